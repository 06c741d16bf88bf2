// exercises: seven storage buffers of different element types (float, int, uint, vec2, ivec4, uvec2, a block of fixed-size members) with a gap in the binding numbers
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Weights { float weights[]; };
layout(std430, binding = 1) readonly buffer Labels { int labels[]; };
layout(std430, binding = 2) readonly buffer Masks { uint masks[]; };
// binding 3 is unused by this shader
layout(std430, binding = 4) readonly buffer Coords { vec2 coords[]; };
layout(std430, binding = 5) readonly buffer Boxes { ivec4 boxes[]; };
layout(std430, binding = 6) writeonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 7) buffer Summary {
    float total_weight;
    int label_sum;
    float histogram[4];
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint n = min(min(uint(weights.length()), uint(labels.length())),
                 min(uint(masks.length()), uint(coords.length())));
    n = min(n, min(uint(boxes.length()), uint(pairs.length())));
    if (i >= n) {
        return;
    }
    ivec4 box = boxes[i];
    vec2 c = coords[i];
    bool inside = c.x >= float(box.x) && c.y >= float(box.y) &&
                  c.x < float(box.z) && c.y < float(box.w);
    float w = (masks[i] & 1u) != 0u && inside ? weights[i] : 0.0;
    pairs[i] = uvec2(i, uint(labels[i]) & 0xffu);
    if (i == 0u) {
        total_weight += w;
        label_sum += labels[i];
        histogram[labels[i] & 3] += w;
    }
}
