// exercises: shared-memory tree reduction, barrier() inside a loop, a grid-stride loop over gl_NumWorkGroups, gl_WorkGroupID
#version 450

#define BLOCK_SIZE 256

layout(local_size_x = BLOCK_SIZE) in;

layout(std430, binding = 0) readonly buffer InputBuffer { float data[]; };
layout(std430, binding = 1) writeonly buffer PartialSums { float partial_sums[]; };

shared float sdata[BLOCK_SIZE];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint n = uint(data.length());
    uint stride = gl_NumWorkGroups.x * BLOCK_SIZE;

    // Each thread accumulates a strided slice first (fewer barriers than one element each).
    float sum = 0.0;
    for (uint i = gl_WorkGroupID.x * BLOCK_SIZE + tid; i < n; i += stride) {
        sum += data[i];
    }
    sdata[tid] = sum;
    barrier();

    for (uint s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        barrier();
    }

    if (tid == 0 && gl_WorkGroupID.x < uint(partial_sums.length())) {
        partial_sums[gl_WorkGroupID.x] = sdata[0];
    }
}
