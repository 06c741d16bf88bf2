/* The C yardstick of `scopedgpu bench` (`python -m scopedgpu bench`): plain Vulkan, no
 * scopedgpu, driving the same SPIR-V (saxpy.spv) on the same device, so that the bench can
 * report how close the Python library gets to the floor any Vulkan program can reach.
 *
 * Built by the bench at run time (yardstick.py) with the system C compiler, against the
 * Vulkan headers vendored in csrc/vendor of a source tree (else the system's):
 *     cc -O2 -std=gnu11 -I csrc/vendor scopedgpu/bench/yardstick.c -o yardstick -ldl
 * Usage: yardstick SAXPY_SPV DEVICE_INDEX TASK... where each TASK is one of
 *     latency ITERS            re-submit one recorded 64-float saxpy dispatch; poll the
 *                              fence (vkGetFenceStatus) until done; then the same with
 *                              vkWaitForFences. Per-iteration times, median and spread.
 *     saxpy N K REPS           K dependent saxpy dispatches over N floats per submission
 *                              (barriers between them, as scopedgpu records), REPS times.
 *     dma BYTES REPS           vkCmdCopyBuffer host-visible staging -> device-local
 *                              (upload) and back (download), REPS times each.
 *     churn SECONDS            per iteration: command pool, command buffer and fence
 *                              created, one dispatch recorded, submitted, waited,
 *                              destroyed (what an anonymous sequence does).
 *     alloc COUNT              COUNT times: vkCreateBuffer + vkAllocateMemory + bind +
 *                              destroy + free of 256 bytes (one allocation per buffer).
 *     xfer BYTES REPS          a host array (malloc'd, as numpy's) to the device and back
 *                              into another host array, by every path the device offers:
 *                              staging (pinned, persistently mapped staging + memcpy in
 *                              and out + vkCmdCopyBuffer to and from device-local memory),
 *                              rebar (memcpy into and out of DEVICE_LOCAL|HOST_VISIBLE|
 *                              HOST_COHERENT memory around a submit whose barriers make
 *                              the writes visible to the device and back), import and
 *                              import_each (VK_EXT_external_memory_host: the arrays
 *                              themselves imported and copied by DMA; imported once, or
 *                              imported and released every round trip). Median round trip
 *                              of each over REPS, the best path, GB/s = 2 * BYTES / time.
 *     chain N K REPS           the dispatch-chain figure: K dependent saxpy dispatches over
 *                              N floats in one command buffer (the commands and barriers of
 *                              `saxpy`), re-submitted REPS times with the fence polled,
 *                              then REPS times waited on (vkWaitForFences); median seconds
 *                              per submission and per dispatch of each.
 *     serve N REQUESTS INFLIGHT  the serve figure's request, with this task's shader
 *                              (shaders/scale.spv: y = a * x, local size 64, one
 *                              float push constant): per request N floats memcpy'd into
 *                              persistently mapped staging, a command buffer recorded
 *                              (staging -> device copy, dispatch with the request's a,
 *                              device -> staging copy, with their barriers), submitted,
 *                              its fence waited on, the result memcpy'd out and checked
 *                              against a * x. INFLIGHT slots (buffers, descriptor set,
 *                              command buffer, fence each) served round robin, so that up
 *                              to INFLIGHT requests are submitted at once; after a warm-up
 *                              pass, REQUESTS requests: per second, latency from a
 *                              request's start to its result (p50, p99), wrong results.
 *     stream TOTAL CHUNK REPS  concurrent DMA: TOTAL bytes host->device and TOTAL bytes
 *                              device->host in CHUNK-sized copies between pinned staging
 *                              and device memory, on two queues (a transfer-only family's
 *                              where there is one with two queues, else the compute
 *                              family's, else one queue); each direction alone, then both
 *                              at once: aggregate GB/s = 2 * TOTAL / wall time.
 * Each result is one line on stdout: `RESULT {json}`. Setup failures go to stderr with exit
 * code 1; the xfer and stream tasks report a path that fails or is absent in their result
 * ("error", "notes") and go on, having freed what that path made.
 */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FUNCS(X)                                                                            \
    X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                           \
    X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceQueueFamilyProperties)       \
    X(vkCreateDevice) X(vkGetDeviceProcAddr) X(vkDestroyInstance)                            \
    X(vkEnumerateDeviceExtensionProperties)
#define DFUNCS(X)                                                                           \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)              \
    X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory)                     \
    X(vkBindBufferMemory) X(vkMapMemory) X(vkCreateShaderModule) X(vkDestroyShaderModule)    \
    X(vkCreateDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkCreateComputePipelines)     \
    X(vkCreateDescriptorPool) X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets)          \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkResetCommandPool)                     \
    X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)                \
    X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCmdPipelineBarrier) X(vkCmdBindPipeline)       \
    X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCreateFence)       \
    X(vkDestroyFence) X(vkResetFences) X(vkWaitForFences) X(vkGetFenceStatus)                \
    X(vkQueueSubmit) X(vkDeviceWaitIdle) X(vkDestroyPipeline) X(vkDestroyPipelineLayout)      \
    X(vkDestroyDescriptorSetLayout) X(vkDestroyDescriptorPool)
#define DECL(n) static PFN_##n n;
FUNCS(DECL)
DFUNCS(DECL)
static PFN_vkGetInstanceProcAddr gipa;
/* Optional: present when the instance is 1.1 and the device has the extension. */
static PFN_vkGetPhysicalDeviceProperties2 vkGetPhysicalDeviceProperties2_;
static PFN_vkGetMemoryHostPointerPropertiesEXT vkGetMemoryHostPointerPropertiesEXT_;

static VkInstance inst;
static VkPhysicalDevice phys;
static VkDevice dev;
static VkQueue queue;
static uint32_t family;
/* Up to two queues of the compute family and of a transfer-only family (for `stream`). */
static VkQueue cqueues[2], tqueues[2];
static uint32_t ncq, ntq, tfamily = UINT32_MAX;
static int has_host_import;             /* VK_EXT_external_memory_host enabled */
static VkDeviceSize import_align = 4096;  /* minImportedHostPointerAlignment */
static VkPhysicalDeviceMemoryProperties memprops;
static VkPhysicalDeviceProperties props;
static VkPipeline pipeline;
static VkPipelineLayout playout;
static VkDescriptorSetLayout slayout;
static VkDescriptorPool dpool;
static VkDescriptorSet dset;
static VkCommandPool cpool;
static VkCommandBuffer cmd;
static VkFence fence;

