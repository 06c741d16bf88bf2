// exercises: 64-bit atomics on a storage buffer (GL_EXT_shader_atomic_int64: atomicAdd/atomicMax on uint64_t); scopedgpu does not enable shaderBufferInt64Atomics
// expect-refusal: Int64Atomics
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Sizes { uint sizes[]; };
layout(std430, binding = 1) buffer Totals {
    uint64_t total_bytes;
    uint64_t largest;
    uint64_t per_bucket[];
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(sizes.length())) {
        return;
    }
    uint64_t s = uint64_t(sizes[i]) << 12;
    atomicAdd(total_bytes, s);
    atomicMax(largest, s);
    if (i < uint(per_bucket.length())) {
        atomicAdd(per_bucket[i], 1ul);
    }
}
