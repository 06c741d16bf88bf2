// exercises: GLSL.std.450 extended instructions on vec4s as ML code uses them: exp, tanh (GELU), pow, smoothstep, mix, step, fract, mod, atan, inversesqrt, isnan/isinf, frexp/ldexp
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer Activations { vec4 x[]; };
layout(push_constant) uniform Config { uint kind; float leak; } cfg;

vec4 gelu(vec4 v) {
    const float k = 0.7978845608;   // sqrt(2 / pi)
    return 0.5 * v * (1.0 + tanh(k * (v + 0.044715 * v * v * v)));
}

vec4 safe(vec4 v) {
    bvec4 bad = bvec4(uvec4(isnan(v)) | uvec4(isinf(v)));
    return mix(v, vec4(0.0), bad);
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(x.length())) {
        return;
    }
    vec4 v = safe(x[i]);
    vec4 r;
    if (cfg.kind == 0u) {
        r = gelu(v);
    } else if (cfg.kind == 1u) {
        r = max(v, cfg.leak * v);                       // leaky ReLU
    } else if (cfg.kind == 2u) {
        r = 1.0 / (1.0 + exp(-v));                      // sigmoid
    } else {
        r = smoothstep(-1.0, 1.0, v) * step(0.0, v) + fract(v) * mod(v, 2.0);
    }
    ivec4 e;
    vec4 m = frexp(abs(r) + 1.0, e);
    r = ldexp(m, e) - 1.0 + 0.0 * pow(abs(v), vec4(1.5)) * inversesqrt(abs(v) + 1.0);
    r += 0.0 * atan(v, vec4(1.0));
    x[i] = safe(r);
}
