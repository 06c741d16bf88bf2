// exercises: functions with in, out, inout and const in parameters, a struct return value, overloads, a function called in a loop
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer Data { vec2 points[]; };
layout(std430, binding = 1) writeonly buffer Out { float out_values[]; };

struct Stats {
    float mean;
    float m2;
    uint n;
};

void welford(inout Stats s, const in float x) {
    s.n += 1u;
    float delta = x - s.mean;
    s.mean += delta / float(s.n);
    s.m2 += delta * (x - s.mean);
}

void rotate(inout vec2 p, in float angle, out float radius) {
    float c = cos(angle), s = sin(angle);
    p = vec2(c * p.x - s * p.y, s * p.x + c * p.y);
    radius = length(p);
}

float clamp01(float x) { return clamp(x, 0.0, 1.0); }
vec2 clamp01(vec2 x) { return clamp(x, vec2(0.0), vec2(1.0)); }

Stats summarize(vec2 p, int steps) {
    Stats s = Stats(0.0, 0.0, 0u);
    for (int k = 0; k < steps; ++k) {
        float r;
        rotate(p, 0.1 * float(k), r);
        welford(s, r);
    }
    return s;
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(points.length()) || i >= uint(out_values.length())) {
        return;
    }
    vec2 p = points[i];
    Stats s = summarize(p, 8);
    points[i] = clamp01(p);
    out_values[i] = s.n > 1u ? clamp01(s.m2 / float(s.n - 1u)) : 0.0;
}
