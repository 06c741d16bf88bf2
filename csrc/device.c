/* Instance, physical-device enumeration, logical device and queues. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "sg_internal.h"

#define SG_MSG_CAP (64 * 1024)

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)types;
    sg_instance *inst = (sg_instance *)user;
    int is_error = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) != 0;
    const char *text = data && data->pMessage ? data->pMessage : "(no message)";
    pthread_mutex_lock(&inst->msg_lock);
    size_t need = strlen(text) + 3;
    if (inst->msg_len + need + 1 < SG_MSG_CAP) {
        int n = snprintf(inst->msgs + inst->msg_len, SG_MSG_CAP - inst->msg_len, "%c %s\n",
                         is_error ? 'E' : 'W', text);
        if (n > 0) inst->msg_len += (size_t)n;
    }
    inst->msg_count++;
    if (is_error) inst->msg_errors++;
    pthread_mutex_unlock(&inst->msg_lock);
    return VK_FALSE;
}

static int has_layer(const char *name) {
    uint32_t n = 0;
    if (sg__gvk.vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkLayerProperties *props = calloc(n, sizeof *props);
    if (!props) return 0;
    int found = 0;
    if (sg__gvk.vkEnumerateInstanceLayerProperties(&n, props) >= 0)  /* VK_INCOMPLETE: a prefix */
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(props[i].layerName, name) == 0) found = 1;
    free(props);
    return found;
}

/* An instance extension of the loader and drivers (layer NULL) or of one layer. */
static int has_extension(const char *layer, const char *name) {
    uint32_t n = 0;
    if (sg__gvk.vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS) return 0;
    VkExtensionProperties *props = calloc(n ? n : 1, sizeof *props);
    if (!props) return 0;
    int found = 0;
    if (sg__gvk.vkEnumerateInstanceExtensionProperties(layer, &n, props) >= 0)
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(props[i].extensionName, name) == 0) found = 1;
    free(props);
    return found;
}

static int has_instance_extension(const char *name) { return has_extension(NULL, name); }

/* Who owns what: the returned instance owns its VkInstance and messenger. On failure
 * nothing is left behind. */
