// exercises: a push-constant block of mixed types (a nested struct with a mat4, ivec2, uint, float, int, bool, vec2), 2D local size, mat4 * vec4
#version 450

layout(local_size_x = 8, local_size_y = 8) in;

struct Camera {
    mat4 view_proj;
    vec4 eye;
};

layout(push_constant) uniform PushConstants {
    Camera cam;
    ivec2 size;
    uint flags;
    float time;
    int frame;
    bool enabled;
    vec2 jitter;
} pc;

layout(std430, binding = 0) buffer Points { vec4 points[]; };

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    uint width = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint idx = p.y * width + p.x;
    if (idx >= uint(points.length())) {
        return;
    }
    vec4 pos = points[idx];
    if (pc.enabled || (pc.flags & 1u) != 0u) {
        pos = pc.cam.view_proj * pos;
    }
    pos.xy += pc.jitter * sin(pc.time + float(pc.frame));
    pos.xyz -= pc.cam.eye.xyz;
    if (any(greaterThanEqual(ivec2(p), max(pc.size, ivec2(1))))) {
        pos.w = 0.0;
    }
    points[idx] = pos;
}
