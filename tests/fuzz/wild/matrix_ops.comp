// exercises: matrices: a runtime array of mat4, mat4 * vec4, transpose, inverse, determinant, outerProduct, matrixCompMult, non-square mat3x2
#version 450

layout(local_size_x = 16) in;

layout(std430, binding = 0) readonly buffer Transforms { mat4 models[]; };
layout(std430, binding = 1) buffer Vertices { vec4 vertices[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(models.length()) || i >= uint(vertices.length())) {
        return;
    }
    mat4 model = models[i];
    vec4 v = vertices[i];
    vec4 world = model * v;

    mat3 normal_matrix = mat3(model);
    if (abs(determinant(normal_matrix)) > 1e-6) {
        normal_matrix = transpose(inverse(normal_matrix));
    }
    vec3 n = normal_matrix * vec3(0.0, 1.0, 0.0);

    mat3x2 proj = mat3x2(1.0, 0.0, 0.0, 1.0, 0.5, 0.5);
    vec2 screen = proj * world.xyz;
    mat2 cov = outerProduct(screen, screen);
    mat2 weighted = matrixCompMult(cov, mat2(0.5));

    vertices[i] = vec4(world.xyz + n * 0.01, weighted[0][0] + weighted[1][1] + world.w * 0.0);
}
