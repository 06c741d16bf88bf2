/* Private to the shim: struct layouts, the Vulkan function tables, the check macro. */
#ifndef SG_INTERNAL_H
#define SG_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include <pthread.h>
#include "sg.h"

/* Functions loaded from the loader before any instance exists. */
#define SG_GLOBAL_FUNCS(X) \
    X(vkCreateInstance) \
    X(vkEnumerateInstanceLayerProperties) \
    X(vkEnumerateInstanceExtensionProperties)

/* Required: an instance or device that lacks one of these fails to be created
 * (SG_ERR_NO_FUNCTION naming it). The OPTIONAL lists may stay NULL; their users check. */
#define SG_INSTANCE_FUNCS(X) \
    X(vkDestroyInstance) \
    X(vkEnumeratePhysicalDevices) \
    X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceFeatures) \
    X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkEnumerateDeviceExtensionProperties) \
    X(vkCreateDevice) \
    X(vkGetDeviceProcAddr)

/* Vulkan 1.1 (core), absent from a 1.0 instance. */
#define SG_INSTANCE_OPTIONAL_FUNCS(X) \
    X(vkGetPhysicalDeviceProperties2) \
    X(vkGetPhysicalDeviceFeatures2)

#define SG_DEVICE_FUNCS(X) \
    X(vkDestroyDevice) \
    X(vkGetDeviceQueue) \
    X(vkDeviceWaitIdle) \
    X(vkCreateBuffer) \
    X(vkDestroyBuffer) \
    X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory) \
    X(vkFreeMemory) \
    X(vkBindBufferMemory) \
    X(vkMapMemory) \
    X(vkUnmapMemory) \
    X(vkCreateShaderModule) \
    X(vkDestroyShaderModule) \
    X(vkCreateDescriptorSetLayout) \
    X(vkDestroyDescriptorSetLayout) \
    X(vkCreatePipelineLayout) \
    X(vkDestroyPipelineLayout) \
    X(vkCreateComputePipelines) \
    X(vkDestroyPipeline) \
    X(vkCreateDescriptorPool) \
    X(vkDestroyDescriptorPool) \
    X(vkAllocateDescriptorSets) \
    X(vkUpdateDescriptorSets) \
    X(vkCreateCommandPool) \
    X(vkDestroyCommandPool) \
    X(vkResetCommandPool) \
    X(vkAllocateCommandBuffers) \
    X(vkBeginCommandBuffer) \
    X(vkEndCommandBuffer) \
    X(vkCmdCopyBuffer) \
    X(vkCmdFillBuffer) \
    X(vkCmdPipelineBarrier) \
    X(vkCmdBindPipeline) \
    X(vkCmdBindDescriptorSets) \
    X(vkCmdPushConstants) \
    X(vkCmdDispatch) \
    X(vkCmdWriteTimestamp) \
    X(vkCmdResetQueryPool) \
    X(vkCreateFence) \
    X(vkDestroyFence) \
    X(vkResetFences) \
    X(vkWaitForFences) \
    X(vkGetFenceStatus) \
    X(vkQueueSubmit) \
    X(vkCreateQueryPool) \
    X(vkDestroyQueryPool) \
    X(vkGetQueryPoolResults)

/* VK_EXT_external_memory_host: only when the device enabled it. */
#define SG_DEVICE_OPTIONAL_FUNCS(X) \
    X(vkGetMemoryHostPointerPropertiesEXT)

#define SG_DECLARE_PFN(name) PFN_##name name;

struct sg_instance {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
    struct { SG_INSTANCE_FUNCS(SG_DECLARE_PFN) SG_INSTANCE_OPTIONAL_FUNCS(SG_DECLARE_PFN) } vk;
    pthread_mutex_t msg_lock;
    char *msgs;          /* newline-separated messages, NUL-terminated */
    size_t msg_len;
    int msg_errors;
    int msg_count;
};

#define SG_MAX_QUEUES 16
#define SG_MAX_TRANSFER_QUEUES 2

