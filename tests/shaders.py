"""GLSL sources shared by the tests (compiled through sg.compile_glsl, cached on disk)."""

ADD_ONE = """
#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length()) a[i] = a[i] + 1.0;
}
"""

SAXPY = """
#version 450
layout(local_size_x = 32) in;
layout(push_constant) uniform P { float alpha; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(set = 0, binding = 2) writeonly buffer O { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < o.length()) o[i] = p.alpha * x[i] + y[i];
}
"""

SCALE_SPEC = """
#version 450
layout(local_size_x = 16) in;
layout(constant_id = 0) const float SCALE = 1.0;
layout(constant_id = 1) const int OFFSET = 0;
layout(set = 0, binding = 0) readonly buffer I { float i_[]; };
layout(set = 0, binding = 1) writeonly buffer O { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < o.length()) o[i] = i_[i] * SCALE + float(OFFSET);
}
"""

PUSH_INT = """
#version 450
layout(local_size_x = 8) in;
layout(push_constant) uniform P { int offset; uint mul; } p;
layout(set = 0, binding = 0) buffer A { int a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length()) a[i] = a[i] * int(p.mul) + p.offset;
}
"""

# Writes gl_GlobalInvocationID.x into every element it covers: shows the default workgroup.
INDEX = """
#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length()) a[i] = i + 1u;
}
"""

# Deliberately slow: for tests that need a sequence to still be running.
SLOW = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { uint iters; } p;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= a.length()) return;
    float v = a[i];
    for (uint k = 0u; k < p.iters; ++k) v = v * 0.999999 + 1.0;
    a[i] = v;
}
"""

TWO_BINDINGS = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 1) buffer B { float b[]; };
void main() { b[0] = a[0]; }
"""


def slow_reference(a, iters):
    import numpy as np
    v = a.astype(np.float32).copy()
    for _ in range(iters):
        v = v * np.float32(0.999999) + np.float32(1.0)
    return v
