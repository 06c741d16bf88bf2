"""Shaders that run until told to stop, or forever (see test_waits.py).

llvmpipe (lavapipe) stops every loop after 65,535 iterations, so a long dispatch is made
of many workgroups. Each workgroup first checks a flag in binding 0 (a "host" tensor the
test writes through its mapping): once the flag is set, the remaining workgroups return at
once (about 1.5 us each on lavapipe), and the dispatch ends.

Left alone, a workgroup spins ROUNDS times 65,535 iterations (a specialization constant):
65,535 rounds, days on any device, so that the work runs until it is told to stop. (With
one round, about 3 ms a workgroup on lavapipe, a GPU that runs thousands of workgroups at
once ends STOPPABLE's dispatch by itself: the NVIDIA H200 in about 0.3 s, inside tests
that sleep 0.3 s before they signal work they expect to be still running; test_waits'
Ctrl-C test failed there.) ONE_ROUND_GLSL is the same kernel with one round, for work
that must end by itself.
"""
from __future__ import annotations

import numpy as np

FLAG_GLSL = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) volatile buffer A { uint a[]; };
layout(constant_id = 0) const uint ROUNDS = 65535u;
void main() {
    uint x = gl_GlobalInvocationID.x;
    if (a[0] != 0u) return;
    for (uint r = 0u; r < ROUNDS; r++) {
        for (uint i = 0u; i < 65535u; i++) {
            x = x * 1664525u + 1013904223u; x ^= x >> 13;
            if ((i & 255u) == 0u && a[0] != 0u) break;
        }
        if (a[0] != 0u) break;
    }
    if (x == 12345u) a[3] = x;
}
"""
# The same with one round: about 3 ms a workgroup on lavapipe, then it ends by itself.
ONE_ROUND_GLSL = FLAG_GLSL.replace("ROUNDS = 65535u;", "ROUNDS = 1u;")
assert ONE_ROUND_GLSL != FLAG_GLSL
# Running until the flag is set, then about 1.5 us a workgroup left (under a second).
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
