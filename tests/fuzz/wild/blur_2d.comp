// exercises: 2D dispatch indexing (gl_GlobalInvocationID.xy, 16x16 local size), a shared tile with an apron, clamp-to-edge loads, a const weight array
#version 450

layout(local_size_x = 16, local_size_y = 16) in;

layout(constant_id = 0) const int WIDTH = 32;
layout(constant_id = 1) const int HEIGHT = 32;

layout(std430, binding = 0) readonly buffer Image { float pixels[]; };
layout(std430, binding = 1) writeonly buffer Blurred { float blurred[]; };

const float weights[3] = float[3](0.25, 0.5, 0.25);
shared float tile[18][18];

float fetch(ivec2 p) {
    p = clamp(p, ivec2(0), ivec2(WIDTH - 1, HEIGHT - 1));
    int idx = p.y * WIDTH + p.x;
    return idx < pixels.length() ? pixels[idx] : 0.0;
}

void main() {
    ivec2 gid = ivec2(gl_GlobalInvocationID.xy);
    ivec2 lid = ivec2(gl_LocalInvocationID.xy);
    ivec2 origin = ivec2(gl_WorkGroupID.xy) * 16 - 1;

    for (int y = lid.y; y < 18; y += 16) {
        for (int x = lid.x; x < 18; x += 16) {
            tile[y][x] = fetch(origin + ivec2(x, y));
        }
    }
    barrier();

    if (gid.x >= WIDTH || gid.y >= HEIGHT) {
        return;
    }
    float acc = 0.0;
    for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
            acc += weights[dx + 1] * weights[dy + 1] * tile[lid.y + 1 + dy][lid.x + 1 + dx];
        }
    }
    int out_idx = gid.y * WIDTH + gid.x;
    if (out_idx < blurred.length()) {
        blurred[out_idx] = acc;
    }
}