int sg_instance_create(int debug, sg_instance **out) {
    int rc = 0;
    sg_instance *inst = NULL;
    if (!sg__get_instance_proc) SG_FAIL("sg_loader_open", SG_ERR_NO_LOADER);
    if (debug && !has_layer("VK_LAYER_KHRONOS_validation"))
        SG_FAIL("VK_LAYER_KHRONOS_validation", SG_ERR_NO_LAYER);
    inst = calloc(1, sizeof *inst);
    if (!inst) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    pthread_mutex_init(&inst->msg_lock, NULL);
    if (debug) {
        inst->msgs = calloc(1, SG_MSG_CAP);
        if (!inst->msgs) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    }

    uint32_t api = VK_API_VERSION_1_0;
    PFN_vkEnumerateInstanceVersion eiv =
        (PFN_vkEnumerateInstanceVersion)sg__get_instance_proc(NULL, "vkEnumerateInstanceVersion");
    if (eiv) {
        uint32_t v = 0;
        if (eiv(&v) == VK_SUCCESS) api = v >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : v;
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "scopedgpu",
                             .pEngineName = "scopedgpu",
                             .apiVersion = api};
    const char *exts[3];
    uint32_t next = 0;
    VkInstanceCreateFlags flags = 0;
    if (debug && has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
        exts[next++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    if (has_instance_extension("VK_KHR_portability_enumeration")) {
        exts[next++] = "VK_KHR_portability_enumeration";
        flags |= 0x00000001; /* VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR */
    }
    /* With the layer, its synchronization validation too: a missing or too narrow
     * barrier is a data race no driver of this machine shows, only some others. */
    VkValidationFeatureEnableEXT sync_validation =
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT features = {
        .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
        .enabledValidationFeatureCount = 1,
        .pEnabledValidationFeatures = &sync_validation};
    if (debug && has_extension("VK_LAYER_KHRONOS_validation",
                               VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME))
        exts[next++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
    const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
    VkDebugUtilsMessengerCreateInfoEXT dbg = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = debug_callback,
        .pUserData = inst};
    int use_messenger = debug && next > 0 && strcmp(exts[0], VK_EXT_DEBUG_UTILS_EXTENSION_NAME) == 0;
    int use_features = 0;
    for (uint32_t i = 0; i < next; i++)
        if (strcmp(exts[i], VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME) == 0) use_features = 1;
    if (use_features) features.pNext = use_messenger ? (const void *)&dbg : NULL;
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pNext = use_features ? (const void *)&features
                                        : use_messenger ? (const void *)&dbg : NULL,
                               .flags = flags,
                               .pApplicationInfo = &app,
                               .enabledLayerCount = debug ? 1 : 0,
                               .ppEnabledLayerNames = layers,
                               .enabledExtensionCount = next,
                               .ppEnabledExtensionNames = exts};
    SG_VK("vkCreateInstance", sg__gvk.vkCreateInstance(&ci, NULL, &inst->instance));
    sg__live_add(NULL, SG_LIVE_INSTANCES, 1);
#define SG_LOAD_INSTANCE(name) \
    SG_LOAD_REQUIRED(sg__get_instance_proc, inst->instance, inst->vk, name)
#define SG_LOAD_INSTANCE_OPT(name) \
    SG_LOAD_OPTIONAL(sg__get_instance_proc, inst->instance, inst->vk, name)
    SG_INSTANCE_FUNCS(SG_LOAD_INSTANCE)
    SG_INSTANCE_OPTIONAL_FUNCS(SG_LOAD_INSTANCE_OPT)
#undef SG_LOAD_INSTANCE
#undef SG_LOAD_INSTANCE_OPT
    if (use_messenger) {
        PFN_vkCreateDebugUtilsMessengerEXT create = (PFN_vkCreateDebugUtilsMessengerEXT)
            sg__get_instance_proc(inst->instance, "vkCreateDebugUtilsMessengerEXT");
        inst->destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)
            sg__get_instance_proc(inst->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (create && inst->destroy_messenger) {
            SG_VK("vkCreateDebugUtilsMessengerEXT",
                  create(inst->instance, &dbg, NULL, &inst->messenger));
            sg__live_add(NULL, SG_LIVE_MESSENGERS, 1);
        }
    }
    *out = inst;
    return 0;
fail:
    sg_instance_destroy(inst);
    return rc;
}

void sg_instance_destroy(sg_instance *inst) {
    if (!inst) return;
    if (inst->messenger) {
        inst->destroy_messenger(inst->instance, inst->messenger, NULL);
        sg__live_add(NULL, SG_LIVE_MESSENGERS, -1);
    }
    if (inst->instance) {
        /* Creation fails when a required function is missing: ask the loader itself for
         * this one (the table may not have it); without it the instance cannot go. */
        PFN_vkDestroyInstance destroy = inst->vk.vkDestroyInstance;
        if (!destroy)
            destroy = (PFN_vkDestroyInstance)sg__get_instance_proc(inst->instance,
                                                                   "vkDestroyInstance");
        if (destroy) {
            destroy(inst->instance, NULL);
            sg__live_add(NULL, SG_LIVE_INSTANCES, -1);
        }
    }
    pthread_mutex_destroy(&inst->msg_lock);
    free(inst->msgs);
    free(inst);
}

int sg_instance_pending(sg_instance *inst) {
    if (!inst || !inst->msgs) return 0;
    return __atomic_load_n(&inst->msg_count, __ATOMIC_RELAXED);
}

int sg_instance_messages(sg_instance *inst, char *buf, size_t buflen, int *nerrors) {
    *nerrors = 0;
    if (buflen) buf[0] = 0;
    if (!inst || !inst->msgs) return 0;
    pthread_mutex_lock(&inst->msg_lock);
    int count = inst->msg_count;
    *nerrors = inst->msg_errors;
    if (buflen) {
        size_t n = inst->msg_len < buflen - 1 ? inst->msg_len : buflen - 1;
        memcpy(buf, inst->msgs, n);
        buf[n] = 0;
    }
    inst->msg_len = 0;
    inst->msgs[0] = 0;
    inst->msg_count = 0;
    inst->msg_errors = 0;
    pthread_mutex_unlock(&inst->msg_lock);
    return count;
}

static int get_physical(sg_instance *inst, uint32_t index, VkPhysicalDevice *out) {
    int rc = 0;
    uint32_t n = 0;
    VkPhysicalDevice *devs = NULL;
    SG_VK("vkEnumeratePhysicalDevices", inst->vk.vkEnumeratePhysicalDevices(inst->instance, &n, NULL));
    if (index >= n) SG_FAIL("vkEnumeratePhysicalDevices", SG_ERR_NO_DEVICE);
    devs = calloc(n, sizeof *devs);
    if (!devs) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    /* VK_INCOMPLETE: devices went away between the two calls; n says how many came. */
    SG_VK("vkEnumeratePhysicalDevices", inst->vk.vkEnumeratePhysicalDevices(inst->instance, &n, devs));
    if (index >= n) SG_FAIL("vkEnumeratePhysicalDevices", SG_ERR_NO_DEVICE);
    *out = devs[index];
fail:
    free(devs);
    return rc;
}

int sg_instance_device_count(sg_instance *inst, uint32_t *count) {
    int rc = 0;
    uint32_t n = 0;
    SG_VK("vkEnumeratePhysicalDevices", inst->vk.vkEnumeratePhysicalDevices(inst->instance, &n, NULL));
    *count = n;
fail:
    return rc;
}

static int has_device_extension(sg_instance *inst, VkPhysicalDevice phys, const char *name) {
    uint32_t n = 0;
    if (inst->vk.vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS) return 0;
    VkExtensionProperties *props = calloc(n ? n : 1, sizeof *props);
    if (!props) return 0;
    int found = 0;
    if (inst->vk.vkEnumerateDeviceExtensionProperties(phys, NULL, &n, props) >= 0)
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(props[i].extensionName, name) == 0) found = 1;
    free(props);
    return found;
}

