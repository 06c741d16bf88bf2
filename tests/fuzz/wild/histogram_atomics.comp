// exercises: atomicAdd on shared and buffer uints, a per-workgroup histogram flushed after memoryBarrierShared() and barrier()
#version 450

layout(local_size_x = 128) in;

layout(std430, binding = 0) readonly buffer Values { uint values[]; };
layout(std430, binding = 1) buffer Histogram { uint bins[]; };

const uint NUM_BINS = 64u;
shared uint local_bins[NUM_BINS];

void main() {
    uint lid = gl_LocalInvocationIndex;
    if (lid < NUM_BINS) {
        local_bins[lid] = 0u;
    }
    barrier();

    uint n = uint(values.length());
    uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
        uint bin = (values[i] >> 26) & (NUM_BINS - 1u);   // top 6 bits
        atomicAdd(local_bins[bin], 1u);
    }
    memoryBarrierShared();
    barrier();

    if (lid < NUM_BINS && lid < uint(bins.length())) {
        uint count = local_bins[lid];
        if (count != 0u) {
            atomicAdd(bins[lid], count);
        }
    }
}
