#version 450
// The stream_saxpy figure's kernel: out = a * x + y, float32, out of place (x and y are
// read, out is written: numpy in, numpy out). Binding 0 x, binding 1 y, binding 2 out;
// vectorised and grid-stride like the built-in saxpy, with a scalar tail.
layout(local_size_x = 256) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer Y4 { vec4 y4[]; };
layout(set = 0, binding = 2) writeonly buffer O4 { vec4 o4[]; };
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(set = 0, binding = 2) writeonly buffer O { float o[]; };
void main() {
    uint n = uint(o.length());
    uint n4 = n / 4u;
    uint gid = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gid; i < n4; i += stride) o4[i] = p.a * x4[i] + y4[i];
    uint t = n4 * 4u + gid;
    if (t < n) o[t] = p.a * x[t] + y[t];
}
