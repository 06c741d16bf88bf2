// exercises: local_size_x_id, specialization constants sizing a shared array (OpSpecConstantOp), a spec-constant bool and float; a 1D box filter with halo loads
#version 450

layout(local_size_x = 64, local_size_x_id = 0) in;

layout(constant_id = 1) const int RADIUS = 3;
layout(constant_id = 2) const bool NORMALIZE = true;
layout(constant_id = 3) const float SCALE = 0.5;

layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float dst[]; };

shared float tile[gl_WorkGroupSize.x + 2 * RADIUS];

void main() {
    int lid = int(gl_LocalInvocationID.x);
    int wg = int(gl_WorkGroupSize.x);
    int n = src.length();
    int base = int(gl_WorkGroupID.x) * wg - RADIUS;

    for (int j = lid; j < wg + 2 * RADIUS; j += wg) {
        int k = clamp(base + j, 0, max(n - 1, 0));
        tile[j] = n > 0 ? src[k] : 0.0;
    }
    barrier();

    int gid = int(gl_GlobalInvocationID.x);
    if (gid >= n || gid >= dst.length()) {
        return;
    }
    float acc = 0.0;
    for (int r = -RADIUS; r <= RADIUS; ++r) {
        acc += tile[lid + RADIUS + r];
    }
    if (NORMALIZE) {
        acc /= float(2 * RADIUS + 1);
    }
    dst[gid] = acc * SCALE;
}
