/* Error reporting, fault injection, live-object counters and the run-time loader. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sg_internal.h"

#ifndef SG_BUILD_ID
#define SG_BUILD_ID "unknown"
#endif

PFN_vkGetInstanceProcAddr sg__get_instance_proc = NULL;
struct sg_global_vk sg__gvk;

static _Thread_local const char *last_call = "";
static int64_t fault_countdown = 0;  /* guarded by atomics: tests drive it from one thread */
static int64_t fault_calls = 0;
int32_t sg__fault_result = VK_ERROR_OUT_OF_DEVICE_MEMORY;
static int64_t global_live[SG_LIVE_COUNT];
static pthread_mutex_t loader_lock = PTHREAD_MUTEX_INITIALIZER;
static void *loader_handle = NULL;
static VkInstance driver_anchor = VK_NULL_HANDLE;

const char *sg_build_id(void) { return SG_BUILD_ID; }

const char *sg_last_call(void) { return last_call; }

void sg__set_error(const char *call) { last_call = call; }

#define SG_NAME(x) case x: return #x
const char *sg_result_name(int code) {
    switch (code) {
    SG_NAME(VK_SUCCESS); SG_NAME(VK_NOT_READY); SG_NAME(VK_TIMEOUT); SG_NAME(VK_EVENT_SET);
    SG_NAME(VK_EVENT_RESET); SG_NAME(VK_INCOMPLETE);
    SG_NAME(VK_ERROR_OUT_OF_HOST_MEMORY); SG_NAME(VK_ERROR_OUT_OF_DEVICE_MEMORY);
    SG_NAME(VK_ERROR_INITIALIZATION_FAILED); SG_NAME(VK_ERROR_DEVICE_LOST);
    SG_NAME(VK_ERROR_MEMORY_MAP_FAILED); SG_NAME(VK_ERROR_LAYER_NOT_PRESENT);
    SG_NAME(VK_ERROR_EXTENSION_NOT_PRESENT); SG_NAME(VK_ERROR_FEATURE_NOT_PRESENT);
    SG_NAME(VK_ERROR_INCOMPATIBLE_DRIVER); SG_NAME(VK_ERROR_TOO_MANY_OBJECTS);
    SG_NAME(VK_ERROR_FORMAT_NOT_SUPPORTED); SG_NAME(VK_ERROR_FRAGMENTED_POOL);
    SG_NAME(VK_ERROR_UNKNOWN); SG_NAME(VK_ERROR_OUT_OF_POOL_MEMORY);
    SG_NAME(VK_ERROR_INVALID_EXTERNAL_HANDLE); SG_NAME(VK_ERROR_FRAGMENTATION);
    SG_NAME(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS); SG_NAME(VK_ERROR_INVALID_SHADER_NV);
    SG_NAME(SG_ERR_NO_LOADER); SG_NAME(SG_ERR_NO_DEVICE); SG_NAME(SG_ERR_ARGUMENT);
    SG_NAME(SG_ERR_MEMORY_TYPE); SG_NAME(SG_ERR_NO_QUEUE); SG_NAME(SG_ERR_NO_LAYER);
    SG_NAME(SG_ERR_RANGE); SG_NAME(SG_ERR_NO_FUNCTION); SG_NAME(SG_ERR_NOT_READY);
    default: return NULL;
    }
}
#undef SG_NAME

void sg_fault_set(int64_t countdown, int32_t result) {
    __atomic_store_n(&fault_calls, 0, __ATOMIC_SEQ_CST);
    sg__fault_result = result;
    __atomic_store_n(&fault_countdown, countdown, __ATOMIC_SEQ_CST);
}

int64_t sg_fault_calls(void) { return __atomic_load_n(&fault_calls, __ATOMIC_SEQ_CST); }

static char fault_missing[128];  /* set by tests before any loading, from one thread */

void sg_fault_missing(const char *name) {
    snprintf(fault_missing, sizeof fault_missing, "%s", name ? name : "");
}

PFN_vkVoidFunction sg__loaded(const char *name, PFN_vkVoidFunction fn) {
    if (fault_missing[0] && strcmp(name, fault_missing) == 0) return NULL;
    return fn;
}

int sg__fault_hit(void) {
    __atomic_add_fetch(&fault_calls, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&fault_countdown, __ATOMIC_RELAXED) <= 0) return 0;
    return __atomic_sub_fetch(&fault_countdown, 1, __ATOMIC_SEQ_CST) == 0;
}

