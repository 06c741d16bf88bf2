// exercises: a std140 uniform buffer in descriptor set 1 beside storage buffers of set 0 (vec4 arrays, a mat3 member); scopedgpu binds set 0 storage buffers only
// expect-refusal: scopedgpu binds tensors as storage buffers of set 0
#version 450

layout(local_size_x = 64) in;

layout(std140, set = 1, binding = 0) uniform Globals {
    mat3 rotation;
    vec4 palette[8];
    float exposure;
    uint count;
} globals;

layout(std430, set = 0, binding = 0) readonly buffer Normals { vec4 normals[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Colors { vec4 colors[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= globals.count || i >= uint(normals.length()) || i >= uint(colors.length())) {
        return;
    }
    vec3 n = globals.rotation * normals[i].xyz;
    float ndotl = max(dot(normalize(n), vec3(0.0, 0.0, 1.0)), 0.0);
    vec4 base = globals.palette[i & 7u];
    colors[i] = vec4(base.rgb * ndotl * globals.exposure, base.a);
}
