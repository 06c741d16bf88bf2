// exercises: GL_KHR_shader_subgroup_basic/arithmetic (subgroupAdd, subgroupExclusiveAdd, subgroupMax, subgroupElect, gl_SubgroupID, gl_NumSubgroups)
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer Values { float vals[]; };
layout(std430, binding = 1) buffer BlockSums { float block_sums[]; };

shared float subgroup_sums[256];   // enough even for a subgroup size of 1

void main() {
    uint gid = gl_GlobalInvocationID.x;
    bool in_range = gid < uint(vals.length());
    float v = in_range ? vals[gid] : 0.0;

    float prefix = subgroupExclusiveAdd(v);
    float total = subgroupAdd(v);
    float biggest = subgroupMax(v);
    if (subgroupElect()) {
        subgroup_sums[gl_SubgroupID] = total;
    }
    barrier();

    // The first subgroup adds up the per-subgroup totals.
    if (gl_SubgroupID == 0u) {
        float s = 0.0;
        for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) {
            s += subgroup_sums[i];
        }
        s = subgroupAdd(s);
        if (subgroupElect() && gl_WorkGroupID.x < uint(block_sums.length())) {
            block_sums[gl_WorkGroupID.x] = s;
        }
    }
    if (in_range) {
        vals[gid] = prefix + v + 0.0 * biggest;   // inclusive scan within the subgroup
    }
}
