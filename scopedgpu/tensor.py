"""Tensors: ranges of the manager's memory pool, with a host copy in a numpy array."""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from scopedgpu import _ki
from scopedgpu._base import Child, Handle, ids
from scopedgpu._device import dtype_feature
from scopedgpu._engine import Engine
from scopedgpu._errors import ScopedGPUError
from scopedgpu._pool import SMALL_LIMIT, Allocation, aligned_empty
from scopedgpu._transfer import host_to_mapped, read_back, upload


__all__ = ["Tensor", "KINDS", "dtype_feature"]

KINDS = ("device", "host", "storage")

# A borrowed array of at least this many bytes is copied straight into the staging range
# at creation, which becomes data() (one copy, no host array made); smaller ones get a
# host copy first, as that costs less than the memoryview and view the switch makes, and
# switch on first use (_adopt_stage), the tensor churn of small tensors not paying for it.
ADOPT_MIN = 1024

def _free_unviewed(engine: weakref.ref[Engine], lent: _TensorHandle) -> None:
    """A staging range that was a destroyed tensor's data() (in lent.stage): back to the
    pool once the last numpy view of it is gone (while views live, the range holds their
    data)."""
    st = engine()
    if st is None or st.closed:
        return   # the pool went whole; numpy frees the memory with the views
    with st.lock:
        if not st.closed and lent.stage is not None:
            st.pool.free_held(lent, True)


class _TensorHandle(Handle):
    """The pool ranges of one tensor: `gpu` (what shaders bind) and `stage` (the
    host-visible staging range of a device tensor, or its imported host copy, in which case
    `host` keeps that host memory alive until the import is released). `view`: a weak
    reference to data() when data() is the staging range itself (a host block of imported
    numpy memory), whose range then waits for the last view."""
    __slots__ = ("gpu", "stage", "host", "view", "fresh")

    def __init__(self) -> None:
        self.gpu: Allocation | None = None
        self.stage: Allocation | None = None
        self.host: np.ndarray | None = None
        self.view: weakref.ref[Any] | None = None
        # The device range of a "device" tensor not yet written by submitted work: it
        # holds what the pool's memory held before, and is zeroed before it is first read
        # (Recorder.touch).
        self.fresh = False

    def release(self, state: Engine, closing: bool) -> None:
        # Each range is taken out of its holder in the pool's step that frees it
        # (Pool.free_held, unimport_held): a release that a Ctrl-C cut short and that runs
        # again (Child.destroy) never frees one twice.
        if closing:
            return  # the pool is destroyed whole, imports included
        pool = state.pool
        v = self.view() if self.view is not None else None
        if v is not None and self.stage is not None:
            # A user still holds data(): its range stays theirs until the view goes. The
            # finalizer is made first, around a holder still empty; the range moves into
            # that holder in one step.
            lent = _TensorHandle()
            weakref.finalize(v, _free_unviewed, weakref.ref(state), lent).atexit = False
            self.lend_stage(lent)
        del v
        if self.gpu is not None:
            pool.free_held(self, False)
        if self.stage is not None:
            if self.host is not None:
                # the device no longer refers to the memory, so numpy may free it with
                # its last view (self.host dropped below)
                pool.unimport_held(self)
            else:
                pool.free_held(self, True)
        self.host = None

    @_ki.step
    def lend_stage(self, lent: _TensorHandle) -> None:
        lent.stage = self.stage
        self.stage = None


@_ki.step
def _unregister(state: Engine, ref: weakref.ref[Any]) -> _TensorHandle | None:
    """Takes a tensor's handle out of the manager's records, in one step (subscripts and
    `del`, not pop(): a signal right after pop() returned would lose what it popped)."""
    refs = state.tensors.refs
    if ref in refs:
        del refs[ref]
    handles = state.handles
    if ref not in handles:
        return None
    handle = handles[ref]
    del handles[ref]
    return handle  # type: ignore[return-value]


