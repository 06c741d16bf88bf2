// exercises: readonly, writeonly, restrict, coherent and volatile buffers, a fixed array before a runtime array, memoryBarrierBuffer and memoryBarrier
#version 450

layout(local_size_x = 32) in;

layout(std430, binding = 0) restrict readonly buffer Src {
    uint header[4];
    float src[];
};
layout(std430, binding = 1) restrict writeonly buffer Dst { float dst[]; };
// volatile alone (it implies coherent): glslang decorates "coherent volatile" members
// Coherent twice, which newer SPIR-V validators refuse
layout(std430, binding = 2) volatile buffer Sync {
    uint arrived;
    uint generation;
};
layout(std430, binding = 3) coherent buffer Flags { uint flags[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint scale_bits = header[0];
    float scale = scale_bits == 0u ? 1.0 : uintBitsToFloat(scale_bits);
    if (i < uint(src.length()) && i < uint(dst.length())) {
        dst[i] = src[i] * scale;
    }
    memoryBarrierBuffer();
    if (gl_LocalInvocationIndex == 0u) {
        uint ticket = atomicAdd(arrived, 1u);
        if (ticket + 1u == gl_NumWorkGroups.x) {
            generation += 1u;     // the last workgroup to arrive bumps the generation
        }
    }
    memoryBarrier();
    if (i < uint(flags.length())) {
        flags[i] = generation;
    }
}