#define CK(expr)                                                                     \
    do {                                                                             \
        VkResult r_ = (expr);                                                        \
        if (r_ != VK_SUCCESS) {                                                      \
            fprintf(stderr, "yardstick: %s failed: VkResult %d\n", #expr, (int)r_);  \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* Memory type choice, the same ranking as scopedgpu's pool. kind 0: device-local without
 * host visibility first; 1 (staging): host-visible coherent memory, cached and not
 * device-local first (pinned system memory); 2 (ReBAR): DEVICE_LOCAL|HOST_VISIBLE|
 * HOST_COHERENT. Returns -1 when no type of `bits` fits. */
enum { MEM_DEVICE = 0, MEM_STAGING = 1, MEM_REBAR = 2 };

static int find_type(uint32_t bits, int kind) {
    int best = -1, best_score = 1 << 30;
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < memprops.memoryTypeCount; i++) {
        if (!(bits & (1u << i))) continue;
        VkMemoryPropertyFlags f = memprops.memoryTypes[i].propertyFlags;
        if (f & 0xF0) continue;
        int score;
        if (kind == MEM_DEVICE) {
            if (!(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
            score = (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) ? 1 : 0;
        } else if (kind == MEM_STAGING) {
            if ((f & hv) != hv) continue;
            score = ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 0 : 2) +
                    ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) &&
                     props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU ? 1 : 0);
        } else {
            if ((f & (hv | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) !=
                (hv | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
            score = 0;
        }
        if (score < best_score) best_score = score, best = (int)i;
    }
    return best;
}

typedef struct { VkBuffer buf; VkDeviceMemory mem; void *ptr; } buffer;

static const VkBufferUsageFlags ALL_USES = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                           VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                           VK_BUFFER_USAGE_TRANSFER_DST_BIT;

/* Accepts a buffer never made, half made or made; leaves it zeroed. Freeing mapped memory
 * unmaps it ("If a memory object is mapped at the time it is freed, it is implicitly
 * unmapped"). The caller has waited for the work that used it. */
static void free_buffer(buffer *b) {
    vkDestroyBuffer(dev, b->buf, NULL);
    vkFreeMemory(dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

/* A buffer of `size` bytes on its own memory of the given kind, mapped when host-visible.
 * All or nothing: on failure *out is untouched and nothing is left behind. A kind without
 * a memory type gives VK_ERROR_FEATURE_NOT_PRESENT. */
static VkResult new_buffer(VkDeviceSize size, int kind, buffer *out) {
    buffer b = {0};
    VkResult r;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                              .usage = ALL_USES};
    if ((r = vkCreateBuffer(dev, &bci, NULL, &b.buf)) != VK_SUCCESS) goto fail;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev, b.buf, &req);
    int type = find_type(req.memoryTypeBits, kind);
    if (type < 0) {
        r = VK_ERROR_FEATURE_NOT_PRESENT;
        goto fail;
    }
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size, .memoryTypeIndex = (uint32_t)type};
    if ((r = vkAllocateMemory(dev, &mai, NULL, &b.mem)) != VK_SUCCESS) goto fail;
    if ((r = vkBindBufferMemory(dev, b.buf, b.mem, 0)) != VK_SUCCESS) goto fail;
    if (kind != MEM_DEVICE &&
        (r = vkMapMemory(dev, b.mem, 0, VK_WHOLE_SIZE, 0, &b.ptr)) != VK_SUCCESS) goto fail;
    *out = b;
    return VK_SUCCESS;
fail:
    free_buffer(&b);
    return r;
}

/* For the tasks whose failure ends the process (the driver reclaims the device with it). */
static buffer make_buffer(VkDeviceSize size, int host) {
    buffer b = {0};
    CK(new_buffer(size, host ? MEM_STAGING : MEM_DEVICE, &b));
    return b;
}

static void bind_saxpy(VkDescriptorSet set, buffer *x, buffer *y, VkDeviceSize bytes) {
    VkDescriptorBufferInfo bi[2] = {{x->buf, 0, bytes}, {y->buf, 0, bytes}};
    VkWriteDescriptorSet w[2];
    for (int i = 0; i < 2; i++)
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set, .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    vkUpdateDescriptorSets(dev, 2, w, 0, NULL);
}

/* The grid of saxpy.comp (vec4, grid-stride): as scopedgpu's ops.elementwise_groups. */
static uint32_t groups(uint64_t n) {
    uint64_t g = (n + 1023) / 1024;
    uint64_t maxx = props.limits.maxComputeWorkGroupCount[0];
    if (maxx > 65535) maxx = 65535;
    if (g > maxx) g = maxx;
    return (uint32_t)(g ? g : 1);
}

static const uint32_t GPU_STAGES = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
static const uint32_t ALL_WRITES = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
static const uint32_t ALL_GPU = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

static void barrier(VkCommandBuffer cb, uint32_t ss, uint32_t sa, uint32_t ds, uint32_t da) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = sa,
                          .dstAccessMask = da};
    vkCmdPipelineBarrier(cb, ss, ds, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* The commands scopedgpu records around its ops on a queue of its own: none before them,
 * and one closing barrier that orders them before every later command on the queue (the
 * next submissions' included) and makes their writes visible to those and to the host. */
static void begin(VkCommandBuffer cb) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CK(vkBeginCommandBuffer(cb, &bi));
}

static void end(VkCommandBuffer cb) {
    barrier(cb, GPU_STAGES, ALL_WRITES, GPU_STAGES | VK_PIPELINE_STAGE_HOST_BIT,
            ALL_GPU | VK_ACCESS_HOST_READ_BIT);
    CK(vkEndCommandBuffer(cb));
}

static void dispatch(VkCommandBuffer cb, VkDescriptorSet set, uint64_t n) {
    float a = 2.0f;
    uint32_t gx = groups(n);
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, playout, 0, 1, &set, 0, NULL);
    vkCmdPushConstants(cb, playout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &a);
    vkCmdDispatch(cb, gx, 1, 1);
}

static void submit_wait(VkCommandBuffer cb, VkFence f, int poll) {
    CK(vkResetFences(dev, 1, &f));
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                       .pCommandBuffers = &cb};
    CK(vkQueueSubmit(queue, 1, &si, f));
    if (poll) {
        VkResult r;
        while ((r = vkGetFenceStatus(dev, f)) == VK_NOT_READY) {}
        CK(r);
    } else {
        CK(vkWaitForFences(dev, 1, &f, VK_TRUE, UINT64_MAX));
    }
}

/* Zero-fills both buffers, as scopedgpu's tensors are: garbage could hold denormals or
 * NaNs, which run slower on some devices (llvmpipe). */
static void zero2(buffer *x, buffer *y, VkDeviceSize bytes) {
    CK(vkResetCommandPool(dev, cpool, 0));
    begin(cmd);
    vkCmdFillBuffer(cmd, x->buf, 0, bytes, 0);
    vkCmdFillBuffer(cmd, y->buf, 0, bytes, 0);
    end(cmd);
    submit_wait(cmd, fence, 0);
}

/* The untimed evaluations before each timed round of the latency and chain tasks: a tenth
 * of the round, and at least WARM_S seconds of them, as the bench warms its own rounds
 * (suite.WARM_S). On lavapipe a process whose threads sat idle for 0.1 s or more (as
 * each side does while the other side's round runs) evaluates slower for a while: some
 * 2,000 one-dispatch evaluations ran at 52 to 72 us, then 29. */
static const double WARM_S = 0.2;

static void warm(VkCommandBuffer cb, int poll, int reps) {
    double t0 = now();
    for (int i = 0; i < reps / 10 + 1 || now() - t0 < WARM_S; i++) submit_wait(cb, fence, poll);
}

static void task_latency(int iters) {
    buffer x = make_buffer(256, 0), y = make_buffer(256, 0);
    bind_saxpy(dset, &x, &y, 256);
    zero2(&x, &y, 256);
    CK(vkResetCommandPool(dev, cpool, 0));
    begin(cmd);
    dispatch(cmd, dset, 64);
    end(cmd);
    double *t = malloc(sizeof(double) * (size_t)iters);
    double med[2], p10[2], p90[2];
    for (int mode = 0; mode < 2; mode++) {
        warm(cmd, 1 - mode, iters);
        for (int i = 0; i < iters; i++) {
            double t0 = now();
            submit_wait(cmd, fence, 1 - mode);
            t[i] = now() - t0;
        }
        med[mode] = pct(t, iters, 0.5);
        p10[mode] = pct(t, iters, 0.1);
        p90[mode] = pct(t, iters, 0.9);
    }
    printf("RESULT {\"task\": \"latency\", \"iters\": %d, \"poll_median_us\": %.3f, "
           "\"poll_p10_us\": %.3f, \"poll_p90_us\": %.3f, \"wait_median_us\": %.3f, "
           "\"wait_p10_us\": %.3f, \"wait_p90_us\": %.3f}\n", iters, med[0] * 1e6,
           p10[0] * 1e6, p90[0] * 1e6, med[1] * 1e6, p10[1] * 1e6, p90[1] * 1e6);
    fflush(stdout);
    free(t);
    free_buffer(&x);
    free_buffer(&y);
}

static void task_saxpy(uint64_t n, int k, int reps) {
    VkDeviceSize bytes = n * 4;
    buffer x = make_buffer(bytes, 0), y = make_buffer(bytes, 0);
    bind_saxpy(dset, &x, &y, bytes);
    zero2(&x, &y, bytes);
    CK(vkResetCommandPool(dev, cpool, 0));
    begin(cmd);
    for (int i = 0; i < k; i++) {
        if (i) barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        dispatch(cmd, dset, n);
    }
    end(cmd);
    submit_wait(cmd, fence, 0);  /* warm */
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        submit_wait(cmd, fence, 0);
        t[i] = now() - t0;
    }
    double med = pct(t, reps, 0.5), best = pct(t, reps, 0.0);
    double traffic = 12.0 * (double)n * k;
    printf("RESULT {\"task\": \"saxpy\", \"n\": %llu, \"k\": %d, \"reps\": %d, "
           "\"median_s\": %.9f, \"gbps\": %.3f, \"best_gbps\": %.3f}\n",
           (unsigned long long)n, k, reps, med, traffic / med / 1e9, traffic / best / 1e9);
    fflush(stdout);
    free(t);
    free_buffer(&x);
    free_buffer(&y);
}

