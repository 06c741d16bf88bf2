#version 450
// Demo: one dense layer over a batch, out = act(x @ W^T + b).
// x: (batch, cols), W: (rows, cols), b: (rows), out: (batch, rows).
// Specialization constant 0 turns the ReLU on; push constants give the sizes.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int RELU = 0;
layout(push_constant) uniform Sizes { uint rows; uint cols; uint batch; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { float w[]; };
layout(set = 0, binding = 2) readonly buffer B { float b[]; };
layout(set = 0, binding = 3) writeonly buffer O { float o[]; };
void main() {
    uint g = gl_GlobalInvocationID.x;
    if (g >= p.rows * p.batch) return;
    uint n = g / p.rows;
    uint r = g % p.rows;
    float acc = b[r];
    for (uint c = 0; c < p.cols; ++c) acc += w[r * p.cols + c] * x[n * p.cols + c];
    if (RELU != 0) acc = max(acc, 0.0);
    o[g] = acc;
}
