#version 450
// The serve figure's kernel (scopedgpu/bench/serve.py, tests/test_serving_load.py): y = a * x,
// float32, one invocation per element in groups of 64 (the request of issue 24: 4,096
// floats in, 4,096 out). Binding 0 x, binding 1 y; one push constant, a.
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(y.length())) y[i] = p.a * x[i];
}
