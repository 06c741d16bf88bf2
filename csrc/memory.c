/* Memory blocks: one VkDeviceMemory and one VkBuffer over all of it. The Python pool
 * sub-allocates tensors out of blocks by offset. */
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include "sg_internal.h"

/* The one kind of buffer the shim makes: storage, transfer source and destination.
 * `next` chains extra create info (external memory for imports). */
static int buffer_create(sg_device *dev, uint64_t size, const void *next, VkBuffer *out) {
    int rc = 0;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .pNext = next,
                              .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    /* With a transfer family in use, a buffer is used by queues of two families: CONCURRENT
     * sharing spares the queue family ownership transfers that EXCLUSIVE would need
     * ("a queue family ownership transfer" is required before another family may use an
     * EXCLUSIVE resource's contents). */
    uint32_t families[2] = {dev->queue_family, dev->transfer_family};
    if (dev->ntransfer) {
        bci.sharingMode = VK_SHARING_MODE_CONCURRENT;
        bci.queueFamilyIndexCount = 2;
        bci.pQueueFamilyIndices = families;
    }
    SG_VK("vkCreateBuffer", dev->vk.vkCreateBuffer(dev->device, &bci, NULL, out));
    sg__live_add(dev, SG_LIVE_BUFFERS, 1);
fail:
    return rc;
}

/* Who owns what: the block owns its buffer and memory (and mapping). On failure
 * nothing is left behind. SG_ERR_MEMORY_TYPE: mem_type cannot back a buffer. */
int sg_block_create(sg_device *dev, uint64_t size, uint32_t mem_type, int map, sg_block **out) {
    int rc = 0;
    sg_block *blk = NULL;
    if (size == 0) SG_FAIL("sg_block_create", SG_ERR_ARGUMENT);
    blk = calloc(1, sizeof *blk);
    if (!blk) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    blk->dev = dev;
    blk->size = size;
    rc = buffer_create(dev, size, NULL, &blk->buffer);
    if (rc) goto fail;
    VkMemoryRequirements req;
    dev->vk.vkGetBufferMemoryRequirements(dev->device, blk->buffer, &req);
    if (mem_type >= 32 || !(req.memoryTypeBits & (1u << mem_type)))
        SG_FAIL("vkGetBufferMemoryRequirements", SG_ERR_MEMORY_TYPE);
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size,
                                .memoryTypeIndex = mem_type};
    SG_VK("vkAllocateMemory", dev->vk.vkAllocateMemory(dev->device, &mai, NULL, &blk->memory));
    sg__live_add(dev, SG_LIVE_MEMORY, 1);
    SG_VK("vkBindBufferMemory", dev->vk.vkBindBufferMemory(dev->device, blk->buffer, blk->memory, 0));
    if (map)
        SG_VK("vkMapMemory",
              dev->vk.vkMapMemory(dev->device, blk->memory, 0, VK_WHOLE_SIZE, 0, &blk->ptr));
    *out = blk;
    return 0;
fail:
    sg_block_destroy(blk);
    return rc;
}

/* The caller guarantees that no submitted work still uses the block (the Python pool
 * frees a range only after the fences of the work that used it have signalled). */
void sg_block_destroy(sg_block *blk) {
    if (!blk) return;
    sg_device *dev = blk->dev;
    if (blk->ptr && !blk->imported) dev->vk.vkUnmapMemory(dev->device, blk->memory);
    if (blk->buffer) {
        dev->vk.vkDestroyBuffer(dev->device, blk->buffer, NULL);
        sg__live_add(dev, SG_LIVE_BUFFERS, -1);
    }
    if (blk->memory) {
        dev->vk.vkFreeMemory(dev->device, blk->memory, NULL);
        sg__live_add(dev, SG_LIVE_MEMORY, -1);
    }
    free(blk);
}

void *sg_block_ptr(sg_block *blk) { return blk->ptr; }

int sg_host_pointer_types(sg_device *dev, void *ptr, uint32_t *type_bits) {
    int rc = 0;
    if (!dev->host_import || !dev->vk.vkGetMemoryHostPointerPropertiesEXT)
        SG_FAIL("vkGetMemoryHostPointerPropertiesEXT", VK_ERROR_EXTENSION_NOT_PRESENT);
    VkMemoryHostPointerPropertiesEXT props = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    SG_VK("vkGetMemoryHostPointerPropertiesEXT",
          dev->vk.vkGetMemoryHostPointerPropertiesEXT(
              dev->device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, ptr, &props));
    *type_bits = props.memoryTypeBits;
fail:
    return rc;
}

/* Who owns what: the block owns its buffer and the VkDeviceMemory of the import, not the
 * host memory, which the caller keeps alive until sg_block_destroy. On failure nothing is
 * left behind. */
int sg_block_import(sg_device *dev, void *ptr, uint64_t size, uint32_t mem_type, sg_block **out) {
    int rc = 0;
    sg_block *blk = NULL;
    if (!dev->host_import) SG_FAIL("sg_block_import", VK_ERROR_EXTENSION_NOT_PRESENT);
    if (!ptr || size == 0) SG_FAIL("sg_block_import", SG_ERR_ARGUMENT);
    blk = calloc(1, sizeof *blk);
    if (!blk) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    blk->dev = dev;
    blk->size = size;
    blk->imported = 1;
    /* VkBufferCreateInfo: a buffer bound to imported memory must be created with the
     * handle type in VkExternalMemoryBufferCreateInfo::handleTypes. */
    VkExternalMemoryBufferCreateInfo ext = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
        .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
    rc = buffer_create(dev, size, &ext, &blk->buffer);
    if (rc) goto fail;
    VkMemoryRequirements req;
    dev->vk.vkGetBufferMemoryRequirements(dev->device, blk->buffer, &req);
    if (mem_type >= 32 || !(req.memoryTypeBits & (1u << mem_type)) || req.size > size)
        SG_FAIL("vkGetBufferMemoryRequirements", SG_ERR_MEMORY_TYPE);
    VkImportMemoryHostPointerInfoEXT imp = {
        .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
        .pHostPointer = ptr};
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .pNext = &imp,
                                .allocationSize = size,
                                .memoryTypeIndex = mem_type};
    SG_VK("vkAllocateMemory", dev->vk.vkAllocateMemory(dev->device, &mai, NULL, &blk->memory));
    sg__live_add(dev, SG_LIVE_MEMORY, 1);
    SG_VK("vkBindBufferMemory", dev->vk.vkBindBufferMemory(dev->device, blk->buffer, blk->memory, 0));
    blk->ptr = ptr;
    *out = blk;
    return 0;
fail:
    sg_block_destroy(blk);
    return rc;
}

void sg_copy_large(uintptr_t dst, uintptr_t src, size_t n) {
    char *d = (char *)dst;
    const char *s = (const char *)src;
#if defined(__x86_64__)
    /* SSE2 (every x86-64): unaligned 16-byte loads, aligned streaming stores, 64 bytes
     * (a cache line) a step once dst is 16-byte aligned; the rest by memcpy. */
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    /* Streaming stores are weakly ordered: fenced before anyone is told the copy is done
     * (the fence of a later queue submission, another thread reading dst). */
    _mm_sfence();
    memcpy(d + i, s + i, n - i);
#else
    memcpy(d, s, n);
#endif
}
