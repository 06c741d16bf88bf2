#version 450
// The bench's roof (C yardstick only): y = x, float32, the same access pattern as
// saxpy.comp (vec4, grid-stride, scalar tail) with one stream less. Its rate is the
// device's copy bandwidth as a kernel sees it; the bench reports saxpy against it.
layout(local_size_x = 256) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) writeonly buffer Y4 { vec4 y4[]; };
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint n = uint(y.length());
    uint n4 = n / 4u;
    uint gid = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gid; i < n4; i += stride) y4[i] = x4[i];
    uint t = n4 * 4u + gid;
    if (t < n) y[t] = x[t];
}
