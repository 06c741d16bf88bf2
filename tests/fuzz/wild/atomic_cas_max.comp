// exercises: an atomicCompSwap retry loop (float max through floatBitsToUint), atomicMin/Or/Xor/Exchange/And on int and uint members
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Samples { float samples[]; };
layout(std430, binding = 1) coherent buffer Stats {
    uint max_bits;      // float bits of the maximum (samples are >= 0)
    int first_negative;
    uint seen_mask;
    uint parity;
    uint last_writer;
    uint per_lane[];
};

void atomic_max_float(float value) {
    uint expected = max_bits;
    while (true) {
        if (uintBitsToFloat(expected) >= value) {
            break;
        }
        uint previous = atomicCompSwap(max_bits, expected, floatBitsToUint(value));
        if (previous == expected) {
            break;          // we won
        }
        expected = previous; // somebody else won, retry against their value
    }
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(samples.length())) {
        return;
    }
    float v = samples[i];
    atomic_max_float(v);
    if (v < 0.0) {
        atomicMin(first_negative, int(i));
    }
    atomicOr(seen_mask, 1u << (i & 31u));
    atomicXor(parity, floatBitsToUint(v) & 1u);
    atomicExchange(last_writer, i);
    if (gl_LocalInvocationID.x < uint(per_lane.length())) {
        atomicAnd(per_lane[gl_LocalInvocationID.x], ~(1u << gl_WorkGroupID.x % 32u));
    }
}
