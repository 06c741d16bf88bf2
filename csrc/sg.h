/* scopedgpu C shim: the only declarations cffi sees.
 *
 * Conventions
 * - Every create/act function returns 0 on success, otherwise a negative code: a VkResult
 *   or one of the SG_ERR_* codes below. sg_last_call() then names the failing call.
 *   Out-parameters are written only on success.
 * - Destroy functions return void, accept NULL, and wait for any submitted work that may
 *   still use the object before releasing it.
 * - The shim holds no policy: which memory type, which device, when to free, is decided
 *   by the Python layer.
 * - This header must stay parseable by cffi's cdef: plain types only, no macros with
 *   expressions, no includes.
 */
#ifndef SG_H
#define SG_H

#include <stdint.h>
#include <stddef.h>

typedef struct sg_instance sg_instance;   /* VkInstance, debug messenger */
typedef struct sg_device sg_device;       /* VkDevice, its compute queues */
typedef struct sg_block sg_block;         /* VkDeviceMemory + one VkBuffer over all of it */
typedef struct sg_program sg_program;     /* shader module, set layout, pipeline layout, pipeline */
typedef struct sg_dset sg_dset;           /* descriptor pool + the one set it holds */
typedef struct sg_seq sg_seq;             /* command pool, command buffer, fence, query pool */

/* Shim error codes, outside VkResult's range. */
#define SG_ERR_NO_LOADER -100001
#define SG_ERR_NO_DEVICE -100002
#define SG_ERR_ARGUMENT -100003
#define SG_ERR_MEMORY_TYPE -100004
#define SG_ERR_NO_QUEUE -100005
#define SG_ERR_NO_LAYER -100006
#define SG_ERR_RANGE -100007        /* an offset and size outside the block (or query pool) */
#define SG_ERR_NO_FUNCTION -100008  /* the loader or driver lacks a Vulkan function */
#define SG_ERR_NOT_READY -100009    /* query results asked for before they were available */
/* Not an error: a wait that timed out. */
#define SG_TIMEOUT 2

/* Indices into sg_live_counts' output. */
#define SG_LIVE_INSTANCES 0
#define SG_LIVE_DEVICES 1
#define SG_LIVE_BUFFERS 2
#define SG_LIVE_MEMORY 3
#define SG_LIVE_SHADER_MODULES 4
#define SG_LIVE_SET_LAYOUTS 5
#define SG_LIVE_PIPELINE_LAYOUTS 6
#define SG_LIVE_PIPELINES 7
#define SG_LIVE_DESCRIPTOR_POOLS 8
#define SG_LIVE_COMMAND_POOLS 9
#define SG_LIVE_FENCES 10
#define SG_LIVE_QUERY_POOLS 11
#define SG_LIVE_MESSENGERS 12
#define SG_LIVE_COUNT 13

typedef struct sg_device_info {
    char name[256];
    char driver_name[256];
    char driver_info[256];
    uint32_t device_type;          /* VkPhysicalDeviceType */
    uint32_t vendor_id;
    uint32_t device_id;
    uint32_t api_version;          /* VK_MAKE_API_VERSION encoding */
    uint32_t driver_version;
    uint32_t max_workgroup_size[3];
    uint32_t max_workgroup_invocations;
    uint32_t max_workgroup_count[3];
    uint32_t max_shared_memory_size;  /* maxComputeSharedMemorySize, bytes */
    uint32_t subgroup_size;
    uint32_t max_push_constants_size;
    uint32_t max_memory_allocation_count;
    uint32_t max_bound_descriptor_sets;
    uint32_t max_storage_buffers_per_stage;
    uint64_t max_storage_buffer_range;
    uint64_t min_storage_buffer_offset_alignment;
    uint64_t max_memory_allocation_size;
    uint64_t non_coherent_atom_size;
    float timestamp_period;        /* nanoseconds per tick */
    uint32_t timestamp_valid_bits; /* of the compute queue family; 0: no timestamps */
    uint32_t queue_family;         /* the compute family the shim will use */
    uint32_t queue_count;
    /* Shader features (1 = supported; the shim enables all of them on the device). */
    uint32_t shader_float64;
    uint32_t shader_int64;
    uint32_t shader_int16;
    uint32_t shader_float16;
    uint32_t shader_int8;
    uint32_t storage_16bit;
    uint32_t storage_8bit;
    /* Memory */
    uint32_t buffer_memory_type_bits; /* memory types a storage/transfer buffer may use */
    uint32_t memory_type_count;
    uint32_t memory_type_flags[32];
    uint32_t memory_type_heap[32];
    uint32_t memory_heap_count;
    uint64_t memory_heap_size[16];
    uint32_t memory_heap_flags[16];
    /* VK_EXT_external_memory_host: 1 when the device can import host memory (API 1.1+);
     * pointer and size of an import must be multiples of host_import_alignment. */
    uint32_t host_import;
    uint64_t host_import_alignment;
} sg_device_info;

