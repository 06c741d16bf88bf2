#version 450
// A GPU-bound task (scopedgpu/bench/dask_scaling.py): v[i] = `iters` steps of a 32-bit LCG from
// i * 2654435761 + seed. Integer arithmetic, so that the loop cannot be shortened, and the
// host can check any element by jumping ahead. 2D grid of 256-wide groups.
layout(local_size_x = 256) in;
layout(push_constant) uniform P { uint seed; uint iters; } p;
layout(set = 0, binding = 0) writeonly buffer V { uint v[]; };
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= uint(v.length())) return;
    uint s = i * 2654435761u + p.seed;
    for (uint k = 0u; k < p.iters; ++k) s = s * 1664525u + 1013904223u;
    v[i] = s;
}