/* The saxpy task's commands, timed both ways: polled, then waited on. */
static void task_chain(uint64_t n, int k, int reps) {
    VkDeviceSize bytes = n * 4;
    buffer x = make_buffer(bytes, 0), y = make_buffer(bytes, 0);
    bind_saxpy(dset, &x, &y, bytes);
    zero2(&x, &y, bytes);
    CK(vkResetCommandPool(dev, cpool, 0));
    begin(cmd);
    for (int i = 0; i < k; i++) {
        if (i) barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        dispatch(cmd, dset, n);
    }
    end(cmd);
    double *t = malloc(sizeof(double) * (size_t)reps);
    double med[2];
    for (int mode = 0; mode < 2; mode++) {   /* 0: poll, 1: vkWaitForFences */
        warm(cmd, 1 - mode, reps);
        for (int i = 0; i < reps; i++) {
            double t0 = now();
            submit_wait(cmd, fence, 1 - mode);
            t[i] = now() - t0;
        }
        med[mode] = pct(t, reps, 0.5);
    }
    printf("RESULT {\"task\": \"chain\", \"n\": %llu, \"k\": %d, \"reps\": %d, "
           "\"poll_median_s\": %.9f, \"wait_median_s\": %.9f, \"poll_us_per_dispatch\": %.4f, "
           "\"wait_us_per_dispatch\": %.4f}\n", (unsigned long long)n, k, reps, med[0],
           med[1], med[0] * 1e6 / k, med[1] * 1e6 / k);
    fflush(stdout);
    free(t);
    free_buffer(&x);
    free_buffer(&y);
}

static void task_dma(uint64_t bytes, int reps) {
    buffer host = make_buffer(bytes, 1), gpu = make_buffer(bytes, 0);
    memset(host.ptr, 1, bytes);
    double rate[2];
    for (int dir = 0; dir < 2; dir++) {
        CK(vkResetCommandPool(dev, cpool, 0));
        begin(cmd);
        VkBufferCopy region = {0, 0, bytes};
        if (dir == 0) vkCmdCopyBuffer(cmd, host.buf, gpu.buf, 1, &region);
        else vkCmdCopyBuffer(cmd, gpu.buf, host.buf, 1, &region);
        end(cmd);
        submit_wait(cmd, fence, 0);
        double *t = malloc(sizeof(double) * (size_t)reps);
        for (int i = 0; i < reps; i++) {
            double t0 = now();
            submit_wait(cmd, fence, 0);
            t[i] = now() - t0;
        }
        rate[dir] = (double)bytes / pct(t, reps, 0.5) / 1e9;
        free(t);
    }
    printf("RESULT {\"task\": \"dma\", \"bytes\": %llu, \"reps\": %d, \"upload_gbps\": %.3f, "
           "\"download_gbps\": %.3f}\n", (unsigned long long)bytes, reps, rate[0], rate[1]);
    fflush(stdout);
    free_buffer(&host);
    free_buffer(&gpu);
}

static void task_churn(double seconds) {
    buffer x = make_buffer(256, 0), y = make_buffer(256, 0);
    bind_saxpy(dset, &x, &y, 256);
    zero2(&x, &y, 256);
    long count = 0;
    double t0 = now(), t1;
    do {
        for (int i = 0; i < 64; i++) {
            VkCommandPool p;
            VkCommandBuffer cb;
            VkFence f;
            VkCommandPoolCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                            .queueFamilyIndex = family};
            CK(vkCreateCommandPool(dev, &cpci, NULL, &p));
            VkCommandBufferAllocateInfo cbai = {
                .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = p,
                .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
            CK(vkAllocateCommandBuffers(dev, &cbai, &cb));
            VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
            CK(vkCreateFence(dev, &fci, NULL, &f));
            begin(cb);
            dispatch(cb, dset, 64);
            end(cb);
            submit_wait(cb, f, 1);
            vkDestroyFence(dev, f, NULL);
            vkDestroyCommandPool(dev, p, NULL);
        }
        count += 64;
        t1 = now();
    } while (t1 - t0 < seconds);
    printf("RESULT {\"task\": \"churn\", \"count\": %ld, \"seconds\": %.6f, \"per_s\": %.1f}\n",
           count, t1 - t0, count / (t1 - t0));
    fflush(stdout);
    free_buffer(&x);
    free_buffer(&y);
}

static void task_alloc(int count) {
    double t0 = now();
    for (int i = 0; i < count; i++) {
        buffer b = make_buffer(256, 0);
        free_buffer(&b);
    }
    double t = now() - t0;
    printf("RESULT {\"task\": \"alloc\", \"count\": %d, \"seconds\": %.6f, \"per_s\": %.1f}\n",
           count, t, count / t);
    fflush(stdout);
}

/* ---- xfer and stream: paths that may be absent or may not fit ---------------------------
 * Every Vulkan call is checked; a failure records the call in task_error and jumps to the
 * path's cleanup, which waits for the device and frees, in reverse, what the path made. */
static char task_error[400];

#define TRY(expr)                                                                    \
    do {                                                                             \
        VkResult r_ = (expr);                                                        \
        if (r_ != VK_SUCCESS) {                                                      \
            snprintf(task_error, sizeof task_error, "%s failed: VkResult %d", #expr,   \
                     (int)r_);                                                       \
            goto fail;                                                               \
        }                                                                            \
    } while (0)
#define FAIL(...)                                                                    \
    do {                                                                             \
        snprintf(task_error, sizeof task_error, __VA_ARGS__);                        \
        goto fail;                                                                   \
    } while (0)

