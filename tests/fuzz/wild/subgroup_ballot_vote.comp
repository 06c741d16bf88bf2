// exercises: GL_KHR_shader_subgroup_ballot/vote/shuffle: stream compaction with subgroupBallot, ballot bit counts, subgroupBroadcastFirst, subgroupAny/All, subgroupShuffleXor
#version 450
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_shuffle : require

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Keys { int keys[]; };
layout(std430, binding = 1) writeonly buffer Compacted { uint compacted[]; };
layout(std430, binding = 2) buffer Counters {
    uint count;
    uint any_negative;
    uint all_zero;
    uint pad;
    int lane_max[];
};

void main() {
    uint gid = gl_GlobalInvocationID.x;
    bool in_range = gid < uint(keys.length());
    int k = in_range ? keys[gid] : 0;
    bool keep = in_range && k >= 0;

    uvec4 ballot = subgroupBallot(keep);
    uint n = subgroupBallotBitCount(ballot);
    uint rank = subgroupBallotExclusiveBitCount(ballot);
    uint base = 0u;
    if (subgroupElect()) {
        base = atomicAdd(count, n);
    }
    base = subgroupBroadcastFirst(base);
    if (keep && base + rank < uint(compacted.length())) {
        compacted[base + rank] = gid;
    }

    bool neg = subgroupAny(k < 0);
    bool zero = subgroupAll(k == 0);
    if (subgroupElect()) {
        if (neg) atomicOr(any_negative, 1u);
        if (zero) atomicAdd(all_zero, 1u);
    }

    int m = k;
    for (uint mask = 1u; mask < gl_SubgroupSize; mask <<= 1) {
        m = max(m, subgroupShuffleXor(m, mask));
    }
    if (gid < uint(lane_max.length())) {
        lane_max[gid] = m;
    }
}