/* Version of the shim's source, compared by the Python layer against its own. */
const char *sg_build_id(void);

/* Name of the Vulkan (or shim) call that produced the last error on this thread. */
const char *sg_last_call(void);

/* Name of a return code: a VkResult ("VK_ERROR_DEVICE_LOST") or one of the SG_ERR_*
 * codes ("SG_ERR_RANGE"); NULL for a code it does not know. Static storage. */
const char *sg_result_name(int code);

/* Loads the Vulkan loader (dlopen). path NULL: the platform's default name.
 * Idempotent. On failure err receives the loader's message. */
int sg_loader_open(const char *path, char *err, size_t errlen);

/* Instance. debug != 0 enables VK_LAYER_KHRONOS_validation and a messenger that stores
 * messages for sg_instance_messages(); SG_ERR_NO_LAYER when it is not installed. */
int sg_instance_create(int debug, sg_instance **out);
void sg_instance_destroy(sg_instance *inst);
int sg_instance_device_count(sg_instance *inst, uint32_t *count);
int sg_instance_device_info(sg_instance *inst, uint32_t index, sg_device_info *info);
/* Copies stored validation messages (one per line, prefixed "E " for errors, "W " for
 * warnings) into buf and forgets them; returns the number of errors among them. */
int sg_instance_messages(sg_instance *inst, char *buf, size_t buflen, int *nerrors);
/* Number of messages waiting (cheap; no copy). */
int sg_instance_pending(sg_instance *inst);

/* Logical device with nqueues queues of the compute family (nqueues clamped to [1, count]).
 * The device keeps a pointer to inst: destroy the device first. */
int sg_device_create(sg_instance *inst, uint32_t index, uint32_t nqueues, sg_device **out);
void sg_device_destroy(sg_device *dev);
int sg_device_wait_idle(sg_device *dev);
uint32_t sg_device_queue_count(sg_device *dev);
/* Queues of a transfer-only family (0 to 2), numbered after the compute queues: a
 * sequence on queue sg_device_queue_count(dev) + i records copies and transfer/host
 * barriers only (dispatches and other stages are refused by sg_seq_end). */
uint32_t sg_device_transfer_queue_count(sg_device *dev);

/* A block: VkDeviceMemory of `size` bytes in memory type mem_type, one VkBuffer over all
 * of it (storage, transfer src and dst), persistently mapped when map != 0. */
int sg_block_create(sg_device *dev, uint64_t size, uint32_t mem_type, int map, sg_block **out);
void sg_block_destroy(sg_block *blk);
void *sg_block_ptr(sg_block *blk);
/* Host memory import (VK_EXT_external_memory_host, enabled by sg_device_create when
 * info.host_import): the memory types that can import the host range at ptr ... */
int sg_host_pointer_types(sg_device *dev, void *ptr, uint32_t *type_bits);
/* ... and a block whose memory is [ptr, ptr + size) itself: no copy, no mapping; the
 * device reads and writes that host memory. ptr and size: multiples of
 * host_import_alignment. The caller keeps the host memory alive and unmoved until
 * sg_block_destroy (and until the work that used the block completed). */
int sg_block_import(sg_device *dev, void *ptr, uint64_t size, uint32_t mem_type, sg_block **out);
/* A host copy of n bytes from src to dst (not overlapping), for copies far larger than
 * the caches (a stream's chunks): on x86-64, non-temporal stores, which write dst
 * without reading it first (an ordinary store reads each line it writes) and leave the
 * caches to other work; elsewhere memcpy. Ends with a store fence. */
void sg_copy_large(uintptr_t dst, uintptr_t src, size_t n);

/* A compute pipeline. Bindings 0..nbindings-1 of set 0 are storage buffers. Specialization
 * constant i has id spec_ids[i], spec_sizes[i] bytes at spec_offsets[i] in spec_data. */
int sg_program_create(sg_device *dev, const uint32_t *code, size_t code_bytes,
                      uint32_t nbindings, uint32_t push_size,
                      uint32_t nspec, const uint32_t *spec_ids, const uint32_t *spec_offsets,
                      const uint32_t *spec_sizes, const void *spec_data, size_t spec_bytes,
                      sg_program **out);
void sg_program_destroy(sg_program *prog);

/* The descriptor set binding blocks[i] at [offsets[i], offsets[i] + ranges[i]) to binding i;
 * SG_ERR_RANGE when a range is empty or reaches past its block. The caller must not
 * destroy it while submitted work may use it. */
int sg_dset_create(sg_device *dev, sg_program *prog, uint32_t n, sg_block *const *blocks,
                   const uint64_t *offsets, const uint64_t *ranges, sg_dset **out);
