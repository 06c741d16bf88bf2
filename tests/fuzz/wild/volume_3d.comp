// exercises: 3D dispatch indexing (4x4x4 local size, gl_GlobalInvocationID.xyz, gl_NumWorkGroups * gl_WorkGroupSize, gl_LocalInvocationIndex), a 7-point Laplacian stencil
#version 450

layout(local_size_x = 4, local_size_y = 4, local_size_z = 4) in;

layout(std430, binding = 0) readonly buffer Field { float field[]; };
layout(std430, binding = 1) writeonly buffer Laplacian { float lap[]; };
layout(std430, binding = 2) buffer Visits { uint visits[]; };

uint linear(uvec3 p, uvec3 dims) {
    return (p.z * dims.y + p.y) * dims.x + p.x;
}

float at(ivec3 p, uvec3 dims) {
    uvec3 q = uvec3(clamp(p, ivec3(0), ivec3(dims) - 1));
    uint idx = linear(q, dims);
    return idx < uint(field.length()) ? field[idx] : 0.0;
}

void main() {
    uvec3 dims = gl_NumWorkGroups * gl_WorkGroupSize;
    uvec3 p = gl_GlobalInvocationID;
    uint idx = linear(p, dims);
    if (idx >= uint(lap.length())) {
        return;
    }
    ivec3 c = ivec3(p);
    float center = at(c, dims);
    float sum = at(c + ivec3(1, 0, 0), dims) + at(c - ivec3(1, 0, 0), dims)
              + at(c + ivec3(0, 1, 0), dims) + at(c - ivec3(0, 1, 0), dims)
              + at(c + ivec3(0, 0, 1), dims) + at(c - ivec3(0, 0, 1), dims);
    lap[idx] = sum - 6.0 * center;
    if (gl_LocalInvocationIndex < uint(visits.length())) {
        atomicAdd(visits[gl_LocalInvocationIndex], 1u);
    }
}