/* A command pool, one command buffer from it and a fence, for one queue family. */
typedef struct { VkCommandPool pool; VkCommandBuffer cb; VkFence fence; } cmdctx;

static void free_ctx(cmdctx *c) {
    /* "All submitted commands that refer to commandPool must have completed execution"
     * before vkDestroyCommandPool; the same holds for a fence and the buffers used. */
    vkDeviceWaitIdle(dev);
    vkDestroyFence(dev, c->fence, NULL);
    vkDestroyCommandPool(dev, c->pool, NULL);
    memset(c, 0, sizeof *c);
}

static VkResult new_ctx(uint32_t fam, cmdctx *out) {
    cmdctx c = {0};
    VkResult r;
    VkCommandPoolCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .queueFamilyIndex = fam};
    if ((r = vkCreateCommandPool(dev, &cpci, NULL, &c.pool)) != VK_SUCCESS) goto fail;
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                        .commandPool = c.pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                        .commandBufferCount = 1};
    if ((r = vkAllocateCommandBuffers(dev, &cbai, &c.cb)) != VK_SUCCESS) goto fail;
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vkCreateFence(dev, &fci, NULL, &c.fence)) != VK_SUCCESS) goto fail;
    *out = c;
    return VK_SUCCESS;
fail:
    free_ctx(&c);
    return r;
}

static VkResult submit_to(VkQueue q, cmdctx *c) {
    VkResult r = vkResetFences(dev, 1, &c->fence);
    if (r != VK_SUCCESS) return r;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                       .pCommandBuffers = &c->cb};
    return vkQueueSubmit(q, 1, &si, c->fence);
}

static VkResult fence_poll(cmdctx *c) {
    VkResult r;
    while ((r = vkGetFenceStatus(dev, c->fence)) == VK_NOT_READY) {}
    return r;
}

static VkResult fence_wait(cmdctx *c) {
    return vkWaitForFences(dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
}

/* Transfer-stage barriers only: they are valid on any queue family, transfer-only ones
 * included. */
static void xbarrier(VkCommandBuffer cb, uint32_t ds, uint32_t da) {
    barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, ds, da);
}

static void copy(VkCommandBuffer cb, buffer *src, VkDeviceSize so, buffer *dst,
                 VkDeviceSize dof, VkDeviceSize bytes) {
    VkBufferCopy region = {so, dof, bytes};
    vkCmdCopyBuffer(cb, src->buf, dst->buf, 1, &region);
}

/* Staging, ReBAR and import round trips all have this shape: optional memcpy in, a
 * submit polled to completion, optional memcpy out. */
typedef struct {
    const char *name;
    int ran;
    double median_s, best_s;
    int reps;               /* timed round trips (fewer than asked when out of time) */
    int ok;                 /* the data came back intact */
    char note[400];
} xfer_path;

/* A path's round trips are done: whether y came back equal to x, and the times. */
static void path_done(xfer_path *p, const char *x, const char *y, uint64_t bytes, double *t,
                      int reps) {
    p->ok = !memcmp(x, y, bytes);
    p->median_s = pct(t, reps, 0.5);
    p->best_s = pct(t, reps, 0.0);
    p->reps = reps;
    p->ran = 1;
}

static int warmups(int reps) { return reps / 10 + 2; }

/* A path may be slow where the others are not (the host reading ReBAR memory over PCIe):
 * it stops after PATH_BUDGET_S seconds with at least 3 timed round trips. The bench
 * alternates rounds of scopedgpu and of this task, and the H200's host was seen to change
 * speed within seconds: a short task keeps the rounds of both sides close in time. */
#define PATH_BUDGET_S 0.5
#define OUT_OF_TIME(i, start) ((i) >= 2 && now() - (start) > PATH_BUDGET_S)

/* The round trips of the staging and rebar paths: x copied into the mapped memory, the
 * recorded command buffer submitted and its fence polled, the memory copied out into y
 * (zeroed first). The timed ones' seconds go to t; returns how many were timed (fewer
 * than reps when the path ran out of time), -1 on a failure (task_error says which). */
static int memcpy_round_trips(cmdctx *c, void *mapped, const char *x, char *y,
                              uint64_t bytes, int reps, double *t) {
    memset(y, 0, bytes);
    double start = now();
    for (int i = -warmups(reps); i < reps; i++) {
        double t0 = now();
        memcpy(mapped, x, bytes);
        TRY(submit_to(queue, c));
        TRY(fence_poll(c));
        memcpy(y, mapped, bytes);
        if (i >= 0) t[i] = now() - t0;
        if (OUT_OF_TIME(i, start)) return i + 1;
    }
    return reps;
fail:
    return -1;
}

static void path_staging(xfer_path *p, const char *x, char *y, uint64_t bytes, int reps,
                         double *t) {
    buffer st = {0}, gpu = {0};
    cmdctx c = {0};
    TRY(new_buffer(bytes, MEM_STAGING, &st));
    TRY(new_buffer(bytes, MEM_DEVICE, &gpu));
    TRY(new_ctx(family, &c));
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    TRY(vkBeginCommandBuffer(c.cb, &bi));
    copy(c.cb, &st, 0, &gpu, 0, bytes);
    xbarrier(c.cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    copy(c.cb, &gpu, 0, &st, 0, bytes);
    xbarrier(c.cb, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    TRY(vkEndCommandBuffer(c.cb));
    reps = memcpy_round_trips(&c, st.ptr, x, y, bytes, reps, t);
    if (reps < 0) goto fail;
    path_done(p, x, y, bytes, t, reps);
fail:
    if (!p->ran) snprintf(p->note, sizeof p->note, "%s", task_error);
    free_ctx(&c);
    free_buffer(&gpu);
    free_buffer(&st);
}

static void path_rebar(xfer_path *p, const char *x, char *y, uint64_t bytes, int reps,
                       double *t) {
    buffer rb = {0};
    cmdctx c = {0};
    if (find_type(~0u, MEM_REBAR) < 0)
        FAIL("absent: no DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT memory type (no ReBAR)");
    TRY(new_buffer(bytes, MEM_REBAR, &rb));
    TRY(new_ctx(family, &c));
    /* The submit makes the host's writes available to the device ("vkQueueSubmit performs
     * a memory domain operation from host to device for all writes performed before the
     * command was executed on the host"); the barriers order every device access after it
     * and make device writes visible to the host: the least a program must do before the
     * device may read what the host wrote and the host may read what the device wrote. */
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    TRY(vkBeginCommandBuffer(c.cb, &bi));
    barrier(c.cb, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT, GPU_STAGES, ALL_GPU);
    barrier(c.cb, GPU_STAGES, ALL_WRITES, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    TRY(vkEndCommandBuffer(c.cb));
    reps = memcpy_round_trips(&c, rb.ptr, x, y, bytes, reps, t);
    if (reps < 0) goto fail;
    path_done(p, x, y, bytes, t, reps);
fail:
    if (!p->ran) snprintf(p->note, sizeof p->note, "%s", task_error);
    free_ctx(&c);
    free_buffer(&rb);
}

/* Imports `bytes` of host memory at p (aligned to import_align, a multiple of it) as a
 * buffer. All or nothing. */
static VkResult import_host(void *ptr, uint64_t bytes, buffer *out) {
    buffer b = {0};
    VkResult r;
    const VkExternalMemoryHandleTypeFlagBits ht =
        VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    VkExternalMemoryBufferCreateInfo ext = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO, .handleTypes = ht};
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &ext,
                              .size = bytes,
                              .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT};
    if ((r = vkCreateBuffer(dev, &bci, NULL, &b.buf)) != VK_SUCCESS) goto fail;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev, b.buf, &req);
    VkMemoryHostPointerPropertiesEXT hp = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    if ((r = vkGetMemoryHostPointerPropertiesEXT_(dev, ht, ptr, &hp)) != VK_SUCCESS) goto fail;
    uint32_t bits = req.memoryTypeBits & hp.memoryTypeBits;
    if (!bits || req.size > bytes) {
        r = VK_ERROR_FEATURE_NOT_PRESENT;
        goto fail;
    }
    uint32_t type = 0;
    while (!(bits & (1u << type))) type++;
    VkImportMemoryHostPointerInfoEXT imp = {
        .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT, .handleType = ht,
        .pHostPointer = ptr};
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &imp,
                                .allocationSize = bytes, .memoryTypeIndex = type};
    if ((r = vkAllocateMemory(dev, &mai, NULL, &b.mem)) != VK_SUCCESS) goto fail;
    if ((r = vkBindBufferMemory(dev, b.buf, b.mem, 0)) != VK_SUCCESS) goto fail;
    *out = b;
    return VK_SUCCESS;
