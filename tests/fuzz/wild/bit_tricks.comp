// exercises: bit manipulation: bitfieldExtract/Insert/Reverse, bitCount, findMSB/findLSB, uaddCarry, umulExtended, a Morton code, packUnorm4x8/unpackHalf2x16
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Keys { uint keys[]; };
layout(std430, binding = 1) writeonly buffer Codes { uvec4 codes[]; };

uint part1by2(uint x) {
    x &= 0x000003ffu;
    x = (x ^ (x << 16)) & 0xff0000ffu;
    x = (x ^ (x << 8)) & 0x0300f00fu;
    x = (x ^ (x << 4)) & 0x030c30c3u;
    x = (x ^ (x << 2)) & 0x09249249u;
    return x;
}

uint morton3(uvec3 p) {
    return (part1by2(p.z) << 2) | (part1by2(p.y) << 1) | part1by2(p.x);
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(keys.length()) || i >= uint(codes.length())) {
        return;
    }
    uint k = keys[i];
    uvec3 cell = uvec3(bitfieldExtract(k, 0, 10), bitfieldExtract(k, 10, 10),
                       bitfieldExtract(k, 20, 10));
    uint code = morton3(cell);
    int hi = findMSB(k);
    int lo = findLSB(k);
    int signed_hi = findMSB(int(k));
    uint carry;
    uint sum = uaddCarry(k, code, carry);
    uint mul_hi, mul_lo;
    umulExtended(k, 0x9e3779b9u, mul_hi, mul_lo);
    uint packed = packUnorm4x8(unpackUnorm4x8(k).wzyx);
    vec2 halves = unpackHalf2x16(k);
    uint flags = bitfieldInsert(uint(bitCount(k)), uint(hi + 1), 8, 8);
    flags = bitfieldInsert(flags, uint(lo + 1), 16, 8);
    codes[i] = uvec4(code ^ bitfieldReverse(sum), flags + carry + uint(signed_hi < 0),
                     mul_hi ^ packed, floatBitsToUint(halves.x + halves.y) ^ mul_lo);
}
