/* Sequences: command pool, one command buffer, fence, optional timestamp query pool. */
#include <stdlib.h>
#include <time.h>
#include "sg_internal.h"

/* Who owns what: the sequence owns its pool (and the command buffer in it), fence and
 * query pool. Creation is all-or-nothing. */
int sg_seq_create(sg_device *dev, uint32_t queue, uint32_t nqueries, sg_seq **out) {
    int rc = 0;
    sg_seq *seq = NULL;
    if (queue >= dev->nqueues + dev->ntransfer) SG_FAIL("sg_seq_create", SG_ERR_NO_QUEUE);
    int transfer_only = queue >= dev->nqueues;
    /* Timestamps are read with the compute family's timestampValidBits. */
    if (nqueries && (transfer_only || !dev->timestamp_valid_bits))
        SG_FAIL("timestampValidBits", SG_ERR_ARGUMENT);
    seq = calloc(1, sizeof *seq);
    if (!seq) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    seq->dev = dev;
    seq->queue = dev->queues[queue];
    seq->transfer_only = transfer_only;
    VkCommandPoolCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .queueFamilyIndex = transfer_only ? dev->transfer_family
                                                                      : dev->queue_family};
    SG_VK("vkCreateCommandPool", dev->vk.vkCreateCommandPool(dev->device, &cpci, NULL, &seq->pool));
    sg__live_add(dev, SG_LIVE_COMMAND_POOLS, 1);
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                        .commandPool = seq->pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                        .commandBufferCount = 1};
    SG_VK("vkAllocateCommandBuffers", dev->vk.vkAllocateCommandBuffers(dev->device, &cbai, &seq->cmd));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    SG_VK("vkCreateFence", dev->vk.vkCreateFence(dev->device, &fci, NULL, &seq->fence));
    sg__live_add(dev, SG_LIVE_FENCES, 1);
    if (nqueries) {
        VkQueryPoolCreateInfo qpci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                      .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                      .queryCount = nqueries};
        SG_VK("vkCreateQueryPool", dev->vk.vkCreateQueryPool(dev->device, &qpci, NULL, &seq->queries));
        sg__live_add(dev, SG_LIVE_QUERY_POOLS, 1);
        seq->nqueries = nqueries;
    }
    *out = seq;
    return 0;
fail:
    sg_seq_destroy(seq);
    return rc;
}

void sg_seq_destroy(sg_seq *seq) {
    if (!seq) return;
    sg_device *dev = seq->dev;
    /* vkDestroyCommandPool: "All VkCommandBuffer objects allocated from commandPool must
     * not be in the pending state", so wait for the last submission first. */
    if (seq->submitted && seq->fence)
        dev->vk.vkWaitForFences(dev->device, 1, &seq->fence, VK_TRUE, UINT64_MAX);
    if (seq->queries) {
        dev->vk.vkDestroyQueryPool(dev->device, seq->queries, NULL);
        sg__live_add(dev, SG_LIVE_QUERY_POOLS, -1);
    }
    if (seq->fence) {
        dev->vk.vkDestroyFence(dev->device, seq->fence, NULL);
        sg__live_add(dev, SG_LIVE_FENCES, -1);
    }
    if (seq->pool) {
        dev->vk.vkDestroyCommandPool(dev->device, seq->pool, NULL);
        sg__live_add(dev, SG_LIVE_COMMAND_POOLS, -1);
    }
    free(seq);
}

/* The caller guarantees the command buffer is not pending (wait first). */
int sg_seq_begin(sg_seq *seq) {
    int rc = 0;
    sg_device *dev = seq->dev;
    SG_VK("vkResetCommandPool", dev->vk.vkResetCommandPool(dev->device, seq->pool, 0));
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    seq->nwritten = 0;
    seq->error = 0;
    seq->error_call = NULL;
    SG_VK("vkBeginCommandBuffer", dev->vk.vkBeginCommandBuffer(seq->cmd, &bi));
    if (seq->queries) dev->vk.vkCmdResetQueryPool(seq->cmd, seq->queries, 0, seq->nqueries);
fail:
    return rc;
}

/* A command refused while recording: the first one is reported by sg_seq_end. */
static void refuse(sg_seq *seq, const char *call, int code) {
    if (!seq->error) {
        seq->error = code;
        seq->error_call = call;
    }
}