/* Host memory import needs Vulkan 1.1 (external memory is core there) and the extension. */
static int can_import_host(sg_instance *inst, VkPhysicalDevice phys, uint32_t api) {
    return api >= VK_API_VERSION_1_1 && inst->vk.vkGetPhysicalDeviceProperties2 &&
           has_device_extension(inst, phys, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
}

/* Queries the feature structs the shim enables; v11/v12 are filled only where the
 * device's API version has them (1.2 and later). */
static void query_features(sg_instance *inst, VkPhysicalDevice phys, uint32_t api,
                           VkPhysicalDeviceFeatures2 *f2, VkPhysicalDeviceVulkan11Features *v11,
                           VkPhysicalDeviceVulkan12Features *v12) {
    memset(f2, 0, sizeof *f2);
    memset(v11, 0, sizeof *v11);
    memset(v12, 0, sizeof *v12);
    f2->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    v11->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    v12->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    if (api >= VK_API_VERSION_1_2 && inst->vk.vkGetPhysicalDeviceFeatures2) {
        f2->pNext = v11;
        v11->pNext = v12;
        inst->vk.vkGetPhysicalDeviceFeatures2(phys, f2);
    } else {
        inst->vk.vkGetPhysicalDeviceFeatures(phys, &f2->features);
    }
}

/* A family that can transfer but neither compute nor draw: on discrete GPUs its queues
 * feed the DMA engines, so copies there overlap copies on the compute queues. */
static uint32_t pick_transfer_family(sg_instance *inst, VkPhysicalDevice phys, uint32_t *count) {
    uint32_t n = 0;
    inst->vk.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
    VkQueueFamilyProperties props[32];
    if (n > 32) n = 32;
    inst->vk.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, props);
    const VkQueueFlags other = VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT;
    for (uint32_t i = 0; i < n; i++) {
        if ((props[i].queueFlags & VK_QUEUE_TRANSFER_BIT) && !(props[i].queueFlags & other) &&
            props[i].queueCount > 0) {
            *count = props[i].queueCount;
            return i;
        }
    }
    *count = 0;
    return UINT32_MAX;
}

