#version 450
// y = a * x + y over float32 as vec4, grid-stride: a fixed grid of 256-wide groups walks
// the whole array (scopedgpu/bench/multi_device.py).
layout(local_size_x = 256) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) readonly buffer X { vec4 x[]; };
layout(set = 0, binding = 1) buffer Y { vec4 y[]; };
void main() {
    uint n = uint(y.length());
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) y[i] = p.a * x[i] + y[i];
}
