"""The scopedgpu side of the `stream_saxpy` figure: numpy arrays pushed through a kernel in
chunks, numpy in, numpy out, with Manager.stream() (upload, kernel and download of
successive chunks overlapped, on the device's transfer queues when it has them)."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

import scopedgpu as sg
from scopedgpu.ops import elementwise_groups

# out = a * x + y, out of place (bindings x, y, out; a float push constant).
SAXPY_OUT = Path(__file__).resolve().parent / "shaders" / "saxpy_out.spv"


@functools.lru_cache(maxsize=1)
def _saxpy_out() -> bytes:
    return SAXPY_OUT.read_bytes()   # once: the figure times repeated calls


def scopedgpu_stream(mgr: sg.Manager, x: np.ndarray, y: np.ndarray, alpha: float,
                     chunk_bytes: int, *, out: np.ndarray | None = None) -> np.ndarray:
    """out = alpha * x + y (float32, 1-D) through the device in chunks of chunk_bytes per
    array, by Manager.stream(); `out` is allocated when not given."""
    if x.dtype != np.float32 or y.dtype != np.float32 or x.shape != y.shape or x.ndim != 1:
        raise ValueError("x and y must be 1-D float32 arrays of one shape")
    if out is None:
        out = np.empty_like(x)
    c = max(4, min(x.size, chunk_bytes // 4))
    groups = elementwise_groups(c, mgr.device.max_workgroup_count[0])
    mgr.stream(_saxpy_out(), inputs=[x, y], outputs=[out],
               push_consts=[float(alpha)], chunk_bytes=c * 4, workgroup=groups)
    return out