fail:
    free_buffer(&b);
    return r;
}

static VkResult record_import(cmdctx *c, buffer *xi, buffer *gpu, buffer *yi, uint64_t bytes) {
    VkResult r = vkResetCommandPool(dev, c->pool, 0);
    if (r != VK_SUCCESS) return r;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if ((r = vkBeginCommandBuffer(c->cb, &bi)) != VK_SUCCESS) return r;
    copy(c->cb, xi, 0, gpu, 0, bytes);
    xbarrier(c->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    copy(c->cb, gpu, 0, yi, 0, bytes);
    xbarrier(c->cb, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    return vkEndCommandBuffer(c->cb);
}

/* each = 0: x and y imported once (a program that reuses its arrays); each = 1: imported,
 * copied and released every round trip (a fresh array each time). */
static void path_import(xfer_path *p, int each, char *x, char *y, uint64_t span,
                        uint64_t bytes, int reps, double *t) {
    buffer xi = {0}, yi = {0}, gpu = {0};
    cmdctx c = {0};
    if (!has_host_import) FAIL("absent: no VK_EXT_external_memory_host");
    TRY(new_buffer(bytes, MEM_DEVICE, &gpu));
    TRY(new_ctx(family, &c));
    if (!each) {
        TRY(import_host(x, span, &xi));
        TRY(import_host(y, span, &yi));
        TRY(record_import(&c, &xi, &gpu, &yi, bytes));
    }
    memset(y, 0, bytes);
    double start = now();
    for (int i = -warmups(reps); i < reps; i++) {
        double t0 = now();
        if (each) {
            TRY(import_host(x, span, &xi));
            TRY(import_host(y, span, &yi));
            TRY(record_import(&c, &xi, &gpu, &yi, bytes));
        }
        TRY(submit_to(queue, &c));
        TRY(fence_poll(&c));
        if (each) {
            free_buffer(&xi);
            free_buffer(&yi);
        }
        if (i >= 0) t[i] = now() - t0;
        if (OUT_OF_TIME(i, start)) {
            reps = i + 1;
            break;
        }
    }
    path_done(p, x, y, bytes, t, reps);
fail:
    if (!p->ran) snprintf(p->note, sizeof p->note, "%s", task_error);
    free_ctx(&c);
    free_buffer(&yi);
    free_buffer(&xi);
    free_buffer(&gpu);
}

static void task_xfer(uint64_t bytes, int reps) {
    /* The arrays are aligned to minImportedHostPointerAlignment so that the import path
     * can take them as they are (numpy's large arrays sit 16 bytes past a page). */
    uint64_t align = import_align > 4096 ? import_align : 4096;
    uint64_t span = (bytes + align - 1) / align * align;
    char *x = NULL, *y = NULL;
    double *t = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
    if (reps < 1 || !t || posix_memalign((void **)&x, align, span) ||
        posix_memalign((void **)&y, align, span)) {
        printf("RESULT {\"task\": \"xfer\", \"bytes\": %llu, \"error\": \"out of host memory "
               "or no repetitions\"}\n", (unsigned long long)bytes);
        fflush(stdout);
        free(x);
        free(y);
        free(t);
        return;
    }
    for (uint64_t i = 0; i < span; i++) x[i] = (char)(i * 131 + 7);
    memset(y, 0, span);
    xfer_path paths[4] = {{.name = "staging"}, {.name = "rebar"}, {.name = "import"},
                          {.name = "import_each"}};
    /* The paths that are fastest somewhere first, right after the bench's round of
     * scopedgpu; the two slow ones (per round trip: host reads over PCIe, an import
     * of both arrays) after them. */
    path_staging(&paths[0], x, y, bytes, reps, t);
    path_import(&paths[2], 0, x, y, span, bytes, reps, t);
    path_rebar(&paths[1], x, y, bytes, reps, t);
    path_import(&paths[3], 1, x, y, span, bytes, reps, t);
    int best = -1;
    for (int i = 0; i < 4; i++)
        if (paths[i].ran && paths[i].ok &&
            (best < 0 || paths[i].median_s < paths[best].median_s)) best = i;
    printf("RESULT {\"task\": \"xfer\", \"bytes\": %llu, \"reps\": %d, \"paths\": {",
           (unsigned long long)bytes, reps);
    for (int i = 0; i < 4; i++) {
        xfer_path *p = &paths[i];
        printf("%s\"%s\": ", i ? ", " : "", p->name);
        if (p->ran)
            printf("{\"median_us\": %.3f, \"best_us\": %.3f, \"gbps\": %.4f, \"reps\": %d, "
                   "\"ok\": %s}", p->median_s * 1e6, p->best_s * 1e6,
                   2.0 * (double)bytes / p->median_s / 1e9, p->reps, p->ok ? "true" : "false");
        else
            printf("{\"skipped\": \"%s\"}", p->note);
    }
    if (best >= 0)
        printf("}, \"best\": \"%s\", \"best_gbps\": %.4f, \"best_median_us\": %.3f}\n",
               paths[best].name, 2.0 * (double)bytes / paths[best].median_s / 1e9,
               paths[best].median_s * 1e6);
    else
        printf("}, \"best\": null, \"error\": \"no path ran\"}\n");
    fflush(stdout);
    free(t);
    free(x);
    free(y);
}

/* The two queues of `stream`: two of a transfer-only family, else two of the compute
 * family, else one of each, else the one queue for both directions. */
static const char *stream_queues(VkQueue *qa, uint32_t *fa, VkQueue *qb, uint32_t *fb) {
    if (ntq >= 2) {
        *qa = tqueues[0], *qb = tqueues[1], *fa = *fb = tfamily;
        return "two queues of a transfer-only family";
    }
    if (ncq >= 2) {
        *qa = cqueues[0], *qb = cqueues[1], *fa = *fb = family;
        return ntq ? "two queues of the compute family (the transfer-only family has one)"
                   : "two queues of the compute family (no transfer-only family)";
    }
    if (ntq == 1) {
        *qa = tqueues[0], *fa = tfamily, *qb = cqueues[0], *fb = family;
        return "one transfer-only queue and one compute queue";
    }
    *qa = *qb = cqueues[0], *fa = *fb = family;
    return "one queue for both directions (no second queue on this device)";
}

static void task_stream(uint64_t total, uint64_t chunk, int reps) {
    buffer hin = {0}, din = {0}, dout = {0}, hout = {0};
    cmdctx up = {0}, down = {0};
    double *t = NULL;
    VkQueue qa, qb;
    uint32_t fa, fb;
    const char *how = stream_queues(&qa, &fa, &qb, &fb);
    if (chunk == 0 || total < chunk || reps < 1) FAIL("bad arguments");
    uint64_t copies = total / chunk, moved = copies * chunk;
    TRY(new_buffer(chunk, MEM_STAGING, &hin));
    TRY(new_buffer(chunk, MEM_DEVICE, &din));
    TRY(new_buffer(chunk, MEM_DEVICE, &dout));
    TRY(new_buffer(chunk, MEM_STAGING, &hout));
    memset(hin.ptr, 1, chunk);
    TRY(new_ctx(fa, &up));
    TRY(new_ctx(fb, &down));
    /* Each buffer is used by one queue family only, so no ownership transfer is needed;
     * the copies of one direction write the same range again and again, which moves the
     * bytes a stream of chunks moves. */
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    TRY(vkBeginCommandBuffer(up.cb, &bi));
    for (uint64_t i = 0; i < copies; i++) copy(up.cb, &hin, 0, &din, 0, chunk);
    TRY(vkEndCommandBuffer(up.cb));
    TRY(vkBeginCommandBuffer(down.cb, &bi));
    for (uint64_t i = 0; i < copies; i++) copy(down.cb, &dout, 0, &hout, 0, chunk);
    xbarrier(down.cb, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    TRY(vkEndCommandBuffer(down.cb));
    t = malloc(sizeof(double) * 3 * (size_t)reps);
    if (!t) FAIL("out of host memory");
    double *tu = t, *td = t + reps, *tb = t + 2 * reps;
    for (int i = -1; i < reps; i++) {   /* one warm-up round */
        double t0 = now();
        TRY(submit_to(qa, &up));
        TRY(fence_wait(&up));
        double t1 = now();
        TRY(submit_to(qb, &down));
        TRY(fence_wait(&down));
        double t2 = now();
        TRY(submit_to(qa, &up));
        TRY(submit_to(qb, &down));
        TRY(fence_wait(&up));
        TRY(fence_wait(&down));
        double t3 = now();
        if (i >= 0) tu[i] = t1 - t0, td[i] = t2 - t1, tb[i] = t3 - t2;
    }
    double mu = pct(tu, reps, 0.5), md = pct(td, reps, 0.5), mb = pct(tb, reps, 0.5);
    printf("RESULT {\"task\": \"stream\", \"bytes_each_way\": %llu, \"chunk\": %llu, "
           "\"reps\": %d, \"queues\": \"%s\", \"queue_families\": [%u, %u], "
           "\"h2d_gbps\": %.4f, \"d2h_gbps\": %.4f, \"concurrent_gbps\": %.4f, "
           "\"concurrent_s\": %.6f}\n", (unsigned long long)moved,
           (unsigned long long)chunk, reps, how, fa, fb, moved / mu / 1e9, moved / md / 1e9,
           2.0 * moved / mb / 1e9, mb);
    fflush(stdout);
    goto done;
fail:
    printf("RESULT {\"task\": \"stream\", \"bytes_each_way\": %llu, \"chunk\": %llu, "
           "\"queues\": \"%s\", \"error\": \"%s\"}\n", (unsigned long long)total,
           (unsigned long long)chunk, how, task_error);
    fflush(stdout);
done:
    free(t);
    free_ctx(&down);
    free_ctx(&up);
    free_buffer(&hout);
    free_buffer(&dout);
    free_buffer(&din);
    free_buffer(&hin);
}

/* ---- serve: one request = upload, y = a * x, download, wait ------------------------------
 * Each slot owns a range of one staging buffer (in and out), a range of one device buffer
 * (x and y), a descriptor set, a command buffer and a fence: one allocation per kind for
 * all the slots (INFLIGHT may be 1,024, beyond a device's maxMemoryAllocationCount in
 * buffers of their own). */
#define SERVE_INPUTS 64

typedef struct {
    uint64_t n, stride;        /* floats per request; bytes between two slots' ranges */
    int inflight;
    buffer host, gpu;          /* host: in ranges, then out ranges; gpu: x ranges, then y */
    VkDescriptorPool pool;
    VkDescriptorSet *sets;
    VkCommandPool cpool;
    VkCommandBuffer *cbs;
    VkFence *fences;
    double *start;             /* per slot: when its request started */
    int *req;                  /* per slot: which request it holds (-1: none) */
    float *inputs, alphas[SERVE_INPUTS];
    double *lat;               /* per request of the pass */
    long bad;                  /* results that differ from a * x */
} serve_ctx;

static void serve_start(serve_ctx *c, int s, int r) {
    VkDeviceSize bytes = c->n * 4;
    VkDeviceSize in = (VkDeviceSize)s * c->stride;
    VkDeviceSize out = (VkDeviceSize)(c->inflight + s) * c->stride;
    c->start[s] = now();
    c->req[s] = r;
    memcpy((char *)c->host.ptr + in, c->inputs + (size_t)(r % SERVE_INPUTS) * c->n, bytes);
    VkCommandBuffer cb = c->cbs[s];
    /* The pool was made with RESET_COMMAND_BUFFER_BIT: begin resets the buffer. */
    begin(cb);
    VkBufferCopy up = {in, in, bytes}, down = {out, out, bytes};
    vkCmdCopyBuffer(cb, c->host.buf, c->gpu.buf, 1, &up);
    barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
    float a = c->alphas[r % SERVE_INPUTS];
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, playout, 0, 1, &c->sets[s], 0,
                            NULL);
    vkCmdPushConstants(cb, playout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &a);
    vkCmdDispatch(cb, (uint32_t)((c->n + 63) / 64), 1, 1);
    barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    vkCmdCopyBuffer(cb, c->gpu.buf, c->host.buf, 1, &down);
    end(cb);
    CK(vkResetFences(dev, 1, &c->fences[s]));
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                       .pCommandBuffers = &cb};
    CK(vkQueueSubmit(queue, 1, &si, c->fences[s]));
}

/* Waits for slot s's request, copies its result out, checks it. */
static void serve_finish(serve_ctx *c, int s, float *result, int timed) {
    int r = c->req[s];
    if (r < 0) return;
    CK(vkWaitForFences(dev, 1, &c->fences[s], VK_TRUE, UINT64_MAX));
    VkDeviceSize out = (VkDeviceSize)(c->inflight + s) * c->stride;
    memcpy(result, (char *)c->host.ptr + out, c->n * 4);
    if (timed) c->lat[r] = now() - c->start[s];
    const float *x = c->inputs + (size_t)(r % SERVE_INPUTS) * c->n;
    float a = c->alphas[r % SERVE_INPUTS];
    for (uint64_t i = 0; i < c->n; i++)
        if (result[i] != a * x[i]) {
            c->bad++;
            break;
        }
    c->req[s] = -1;
}

/* `count` requests, slot r % inflight each; returns the seconds they took. */
static double serve_pass(serve_ctx *c, int count, float *result, int timed) {
    double t0 = now();
    for (int r = 0; r < count; r++) {
        int s = r % c->inflight;
        serve_finish(c, s, result, timed);
        serve_start(c, s, r);
    }
    for (int i = 0; i < c->inflight; i++)   /* the oldest first: slot count % inflight */
        serve_finish(c, (count + i) % c->inflight, result, timed);
    return now() - t0;
}

static void task_serve(uint64_t n, int requests, int inflight) {
    if (n == 0 || requests < 1 || inflight < 1) {
        fprintf(stderr, "yardstick: serve needs N, REQUESTS and INFLIGHT >= 1\n");
        exit(1);
    }
    serve_ctx c = {.n = n, .inflight = inflight};
    VkDeviceSize align = props.limits.minStorageBufferOffsetAlignment;
    if (align < 4) align = 4;
    c.stride = (n * 4 + align - 1) / align * align;
    c.host = make_buffer(2 * (VkDeviceSize)inflight * c.stride, 1);
    c.gpu = make_buffer(2 * (VkDeviceSize)inflight * c.stride, 0);
    c.sets = calloc((size_t)inflight, sizeof *c.sets);
    c.cbs = calloc((size_t)inflight, sizeof *c.cbs);
    c.fences = calloc((size_t)inflight, sizeof *c.fences);
    c.start = calloc((size_t)inflight, sizeof *c.start);
    c.req = malloc(sizeof(int) * (size_t)inflight);
    c.inputs = malloc(sizeof(float) * SERVE_INPUTS * n);
    c.lat = malloc(sizeof(double) * (size_t)requests);
    float *result = malloc(sizeof(float) * n);
    if (!c.sets || !c.cbs || !c.fences || !c.start || !c.req || !c.inputs || !c.lat || !result) {
        fprintf(stderr, "yardstick: out of host memory\n");
        exit(1);
    }
    /* Inputs of a plain LCG in [-4, 4), alphas in [0.5, 2): no denormals, no NaNs. */
    uint32_t st = 12345;
    for (size_t i = 0; i < SERVE_INPUTS * n; i++) {
        st = st * 1664525u + 1013904223u;
        c.inputs[i] = (float)(st >> 8) / 16777216.0f * 8.0f - 4.0f;
    }
    for (int i = 0; i < SERVE_INPUTS; i++) c.alphas[i] = 0.5f + 1.5f * (float)i / SERVE_INPUTS;
    for (int i = 0; i < inflight; i++) c.req[i] = -1;
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2 * (uint32_t)inflight};
    VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                       .maxSets = (uint32_t)inflight, .poolSizeCount = 1,
                                       .pPoolSizes = &ps};
    CK(vkCreateDescriptorPool(dev, &dpci, NULL, &c.pool));
    VkDescriptorSetLayout *layouts = malloc(sizeof *layouts * (size_t)inflight);
    if (!layouts) {
        fprintf(stderr, "yardstick: out of host memory\n");
        exit(1);
    }
    for (int i = 0; i < inflight; i++) layouts[i] = slayout;
    VkDescriptorSetAllocateInfo dsai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                        .descriptorPool = c.pool,
                                        .descriptorSetCount = (uint32_t)inflight,
                                        .pSetLayouts = layouts};
    CK(vkAllocateDescriptorSets(dev, &dsai, c.sets));
    free(layouts);
    VkDeviceSize bytes = n * 4;
    for (int i = 0; i < inflight; i++) {
        VkDescriptorBufferInfo bi[2] = {
            {c.gpu.buf, (VkDeviceSize)i * c.stride, bytes},
            {c.gpu.buf, (VkDeviceSize)(inflight + i) * c.stride, bytes}};
        VkWriteDescriptorSet w[2];
        for (int j = 0; j < 2; j++)
            w[j] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                          .dstSet = c.sets[i], .dstBinding = (uint32_t)j,
                                          .descriptorCount = 1,
                                          .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                          .pBufferInfo = &bi[j]};
        vkUpdateDescriptorSets(dev, 2, w, 0, NULL);
    }
    VkCommandPoolCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                    .queueFamilyIndex = family};
    CK(vkCreateCommandPool(dev, &cpci, NULL, &c.cpool));
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                        .commandPool = c.cpool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                        .commandBufferCount = (uint32_t)inflight};
    CK(vkAllocateCommandBuffers(dev, &cbai, c.cbs));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    for (int i = 0; i < inflight; i++) CK(vkCreateFence(dev, &fci, NULL, &c.fences[i]));
    int warm = requests < 2 * inflight ? requests : 2 * inflight;
    if (warm < 16) warm = requests < 16 ? requests : 16;
    serve_pass(&c, warm, result, 0);
    c.bad = 0;
    double el = serve_pass(&c, requests, result, 1);
    printf("RESULT {\"task\": \"serve\", \"n\": %llu, \"requests\": %d, \"inflight\": %d, "
           "\"seconds\": %.6f, \"per_s\": %.1f, \"p50_us\": %.3f, \"p99_us\": %.3f, "
           "\"bad\": %ld}\n", (unsigned long long)n, requests, inflight, el, requests / el,
           pct(c.lat, requests, 0.5) * 1e6, pct(c.lat, requests, 0.99) * 1e6, c.bad);
    fflush(stdout);
    /* Every fence has signalled (serve_pass waited for each slot it used). */
    for (int i = 0; i < inflight; i++) vkDestroyFence(dev, c.fences[i], NULL);
    vkDestroyCommandPool(dev, c.cpool, NULL);
    vkDestroyDescriptorPool(dev, c.pool, NULL);
    free_buffer(&c.gpu);
    free_buffer(&c.host);
    free(c.sets);
    free(c.cbs);
    free(c.fences);
    free(c.start);
    free(c.req);
    free(c.inputs);
    free(c.lat);
    free(result);
}

