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

#define SG_INSTANCE_FUNCS(X) \
    X(vkDestroyInstance) \
    X(vkEnumeratePhysicalDevices) \
    X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) \
    X(vkGetPhysicalDeviceFeatures) \
    X(vkGetPhysicalDeviceFeatures2) \
    X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkEnumerateDeviceExtensionProperties) \
    X(vkCreateDevice) \
    X(vkGetDeviceProcAddr)

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
    X(vkGetQueryPoolResults) \
    X(vkGetMemoryHostPointerPropertiesEXT)

#define SG_DECLARE_PFN(name) PFN_##name name;

struct sg_instance {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
    struct { SG_INSTANCE_FUNCS(SG_DECLARE_PFN) } vk;
    pthread_mutex_t msg_lock;
    char *msgs;          /* newline-separated messages, NUL-terminated */
    size_t msg_len;
    int msg_errors;
    int msg_count;
};

#define SG_MAX_QUEUES 16

struct sg_device {
    sg_instance *inst;
    VkPhysicalDevice phys;
    VkDevice device;
    uint32_t queue_family;
    uint32_t nqueues;
    VkQueue queues[SG_MAX_QUEUES];
    uint32_t timestamp_valid_bits;
    int host_import;     /* VK_EXT_external_memory_host enabled */
    struct { SG_DEVICE_FUNCS(SG_DECLARE_PFN) } vk;
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
    VkDescriptorPool pool;
    VkDescriptorSet set;
};

struct sg_seq {
    sg_device *dev;
    VkQueue queue;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkQueryPool queries;
    uint32_t nqueries;
    int submitted;   /* a submission whose fence has not been seen signalled */
};

/* errors.c */
extern PFN_vkGetInstanceProcAddr sg__get_instance_proc;
struct sg_global_vk { SG_GLOBAL_FUNCS(SG_DECLARE_PFN) };
extern struct sg_global_vk sg__gvk;
void sg__set_error(const char *call);
int sg__fault_hit(void);       /* 1: this checked call must fail */
extern int32_t sg__fault_result;
void sg__live_add(sg_device *dev, int kind, int delta);

/* Checks one Vulkan call: on failure records its name, stores the code in rc and jumps
 * to the function's `fail:` ladder. Fault injection replaces the call's result, without
 * making the call, when its countdown reaches this call. */
#define SG_VK(name, expr)                                            \
    do {                                                             \
        VkResult sg_r_;                                              \
        if (sg__fault_hit()) sg_r_ = (VkResult)sg__fault_result;     \
        else sg_r_ = (expr);                                         \
        if (sg_r_ != VK_SUCCESS) {                                   \
            sg__set_error(name);                                     \
            rc = (int)sg_r_;                                         \
            goto fail;                                               \
        }                                                            \
    } while (0)

/* Shim-level failure (bad argument, malloc): same ladder. */
#define SG_FAIL(name, code)                                          \
    do {                                                             \
        sg__set_error(name);                                         \
        rc = (code);                                                 \
        goto fail;                                                   \
    } while (0)

#endif