def binding_shapes(tensors: list[Any], manager: object) -> tuple[tuple[np.dtype, int], ...] | None:
    """(dtype, bytes) of each tensor when every item is a live Tensor of `manager`, else
    None, the caller's own checks then saying which is not (package-internal: an
    algorithm's creation, the whole check in one call)."""
    out = []
    for t in tensors:
        if type(t) is not Tensor or t._destroyed or t._mgr is not manager:
            return None
        out.append((t._dtype, t._nbytes))
    return tuple(out)


class Tensor(Child):
    """A tensor in the manager's memory pool; create it with Manager.tensor().

    kind "device": device-local memory plus a host copy (`data()`) and a staging range,
    synchronised by OpTensorSyncDevice / OpTensorSyncLocal. kind "host": host-visible
    memory the device reads directly, plus the host copy. kind "storage": device memory
    only, no host copy.

    The tensor's memory returns to the pool on destroy(), when the manager closes, or when
    the object becomes unreachable; never while submitted GPU work may still use it.
    The array `data()` returns is ordinary numpy memory and outlives the tensor.

    On devices with VK_EXT_external_memory_host, a device tensor's data() is the memory
    the device copies from and to (large tensors: their own page-aligned host copy,
    imported; small ones: a range of a pool block of imported numpy memory, from creation
    for 1 KiB and up, else from the first data() call or sync on), as in kp, where data()
    is the mapped staging buffer: OpTensorSyncDevice / OpTensorSyncLocal then copy
    between data() and device memory by DMA while the sequence runs, not at submit and at
    completion; so do not write data() between eval_async() and eval_await() of a
    sequence that syncs the tensor (eval() is unaffected).
    """
    # Slots are quicker to set than a fresh __dict__ (tensors are made by the 100,000);
    # "__dict__" keeps room for attributes of the user's own.
    __slots__ = ("_shape", "_size", "_dtype", "_kind", "_nbytes", "_host", "_gpu", "_stage",
                 "_zero_copy", "_mapped", "_th", "_lent", "__dict__")
    _what = "tensor"
    _th: _TensorHandle
    _gpu: Allocation
    _stage: Allocation | None
    _mapped: Allocation | None

    def __init__(self, manager: object, engine: Engine, array: np.ndarray, kind: str,
                 borrowed: bool = False, *, fill: bool = True):
        # borrowed: `array` is the caller's (Manager.tensor's and empty()'s small device
        # tensors), so it is copied: straight into the staging range where that can be
        # data() (ADOPT_MIN bytes and up), else into a new host copy.
        state = engine
        handle = _TensorHandle()
        self._shape = array.shape
        self._size = array.size
        self._dtype = array.dtype
        self._kind = kind
        self._nbytes = nbytes = array.nbytes
        self._host: np.ndarray | None = None if kind == "storage" or borrowed else array
        with state.lock:
            # Checked under the lock: another thread may have closed the manager since
            # Manager.tensor() checked, destroying the pool's device and its mappings.
            if state.closed:
                state.check_open()
            if state.garbage or state.running:
                state.collect()
            if kind == "device" and nbytes <= SMALL_LIMIT:
                # The common small case (tensor churn): a device range and a staging range
                # in one pool call, and Child.__init__ inlined.
                pair = None
                try:
                    pair = state.pool.alloc_pair(nbytes)
                    handle.gpu, handle.stage = pair
                    handle.fresh = True
                    self._gpu, self._stage = pair
                    self._mapped = self._stage
                    self._zero_copy = False
                    self._lent = False
                    if borrowed:
                        if nbytes >= ADOPT_MIN and pair[1].block.view is not None:
                            # New, so no work can use it: its staging range becomes
                            # data() now (_adopt_stage's switch, with one copy in all).
                            self._view_stage(handle, array)
                        else:
                            self._host = array.copy()
                    self._mgr = manager
                    self._engine = engine
                    self._id = next(ids)
                    self._destroyed = False
                    self._handle = handle
                    self._th = handle
                    ref: weakref.ref[Any] = weakref.ref(self, state.on_unreachable)
                    self._ref = ref
                    state.handles[ref] = handle
                    state.tensors.refs[ref] = None
                except BaseException:
                    self._unmake(state, handle, pair)
                    raise
                return
            if borrowed:
                array = array.copy()
                if kind != "storage":
                    self._host = array
            pool = state.pool
            try:
                handle.gpu = pool.alloc(nbytes, "host" if kind == "host" else "device")
                handle.fresh = kind == "device"
                if kind == "device" and handle.stage is None:
                    if pool.import_align and pool.can_import(self._nbytes):
                        # The host copy itself becomes the staging memory: no memcpy in
                        # the sync ops, one DMA each way.
                        if array.ctypes.data % pool.import_align:
                            aligned = aligned_empty(array.shape, array.dtype,
                                                    pool.import_align)
                            np.copyto(aligned, array)
                            array = self._host = aligned
                        handle.stage = pool.import_host(array.ctypes.data, self._nbytes)
                        if handle.stage is not None:
                            handle.host = array
                    if handle.stage is None:
                        handle.stage = pool.alloc(self._nbytes, "host")
                super().__init__(manager, engine, handle)
                self._th = handle
                self._lent = False
                state.tensors.add(self)
                self._gpu = handle.gpu
                self._stage = handle.stage
                # Zero-copy: the sync ops' DMA reads and writes data() itself.
                self._zero_copy = handle.host is not None
                # Host-visible range the sync ops copy through: staging, or the tensor
                # itself.
                self._mapped = handle.stage if kind == "device" else (
                    handle.gpu if kind == "host" else None)
                if kind == "host":
                    # under the lock: a concurrent close() would unmap the memory
                    self.write_mapped()
            except BaseException:
                self._unmake(state, handle, None)
                raise
        if kind == "storage" and fill:   # (fill=False: contents undefined; stream()'s chunks)
            try:
                upload(engine, handle.gpu, array, f"uploading {self!r}")
            except BaseException:
                self.destroy()
                raise

    def _unmake(self, state: Engine, handle: _TensorHandle, pair: Any) -> None:
        """Creation failed (any exception, Ctrl-C included): frees what was made, whether
        the handle was registered yet or not. The lock is held."""
        ref = getattr(self, "_ref", None)
        if ref is not None:
            state.handles.pop(ref, None)
            state.tensors.refs.pop(ref, None)
        self._destroyed = True
        state.destroys += 1
        if handle.gpu is None and pair is not None:
            handle.gpu, handle.stage = pair
        stage = handle.stage
        if stage is not None and stage.block.sub is None and handle.host is None:
            handle.host = self._host   # an import made just before the interrupt
        handle.release(state, False)

    # -- properties -------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the array the tensor was made from."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the elements."""
        return self._dtype

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self._nbytes

    @property
    def kind(self) -> str:
        """"device", "host" or "storage" (see the class docstring)."""
        return self._kind

    @property
    def ndim(self) -> int:
        """Number of dimensions, as numpy."""
        return len(self._shape)

    def __len__(self) -> int:
        """The length of the first dimension, as numpy (TypeError for a 0-d tensor)."""
        if not self._shape:
            raise TypeError("len() of unsized object")
        return self._shape[0]

    def size_bytes(self) -> int:

        """Size in bytes (kp's name for nbytes)."""
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
        if not self._zero_copy and not self._lent:
            self._adopt_stage()
            # Not switched (work ran): data() stays this array for good, since the caller
            # may hold it.
            self._lent = not self._zero_copy
        if self._host is None:
            raise ScopedGPUError(
                f"{self!r} has no host memory (kind 'storage'): copy it into a 'device' or "
                "'host' tensor with OpTensorCopy and read that one")
        check = self._engine.sync_check
        if check is not None:   # debug mode: a kernel wrote it after its last download?
            check.host_read(self)
        return self._host

    def numpy(self) -> np.ndarray:
        """A copy of the host data."""
        # data()'s checks, without making the staging range the host copy first
        # (_adopt_stage): a copy is taken either way, and adopting would copy the data
        # once more (and cost a buffer export) for a tensor often destroyed next.
        if self._destroyed:
            self._check()
        host = self._host
        if host is None:
            return self.data().copy()   # (raises data()'s error: no host memory)
        check = self._engine.sync_check
        if check is not None:   # debug mode: a kernel wrote it after its last download?
            check.host_read(self)
        return host.copy()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """numpy 2's protocol, for callers that use it directly: a copy of the host data,
        so copy=False raises ValueError; dtype converts the copy. (numpy itself reads
        __array_interface__ first: np.asarray(t) is a view of data(), np.array(t) a
        copy.)"""
        if copy is False:
            raise ValueError(f"{self!r} cannot be viewed without a copy (copy=False); "
                             "use t.data() for the zero-copy view of its host memory, or "
                             "np.array(t) for a copy")
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    # -- array protocols: the host copy, zero-copy ----------------------------------------
    @property
    def __array_interface__(self) -> dict[str, Any]:
        """numpy's array interface of data() (zero-copy): `np.asarray(t)` and
        `np.array(t, copy=False)` are views of the host copy (numpy reads this before
        __array__; `np.array(t)` and `t.numpy()` copy). Its "data" is the data() array
        itself, not a bare address, so numpy makes that array the base of the view: the
        memory lives as long as the view does, as data() views do. Raises DestroyedError
        after destroy(), and for a "storage" tensor what data() raises."""
        arr = self.data()
        face = dict(arr.__array_interface__)
        face["data"] = arr   # a buffer (C-contiguous): numpy holds it, not the tensor
        face["strides"] = None
        return face

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None,
                   copy: bool | None = None) -> Any:
        """DLPack export of data() (the array API standard's keywords; numpy's own
        ndarray.__dlpack__ makes the capsule): `np.from_dlpack(t)` and
        `torch.from_dlpack(t)` share the host copy without copying (copy=True asks for a
        copy), and the capsule keeps that memory alive as data() views do. CPU only:
        stream must be None (ValueError otherwise) and dl_device the CPU (BufferError),
        the same with every numpy; with numpy before 2.1, max_version still gives the
        first protocol's capsule ("dltensor"), as the array API allows. Raises
        DestroyedError after destroy(), and for a "storage" tensor what data() raises."""
        arr: Any = self.data()
        if stream is not None:
            raise ValueError(f"{self!r}.__dlpack__: the host copy is on the CPU, which has "
                             f"no streams: stream=None, not {stream!r}")
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError(f"{self!r}.__dlpack__: the host copy is on the CPU, device "
                              f"(1, 0); dl_device={dl_device!r} needs a copy to that device")
        if copy:
            arr = arr.copy()
        if max_version is None:
            return arr.__dlpack__()
        try:
            return arr.__dlpack__(max_version=max_version)
        except TypeError:   # numpy < 2.1 makes the first protocol's capsule alone
            return arr.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        """(1, 0): DLPack's CPU device (kDLCPU), where the host copy lives. Raises as
        __dlpack__ does."""
        dev: tuple[int, int] = self.data().__dlpack_device__()
        return dev

    # -- the package's interface (ops and sequences) ----------------------------------
    @property
    def host_data(self) -> np.ndarray:
        """The host copy as it is, without data()'s checks (package-internal)."""
        assert self._host is not None
        return self._host

    @property
    def ranges(self) -> _TensorHandle:
        """The handle that owns the tensor's ranges; its `fresh` is read and cleared by
        the recorder (package-internal)."""
        return self._th

    @property
    def gpu_range(self) -> Allocation:
        """The pool range shaders bind and copies use (package-internal)."""
        return self._gpu

    @property
    def stage_range(self) -> Allocation | None:
        """The host-visible staging range of a device tensor (package-internal)."""
        return self._stage

    @property
    def handle(self) -> Handle:
        """What this tensor owns (package-internal: a sequence's in-flight set)."""
        return self._handle

    def _adopt_stage(self) -> None:
        """Makes the staging range data() itself where it is numpy memory (a host block
        of imported memory): the sync ops then copy nothing on the host. Only while no
        sequence runs (a download in flight would land beside the host copy taken over
        here), and before anyone held data(): data(), the first sync and the recording of
        a download call it. Where the range is not numpy memory, it never will be:
        `_lent` then stops the callers from trying again."""
        if self._zero_copy or self._lent:
            return
        stage = self._stage
        host = self._host
        if stage is None or stage.block.view is None or host is None or not self._nbytes:
            self._lent = True
            return
        engine = self._engine
        if engine.running:
            return   # (read again under the lock below: this only spares taking it)
        with engine.lock:
            if engine.running or self._destroyed:   # (destroyed: by another thread since
                return                              # the caller's check; its range is freed)
            self._view_stage(self._th, host)

    def _view_stage(self, handle: _TensorHandle, host: np.ndarray) -> None:
        """Makes the staging range (of a block of imported numpy memory) data(), holding
        a copy of `host`; the caller holds the lock and knows no work uses the tensor.
        One object per tensor under every view of data(): the memoryview slice numpy
        makes the array's base (frombuffer), which every view of data() keeps alive,
        and which lives exactly as long as some view does (its weak reference in
        handle.view: the range waits for it). (A memoryview slice and frombuffer: a third
        of the cost of a ctypes array over the range.)"""
        stage = self._stage
        assert stage is not None and stage.block.view is not None
        offset = stage.offset
        view = np.frombuffer(stage.block.view[offset:offset + self._nbytes],
                             dtype=self._dtype)
        keeper = view.base
        if len(self._shape) != 1:   # (1-D: frombuffer's shape already)
            view = view.reshape(self._shape)
        view[...] = host   # (numpy's setitem: a third less than np.copyto's call)
        handle.view = weakref.ref(keeper)
        self._host = view
        self._zero_copy = True

    def write_mapped(self) -> None:
        """Copies the host data into the host-visible range the device reads (before a
        submission that syncs it; nothing to do when that range is data() itself;
        package-internal)."""
        if self._zero_copy:
            return
        self._adopt_stage()
        if self._zero_copy:
            return
        host = self._host
        assert host is not None and self._mapped is not None
        host_to_mapped(self._mapped.address, host, self._nbytes)

    def read_back(self) -> tuple[Any, Any, int] | None:
        """The copy that refreshes the host data after a download: (destination, source,
        bytes), plain pointers that refer to no scopedgpu object; None when the download
        lands in data() itself (package-internal)."""
        # Recording a download: the moment to make data() the staging range, or every
        # completion of this recording would copy the range into the host copy.
        self._adopt_stage()
        if self._zero_copy:
            return None
        host = self._host
        assert host is not None and self._mapped is not None
        return read_back(host, self._mapped.address, self._nbytes)

    def _forget(self) -> None:
        self._engine.tensors.discard(self)

    def destroy(self) -> None:
        """Returns the tensor's memory to the pool (after the GPU work that uses it).
        Idempotent. data() arrays stay valid; destroy() cancels no submitted work, so an
        OpTensorSyncLocal still running completes into them."""
        # Child.destroy, inlined: tensors are made and destroyed by the 100,000.
        state = self._engine
        with state.lock:
            if self._destroyed:
                return
            self._destroyed = True
            state.destroys += 1
            if self._th.view is not None:
                self._host = None   # data() is a range of the pool: the user's views keep it
            handle = None
            # Ctrl-C anywhere below: a handle unregistered and not yet released is
            # released by the handler (a release cut short runs again: it frees nothing
            # twice).
            try:
                handle = _unregister(state, self._ref)
                if handle is not None:
                    if state.running:
                        state.release(handle)
                    else:
                        handle.release(state, False)
            except BaseException:
                if handle is not None:
                    state.release(handle)
                raise
            # Unregistered: its weak reference goes with its callback, which would only
            # find nothing to release when the object goes (a call per tensor, saved).
            self._ref = None  # type: ignore[assignment]
            if state.debug:
                state.check_validation(f"destroying {self!r}")