static void *load_spirv(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "yardstick: cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "yardstick: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void setup(const char *spv, uint32_t index) {
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "yardstick: no Vulkan loader: %s\n", dlerror());
        exit(1);
    }
    gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "scopedgpu-yardstick",
                             .apiVersion = VK_API_VERSION_1_1};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                .pApplicationInfo = &app};
    CK(create(&ici, NULL, &inst));
#define LOADI(n) n = (PFN_##n)gipa(inst, #n);
    FUNCS(LOADI)
    uint32_t n = 0;
    CK(vkEnumeratePhysicalDevices(inst, &n, NULL));
    VkPhysicalDevice devs[64];
    if (n > 64) n = 64;
    VkResult er = vkEnumeratePhysicalDevices(inst, &n, devs);
    if (er != VK_SUCCESS && er != VK_INCOMPLETE) CK(er);
    if (index >= n) {
        fprintf(stderr, "yardstick: no device %u (%u devices)\n", index, n);
        exit(1);
    }
    phys = devs[index];
    vkGetPhysicalDeviceProperties(phys, &props);
    vkGetPhysicalDeviceMemoryProperties(phys, &memprops);
    VkQueueFamilyProperties qf[32];
    uint32_t nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, qf);
    family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && family == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
    if (family == UINT32_MAX) {
        fprintf(stderr, "yardstick: no compute queue\n");
        exit(1);
    }
    for (uint32_t i = 0; i < nq && tfamily == UINT32_MAX; i++)
        if ((qf[i].queueFlags & VK_QUEUE_TRANSFER_BIT) &&
            !(qf[i].queueFlags & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT)))
            tfamily = i;
    ncq = qf[family].queueCount >= 2 ? 2 : 1;
    ntq = tfamily == UINT32_MAX ? 0 : (qf[tfamily].queueCount >= 2 ? 2 : 1);
    float prio[2] = {1.0f, 1.0f};
    VkDeviceQueueCreateInfo qci[2] = {
        {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = family,
         .queueCount = ncq, .pQueuePriorities = prio},
        {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = tfamily,
         .queueCount = ntq, .pQueuePriorities = prio}};
    /* VK_EXT_external_memory_host where the device has it (it needs Vulkan 1.1's
     * external-memory core and vkGetPhysicalDeviceProperties2 for its alignment). */
    const char *exts[1];
    uint32_t next = 0;
    vkGetPhysicalDeviceProperties2_ =
        (PFN_vkGetPhysicalDeviceProperties2)gipa(inst, "vkGetPhysicalDeviceProperties2");
    if (props.apiVersion >= VK_API_VERSION_1_1 && vkGetPhysicalDeviceProperties2_) {
        uint32_t ne = 0;
        CK(vkEnumerateDeviceExtensionProperties(phys, NULL, &ne, NULL));
        VkExtensionProperties *ep = calloc(ne ? ne : 1, sizeof *ep);
        if (!ep) {
            fprintf(stderr, "yardstick: out of host memory\n");
            exit(1);
        }
        VkResult er2 = vkEnumerateDeviceExtensionProperties(phys, NULL, &ne, ep);
        if (er2 != VK_SUCCESS && er2 != VK_INCOMPLETE) CK(er2);
        for (uint32_t i = 0; i < ne; i++)
            if (!strcmp(ep[i].extensionName, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME))
                exts[next++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
        free(ep);
        if (next) {
            VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
                .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
            VkPhysicalDeviceProperties2 p2 = {
                .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &hp};
            vkGetPhysicalDeviceProperties2_(phys, &p2);
            if (hp.minImportedHostPointerAlignment) import_align = hp.minImportedHostPointerAlignment;
        }
    }
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .queueCreateInfoCount = ntq ? 2 : 1, .pQueueCreateInfos = qci,
                              .enabledExtensionCount = next, .ppEnabledExtensionNames = exts};
    CK(vkCreateDevice(phys, &dci, NULL, &dev));
