#version 450
// Benchmark kernel (python -m scopedgpu bench and its C yardstick): y = a * x + y,
// float32. Binding 0 is x, binding 1 is y; the push constant is a. Vectorised and
// grid-stride, as the built-in elementwise shaders: each invocation updates whole vec4s at
// i, i + stride, ..., and the last n % 4 floats through the scalar view. Dispatched as
// min(ceil(n / 4 / 256), 65535) groups of 256, so any size fits maxComputeWorkGroupCount.
layout(local_size_x = 256) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) buffer Y4 { vec4 y4[]; };
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
void main() {
    uint n = uint(y.length());
    uint n4 = n / 4u;
    uint gid = gl_GlobalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gid; i < n4; i += stride) y4[i] = p.a * x4[i] + y4[i];
    uint t = n4 * 4u + gid;
    if (t < n) y[t] = p.a * x[t] + y[t];
}
