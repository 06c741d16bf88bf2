"""Small GLSL compute shaders shared by the lifetime tests."""
from __future__ import annotations

import numpy as np

# b[i] = a[i] + 1 for each dtype the state machine uses; binding 0 in, binding 1 out.
_ADD_ONE = """#version 450
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) buffer A {{ {t} a[]; }};
layout(set = 0, binding = 1) buffer B {{ {t} b[]; }};
void main() {{
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length() && i < b.length()) b[i] = a[i] + {t}(1);
}}
"""
GLSL_TYPE = {np.dtype(np.float32): "float", np.dtype(np.int32): "int",
             np.dtype(np.uint32): "uint"}

# A shader that keeps lavapipe busy for a while: its cost grows with the number of
# workgroups (with a[1] = 1e6, about 0.2 s per 128 groups of 64 invocations on 2 CPU cores). Each
# invocation loops a[1] times over an integer hash the compiler cannot fold away.
SLOW = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() {
    uint x = gl_GlobalInvocationID.x;
    uint n = a[1];
    for (uint i = 0u; i < n; i++) { x = x * 1664525u + 1013904223u; x ^= x >> 13; }
    if (x == 12345u) a[2] = x;
}
"""


def add_one_glsl(dtype) -> str:
    return _ADD_ONE.format(t=GLSL_TYPE[np.dtype(dtype)])


def add_one_spirv(dtype) -> bytes:
    import scopedgpu as sg
    return sg.compile_glsl(add_one_glsl(dtype))


def slow_spirv() -> bytes:
    import scopedgpu as sg
    return sg.compile_glsl(SLOW)