/* [offset, offset + size) inside the block, without overflow. */
static int in_block(const sg_block *blk, uint64_t offset, uint64_t size) {
    return blk && size > 0 && offset < blk->size && size <= blk->size - offset;
}

void sg_seq_copy(sg_seq *seq, sg_block *src, uint64_t src_offset, sg_block *dst,
                 uint64_t dst_offset, uint64_t size) {
    /* vkCmdCopyBuffer: "The size member of each element of pRegions must be less than or
     * equal to the size of srcBuffer minus srcOffset" (and likewise for dstBuffer). */
    if (!in_block(src, src_offset, size) || !in_block(dst, dst_offset, size)) {
        refuse(seq, "sg_seq_copy", SG_ERR_RANGE);
        return;
    }
    VkBufferCopy region = {.srcOffset = src_offset, .dstOffset = dst_offset, .size = size};
    seq->dev->vk.vkCmdCopyBuffer(seq->cmd, src->buffer, dst->buffer, 1, &region);
}

void sg_seq_zero(sg_seq *seq, sg_block *blk, uint64_t offset, uint64_t size) {
    /* vkCmdFillBuffer: dstOffset and size multiples of 4, within the buffer. */
    if (!in_block(blk, offset, size) || (offset | size) % 4) {
        refuse(seq, "sg_seq_zero", SG_ERR_RANGE);
        return;
    }
    seq->dev->vk.vkCmdFillBuffer(seq->cmd, blk->buffer, offset, size, 0);
}

void sg_seq_barrier(sg_seq *seq, uint32_t src_stages, uint32_t src_access,
                    uint32_t dst_stages, uint32_t dst_access) {
    /* vkCmdPipelineBarrier: "Any pipeline stage included in srcStageMask must be supported
     * by the capabilities of the queue family"; a transfer-only family has transfer, host
     * and the top/bottom pseudo-stages. */
    const uint32_t transfer_stages = VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT |
                                     VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT |
                                     VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT |
                                     VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    if (seq->transfer_only && ((src_stages | dst_stages) & ~transfer_stages)) {
        refuse(seq, "sg_seq_barrier", SG_ERR_ARGUMENT);
        return;
    }
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = src_access,
                          .dstAccessMask = dst_access};
    seq->dev->vk.vkCmdPipelineBarrier(seq->cmd, src_stages, dst_stages, 0, 1, &mb, 0, NULL, 0, NULL);
}

void sg_seq_dispatch(sg_seq *seq, sg_program *prog, sg_dset *ds, const void *push,
                     uint32_t push_size, uint32_t x, uint32_t y, uint32_t z) {
    sg_device *dev = seq->dev;
    /* vkCmdPushConstants: "offset + size must be less than or equal to" the layout's
     * range, and size "must be a multiple of 4". */
    /* vkCmdDispatch: "The VkCommandPool that commandBuffer was allocated from must support
     * compute operations". */
    if (seq->transfer_only || push_size > prog->push_size || push_size % 4 ||
        (push_size && !push)) {
        refuse(seq, "sg_seq_dispatch", SG_ERR_ARGUMENT);
        return;
    }
    dev->vk.vkCmdBindPipeline(seq->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, prog->pipeline);
    if (ds)
        dev->vk.vkCmdBindDescriptorSets(seq->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, prog->layout, 0,
                                        1, &ds->set, 0, NULL);
    if (push_size)
        dev->vk.vkCmdPushConstants(seq->cmd, prog->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                   push_size, push);
    dev->vk.vkCmdDispatch(seq->cmd, x, y, z);
}

/* Timestamps are written in order, 0, 1, 2, ...: sg_seq_timestamps reads the first
 * nwritten. */
void sg_seq_timestamp(sg_seq *seq, uint32_t query) {
    if (!seq->queries || query != seq->nwritten || query >= seq->nqueries) {
        refuse(seq, "sg_seq_timestamp", SG_ERR_RANGE);
        return;
    }
    seq->dev->vk.vkCmdWriteTimestamp(seq->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                     seq->queries, query);
    seq->nwritten = query + 1;
}

/* Ends the command buffer even after a refused command (so that the next begin finds it
 * in a state it may reset), then reports that refusal. */
int sg_seq_end(sg_seq *seq) {
    int rc = 0;
    SG_VK("vkEndCommandBuffer", seq->dev->vk.vkEndCommandBuffer(seq->cmd));
    if (seq->error) SG_FAIL(seq->error_call, seq->error);
fail:
    return rc;
}