static uint32_t pick_queue_family(sg_instance *inst, VkPhysicalDevice phys, uint32_t *count,
                                  uint32_t *ts_bits) {
    uint32_t n = 0;
    inst->vk.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
    VkQueueFamilyProperties props[32];
    if (n > 32) n = 32;
    inst->vk.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, props);
    for (uint32_t i = 0; i < n; i++) {
        if (props[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            *count = props[i].queueCount;
            *ts_bits = props[i].timestampValidBits;
            return i;
        }
    }
    *count = 0;
    *ts_bits = 0;
    return UINT32_MAX;
}

int sg_instance_device_info(sg_instance *inst, uint32_t index, sg_device_info *info) {
    int rc = 0;
    VkPhysicalDevice phys;
    rc = get_physical(inst, index, &phys);
    if (rc) return rc;
    memset(info, 0, sizeof *info);
    VkPhysicalDeviceProperties p;
    inst->vk.vkGetPhysicalDeviceProperties(phys, &p);
    snprintf(info->name, sizeof info->name, "%s", p.deviceName);
    info->device_type = p.deviceType;
    info->vendor_id = p.vendorID;
    info->device_id = p.deviceID;
    info->api_version = p.apiVersion;
    info->driver_version = p.driverVersion;
    for (int i = 0; i < 3; i++) {
        info->max_workgroup_size[i] = p.limits.maxComputeWorkGroupSize[i];
        info->max_workgroup_count[i] = p.limits.maxComputeWorkGroupCount[i];
    }
    info->max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
    info->max_shared_memory_size = p.limits.maxComputeSharedMemorySize;
    info->max_push_constants_size = p.limits.maxPushConstantsSize;
    info->max_memory_allocation_count = p.limits.maxMemoryAllocationCount;
    info->max_bound_descriptor_sets = p.limits.maxBoundDescriptorSets;
    info->max_storage_buffers_per_stage = p.limits.maxPerStageDescriptorStorageBuffers;
    info->max_storage_buffer_range = p.limits.maxStorageBufferRange;
    info->min_storage_buffer_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
    info->non_coherent_atom_size = p.limits.nonCoherentAtomSize;
    info->timestamp_period = p.limits.timestampPeriod;
    info->max_memory_allocation_size = 0;

    if (p.apiVersion >= VK_API_VERSION_1_1 && inst->vk.vkGetPhysicalDeviceProperties2) {
        int import = can_import_host(inst, phys, p.apiVersion);
        VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
        VkPhysicalDeviceSubgroupProperties sub = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
            .pNext = import ? &host : NULL};
        VkPhysicalDeviceMaintenance3Properties m3 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &sub};
        VkPhysicalDeviceDriverProperties drv = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, .pNext = &m3};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = p.apiVersion >= VK_API_VERSION_1_2
                                                       ? (void *)&drv : (void *)&m3};
        inst->vk.vkGetPhysicalDeviceProperties2(phys, &p2);
        info->subgroup_size = sub.subgroupSize;
        info->max_memory_allocation_size = m3.maxMemoryAllocationSize;
        if (import && host.minImportedHostPointerAlignment) {
            info->host_import = 1;
            info->host_import_alignment = host.minImportedHostPointerAlignment;
        }
        if (p.apiVersion >= VK_API_VERSION_1_2) {
            snprintf(info->driver_name, sizeof info->driver_name, "%s", drv.driverName);
            snprintf(info->driver_info, sizeof info->driver_info, "%s", drv.driverInfo);
        }
    }

    VkPhysicalDeviceFeatures2 f2;
    VkPhysicalDeviceVulkan11Features v11;
    VkPhysicalDeviceVulkan12Features v12;
    query_features(inst, phys, p.apiVersion, &f2, &v11, &v12);
    info->shader_float64 = f2.features.shaderFloat64;
    info->shader_int64 = f2.features.shaderInt64;
    info->shader_int16 = f2.features.shaderInt16;
    info->shader_float16 = v12.shaderFloat16;
    info->shader_int8 = v12.shaderInt8;
    info->storage_16bit = v11.storageBuffer16BitAccess;
    info->storage_8bit = v12.storageBuffer8BitAccess;

    info->queue_family = pick_queue_family(inst, phys, &info->queue_count,
                                           &info->timestamp_valid_bits);

    VkPhysicalDeviceMemoryProperties mp;
    inst->vk.vkGetPhysicalDeviceMemoryProperties(phys, &mp);
    info->memory_type_count = mp.memoryTypeCount;
    for (uint32_t i = 0; i < mp.memoryTypeCount && i < 32; i++) {
        info->memory_type_flags[i] = mp.memoryTypes[i].propertyFlags;
        info->memory_type_heap[i] = mp.memoryTypes[i].heapIndex;
    }
    info->memory_heap_count = mp.memoryHeapCount;
    for (uint32_t i = 0; i < mp.memoryHeapCount && i < 16; i++) {
        info->memory_heap_size[i] = mp.memoryHeaps[i].size;
        info->memory_heap_flags[i] = mp.memoryHeaps[i].flags;
    }
    info->buffer_memory_type_bits = mp.memoryTypeCount >= 32 ? 0xffffffffu
                                                             : (1u << mp.memoryTypeCount) - 1;
    return 0;
}