#define LOADD(n) n = (PFN_##n)vkGetDeviceProcAddr(dev, #n);
    DFUNCS(LOADD)
    if (next)
        vkGetMemoryHostPointerPropertiesEXT_ = (PFN_vkGetMemoryHostPointerPropertiesEXT)
            vkGetDeviceProcAddr(dev, "vkGetMemoryHostPointerPropertiesEXT");
    has_host_import = vkGetMemoryHostPointerPropertiesEXT_ != NULL;
    for (uint32_t i = 0; i < ncq; i++) vkGetDeviceQueue(dev, family, i, &cqueues[i]);
    for (uint32_t i = 0; i < ntq; i++) vkGetDeviceQueue(dev, tfamily, i, &tqueues[i]);
    queue = cqueues[0];

    size_t code_size;
    void *code = load_spirv(spv, &code_size);
    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                     .codeSize = code_size, .pCode = code};
    VkShaderModule module;
    CK(vkCreateShaderModule(dev, &smci, NULL, &module));
    free(code);
    VkDescriptorSetLayoutBinding b[2];
    for (uint32_t i = 0; i < 2; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dslci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 2,
        .pBindings = b};
    CK(vkCreateDescriptorSetLayout(dev, &dslci, NULL, &slayout));
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 4};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .setLayoutCount = 1, .pSetLayouts = &slayout,
                                       .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    CK(vkCreatePipelineLayout(dev, &plci, NULL, &playout));
    VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = module, .pName = "main"},
        .layout = playout};
    CK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipeline));
    vkDestroyShaderModule(dev, module, NULL);
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2};
    VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                       .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps};
    CK(vkCreateDescriptorPool(dev, &dpci, NULL, &dpool));
    VkDescriptorSetAllocateInfo dsai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                        .descriptorPool = dpool, .descriptorSetCount = 1,
                                        .pSetLayouts = &slayout};
    CK(vkAllocateDescriptorSets(dev, &dsai, &dset));
    VkCommandPoolCreateInfo cpoolci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                       .queueFamilyIndex = family};
    CK(vkCreateCommandPool(dev, &cpoolci, NULL, &cpool));
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                        .commandPool = cpool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                        .commandBufferCount = 1};
    CK(vkAllocateCommandBuffers(dev, &cbai, &cmd));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    CK(vkCreateFence(dev, &fci, NULL, &fence));
    printf("RESULT {\"task\": \"device\", \"name\": \"%s\", \"queue_family\": %u, "
           "\"compute_queues\": %u, \"transfer_family\": %d, \"transfer_queues\": %u, "
           "\"rebar_type\": %d, \"host_import\": %s, \"import_align\": %llu}\n",
           props.deviceName, family, ncq, tfamily == UINT32_MAX ? -1 : (int)tfamily, ntq,
           find_type(~0u, MEM_REBAR), has_host_import ? "true" : "false",
           (unsigned long long)import_align);
    fflush(stdout);
}