/* Binds a set made by sg_dset_create for prog to other ranges (a recycled set: no submitted
 * work that may still run uses it), with sg_dset_create's checks; SG_ERR_ARGUMENT when it
 * was made for another program. On an error it keeps its old bindings. */
int sg_dset_rebind(sg_dset *ds, sg_program *prog, uint32_t n, sg_block *const *blocks,
                   const uint64_t *offsets, const uint64_t *ranges);
void sg_dset_destroy(sg_dset *ds);

/* Sequence: command pool, one primary command buffer, fence, and a query pool of
 * nqueries timestamps when nqueries > 0. Destroy waits for its fence if submitted. */
int sg_seq_create(sg_device *dev, uint32_t queue, uint32_t nqueries, sg_seq **out);
void sg_seq_destroy(sg_seq *seq);
/* Recording: begin resets the pool. The cmd functions return nothing: a command they
 * refuse (a copy outside its blocks, push constants larger than the program's, a
 * timestamp beyond the query pool) is not recorded, and sg_seq_end reports the first
 * such refusal (SG_ERR_RANGE, SG_ERR_ARGUMENT; sg_last_call names the cmd function),
 * as Vulkan reports recording errors at end. */
int sg_seq_begin(sg_seq *seq);
void sg_seq_copy(sg_seq *seq, sg_block *src, uint64_t src_offset, sg_block *dst,
                 uint64_t dst_offset, uint64_t size);
void sg_seq_barrier(sg_seq *seq, uint32_t src_stages, uint32_t src_access,
                    uint32_t dst_stages, uint32_t dst_access);
/* Fills [offset, offset + size) of the block with zeros (a transfer write); offset and
 * size multiples of 4. */
void sg_seq_zero(sg_seq *seq, sg_block *blk, uint64_t offset, uint64_t size);
void sg_seq_dispatch(sg_seq *seq, sg_program *prog, sg_dset *ds, const void *push,
                     uint32_t push_size, uint32_t x, uint32_t y, uint32_t z);
void sg_seq_timestamp(sg_seq *seq, uint32_t query);
int sg_seq_end(sg_seq *seq);
/* Resets the fence and submits the recorded command buffer. */
int sg_seq_submit(sg_seq *seq);
/* Waits up to timeout_ns (UINT64_MAX: forever) for the last submission: 0 when done,
 * SG_TIMEOUT when not yet, negative on error (the submission then still counts as
 * pending). Polls the fence for spin_ns at most before blocking; the poll counts towards
 * timeout_ns. */
int sg_seq_wait(sg_seq *seq, uint64_t timeout_ns, uint32_t spin_ns);
/* sg_seq_submit, then sg_seq_wait(timeout_ns, spin_ns) when it succeeded, in one call
 * (a re-evaluation from Python pays for one call, not two: the latency figure). Returns
 * the wait's result; *submit_rc is the submission's: when it is not 0, nothing was
 * submitted and it is returned too. */
int sg_seq_submit_wait(sg_seq *seq, uint64_t timeout_ns, uint32_t spin_ns, int *submit_rc);
/* 0 when the last submission is done (or nothing was submitted), SG_TIMEOUT if running,
 * negative on error (still pending). */
int sg_seq_status(sg_seq *seq);
/* The first n timestamps of the last recording, once its submission completed:
 * SG_ERR_RANGE when n exceeds the timestamps recorded (never waits on a query that was
 * not written). */
int sg_seq_timestamps(sg_seq *seq, uint32_t n, uint64_t *out);

/* Where this process (or the parent it was forked from) loaded the Vulkan loader:
 * registers an exit handler that ends the process with _exit(status) once Python has
 * finalized, so that the drivers' own exit handlers and destructors never run. The
 * Python layer calls it in the child of fork(), where those handlers tear down driver
 * state the child shares with its parent (NVIDIA's, through the inherited device files:
 * the parent's device is lost) or join threads that exist only in the parent (lavapipe:
 * the child crashes), and when it gives up on GPU work that never ends (NVIDIA's exit
 * handler waits for it: the process never exits). Returns 1 when registered (once per
 * process), 0 when no loader was loaded, SG_ERR_NO_FUNCTION where the C library has no
 * on_exit (not glibc). */
int sg_exit_guard(void);

/* Live Vulkan objects: dev NULL gives the process-wide counts. out receives
 * SG_LIVE_COUNT values. */
void sg_live_counts(sg_device *dev, int64_t *out);

/* Fault injection: the countdown-th checked Vulkan call from now fails with `result`
 * without being made. 0 turns it off. sg_fault_calls() counts checked calls made since
 * the last sg_fault_set (for sizing a sweep). */
void sg_fault_set(int64_t countdown, int32_t result);
int64_t sg_fault_calls(void);
/* Fault injection: the loader treats the Vulkan function of this name as missing (as a
 * driver lacking it would) until called again with NULL. */
void sg_fault_missing(const char *name);

#endif
