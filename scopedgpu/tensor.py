"""Tensors: ranges of the manager's memory pool, with a host copy in a numpy array."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from scopedgpu._base import Child, Handle
from scopedgpu._errors import ScopedGPUError
from scopedgpu._ffi import ffi

if TYPE_CHECKING:
    from scopedgpu._pool import Allocation
    from scopedgpu.manager import Manager, _State

__all__ = ["Tensor", "KINDS", "dtype_feature"]

KINDS = ("device", "host", "storage")

# dtype -> the DeviceInfo flag it needs (None: every Vulkan device)
_DTYPE_FEATURE: dict[np.dtype, str | None] = {
    np.dtype(np.float32): None, np.dtype(np.int32): None, np.dtype(np.uint32): None,
    np.dtype(np.float64): "float64", np.dtype(np.int64): "int64",
    np.dtype(np.uint64): "int64", np.dtype(np.float16): "float16",
    np.dtype(np.int16): "int16", np.dtype(np.uint16): "int16",
    np.dtype(np.int8): "int8", np.dtype(np.uint8): "int8",
}


def dtype_feature(dtype: np.dtype) -> str | None:
    """The device feature a dtype needs; TypeError for dtypes scopedgpu never supports."""
    dt = np.dtype(dtype)
    if dt.byteorder == ">":
        raise TypeError(f"dtype {dt} is big-endian; GPUs read little-endian data")
    dt = dt.newbyteorder("=")
    if dt not in _DTYPE_FEATURE:
        names = ", ".join(str(d) for d in _DTYPE_FEATURE)
        raise TypeError(f"dtype {dt} is not supported by scopedgpu; use one of {names}")
    return _DTYPE_FEATURE[dt]


class _TensorHandle(Handle):
    """The pool ranges of one tensor: `gpu` (what shaders bind) and `stage` (the
    host-visible staging range of a device tensor)."""
    __slots__ = ("gpu", "stage")

    def __init__(self) -> None:
        self.gpu: Allocation | None = None
        self.stage: Allocation | None = None

    def release(self, state: _State, closing: bool) -> None:
        if closing:
            return  # the pool is destroyed whole
        for a in (self.gpu, self.stage):
            if a is not None:
                state.pool.free(a)
        self.gpu = self.stage = None


class Tensor(Child):
    """A tensor in the manager's memory pool; create it with Manager.tensor().

    kind "device": device-local memory plus a host copy (`data()`) and a staging range,
    synchronised by OpTensorSyncDevice / OpTensorSyncLocal. kind "host": host-visible
    memory the device reads directly, plus the host copy. kind "storage": device memory
    only, no host copy.

    The tensor's memory returns to the pool on destroy(), when the manager closes, or when
    the object becomes unreachable; never while submitted GPU work may still use it.
    The array `data()` returns is ordinary numpy memory and outlives the tensor.
    """
    _what = "tensor"

    def __init__(self, manager: Manager, array: np.ndarray, kind: str):
        state = manager._state
        handle = _TensorHandle()
        self._shape = array.shape
        self._dtype = array.dtype
        self._kind = kind
        self._nbytes = int(array.nbytes)
        self._host: np.ndarray | None = None if kind == "storage" else array
        with state.lock:
            # Checked under the lock: another thread may have closed the manager since
            # Manager.tensor() checked, destroying the pool's device and its mappings.
            state.check_open()
            state.collect()
            pool = state.pool
            handle.gpu = pool.alloc(self._nbytes, "host" if kind == "host" else "device")
            try:
                if kind == "device":
                    handle.stage = pool.alloc(self._nbytes, "host")
            except BaseException:
                pool.free(handle.gpu)
                raise
            super().__init__(manager, handle)
            state.tensors.add(self)
            self._gpu = handle.gpu
            self._stage = handle.stage
            # Host-visible range the sync ops copy through: staging, or the tensor itself.
            self._mapped = handle.stage if kind == "device" else (
                handle.gpu if kind == "host" else None)
            self._mapped_ptr = ffi.cast("void *", self._mapped.address) if self._mapped else None
            if kind == "host":
                self._to_mapped()
        if kind == "storage":
            try:
                manager._upload(self, array)
            except BaseException:
                self.destroy()
                raise

    # -- properties -------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def kind(self) -> str:
        return self._kind

    def __len__(self) -> int:
        return self.size

    def size_bytes(self) -> int:
        return self._nbytes

    def __repr__(self) -> str:
        state = " destroyed" if self._destroyed else ""
        return (f"<Tensor #{self._id} shape={self._shape} dtype={self._dtype} "
                f"kind={self._kind!r}{state}>")

    # -- host data ----------------------------------------------------------------
    def data(self) -> np.ndarray:
        """The tensor's host copy as a writable numpy array, without copying. Changes reach
        the device with OpTensorSyncDevice; OpTensorSyncLocal refreshes it. The array stays
        valid after the tensor is destroyed, holding the data as of the last sync."""
        self._check()
        if self._host is None:
            raise ScopedGPUError(
                f"{self!r} has no host memory (kind 'storage'): copy it into a 'device' or "
                "'host' tensor with OpTensorCopy and read that one")
        return self._host

    def numpy(self) -> np.ndarray:
        """A copy of the host data."""
        return self.data().copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    # -- used by the ops -------------------------------------------------------------
    def _to_mapped(self) -> None:
        host = self._host
        assert host is not None and self._mapped_ptr is not None
        ffi.memmove(self._mapped_ptr, ffi.from_buffer(host), self._nbytes)

    def _from_mapped(self) -> None:
        host = self._host
        assert host is not None and self._mapped_ptr is not None
        ffi.memmove(ffi.from_buffer(host), self._mapped_ptr, self._nbytes)

    def _forget(self) -> None:
        self._mgr._state.tensors.discard(self)