void sg__live_add(sg_device *dev, int kind, int delta) {
    __atomic_add_fetch(&global_live[kind], delta, __ATOMIC_RELAXED);
    if (dev) __atomic_add_fetch(&dev->live[kind], delta, __ATOMIC_RELAXED);
}

void sg_live_counts(sg_device *dev, int64_t *out) {
    const int64_t *src = dev ? dev->live : global_live;
    for (int i = 0; i < SG_LIVE_COUNT; i++) out[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

/* Who owns what: the loader handle is process-wide and never closed (drivers may keep
 * threads or atexit handlers that live in it). Failure leaves nothing loaded. */
int sg_loader_open(const char *path, char *err, size_t errlen) {
    int rc = 0;
    pthread_mutex_lock(&loader_lock);
    if (loader_handle) goto done;
    const char *names[] = {path, "libvulkan.so.1", "libvulkan.so", "libvulkan.1.dylib",
                           "libMoltenVK.dylib"};
    void *h = NULL;
    /* An explicit path is the only one tried: asking for a loader and silently getting
     * another would hide the mistake. */
    size_t count = path ? 1 : sizeof names / sizeof names[0];
    for (size_t i = path ? 0 : 1; i < count && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *msg = dlerror();
        if (err && errlen) snprintf(err, errlen, "%s", msg ? msg : "libvulkan not found");
        sg__set_error("dlopen");
        rc = SG_ERR_NO_LOADER;
        goto done;
    }
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(h, "vkGetInstanceProcAddr");
    if (!gipa) {
        if (err && errlen) snprintf(err, errlen, "the Vulkan loader has no vkGetInstanceProcAddr");
        dlclose(h);
        sg__set_error("dlsym");
        rc = SG_ERR_NO_LOADER;
        goto done;
    }
    const char *missing = NULL;
#define SG_LOAD_GLOBAL(name)                                                     \
    sg__gvk.name = (PFN_##name)sg__loaded(#name, gipa(NULL, #name));             \
    if (!sg__gvk.name && !missing) missing = #name;
    SG_GLOBAL_FUNCS(SG_LOAD_GLOBAL)
#undef SG_LOAD_GLOBAL
    if (missing) {
        if (err && errlen) snprintf(err, errlen, "the Vulkan loader has no %s", missing);
        dlclose(h);
        memset(&sg__gvk, 0, sizeof sg__gvk);
        sg__set_error(missing);
        rc = SG_ERR_NO_LOADER;
        goto done;
    }
    sg__get_instance_proc = gipa;
    loader_handle = h;
    /* The loader loads the drivers with each instance and unloads them with it. Some
     * drivers leak per-load state: NVIDIA 580 refuses vkCreateInstance
     * (VK_ERROR_INCOMPATIBLE_DRIVER) after about 30 create/destroy cycles. One bare
     * instance kept for the life of the process keeps the drivers loaded, like the
     * loader itself. It is not counted as a live object; failure to make it is ignored
     * (the next instance reports the real error). */
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .apiVersion = VK_API_VERSION_1_0};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    if (sg__gvk.vkCreateInstance(&ci, NULL, &driver_anchor) != VK_SUCCESS)
        driver_anchor = VK_NULL_HANDLE;
done:
    pthread_mutex_unlock(&loader_lock);
    return rc;
}

#ifdef __GLIBC__
/* Runs first at exit() (the last handler registered runs first), with the process's own
 * exit status: flush C's streams, then leave without the handlers and destructors
 * registered before it, the Vulkan drivers' among them. */
static void exit_without_drivers(int status, void *arg) {
    (void)arg;
    fflush(NULL);
    _exit(status);
}
#endif

int sg_exit_guard(void) {
    /* No driver was ever loaded (the loader, and with it the anchor instance, is loaded
     * by the first instance): the exit cannot reach one. */
    if (!loader_handle) return 0;
#ifdef __GLIBC__
    static pid_t guarded = 0;   /* copied by fork: each process registers once */
    if (guarded == getpid()) return 1;
    if (on_exit(exit_without_drivers, NULL) != 0) {
        sg__set_error("on_exit");
        return SG_ERR_NO_FUNCTION;
    }
    guarded = getpid();
    return 1;
#else
    sg__set_error("on_exit");
    return SG_ERR_NO_FUNCTION;
#endif
}
