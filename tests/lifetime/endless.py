"""Shaders that run until told to stop, or forever (see test_waits.py).

llvmpipe (lavapipe) stops every loop after 65,535 iterations, so a long dispatch is made
of many workgroups. Each workgroup first checks a flag in binding 0 (a "host" tensor the
test writes through its mapping): once the flag is set, the remaining workgroups return at
once (about 1.5 us each on lavapipe), and the dispatch ends.
"""
from __future__ import annotations

import numpy as np

FLAG_GLSL = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) volatile buffer A { uint a[]; };
void main() {
    uint x = gl_GlobalInvocationID.x;
    if (a[0] != 0u) return;
    for (uint i = 0u; i < 65535u; i++) {
        x = x * 1664525u + 1013904223u; x ^= x >> 13;
        if ((i & 255u) == 0u && a[0] != 0u) break;
    }
    if (x == 12345u) a[3] = x;
}
"""
# About 3 ms per workgroup while the flag is clear (25 minutes for (65535, 8, 1) on two
# cores), about 1.5 us once it is set (under a second).
STOPPABLE = (65535, 8, 1)
# Weeks: only for child processes, which cannot stop it.
ENDLESS = (65535, 65535, 1)


def flag_tensor(mgr):
    return mgr.tensor(np.zeros(4, np.uint32), kind="host")


def set_flag(t) -> None:
    """Writes 1 into the flag through the tensor's mapped memory (what the shader reads)."""
    from scopedgpu._ffi import ffi
    ffi.cast("uint32_t *", t._gpu.address)[0] = 1


def busy_sequence(mgr, flag, workgroup=STOPPABLE):
    import scopedgpu as sg
    algo = mgr.algorithm([flag], sg.compile_glsl(FLAG_GLSL), workgroup=workgroup)
    return mgr.sequence().record(sg.OpAlgoDispatch(algo))
