/* Compute programs (shader module, layouts, pipeline) and descriptor sets. */
#include <stdlib.h>
#include "sg_internal.h"

#define SG_MAX_BINDINGS 64
#define SG_MAX_SPEC 64

/* Who owns what: the program owns its module, set layout, pipeline layout and pipeline.
 * Creation is all-or-nothing. */
int sg_program_create(sg_device *dev, const uint32_t *code, size_t code_bytes,
                      uint32_t nbindings, uint32_t push_size,
                      uint32_t nspec, const uint32_t *spec_ids, const uint32_t *spec_offsets,
                      const uint32_t *spec_sizes, const void *spec_data, size_t spec_bytes,
                      sg_program **out) {
    int rc = 0;
    sg_program *prog = NULL;
    if (!code || code_bytes == 0 || code_bytes % 4 || nbindings > SG_MAX_BINDINGS ||
        nspec > SG_MAX_SPEC || push_size % 4)
        SG_FAIL("sg_program_create", SG_ERR_ARGUMENT);
    prog = calloc(1, sizeof *prog);
    if (!prog) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    prog->dev = dev;
    prog->nbindings = nbindings;
    prog->push_size = push_size;

    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                     .codeSize = code_bytes,
                                     .pCode = code};
    SG_VK("vkCreateShaderModule", dev->vk.vkCreateShaderModule(dev->device, &smci, NULL, &prog->module));
    sg__live_add(dev, SG_LIVE_SHADER_MODULES, 1);

    VkDescriptorSetLayoutBinding b[SG_MAX_BINDINGS];
    for (uint32_t i = 0; i < nbindings; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dslci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .bindingCount = nbindings,
        .pBindings = b};
    SG_VK("vkCreateDescriptorSetLayout",
          dev->vk.vkCreateDescriptorSetLayout(dev->device, &dslci, NULL, &prog->set_layout));
    sg__live_add(dev, SG_LIVE_SET_LAYOUTS, 1);

    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0,
                               .size = push_size};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .setLayoutCount = 1,
                                       .pSetLayouts = &prog->set_layout,
                                       .pushConstantRangeCount = push_size ? 1 : 0,
                                       .pPushConstantRanges = &pcr};
    SG_VK("vkCreatePipelineLayout",
          dev->vk.vkCreatePipelineLayout(dev->device, &plci, NULL, &prog->layout));
    sg__live_add(dev, SG_LIVE_PIPELINE_LAYOUTS, 1);

    VkSpecializationMapEntry entries[SG_MAX_SPEC];
    for (uint32_t i = 0; i < nspec; i++) {
        if ((size_t)spec_offsets[i] + spec_sizes[i] > spec_bytes)
            SG_FAIL("sg_program_create", SG_ERR_ARGUMENT);
        entries[i] = (VkSpecializationMapEntry){.constantID = spec_ids[i],
                                                .offset = spec_offsets[i],
                                                .size = spec_sizes[i]};
    }
    VkSpecializationInfo si = {.mapEntryCount = nspec, .pMapEntries = entries,
                               .dataSize = spec_bytes, .pData = spec_data};
    VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = prog->module,
                  .pName = "main",
                  .pSpecializationInfo = nspec ? &si : NULL},
        .layout = prog->layout};
    SG_VK("vkCreateComputePipelines",
          dev->vk.vkCreateComputePipelines(dev->device, VK_NULL_HANDLE, 1, &cpci, NULL, &prog->pipeline));
    /* VK_PIPELINE_COMPILE_REQUIRED (a success code, only asked for by a flag not set
     * here) comes without a pipeline. */
    if (!prog->pipeline) SG_FAIL("vkCreateComputePipelines", VK_ERROR_UNKNOWN);
    sg__live_add(dev, SG_LIVE_PIPELINES, 1);
    *out = prog;
    return 0;
fail:
    sg_program_destroy(prog);
    return rc;
}

/* The caller guarantees no submitted work uses the pipeline (the manager destroys
 * programs only after its device is idle). */
void sg_program_destroy(sg_program *prog) {
    if (!prog) return;
    sg_device *dev = prog->dev;
    if (prog->pipeline) {
        dev->vk.vkDestroyPipeline(dev->device, prog->pipeline, NULL);
        sg__live_add(dev, SG_LIVE_PIPELINES, -1);
    }
    if (prog->layout) {
        dev->vk.vkDestroyPipelineLayout(dev->device, prog->layout, NULL);
        sg__live_add(dev, SG_LIVE_PIPELINE_LAYOUTS, -1);
    }
    if (prog->set_layout) {
        dev->vk.vkDestroyDescriptorSetLayout(dev->device, prog->set_layout, NULL);
        sg__live_add(dev, SG_LIVE_SET_LAYOUTS, -1);
    }
    if (prog->module) {
        dev->vk.vkDestroyShaderModule(dev->device, prog->module, NULL);
        sg__live_add(dev, SG_LIVE_SHADER_MODULES, -1);
    }
    free(prog);
}