/* Everything setup made, children before parents, after the device is idle. */
static void teardown(void) {
    vkDeviceWaitIdle(dev);
    vkDestroyFence(dev, fence, NULL);
    vkDestroyCommandPool(dev, cpool, NULL);
    vkDestroyDescriptorPool(dev, dpool, NULL);
    vkDestroyPipeline(dev, pipeline, NULL);
    vkDestroyPipelineLayout(dev, playout, NULL);
    vkDestroyDescriptorSetLayout(dev, slayout, NULL);
    vkDestroyDevice(dev, NULL);
    vkDestroyInstance(inst, NULL);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: yardstick SAXPY_SPV DEVICE_INDEX TASK...\n");
        return 1;
    }
    setup(argv[1], (uint32_t)atoi(argv[2]));
    for (int i = 3; i < argc;) {
        const char *t = argv[i];
        if (!strcmp(t, "latency") && i + 1 < argc) {
            task_latency(atoi(argv[i + 1]));
            i += 2;
        } else if (!strcmp(t, "saxpy") && i + 3 < argc) {
            task_saxpy(strtoull(argv[i + 1], NULL, 10), atoi(argv[i + 2]), atoi(argv[i + 3]));
            i += 4;
        } else if (!strcmp(t, "chain") && i + 3 < argc) {
            task_chain(strtoull(argv[i + 1], NULL, 10), atoi(argv[i + 2]), atoi(argv[i + 3]));
            i += 4;
        } else if (!strcmp(t, "serve") && i + 3 < argc) {
            task_serve(strtoull(argv[i + 1], NULL, 10), atoi(argv[i + 2]), atoi(argv[i + 3]));
            i += 4;
        } else if (!strcmp(t, "dma") && i + 2 < argc) {
            task_dma(strtoull(argv[i + 1], NULL, 10), atoi(argv[i + 2]));
            i += 3;
        } else if (!strcmp(t, "churn") && i + 1 < argc) {
            task_churn(atof(argv[i + 1]));
            i += 2;
        } else if (!strcmp(t, "alloc") && i + 1 < argc) {
            task_alloc(atoi(argv[i + 1]));
            i += 2;
        } else if (!strcmp(t, "xfer") && i + 2 < argc) {
            task_xfer(strtoull(argv[i + 1], NULL, 10), atoi(argv[i + 2]));
            i += 3;
        } else if (!strcmp(t, "stream") && i + 3 < argc) {
            task_stream(strtoull(argv[i + 1], NULL, 10), strtoull(argv[i + 2], NULL, 10),
                        atoi(argv[i + 3]));
            i += 4;
        } else {
            fprintf(stderr, "yardstick: bad task at '%s'\n", t);
            return 1;
        }
    }
    teardown();
    return 0;
}
