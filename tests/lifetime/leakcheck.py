"""Leak-check harness after wgpu-py's memory tests: create n objects of a kind, release
them, and assert that the Python-side and the shim-side counts are back at the baseline.

    def test_tensors(mgr):
        check_release(mgr, lambda: mgr.tensor(np.ones(4, np.float32)), n=20,
                      grows={"tensors": 20, "buffers": 1})

`make()` returns one object (or a tuple of them); `release(obj)` releases one (default:
destroy() on each); `grows` lists the counts that must have grown by at least that much
while the n objects were alive, which proves the harness counted the right thing. The
counts are scopedgpu.testing.live_counts(mgr, process=True): the manager's live objects,
its pool's accounting and the process-wide shim counts (the one leak-count helper that
no_leaks, the sg_manager and mgr fixtures and LifetimeMachine use too).
"""
from __future__ import annotations

from typing import Any, Callable

import scopedgpu as sg
from scopedgpu.testing import live_counts


def _destroy(obj: Any) -> None:
    for o in obj if isinstance(obj, tuple) else (obj,):
        o.destroy()


def check_release(mgr: sg.Manager, make: Callable[[], Any], *, n: int = 10,
                  grows: dict[str, int], release: Callable[[Any], None] | None = _destroy,
                  drop_only: bool = False) -> None:
    """Creates n objects, checks that the counts in `grows` grew by at least the given
    amounts, releases them (release(obj) for each; with drop_only, by dropping every
    reference and collecting garbage), and asserts every count is back at the baseline."""
    baseline = live_counts(mgr, process=True)
    objs = [make() for _ in range(n)]
    during = live_counts(mgr, process=True)
    for key, least in grows.items():
        assert during[key] - baseline[key] >= least, (
            f"{key}: {baseline[key]} -> {during[key]} while {n} objects were alive; expected "
            f"it to grow by at least {least} (the harness is not counting this kind)")
    if not drop_only and release is not None:
        for obj in objs:
            release(obj)
        del obj
    del objs
    after = live_counts(mgr, process=True)
    diff = {k: (baseline[k], after[k]) for k in baseline if after.get(k) != baseline[k]}
    assert not diff, f"leak: counts not back to baseline (baseline, after): {diff}"
