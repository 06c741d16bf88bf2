// exercises: loops with break and continue, a switch with fallthrough and default, a do-while, nested loops, early return
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Ops { uint ops[]; };
layout(std430, binding = 1) buffer Stack { int result[]; };

int run_program(uint start, uint count) {
    int acc = 0;
    int reg = 1;
    for (uint pc = start; pc < start + count; ++pc) {
        uint op = ops[pc] & 0xfu;
        uint arg = ops[pc] >> 4;
        if (op == 0u) {
            continue;               // nop
        }
        switch (op) {
        case 1u:
            acc += int(arg);
            break;
        case 2u:
            acc -= int(arg);
            break;
        case 3u:
            reg = -reg;             // falls through into the multiply
        case 4u:
            acc *= reg;
            break;
        case 15u:
            return acc;             // halt
        default:
            acc ^= int(op);
            break;
        }
        if (acc > 1000000) {
            break;
        }
    }
    return acc;
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint n = uint(ops.length());
    if (i >= uint(result.length()) || 8u * i + 8u > n) {
        return;
    }
    int v = run_program(8u * i, 8u);
    int steps = 0;
    do {
        v = (v & 1) == 0 ? v / 2 : 3 * v + 1;
        steps++;
    } while (v > 1 && steps < 64);
    for (int a = 0; a < 4; ++a) {
        for (int b = 0; b < 4; ++b) {
            if (b > a) break;
            steps += a * b;
        }
    }
    result[i] = steps;
}
