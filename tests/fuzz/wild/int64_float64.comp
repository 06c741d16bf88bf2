// exercises: int64 and float64 (GL_ARB_gpu_shader_int64, double): a splitmix64 generator with an inout state, unpackUint2x32, double accumulation
#version 450
#extension GL_ARB_gpu_shader_int64 : require

layout(local_size_x = 32) in;

layout(std430, binding = 0) readonly buffer Seeds { uint64_t seeds[]; };
layout(std430, binding = 1) writeonly buffer Means { double means[]; };

uint64_t splitmix64(inout uint64_t state) {
    state += 0x9E3779B97F4A7C15UL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
    return z ^ (z >> 31);
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(seeds.length()) || i >= uint(means.length())) {
        return;
    }
    uint64_t state = seeds[i] + uint64_t(i);
    double acc = 0.0LF;
    for (int k = 0; k < 16; ++k) {
        uvec2 halves = unpackUint2x32(splitmix64(state));
        acc += double(halves.y >> 11) * (1.0LF / 2097152.0LF);   // 21 bits to [0, 1)
    }
    int64_t signed_state = int64_t(state);
    means[i] = acc / 16.0LF + (signed_state < 0L ? 0.0LF : -0.0LF);
}