/* Who owns what: the device owns its VkDevice; the queues belong to it. The instance
 * must outlive it. On failure nothing is left behind. */
int sg_device_create(sg_instance *inst, uint32_t index, uint32_t nqueues, sg_device **out) {
    int rc = 0;
    sg_device *dev = NULL;
    VkPhysicalDevice phys;
    rc = get_physical(inst, index, &phys);
    if (rc) return rc;
    dev = calloc(1, sizeof *dev);
    if (!dev) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    dev->inst = inst;
    dev->phys = phys;
    uint32_t count = 0;
    dev->queue_family = pick_queue_family(inst, phys, &count, &dev->timestamp_valid_bits);
    if (dev->queue_family == UINT32_MAX || count == 0) SG_FAIL("vkGetPhysicalDeviceQueueFamilyProperties", SG_ERR_NO_QUEUE);
    uint32_t tcount = 0;
    dev->transfer_family = pick_transfer_family(inst, phys, &tcount);
    dev->ntransfer = tcount < SG_MAX_TRANSFER_QUEUES ? tcount : SG_MAX_TRANSFER_QUEUES;
    if (dev->ntransfer == 0) dev->transfer_family = UINT32_MAX;
    if (nqueues < 1) nqueues = 1;
    if (nqueues > count) nqueues = count;
    if (nqueues > SG_MAX_QUEUES - SG_MAX_TRANSFER_QUEUES) nqueues = SG_MAX_QUEUES - SG_MAX_TRANSFER_QUEUES;
    dev->nqueues = nqueues;
    float priorities[SG_MAX_QUEUES];
    for (uint32_t i = 0; i < SG_MAX_QUEUES; i++) priorities[i] = 1.0f;
    VkDeviceQueueCreateInfo qci[2] = {
        {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
         .queueFamilyIndex = dev->queue_family,
         .queueCount = nqueues,
         .pQueuePriorities = priorities},
        {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
         .queueFamilyIndex = dev->transfer_family,
         .queueCount = dev->ntransfer,
         .pQueuePriorities = priorities}};

    VkPhysicalDeviceProperties p;
    inst->vk.vkGetPhysicalDeviceProperties(phys, &p);
    VkPhysicalDeviceFeatures2 have;
    VkPhysicalDeviceVulkan11Features have11;
    VkPhysicalDeviceVulkan12Features have12;
    query_features(inst, phys, p.apiVersion, &have, &have11, &have12);
    /* Enable only what shaders over storage buffers need: robustBufferAccess and the
     * like cost speed and are left off. */
    VkPhysicalDeviceVulkan12Features en12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .shaderFloat16 = have12.shaderFloat16,
        .shaderInt8 = have12.shaderInt8,
        .storageBuffer8BitAccess = have12.storageBuffer8BitAccess,
        .uniformAndStorageBuffer8BitAccess = have12.uniformAndStorageBuffer8BitAccess,
        .vulkanMemoryModel = have12.vulkanMemoryModel,
        /* "If vulkanMemoryModel is enabled and vulkanMemoryModelDeviceScope is not
         * enabled, Device memory scope must not be used" (VUID-06265): glslang gives
         * every atomic on a storage buffer Device scope. */
        .vulkanMemoryModelDeviceScope = have12.vulkanMemoryModel &&
                                        have12.vulkanMemoryModelDeviceScope,
        .bufferDeviceAddress = VK_FALSE};
    VkPhysicalDeviceVulkan11Features en11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
        .pNext = &en12,
        .storageBuffer16BitAccess = have11.storageBuffer16BitAccess,
        .uniformAndStorageBuffer16BitAccess = have11.uniformAndStorageBuffer16BitAccess};
    VkPhysicalDeviceFeatures2 en = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    en.features.shaderFloat64 = have.features.shaderFloat64;
    en.features.shaderInt64 = have.features.shaderInt64;
    en.features.shaderInt16 = have.features.shaderInt16;
    int modern = p.apiVersion >= VK_API_VERSION_1_2 && inst->vk.vkGetPhysicalDeviceFeatures2;
    en.pNext = &en11;
    const char *exts[1];
    uint32_t next = 0;
    if (can_import_host(inst, phys, p.apiVersion)) {
        exts[next++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
        dev->host_import = 1;
    }
    VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = modern ? &en : NULL,
                             .queueCreateInfoCount = dev->ntransfer ? 2 : 1,
                             .pQueueCreateInfos = qci,
                             .enabledExtensionCount = next,
                             .ppEnabledExtensionNames = exts,
                             .pEnabledFeatures = modern ? NULL : &en.features};
    SG_VK("vkCreateDevice", inst->vk.vkCreateDevice(phys, &ci, NULL, &dev->device));
    sg__live_add(dev, SG_LIVE_DEVICES, 1);