int sg_seq_submit(sg_seq *seq) {
    int rc = 0;
    sg_device *dev = seq->dev;
    /* vkResetFences: "Each element of pFences must not be currently associated with any
     * queue command that has not yet completed execution"; the caller waited. */
    SG_VK("vkResetFences", dev->vk.vkResetFences(dev->device, 1, &seq->fence));
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &seq->cmd};
    SG_VK("vkQueueSubmit", dev->vk.vkQueueSubmit(seq->queue, 1, &si, seq->fence));
    seq->submitted = 1;
fail:
    return rc;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Fence polls and waits return VK_NOT_READY and VK_TIMEOUT as results, not failures, so
 * they do not go through SG_VK; fault injection counts one call per poll or wait of a
 * pending submission (not per spin of the loop below) and leaves it pending. */
static int fence_status(sg_seq *seq) {
    VkResult r = seq->dev->vk.vkGetFenceStatus(seq->dev->device, seq->fence);
    if (r == VK_SUCCESS) {
        seq->submitted = 0;
        return 0;
    }
    if (r == VK_NOT_READY) return SG_TIMEOUT;
    sg__set_error("vkGetFenceStatus");
    return (int)r;
}

int sg_seq_status(sg_seq *seq) {
    if (!seq->submitted) return 0;
    if (sg__fault_hit()) {
        sg__set_error("vkGetFenceStatus");
        return sg__fault_result;
    }
    return fence_status(seq);
}

int sg_seq_wait(sg_seq *seq, uint64_t timeout_ns, uint32_t spin_ns) {
    if (!seq->submitted) return 0;
    if (sg__fault_hit()) {
        sg__set_error("vkWaitForFences");
        return sg__fault_result;
    }
    sg_device *dev = seq->dev;
    /* A short poll first: small dispatches finish within microseconds, and a blocking
     * wait costs a sleep and a wake-up on most drivers. The poll counts towards
     * timeout_ns: the blocking wait gets what is left of it. */
    if (spin_ns) {
        uint64_t start = now_ns(), spent;
        uint64_t limit = spin_ns < timeout_ns ? spin_ns : timeout_ns;
        do {
            int s = fence_status(seq);
            if (s != SG_TIMEOUT) return s;
            spent = now_ns() - start;
        } while (spent < limit);
        if (timeout_ns != UINT64_MAX) timeout_ns = spent < timeout_ns ? timeout_ns - spent : 0;
    }
    VkResult r = dev->vk.vkWaitForFences(dev->device, 1, &seq->fence, VK_TRUE, timeout_ns);
    if (r == VK_SUCCESS) {
        seq->submitted = 0;
        return 0;
    }
    if (r == VK_TIMEOUT) return SG_TIMEOUT;
    sg__set_error("vkWaitForFences");
    return (int)r;
}

int sg_seq_submit_wait(sg_seq *seq, uint64_t timeout_ns, uint32_t spin_ns, int *submit_rc) {
    int rc = sg_seq_submit(seq);
    *submit_rc = rc;
    if (rc) return rc;
    return sg_seq_wait(seq, timeout_ns, spin_ns);
}

int sg_seq_timestamps(sg_seq *seq, uint32_t n, uint64_t *out) {
    int rc = 0;
    /* vkGetQueryPoolResults with VK_QUERY_RESULT_WAIT_BIT on a query that was never
     * written "may wait forever" (a strict driver hangs, lavapipe says VK_NOT_READY):
     * only the queries this recording wrote are read. */
    if (!seq->queries || n > seq->nwritten) SG_FAIL("sg_seq_timestamps", SG_ERR_RANGE);
    if (n == 0) return 0;
    VkResult res;
    SG_VK_RES("vkGetQueryPoolResults",
              seq->dev->vk.vkGetQueryPoolResults(seq->dev->device, seq->queries, 0, n,
                                                 n * sizeof(uint64_t), out, sizeof(uint64_t),
                                                 VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
              res);
    /* VK_NOT_READY: some result was not available (not with WAIT_BIT, by the spec). */
    if (res != VK_SUCCESS) SG_FAIL("vkGetQueryPoolResults", SG_ERR_NOT_READY);
    uint32_t bits = seq->dev->timestamp_valid_bits;
    if (bits < 64)
        for (uint32_t i = 0; i < n; i++) out[i] &= (1ull << bits) - 1;
fail:
    return rc;
}