struct sg_device {
    sg_instance *inst;
    VkPhysicalDevice phys;
    VkDevice device;
    uint32_t queue_family;
    uint32_t nqueues;            /* queues [0, nqueues) are of queue_family (compute) */
    uint32_t transfer_family;    /* a transfer-only family; UINT32_MAX when none is used */
    uint32_t ntransfer;          /* queues [nqueues, nqueues + ntransfer) are of it */
    VkQueue queues[SG_MAX_QUEUES];
    uint32_t timestamp_valid_bits;
    int host_import;     /* VK_EXT_external_memory_host enabled */
    struct { SG_DEVICE_FUNCS(SG_DECLARE_PFN) SG_DEVICE_OPTIONAL_FUNCS(SG_DECLARE_PFN) } vk;
    int64_t live[SG_LIVE_COUNT];
};

struct sg_block {
    sg_device *dev;
    VkBuffer buffer;
    VkDeviceMemory memory;
    void *ptr;
    uint64_t size;
    int imported;    /* ptr is imported host memory, not a mapping */
};

struct sg_program {
    sg_device *dev;
    VkShaderModule module;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    uint32_t nbindings;
    uint32_t push_size;
};

struct sg_dset {
    sg_device *dev;
    sg_program *prog;   /* whose set layout it was allocated with (not owned) */
    VkDescriptorPool pool;
    VkDescriptorSet set;
};

struct sg_seq {
    sg_device *dev;
    VkQueue queue;
    int transfer_only;  /* on a transfer-only queue: copies and transfer/host barriers only */
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkQueryPool queries;
    uint32_t nqueries;
    uint32_t nwritten;  /* timestamps recorded since sg_seq_begin: queries [0, nwritten) */
    int submitted;   /* a submission whose fence has not been seen signalled */
    int error;       /* first command refused since sg_seq_begin (reported by sg_seq_end) */
    const char *error_call;
};

/* errors.c */
extern PFN_vkGetInstanceProcAddr sg__get_instance_proc;
struct sg_global_vk { SG_GLOBAL_FUNCS(SG_DECLARE_PFN) };
extern struct sg_global_vk sg__gvk;
void sg__set_error(const char *call);
int sg__fault_hit(void);       /* 1: this checked call must fail */
extern int32_t sg__fault_result;
void sg__live_add(sg_device *dev, int kind, int delta);
/* A loaded function pointer, NULL when the fault hook names it missing. */
PFN_vkVoidFunction sg__loaded(const char *name, PFN_vkVoidFunction fn);

/* Checks one Vulkan call. A negative VkResult is a failure: the call's name is recorded,
 * the code stored in rc, and control jumps to the function's `fail:` ladder. Positive
 * results are success codes that carry news (VK_NOT_READY, VK_TIMEOUT, VK_INCOMPLETE):
 * SG_VK_RES leaves the result in `res` for the caller to handle them where they mean
 * something; SG_VK is for calls whose one success code is VK_SUCCESS. Fault injection
 * replaces the call's result, without making the call, when its countdown reaches it. */
#define SG_VK_RES(name, expr, res)                                   \
    do {                                                             \
        if (sg__fault_hit()) (res) = (VkResult)sg__fault_result;     \
        else (res) = (expr);                                         \
        if ((res) < 0) {                                             \
            sg__set_error(name);                                     \
            rc = (int)(res);                                         \
            goto fail;                                               \
        }                                                            \
    } while (0)

#define SG_VK(name, expr)                                            \
    do {                                                             \
        VkResult sg_r_;                                              \
        SG_VK_RES(name, expr, sg_r_);                                \
    } while (0)

/* Loads the functions of one X-macro list through `get(handle, name)` into `table`;
 * a required one that is missing fails with SG_ERR_NO_FUNCTION naming it. */
#define SG_LOAD_REQUIRED(get, handle, table, name)                                  \
    do {                                                                            \
        (table).name = (PFN_##name)sg__loaded(#name, get(handle, #name));           \
        if (!(table).name) SG_FAIL(#name, SG_ERR_NO_FUNCTION);                      \
    } while (0);
#define SG_LOAD_OPTIONAL(get, handle, table, name)                                  \
    (table).name = (PFN_##name)sg__loaded(#name, get(handle, #name));

/* Shim-level failure (bad argument, malloc): same ladder. */
#define SG_FAIL(name, code)                                          \
    do {                                                             \
        sg__set_error(name);                                         \
        rc = (code);                                                 \
        goto fail;                                                   \
    } while (0)

#endif
