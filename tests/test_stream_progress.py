"""stream(progress=...): called in the calling thread once per chunk whose outputs are
written, with (chunks done, chunks in all); its exception ends the stream like any other
(nothing leaked, the manager usable); anything but a callable or None is refused before
anything is allocated."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from scopedgpu._shaders import builtin_spirv

SAXPY = builtin_spirv("saxpy")      # binding 0: x, binding 1: y; y = a * x + y


def _arrays(n: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(n, dtype=np.float32), np.ones(n, np.float32)


def test_progress_counts_every_chunk_in_the_calling_thread(mgr):
    x, y = _arrays()
    want = 2.0 * x + y
    calls: list[tuple[int, int, bool]] = []
    done_rows: list[bool] = []
    main = threading.get_ident()

    def progress(done: int, total: int) -> None:
        calls.append((done, total, threading.get_ident() == main))
        # At least `done` chunks (of 1,000 rows) written whole: the worker threads' host
        # copies of several chunks may end in any order, so not always the first `done`.
        whole = sum(np.array_equal(y[c * 1000:(c + 1) * 1000], want[c * 1000:(c + 1) * 1000])
                    for c in range(10))
        done_rows.append(whole >= done)

    mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0], chunk_bytes=4000,
               depth=3, workers=2, progress=progress)
    np.testing.assert_array_equal(y, want)
    assert calls == [(k, 10, True) for k in range(1, 11)]
    assert all(done_rows), done_rows   # each call counts only chunks already written


def test_an_exception_from_progress_ends_the_stream(mgr):
    x, y = _arrays()

    def progress(done: int, total: int) -> None:
        if done == 3:
            raise RuntimeError("stop at 3")

    with pytest.raises(RuntimeError, match="stop at 3"):
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0], chunk_bytes=4000,
                   progress=progress)
    mgr.wait_idle()
    x2, y2 = _arrays(64)
    mgr.stream(SAXPY, inputs=[x2, y2], outputs=[y2], push_consts=[1.0])
    np.testing.assert_array_equal(y2, x2 + 1)


@pytest.mark.parametrize("bad", [1, "tqdm", [print]])
def test_progress_must_be_callable(mgr, bad):
    x, y = _arrays(64)
    before = mgr.live_objects()
    with pytest.raises(TypeError, match="progress must be a callable"):
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.0], progress=bad)
    assert mgr.live_objects() == before
    np.testing.assert_array_equal(y, np.ones(64, np.float32))
