#version 450
// Benchmark kernel (python -m scopedgpu bench and its C yardstick): y = a * x + y,
// float32. Binding 0 is x, binding 1 is y; the push constant is a. Dispatched as a 2D
// grid of 256-wide groups, (min(groups, 65535), ceil(groups / 65535)), so that 2^26
// elements fit maxComputeWorkGroupCount on every device.
layout(local_size_x = 256) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i < uint(y.length())) y[i] = p.a * x[i] + y[i];
}
