// exercises: 16-bit storage and float16_t/int16_t arithmetic (GL_EXT_shader_16bit_storage, explicit_arithmetic_types), f16vec4 loads, fma in half precision
#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Activations { f16vec4 act[]; };
layout(std430, binding = 1) buffer Output { float16_t y[]; };

layout(push_constant) uniform Params {
    float alpha;
    float beta;
} params;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(act.length()) || i >= uint(y.length())) {
        return;
    }
    f16vec4 v = act[i];
    float16_t alpha = float16_t(params.alpha);
    float16_t norm2 = dot(v, v);
    int16_t sign_count = int16_t(v.x < float16_t(0)) + int16_t(v.y < float16_t(0));
    float16_t r = fma(alpha, norm2, float16_t(params.beta) * y[i]);
    y[i] = r + float16_t(sign_count) * float16_t(0.25);
}
