"""The scopedgpu side of the `stream_saxpy` figure: a numpy array pushed through a kernel in
chunks, numpy in, numpy out. One function, so that it can be swapped for the streaming API
(upload, compute and download of successive chunks overlapped on separate queues) once
scopedgpu has it; today it is the best the public API does without one: sequential."""
from __future__ import annotations

import numpy as np

import scopedgpu as sg
from scopedgpu.ops import elementwise_groups


def scopedgpu_stream(mgr: sg.Manager, x: np.ndarray, y: np.ndarray, alpha: float,
                     chunk_bytes: int, *, spirv: bytes) -> np.ndarray:
    """out = alpha * x + y (float32, 1-D), through the device in chunks of chunk_bytes per
    input: per chunk, the chunk of x and of y written into two tensors' host views, one
    recorded sequence [sync device, saxpy dispatch, sync local] evaluated, the result read
    back. The tensors and the sequence are made once and reused for every chunk, and
    destroyed before returning. `spirv` is the saxpy shader (y = a * x + y, bindings x, y,
    a float push constant), scopedgpu's built-in saxpy.spv."""
    if x.dtype != np.float32 or y.dtype != np.float32 or x.shape != y.shape or x.ndim != 1:
        raise ValueError("x and y must be 1-D float32 arrays of one shape")
    n = x.size
    out = np.empty_like(x)
    c = max(4, min(n, chunk_bytes // 4))
    tx = mgr.empty(c)
    ty = mgr.empty(c)
    groups = elementwise_groups(c, mgr.device.max_workgroup_count[0])
    algo = mgr.algorithm([tx, ty], spirv, workgroup=groups, push_consts=[float(alpha)])
    seq = mgr.sequence()
    try:
        seq.record(sg.OpTensorSyncDevice([tx, ty]))
        seq.record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([ty]))
        hx, hy = tx.data(), ty.data()
        for i in range(0, n, c):
            k = min(c, n - i)
            hx[:k] = x[i:i + k]
            hy[:k] = y[i:i + k]
            if k < c:   # the last, short chunk: the kernel runs over zeros past its end
                hx[k:] = 0
                hy[k:] = 0
            seq.eval()
            out[i:i + k] = hy[:k]
    finally:
        seq.destroy()
        algo.destroy()
        tx.destroy()
        ty.destroy()
    return out