/* VkDescriptorBufferInfo: "offset must be less than the size of buffer" and "range must
 * be less than or equal to the size of buffer minus offset"; a shader would otherwise
 * reach memory past the block. */
static int ranges_ok(uint32_t n, sg_block *const *blocks, const uint64_t *offsets,
                     const uint64_t *ranges) {
    for (uint32_t i = 0; i < n; i++)
        if (!blocks[i] || ranges[i] == 0 || offsets[i] >= blocks[i]->size ||
            ranges[i] > blocks[i]->size - offsets[i])
            return 0;
    return 1;
}

/* Binding i of the set to (blocks[i], offsets[i], ranges[i]); the caller checked them. */
static void write_set(sg_device *dev, VkDescriptorSet set, uint32_t n, sg_block *const *blocks,
                      const uint64_t *offsets, const uint64_t *ranges) {
    VkDescriptorBufferInfo infos[SG_MAX_BINDINGS];
    VkWriteDescriptorSet writes[SG_MAX_BINDINGS];
    for (uint32_t i = 0; i < n; i++) {
        infos[i] = (VkDescriptorBufferInfo){.buffer = blocks[i]->buffer, .offset = offsets[i],
                                            .range = ranges[i]};
        writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                           .dstSet = set,
                                           .dstBinding = i,
                                           .descriptorCount = 1,
                                           .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                           .pBufferInfo = &infos[i]};
    }
    if (n) dev->vk.vkUpdateDescriptorSets(dev->device, n, writes, 0, NULL);
}

/* Who owns what: the dset owns its descriptor pool (the set is freed with the pool).
 * It refers to the program's set layout and the blocks without owning them. */
int sg_dset_create(sg_device *dev, sg_program *prog, uint32_t n, sg_block *const *blocks,
                   const uint64_t *offsets, const uint64_t *ranges, sg_dset **out) {
    int rc = 0;
    sg_dset *ds = NULL;
    if (n != prog->nbindings || n > SG_MAX_BINDINGS) SG_FAIL("sg_dset_create", SG_ERR_ARGUMENT);
    if (!ranges_ok(n, blocks, offsets, ranges)) SG_FAIL("sg_dset_create", SG_ERR_RANGE);
    ds = calloc(1, sizeof *ds);
    if (!ds) SG_FAIL("calloc", VK_ERROR_OUT_OF_HOST_MEMORY);
    ds->dev = dev;
    ds->prog = prog;
    VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                 .descriptorCount = n ? n : 1};
    VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                       .maxSets = 1,
                                       .poolSizeCount = 1,
                                       .pPoolSizes = &size};
    SG_VK("vkCreateDescriptorPool", dev->vk.vkCreateDescriptorPool(dev->device, &dpci, NULL, &ds->pool));
    sg__live_add(dev, SG_LIVE_DESCRIPTOR_POOLS, 1);
    VkDescriptorSetAllocateInfo dsai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                        .descriptorPool = ds->pool,
                                        .descriptorSetCount = 1,
                                        .pSetLayouts = &prog->set_layout};
    SG_VK("vkAllocateDescriptorSets", dev->vk.vkAllocateDescriptorSets(dev->device, &dsai, &ds->set));
    write_set(dev, ds->set, n, blocks, offsets, ranges);
    *out = ds;
    return 0;
fail:
    sg_dset_destroy(ds);
    return rc;
}

/* vkUpdateDescriptorSets: "the descriptor set must not be in use by any command buffer
 * that is pending"; the caller's set is a recycled one, whose work completed, made for
 * the same program (its set layout). On an error the set keeps its old bindings. */
int sg_dset_rebind(sg_dset *ds, sg_program *prog, uint32_t n, sg_block *const *blocks,
                   const uint64_t *offsets, const uint64_t *ranges) {
    int rc = 0;
    if (!ds || ds->prog != prog || n != prog->nbindings || n > SG_MAX_BINDINGS)
        SG_FAIL("sg_dset_rebind", SG_ERR_ARGUMENT);
    if (!ranges_ok(n, blocks, offsets, ranges)) SG_FAIL("sg_dset_rebind", SG_ERR_RANGE);
    write_set(ds->dev, ds->set, n, blocks, offsets, ranges);
fail:
    return rc;
}

void sg_dset_destroy(sg_dset *ds) {
    if (!ds) return;
    if (ds->pool) {
        ds->dev->vk.vkDestroyDescriptorPool(ds->dev->device, ds->pool, NULL);
        sg__live_add(ds->dev, SG_LIVE_DESCRIPTOR_POOLS, -1);
    }
    free(ds);
}
