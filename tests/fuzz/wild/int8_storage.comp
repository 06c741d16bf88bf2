// exercises: 8-bit storage with int8/int16 arithmetic (GL_EXT_shader_8bit_storage): RGB bytes to grayscale, widening and clamped narrowing
#version 450
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Pixels { uint8_t rgb[]; };
layout(std430, binding = 1) writeonly buffer Gray { uint8_t gray[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(gray.length()) || 3u * i + 2u >= uint(rgb.length())) {
        return;
    }
    uint16_t r = uint16_t(rgb[3u * i]);
    uint16_t g = uint16_t(rgb[3u * i + 1u]);
    uint16_t b = uint16_t(rgb[3u * i + 2u]);
    uint16_t luma = (uint16_t(77) * r + uint16_t(150) * g + uint16_t(29) * b) >> 8;
    int8_t bias = int8_t(-3);
    int16_t biased = int16_t(luma) + int16_t(bias);
    gray[i] = uint8_t(clamp(biased, int16_t(0), int16_t(255)));
}
