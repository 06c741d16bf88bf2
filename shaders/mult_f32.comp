#version 450
// OpMult: out = a * b, elementwise, float32. Vectorised and grid-stride: each invocation
// multiplies whole vec4s (16-byte loads and stores; the pool aligns every tensor to at
// least 16 bytes) at i, i + stride, ...; the last n % 4 elements, which fill no vec4, go
// through the scalar view of the same buffers. Any grid covers any size, so OpMult
// dispatches min(ceil(n / 4 / 256), 65535) groups, within every device's limits.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(set = 0, binding = 2) writeonly buffer O4 { vec4 o4[]; };
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer O { float o[]; };
void main() {
    uint n = uint(o.length());
    uint n4 = n / 4u;
    uint gid = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gid; i < n4; i += stride) o4[i] = a4[i] * b4[i];
    uint t = n4 * 4u + gid;
    if (t < n) o[t] = a[t] * b[t];
}
