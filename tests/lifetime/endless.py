"""Shaders that run until told to stop, or forever (see test_waits.py).

llvmpipe (lavapipe) stops every loop after 65,535 iterations, so a long dispatch is made
of many workgroups. Each workgroup first checks a flag in binding 0 (a "host" tensor the
test writes through its mapping): once the flag is set, the remaining workgroups return at
once (about 1.5 us each on lavapipe), and the dispatch ends.

On a GPU the flag is not a stop button: Vulkan does not make host writes made while a
dispatch runs visible to it, and on the NVIDIA H200 no workgroup of a running dispatch
saw it (STOPPABLE's dispatch ended after 0.771 s with the flag set 0.1 s into it, as
without; a kernel that spun until the flag, tried in session 39, ran on until the driver
reported VK_ERROR_DEVICE_LOST). There the dispatch ends by itself, each workgroup after
its 65,535 iterations: STOPPABLE's after about 0.8 s on the H200 (once within 0.3 s), so
a test that waits for it after setting the flag waits that long; LONG_GPU's after about
3 s, for a test that must find the work still running after a sleep
(busy_sequence(..., long_on_gpu=True)). `python tests/lifetime/endless.py` measures both
on the default device.
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
# Four times STOPPABLE's workgroups: 3.08 s on the H200; on lavapipe, where the flag
# stops it, about 0.4 s once it is set.
LONG_GPU = (65535, 32, 1)
# Weeks: only for child processes, which cannot stop it.
ENDLESS = (65535, 65535, 1)


def flag_tensor(mgr):
    return mgr.tensor(np.zeros(4, np.uint32), kind="host")


def set_flag(t) -> None:
    """Writes 1 into the flag through the tensor's mapped memory (what the shader reads)."""
    from scopedgpu._ffi import ffi
    ffi.cast("uint32_t *", t._gpu.address)[0] = 1


def busy_sequence(mgr, flag, workgroup=STOPPABLE, long_on_gpu=False):
    """A sequence of one dispatch of the flag kernel; long_on_gpu: LONG_GPU's workgroups
    on a device other than a CPU (lavapipe keeps `workgroup`: its flag works)."""
    import scopedgpu as sg
    if long_on_gpu and mgr.device.type != "cpu":
        workgroup = LONG_GPU
    algo = mgr.algorithm([flag], sg.compile_glsl(FLAG_GLSL), workgroup=workgroup)
    return mgr.sequence().record(sg.OpAlgoDispatch(algo))


def _time_it() -> None:
    """How the flag kernel behaves on the default device: STOPPABLE and LONG_GPU left
    alone (at most 5 s, then the flag is set), and STOPPABLE with the flag set 0.1 s into
    it. `python tests/lifetime/endless.py` (the session-39 figures of docs/benchmarks.md)."""
    import time

    import scopedgpu as sg
    with sg.Manager() as m:
        print(m.device)
        for name, wg, flag_at in (("STOPPABLE", STOPPABLE, None), ("LONG_GPU", LONG_GPU, None),
                                  ("STOPPABLE", STOPPABLE, 0.1)):
            f = flag_tensor(m)
            with busy_sequence(m, f, wg) as seq:
                t0 = time.perf_counter()
                seq.eval_async()
                if flag_at is not None:
                    time.sleep(flag_at)
                    set_flag(f)
                ended = seq.eval_await(5.0)
                took = time.perf_counter() - t0
                how = f"ended after {took:.3f} s" if ended else "still running after 5 s"
                if not ended:
                    set_flag(f)
                    seq.eval_await()
                    how += f", ended {time.perf_counter() - t0 - took:.3f} s after the flag"
                when = "" if flag_at is None else f", the flag set at {flag_at} s"
                print(f"{name} {wg}{when}: {how}", flush=True)
            f.destroy()


if __name__ == "__main__":
    _time_it()
