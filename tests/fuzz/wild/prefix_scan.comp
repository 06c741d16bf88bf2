// exercises: a work-efficient (Blelloch) exclusive scan in shared memory: barriers in up-sweep and down-sweep loops, groupMemoryBarrier
#version 450

#define N 512
layout(local_size_x = N / 2) in;

layout(std430, binding = 0) readonly buffer In { uint input_data[]; };
layout(std430, binding = 1) writeonly buffer Out { uint output_data[]; };
layout(std430, binding = 2) writeonly buffer Totals { uint block_totals[]; };

shared uint temp[N];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint block = gl_WorkGroupID.x;
    uint base = block * N;
    uint len = uint(input_data.length());

    temp[2u * tid] = base + 2u * tid < len ? input_data[base + 2u * tid] : 0u;
    temp[2u * tid + 1u] = base + 2u * tid + 1u < len ? input_data[base + 2u * tid + 1u] : 0u;

    uint offset = 1u;
    for (uint d = N >> 1; d > 0u; d >>= 1) {   // up-sweep
        barrier();
        if (tid < d) {
            uint ai = offset * (2u * tid + 1u) - 1u;
            uint bi = offset * (2u * tid + 2u) - 1u;
            temp[bi] += temp[ai];
        }
        offset *= 2u;
    }
    if (tid == 0u) {
        if (block < uint(block_totals.length())) {
            block_totals[block] = temp[N - 1];
        }
        temp[N - 1] = 0u;
    }
    for (uint d = 1u; d < N; d *= 2u) {          // down-sweep
        offset >>= 1;
        groupMemoryBarrier();
        barrier();
        if (tid < d) {
            uint ai = offset * (2u * tid + 1u) - 1u;
            uint bi = offset * (2u * tid + 2u) - 1u;
            uint t = temp[ai];
            temp[ai] = temp[bi];
            temp[bi] += t;
        }
    }
    barrier();
    uint out_len = uint(output_data.length());
    if (base + 2u * tid < out_len) output_data[base + 2u * tid] = temp[2u * tid];
    if (base + 2u * tid + 1u < out_len) output_data[base + 2u * tid + 1u] = temp[2u * tid + 1u];
}
