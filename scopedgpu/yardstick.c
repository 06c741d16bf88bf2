/* The C yardstick of `python -m scopedgpu bench`: plain Vulkan, no scopedgpu, driving the
 * same SPIR-V (saxpy.spv) on the same device, so that the bench can report how close the
 * Python library gets to the floor any Vulkan program can reach.
 *
 * Built by the bench at run time with the system C compiler:
 *     cc -O2 -std=gnu11 yardstick.c -o yardstick -ldl
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
 * Each result is one line on stdout: `RESULT {json}`. Errors go to stderr, exit code 1.
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
    X(vkCreateDevice) X(vkGetDeviceProcAddr) X(vkDestroyInstance)
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
    X(vkQueueSubmit) X(vkDeviceWaitIdle)
#define DECL(n) static PFN_##n n;
FUNCS(DECL)
DFUNCS(DECL)
static PFN_vkGetInstanceProcAddr gipa;

static VkInstance inst;
static VkPhysicalDevice phys;
static VkDevice dev;
static VkQueue queue;
static uint32_t family;
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

/* Memory type choice, the same ranking as scopedgpu's pool: device-local without host
 * visibility first; for staging, host-visible coherent memory, cached and not
 * device-local first (pinned system memory). */
static uint32_t pick_type(uint32_t bits, int host) {
    int best = -1, best_score = 1 << 30;
    for (uint32_t i = 0; i < memprops.memoryTypeCount; i++) {
        if (!(bits & (1u << i))) continue;
        VkMemoryPropertyFlags f = memprops.memoryTypes[i].propertyFlags;
        if (f & 0xF0) continue;
        int score;
        if (!host) {
            if (!(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
            score = (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) ? 1 : 0;
        } else {
            VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                         VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
            if ((f & need) != need) continue;
            score = ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 0 : 2) +
                    ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) &&
                     props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU ? 1 : 0);
        }
        if (score < best_score) best_score = score, best = (int)i;
    }
    if (best < 0) {
        fprintf(stderr, "yardstick: no suitable memory type\n");
        exit(1);
    }
    return (uint32_t)best;
}

typedef struct { VkBuffer buf; VkDeviceMemory mem; void *ptr; } buffer;

static buffer make_buffer(VkDeviceSize size, int host) {
    buffer b = {0};
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT};
    CK(vkCreateBuffer(dev, &bci, NULL, &b.buf));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev, b.buf, &req);
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size,
                                .memoryTypeIndex = pick_type(req.memoryTypeBits, host)};
    CK(vkAllocateMemory(dev, &mai, NULL, &b.mem));
    CK(vkBindBufferMemory(dev, b.buf, b.mem, 0));
    if (host) CK(vkMapMemory(dev, b.mem, 0, VK_WHOLE_SIZE, 0, &b.ptr));
    return b;
}

static void free_buffer(buffer *b) {
    vkDestroyBuffer(dev, b->buf, NULL);
    vkFreeMemory(dev, b->mem, NULL);
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

/* The commands scopedgpu records around its ops: a leading barrier that orders earlier
 * submissions, and a trailing one that makes device writes visible to the host. */
static void begin(VkCommandBuffer cb) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CK(vkBeginCommandBuffer(cb, &bi));
    barrier(cb, GPU_STAGES, ALL_WRITES, GPU_STAGES, ALL_GPU);
}

static void end(VkCommandBuffer cb) {
    barrier(cb, GPU_STAGES, ALL_WRITES, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
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
        for (int i = 0; i < iters / 10 + 1; i++) submit_wait(cmd, fence, 1 - mode);  /* warm */
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
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = family, .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci};
    CK(vkCreateDevice(phys, &dci, NULL, &dev));
#define LOADD(n) n = (PFN_##n)vkGetDeviceProcAddr(dev, #n);
    DFUNCS(LOADD)
    vkGetDeviceQueue(dev, family, 0, &queue);

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
    printf("RESULT {\"task\": \"device\", \"name\": \"%s\", \"queue_family\": %u}\n",
           props.deviceName, family);
    fflush(stdout);
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
        } else if (!strcmp(t, "dma") && i + 2 < argc) {
            task_dma(strtoull(argv[i + 1], NULL, 10), atoi(argv[i + 2]));
            i += 3;
        } else if (!strcmp(t, "churn") && i + 1 < argc) {
            task_churn(atof(argv[i + 1]));
            i += 2;
        } else if (!strcmp(t, "alloc") && i + 1 < argc) {
            task_alloc(atoi(argv[i + 1]));
            i += 2;
        } else {
            fprintf(stderr, "yardstick: bad task at '%s'\n", t);
            return 1;
        }
    }
    vkDeviceWaitIdle(dev);
    /* The process exits here; the driver reclaims the device with it. */
    return 0;
}