#define SG_LOAD_DEVICE(name) \
    SG_LOAD_REQUIRED(inst->vk.vkGetDeviceProcAddr, dev->device, dev->vk, name)
#define SG_LOAD_DEVICE_OPT(name) \
    SG_LOAD_OPTIONAL(inst->vk.vkGetDeviceProcAddr, dev->device, dev->vk, name)
    SG_DEVICE_FUNCS(SG_LOAD_DEVICE)
    SG_DEVICE_OPTIONAL_FUNCS(SG_LOAD_DEVICE_OPT)
#undef SG_LOAD_DEVICE
#undef SG_LOAD_DEVICE_OPT
    for (uint32_t i = 0; i < nqueues; i++)
        dev->vk.vkGetDeviceQueue(dev->device, dev->queue_family, i, &dev->queues[i]);
    for (uint32_t i = 0; i < dev->ntransfer; i++)
        dev->vk.vkGetDeviceQueue(dev->device, dev->transfer_family, i, &dev->queues[nqueues + i]);
    *out = dev;
    return 0;
fail:
    sg_device_destroy(dev);
    return rc;
}

void sg_device_destroy(sg_device *dev) {
    if (!dev) return;
    if (dev->device) {
        /* vkDestroyDevice: "All child objects created using device must have been
         * destroyed prior to destroying device", and no work may be pending on it. */
        PFN_vkGetDeviceProcAddr get = dev->inst->vk.vkGetDeviceProcAddr;
        PFN_vkDeviceWaitIdle wait = dev->vk.vkDeviceWaitIdle;
        PFN_vkDestroyDevice destroy = dev->vk.vkDestroyDevice;
        /* As for the instance: a device whose table is incomplete (creation failed on a
         * missing function) asks the driver for these two directly. */
        if (!wait) wait = (PFN_vkDeviceWaitIdle)get(dev->device, "vkDeviceWaitIdle");
        if (!destroy) destroy = (PFN_vkDestroyDevice)get(dev->device, "vkDestroyDevice");
        if (wait) wait(dev->device);
        if (destroy) {
            destroy(dev->device, NULL);
            sg__live_add(dev, SG_LIVE_DEVICES, -1);
        }
    }
    free(dev);
}

int sg_device_wait_idle(sg_device *dev) {
    int rc = 0;
    SG_VK("vkDeviceWaitIdle", dev->vk.vkDeviceWaitIdle(dev->device));
fail:
    return rc;
}

uint32_t sg_device_queue_count(sg_device *dev) { return dev->nqueues; }

uint32_t sg_device_transfer_queue_count(sg_device *dev) { return dev->ntransfer; }
