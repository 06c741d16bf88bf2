"""The host side of the data path: numpy arrays in and out of mapped pool memory.

numpy -> pool: a tensor's host copy (Tensor.data()) is written into its host-visible
range (staging, or the memory of a "host" tensor) by host_to_mapped() before a
submission that reads it (OpTensorSyncDevice's pre-submit step), or, for a large
device tensor on a device that imports host memory, is itself that range (no copy).
pool -> numpy: read_back() makes the (destination, source, bytes) triple a sequence
runs through copy() once its fence signalled. A "storage" tensor is written once, by
upload(): a staging range and a one-off command buffer. Large copies use a few threads.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from scopedgpu import _vk
from scopedgpu._device import DeviceInfo, check_dtype
from scopedgpu._engine import SPIN_NS, Engine, fence_wait
from scopedgpu._submission import Submission

__all__ = ["contiguous_arrays", "copy", "host_to_mapped", "read_back", "upload"]

PARALLEL_COPY_MIN = 16 << 20     # host copies this large are split over threads
_copier = None


def contiguous_arrays(arrays: Any, label: str, info: DeviceInfo) -> list[np.ndarray]:
    """The arrays as a list, each checked to be a numpy array of a dtype that tensor()
    takes on this device (check_dtype: the one rule) and C-contiguous (what a copy or an
    import of its memory as one range needs); `label` names the i-th in the error (a
    format string with {i})."""
    out = list(arrays)
    for i, a in enumerate(out):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{label.format(i=i)} must be a numpy array, not "
                            f"{type(a).__name__}")
        try:
            check_dtype(a.dtype, info)
        except TypeError as exc:
            raise TypeError(f"{label.format(i=i)}: {exc}") from None
        if not a.flags.c_contiguous:
            raise ValueError(f"{label.format(i=i)} must be C-contiguous "
                             "(np.ascontiguousarray makes a contiguous copy)")
    return out


def copy(dst: Any, src: Any, nbytes: int) -> None:
    """memcpy between a numpy array's memory and mapped memory (cffi pointers). Large
    copies are split over a few threads: numpy releases the GIL while it copies, and one
    core rarely saturates memory bandwidth. Used only where no host-memory import (DMA
    straight from data()) is possible."""
    global _copier
    # The size test first: os.cpu_count() costs microseconds (it reads the affinity mask),
    # which at 4 KiB was a third of a round trip.
    if nbytes < PARALLEL_COPY_MIN:
        _vk.memmove(dst, src, nbytes)
        return
    workers = min(8, (os.cpu_count() or 1) // 2)
    if workers < 2:
        _vk.memmove(dst, src, nbytes)
        return
    if _copier is None:
        from concurrent.futures import ThreadPoolExecutor
        _copier = ThreadPoolExecutor(workers, thread_name_prefix="scopedgpu-copy")
    d = np.frombuffer(_vk.byte_buffer(dst, nbytes), dtype=np.uint8)
    s = np.frombuffer(_vk.byte_buffer(src, nbytes), dtype=np.uint8)
    step = -(-nbytes // (2 * workers)) // 4096 * 4096 or nbytes
    parts = [(i, min(i + step, nbytes)) for i in range(0, nbytes, step)]
    for f in [_copier.submit(np.copyto, d[a:b], s[a:b]) for a, b in parts]:
        f.result()


def host_to_mapped(address: int, host: np.ndarray, nbytes: int) -> None:
    """Writes an array's bytes into mapped memory at `address`."""
    copy(_vk.address_ptr(address), _vk.array_ptr(host), nbytes)


def read_back(host: np.ndarray, address: int, nbytes: int) -> tuple[Any, Any, int]:
    """The copy that refreshes an array from mapped memory at `address`: (destination,
    source, bytes), plain pointers that refer to no scopedgpu object, run by copy()."""
    return (_vk.array_ptr(host), _vk.address_ptr(address), nbytes)


def upload(st: Engine, dst: Any, array: np.ndarray, what: str) -> None:
    """Writes `array` into the device range `dst` (an Allocation of a storage tensor)
    through a temporary staging range and a one-off command buffer, a Submission that
    owns both (an idle one of the sequence cache for queue 0 when there is one). Whatever
    interrupts this (Ctrl-C included) releases it to the engine, which frees it once its
    copy completed: nothing freed under the GPU, nothing left behind."""
    # All under the lock, the wait included: close() must not destroy the device under
    # the copy.
    with st.lock:
        st.check_open()
        sub = None
        try:
            sub = st.seq_cache.take(0, None)
            if sub is None or sub.seq is None:
                sub = Submission(0, recyclable=True)
                sub.create(st, what)
            sub.sig = None   # (its commands are replaced)
            sub.label = "a storage upload"
            sub.stage = st.pool.alloc(array.nbytes, "host")
            stage = sub.stage
            _vk.memmove(_vk.address_ptr(stage.address), _vk.array_ptr(array), array.nbytes)
            h = sub.seq
            _vk.check(_vk.seq_begin(h), what)
            _vk.seq_copy(h, stage.block.handle, stage.offset, dst.block.handle, dst.offset,
                         array.nbytes)
            # The copy before any later use of the tensor on this queue.
            _vk.seq_barrier(h, _vk.STAGES_GPU, _vk.ACCESS_ALL_WRITES, _vk.STAGES_GPU,
                            _vk.ACCESS_ALL_GPU)
            _vk.check(_vk.seq_end(h), what)
            _vk.check(_vk.seq_submit(h), what)
            # In slices (Ctrl-C gets through): the copy queues behind any dispatch
            # running on queue 0, which may be long. Interrupted, the copy is still
            # awaited below before the tensor's memory can be freed.
            _vk.check(fence_wait(st, h, None), what)
            sub.release(st)   # (in the try: cut short, the handler below repeats it)
        except BaseException as exc:
            if sub is not None:
                # Before the tensor's memory is freed: a copy always ends (no slices).
                h = sub.seq
                if h is not None:
                    _vk.seq_wait(h, _vk.WAIT_FOREVER_NS, SPIN_NS)
                sub.release(st)   # (a no-op once released)
            st.validation_failed(exc, what)
            raise
        st.check_validation(what)


def _after_fork() -> None:
    global _copier
    _copier = None   # the host-copy threads of the parent do not exist in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
