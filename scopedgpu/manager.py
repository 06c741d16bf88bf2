"""The Manager: one Vulkan device, its memory pool, and every object made on it.

The public face over the lifetime engine (scopedgpu._engine), the caches
(scopedgpu._caches) and the children (Tensor, Algorithm, Sequence): it checks the
arguments of each call and hands the work to them. See docs/architecture.md.
"""
from __future__ import annotations

import functools
import logging
import math
import numbers
import weakref
from typing import Any, Callable, Sequence as Seq, TypeVar

import numpy as np

from scopedgpu import _device, _vk
from scopedgpu._base import NoCopy
from scopedgpu._caches import (CACHED_OBJECTS, Programs, Reflections, SequenceCache,
                               cached_counts)
from scopedgpu._errors import DeviceError, NoDeviceError
from scopedgpu._engine import (DEFAULT_WAIT_TIMEOUT, STATES, Engine, Roots,  # noqa: F401
                               abandoned_managers, drain, fork_hint, shutdown,
                               wait_timeout_from)
from scopedgpu._pool import IMPORT_MIN, Pool, aligned_empty
from scopedgpu._settings import get as setting, positive_bytes
from scopedgpu._spirv import ShaderInfo
from scopedgpu._synccheck import SyncCheck
from scopedgpu.algorithm import Algorithm
from scopedgpu.ops import Op
from scopedgpu.pinned import Pinned, pin
from scopedgpu.sequence import Sequence
from scopedgpu.stream import stream
from scopedgpu.tensor import KINDS, Tensor

__all__ = ["Manager", "live_vulkan_objects", "abandoned_managers"]

log = logging.getLogger("scopedgpu")
M = TypeVar("M", bound="Manager")


def shim_live_counts(dev: Any = None) -> dict[str, int]:
    return _vk.live_counts(dev)


def _from_python(data: Any, dtype: Any) -> tuple[Any, Any]:
    """tensor()'s input that is not an array: a buffer-protocol object (bytes, bytearray,
    memoryview, array.array) as a numpy view keeping its element type and shape (bytes:
    uint8); anything else must be numbers, nested in lists or tuples, and gives float32
    unless dtype says otherwise (kp). None and non-numeric elements raise TypeError."""
    if data is None:
        raise TypeError("mgr.tensor(): data must be array-like (a numpy array, a list of "
                        "numbers, a buffer), not None")
    try:
        view = memoryview(data)
    except TypeError:
        view = None
    if view is not None:
        return np.asarray(view), dtype
    try:
        probe = np.asarray(data)
    except (TypeError, ValueError) as exc:   # ragged nesting
        raise TypeError(f"mgr.tensor(): cannot make a tensor from {type(data).__name__} "
                        f"{data!r:.80}: {exc}") from None
    kind = probe.dtype.kind
    if kind == "O" and all(isinstance(v, numbers.Real) for v in probe.ravel()):
        kind = "f"   # integers beyond 64 bits: numbers all the same
    if kind not in "biuf":
        raise TypeError(f"mgr.tensor(): data must be numbers, not {type(data).__name__} "
                        f"{data!r:.80} (numpy reads it as dtype kind {kind!r})")
    return data, np.float32 if dtype is None else dtype


# DLPack's device types (dlpack.h, DLDeviceType), for the message naming a device.
_DL_DEVICES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan",
               8: "Metal", 9: "VPI", 10: "ROCm", 11: "ROCm host (pinned)", 12: "ext_dev",
               13: "CUDA managed", 14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}


def _from_dlpack(data: Any) -> np.ndarray:
    """tensor()'s DLPack input (a PyTorch CPU tensor, a JAX or CuPy array...): a numpy view
    of its memory (np.from_dlpack, no copy here; tensor() copies it), keeping its dtype and
    shape. Only memory on the CPU device: anything else raises TypeError naming the
    device, before any copy."""
    name = type(data).__name__
    try:
        dev_type, dev_id = data.__dlpack_device__()
    except AttributeError:
        dev_type, dev_id = 1, 0   # numpy asks for it too: from_dlpack says what is missing
    if int(dev_type) != 1:
        where = _DL_DEVICES.get(int(dev_type), f"DLPack device type {int(dev_type)}")
        raise TypeError(f"mgr.tensor(): the {name} is in {where} memory (device "
                        f"{int(dev_id)}); scopedgpu takes host (CPU) memory only: copy it "
                        "to the host first (torch: .cpu(), CuPy: .get())")
    try:
        return np.from_dlpack(data)
    except (TypeError, ValueError, BufferError, RuntimeError) as exc:
        raise TypeError(f"mgr.tensor(): cannot read the {name} through DLPack: "
                        f"{exc}") from exc


# Manager.empty()'s fast path: 1-D, a numpy scalar type (or int, float) of at most 8
# bytes, fewer than IMPORT_MIN bytes (which tensor() copies to an aligned array).
_SMALL_TYPES = frozenset({np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                          np.int64, np.uint8, np.uint16, np.uint32, np.uint64, float, int})
_EMPTY_FAST = IMPORT_MIN // 8


# empty()'s fast path shares read-only zeros up to this many elements (64 of them at
# most, 128 KiB each at most).
_ZEROS_SHARED = 16384


@functools.lru_cache(maxsize=64)
def _zeros(n: int, dtype: type) -> np.ndarray:
    """Read-only zeros of n elements, shared by empty()'s fast path (which copies them)."""
    z: np.ndarray = np.zeros(n, dtype=dtype)
    z.flags.writeable = False
    return z


class Manager(NoCopy):
    """One Vulkan device and everything made on it.

    Manager(device=None, *, debug=None, memory_limit=None, wait_timeout=None): `device` is
    an index, a case-insensitive name substring, or None for the best device (discrete >
    integrated > virtual > cpu; SCOPEDGPU_DEVICE overrides). debug=True (or
    SCOPEDGPU_DEBUG=1) turns on the Khronos validation layer; its errors raise
    ValidationError from the call that caused them. memory_limit (or
    SCOPEDGPU_MEMORY_LIMIT) caps the bytes of the tensor pool. wait_timeout (or
    SCOPEDGPU_WAIT_TIMEOUT; default 10 seconds) bounds how long close(),
    Sequence.destroy(), the collector and interpreter exit wait for GPU work that may
    never end (see close()).

    A Manager cannot be copied or pickled (TypeError). After os.fork() it is unusable in
    the child (ForkedError); the child may open a Manager of its own where the driver
    allows it (NVIDIA's does not: DeviceError naming fork and the 'spawn' start method).

    close() (or the end of a `with` block, or interpreter exit) waits for all GPU work and
    then frees everything the manager made. Calls are thread-safe: one lock guards the
    manager's state; sequence fence waits happen outside it (wait_idle() and storage
    uploads wait under it). One Sequence evaluated from several threads is serialized.
    See docs/threads.md.
    """

    _what = "manager"   # NoCopy: a copy would share the device

    def __init__(self, device: int | str | None = None, *, debug: bool | None = None,
                 memory_limit: int | None = None, wait_timeout: float | None = None):
        timeout = wait_timeout_from(wait_timeout)
        max_queues = setting("SCOPEDGPU_QUEUES")
        _device.load_vulkan()
        if debug is None:
            debug = setting("SCOPEDGPU_DEBUG")
        if memory_limit is None:
            memory_limit = setting("SCOPEDGPU_MEMORY_LIMIT")
        else:
            memory_limit = positive_bytes(memory_limit, "memory_limit")
        state = Engine()
        state.wait_timeout = timeout
        STATES.add(state)
        self._state = state
        # Keeps named sequences until deleted, running ones until they complete (see
        # Engine.running).
        self._roots = Roots()
        # Registered first, so that whatever is created below is freed on failure too.
        self._finalizer = weakref.finalize(self, shutdown, state)
        # The out-parameters are made before the calls that fill them, so that an
        # exception arriving between a call's return and the store below (Ctrl-C)
        # still finds, and frees, what the call made.
        out = _vk.out("instance")
        dout = _vk.out("device")
        try:
            rc = _vk.instance_create(1 if debug else 0, out)
            if debug:
                # The forgotten-sync checks need no layer: on without it too.
                state.sync_check = SyncCheck()
            if rc == _vk.ERR_NO_LAYER:
                log.warning("debug=True, but the Khronos validation layer is not installed "
                            "(Debian/Ubuntu: apt-get install vulkan-validationlayers); "
                            "continuing without validation")
                debug = False
                rc = _vk.instance_create(0, out)
            if rc != 0:
                try:
                    _vk.check(rc, "creating a Vulkan instance")
                except Exception as exc:
                    raise NoDeviceError(f"{exc}. {_device.INSTALL_HINT}") from exc
            state.inst = out[0]
            state.debug = bool(debug)
            if state.debug:
                _vk.debug_states.add(state)
            info = _device.choose_device(_device.enumerate_devices(state.inst), device)
            try:
                _vk.device_create(state.inst, info.index, min(info.queue_count, max_queues), dout,
                                  f"creating a logical device on {info.name}")
            except DeviceError as exc:
                hint = fork_hint()
                if not hint:
                    raise
                raise type(exc)(f"{exc}. {hint}", result=exc.result, call=exc.call,
                                  code=exc.code) from exc
            state.dev = dout[0]
            state.info = info
            state.cpu_device = info.type == "cpu"
            if log.isEnabledFor(logging.DEBUG):
                env = setting("SCOPEDGPU_DEVICE") if device is None else None
                log.debug("Manager: device %d, %s (%s, Vulkan %s), chosen %s; validation %s",
                          info.index, info.name, info.type, info.api_version,
                          f"by the argument device={device!r}" if device is not None else
                          f"by SCOPEDGPU_DEVICE={env!r}" if env is not None else
                          "by default (the best type: discrete > integrated > virtual > "
                          "cpu, then the lowest index)", "on" if debug else "off")
            # (out of memory: every fence polled now, not after collect()'s gap)
            state.pool = Pool(state.dev, info, memory_limit,
                              on_oom=functools.partial(state.collect, True))
            state.seq_cache = SequenceCache(state)
            state.programs = Programs(state)
            state.reflections = Reflections(info)
            state.check_validation(f"opening {info.name}")
        except BaseException:
            if state.inst is None and out[0] != _vk.NULL:
                state.inst = out[0]
            if state.dev is None and dout[0] != _vk.NULL:
                state.dev = dout[0]
            self._finalizer()
            raise
        self._nqueues = _vk.device_queue_count(state.dev)
        state.nqueues = self._nqueues
        self._dtypes_ok: set[np.dtype] = set()   # native-order dtypes this device supports

    # -- life ------------------------------------------------------------------------------
    def close(self) -> None:
        """Waits for all GPU work, then destroys every sequence, algorithm and tensor of
        this manager, its pipelines and memory, and the device. Idempotent. data() arrays
        stay valid.

        The wait lasts at most `wait_timeout` seconds. Work still running then is given
        up on: the manager closes (every object is destroyed for the caller), a warning
        on the "scopedgpu" logger names what still runs, and the device, its memory and
        Vulkan objects stay allocated until the process exits, since the GPU may still
        use them. Ctrl-C during the wait raises KeyboardInterrupt and leaves the
        manager open."""
        st = self._state
        if not st.closed and not st.forked and st.dev is not None:
            with st.lock:
                if not st.closed and drain(st, st.wait_timeout):
                    st.gave_up = True   # _shutdown gives up without waiting again
        self._finalizer()
        self._roots.named.clear()
        self._roots.running.clear()

    @property
    def closed(self) -> bool:
        """True once close() ran (or the manager was collected)."""
        return self._state.closed

    def __enter__(self: M) -> M:
        self._state.check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def device(self) -> _device.DeviceInfo:
        """The DeviceInfo of the device this manager runs on."""
        return self._state.info

    @property
    def queue_count(self) -> int:
        """How many compute queues this manager opened (sequence(queue=...) takes an index
        below it): as many as the device's compute family has, at most 8, or at most
        SCOPEDGPU_QUEUES."""
        return self._nqueues

    @property
    def debug(self) -> bool:
        """True when the validation layer is on for this manager."""
        return self._state.debug

    @property
    def wait_timeout(self) -> float:
        """Seconds close(), Sequence.destroy(), the collector and interpreter exit wait
        for GPU work before giving up on it (Manager(wait_timeout=...), or
        SCOPEDGPU_WAIT_TIMEOUT; default 10)."""
        return self._state.wait_timeout

    def __repr__(self) -> str:
        st = self._state
        name = st.info.name if st.info else "?"
        return f"<Manager {name!r}{' closed' if st.closed else ''}>"

    def _open(self) -> Engine:
        st = self._state
        if st.closed:
            st.check_open()
        return st

    # -- tensors ------------------------------------------------------------------------------
    def tensor(self, data: Any, *, dtype: Any = None, kind: str = "device") -> Tensor:
        """Copies `data` (array-like) into a new tensor. Python lists give float32 (as in
        kp) unless dtype says otherwise; numpy arrays keep their dtype. kind: "device",
        "host" or "storage" (see Tensor). The tensor's memory returns to the pool on
        destroy(), at close(), or when it becomes unreachable."""
        st = self._state
        if st.closed:
            st.check_open()
        if type(data) is np.ndarray and dtype is None and kind in KINDS:
            # Fast path (tensor churn): a numpy array keeps its dtype.
            if data.dtype in self._dtypes_ok and data.size:
                pool = st.pool
                if data.nbytes >= IMPORT_MIN:
                    if data.nbytes > pool.size_ok:   # before any copy: too big fails now
                        pool.check_request(data.nbytes, kind)
                    if kind == "device" and pool.can_import(data.nbytes):
                        # Copy straight into memory the device can import (one copy).
                        arr = aligned_empty(data.shape, data.dtype, pool.import_align)
                        np.copyto(arr, data)
                        return Tensor(self, st, arr, kind)
                return Tensor(self, st, data, kind, True)   # (positional: no kwargs dict)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if isinstance(data, Tensor):
            raise TypeError("mgr.tensor() copies array data; to copy a tensor on the device "
                            "use OpTensorCopy")
        if not isinstance(data, np.ndarray):
            if hasattr(data, "__dlpack__"):
                data = _from_dlpack(data)
            elif not hasattr(data, "__array__"):
                data, dtype = _from_python(data, dtype)
        if isinstance(data, np.ndarray) and data.size * 8 > st.pool.size_ok:
            st.pool.check_request(data.size * np.dtype(dtype or data.dtype).itemsize, kind)
        try:
            arr = np.array(data, dtype=dtype, order="C", copy=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"mgr.tensor(): cannot make a tensor from {type(data).__name__}: "
                            f"{exc}") from exc
        self._check_dtype(arr.dtype)
        if arr.dtype.byteorder not in ("=", "|"):
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if arr.size == 0:
            raise ValueError(f"a tensor needs at least one element; got shape {arr.shape}")
        if arr.nbytes > st.pool.size_ok:
            st.pool.check_request(arr.nbytes, kind)
        return Tensor(self, st, arr, kind)

    def tensor_t(self, array: Any, kind: str = "device") -> Tensor:
        """kp-compatible: like tensor(), keeping the array's dtype."""
        arr = np.asarray(array)
        return self.tensor(arr, dtype=arr.dtype, kind=kind)

    def empty(self, shape: int | Seq[int], dtype: Any = np.float32, *,
              kind: str = "device") -> Tensor:
        """A zero-filled tensor."""
        st = self._open()
        if (type(shape) is int and 0 < shape < _EMPTY_FAST and kind in KINDS
                and type(dtype) is type and dtype in _SMALL_TYPES
                and shape * 8 <= st.pool.size_ok):
            # Fast path (a request's output): small, so nothing to check before numpy
            # allocates. Up to _ZEROS_SHARED elements, zeros of its shape and dtype,
            # shared and read-only, are copied into the tensor as tensor() copies an
            # array (straight into the staging range, or a host copy of its own); above,
            # numpy's zeros become the host copy itself.
            shared = shape <= _ZEROS_SHARED
            zeros = _zeros(shape, dtype) if shared else np.zeros(shape, dtype=dtype)
            if zeros.dtype in self._dtypes_ok:
                return Tensor(self, st, zeros, kind, shared)
            return self.tensor(zeros, kind=kind)
        try:    # a tensor too big for the device fails before numpy allocates it
            dims: list[Any] = [shape] if np.ndim(shape) == 0 else list(shape)  # type: ignore[arg-type]
            nbytes = math.prod(int(d) for d in dims) * np.dtype(dtype).itemsize
        except (TypeError, ValueError):
            nbytes = 0   # numpy says what is wrong below
        if nbytes > st.pool.size_ok and kind in KINDS:
            st.pool.check_request(nbytes, kind)
        return self.tensor(np.zeros(shape, dtype=dtype), kind=kind)

    def _check_dtype(self, dtype: np.dtype) -> None:
        _device.check_dtype(dtype, self._state.info)
        if dtype.byteorder in ("=", "|"):
            self._dtypes_ok.add(dtype)

    def shader_info(self, spirv: bytes) -> ShaderInfo:
        """What a SPIR-V module declares (bindings, local size, push constants,
        specialization constants), validated as algorithm() validates it."""
        st = self._open()
        with st.lock:
            return st.reflections.get(spirv)

    # -- algorithms and sequences -----------------------------------------------------------
    def algorithm(self, tensors: Seq[Tensor], spirv: bytes, workgroup: Seq[int] | None = None,
                  spec_consts: Any = None, push_consts: Any = None, *,
                  reinterpret: bool = False) -> Algorithm:
        """A compute shader bound to tensors (binding i is tensors[i]). workgroup: number of
        workgroups (x, y, z); None covers tensors[0] with the shader's own local size.
        spec_consts: a list's values take the types the shader declares for its constant
        ids. push_consts: a list or tuple gives the push-constant block's members in
        order, a dict (or numpy structured scalar) by name, each packed as the shader
        declares it (TypeError or ValueError naming a member a value does not fit); a
        numpy array or bytes is passed bit for bit. A block the shader declares must be
        given whole (ShaderError otherwise; zeros on purpose: push_consts=[0, 0]). Sizes
        are checked against the SPIR-V. A tensor whose dtype differs from its
        binding's declared element type raises ShaderError, unless reinterpret=True (the
        bytes are then read as the shader's type, as kp does). A tensor whose binding the
        shader does not use is accepted and ignored by the shader."""
        st = self._open()
        return Algorithm(self, st, tensors, spirv, workgroup, spec_consts, push_consts,
                         reinterpret=reinterpret)

    def sequence(self, name: str | None = None, *, queue: int = 0,
                 timestamps: bool = False) -> Sequence:
        """name None: a new anonymous sequence (destroyed at the end of its `with` block).
        A name: the named sequence of that name, created on first use."""
        st = self._open()
        if name is not None and not isinstance(name, str):
            raise TypeError(f"a sequence name must be a str or None, not {type(name).__name__}")
        if not isinstance(queue, int) or not 0 <= queue < self._nqueues:
            raise ValueError(f"queue must be an index below {self._nqueues} (this manager "
                             f"opened {self._nqueues} queue(s)), not {queue!r}")
        if timestamps and not st.info.timestamps:
            raise ValueError(f"{st.info.name} does not support timestamps on its compute queue")
        with st.lock:
            if name is not None and name in st.named:
                seq = st.named[name]
                return seq
            seq = Sequence(self, st, self._roots, name, queue, timestamps)
            if name is not None:
                st.named[name] = seq
                self._roots.named[name] = seq
            return seq

    def delete_sequence(self, name: str) -> None:
        """Waits for the named sequence and destroys it. KeyError if there is none."""
        st = self._open()
        with st.lock:
            seq = st.named.get(name)
        if seq is None:
            raise KeyError(f"no named sequence {name!r}; named sequences: "
                           f"{sorted(st.named) or 'none'}")
        seq.destroy()

    def clear_sequences(self, *, named: bool = False) -> int:
        """Destroys every anonymous sequence (and the named ones too when named=True),
        after their GPU work; returns how many it destroyed."""
        st = self._open()
        with st.lock:
            victims = [s for s in list(st.sequences)
                       if not s.destroyed and (s.name is None or named)]
        for s in victims:
            s.destroy()
        return len(victims)

    def sequence_names(self) -> list[str]:

        """The names of the live named sequences, sorted."""
        return sorted(self._open().named)

    def sequences(self) -> list[Sequence]:
        """The live sequences, named and anonymous."""
        st = self._open()
        with st.lock:
            return sorted((s for s in st.sequences if not s.destroyed), key=lambda s: s.number)

    def stream(self, spirv: bytes, inputs: Seq[np.ndarray], outputs: Seq[np.ndarray], *,
               push_consts: Any = None, spec_consts: Any = None,
               workgroup: Seq[int] | None = None, chunk_bytes: int | None = None,
               depth: int | None = None, workers: int | None = None,
               progress: Callable[[int, int], object] | None = None) -> list[np.ndarray]:
        """Runs a kernel over numpy arrays too big for one go, chunk by chunk along axis 0,
        with the upload of one chunk, the kernel on another and the download of a third
        overlapped (on the device's transfer queues when it has them). Binding i is the
        i-th distinct array of inputs + outputs; an array in both is read and written
        (in place). The arrays follow tensor()'s dtype rule (TypeError naming the
        argument) and algorithm()'s binding rule (ShaderError when a dtype cannot be its
        binding's declared element type). `chunk_bytes` (default 8 MiB) bounds one chunk
        of the widest array (a chunk is also cut to what one binding spans and, without a
        workgroup, to what one dispatch of the default grid covers); `depth` chunks are in
        flight (default twice `workers`, the threads that copy chunks into and out of
        pinned staging: default the CPU count less two, 2 to 14); all three are whole
        numbers, at least 1. Writes the outputs and returns them. Everything it allocates
        is freed before it returns, after the GPU is done with it, also when it raises;
        after Ctrl-C, which reaches the caller at once, what the GPU still uses is freed
        by the manager's next call once that work completed, or by close().
        The kernel must treat its bindings elementwise (each chunk is a separate dispatch
        over chunk-sized buffers; the last chunk's buffers are not shrunk, so a kernel
        reads `length()` of them and its tail results are discarded).
        `progress(done, total)`, when given, is called in the calling thread each time a
        chunk's outputs are written, with the chunks done and the chunks in all (a tqdm
        bar: `progress=lambda done, total: bar.update(1)`); an exception it raises ends
        the stream as any other does."""
        engine = self._open()
        return stream(self, engine, spirv, inputs, outputs, push_consts=push_consts,
                      spec_consts=spec_consts, workgroup=workgroup, chunk_bytes=chunk_bytes,
                      depth=depth, workers=workers, progress=progress)

    def pinned(self, *arrays: np.ndarray) -> Pinned:
        """Imports the memory of C-contiguous numpy arrays (of dtypes tensor() takes: the
        same TypeError otherwise) into the device, once, for stream() to move their chunks
        by DMA alone (no copy through staging, no import per chunk):
        `with mgr.pinned(x, y, out): mgr.stream(...)`. The arrays stay ordinary
        numpy arrays. The returned Pinned frees the imports at destroy() or at the end of
        its `with` block, after any stream() using them returned (or once it became
        unreachable); close() frees what is left. An array the device cannot import is
        left out (`Pinned.unpinned` says why, `pinned_bytes` counts what was imported)
        and stream() copies it as usual. An array of a dtype tensor() refuses, or not in
        the device's byte order, raises TypeError: its memory is imported as it is."""
        engine = self._open()
        return pin(self, engine, list(arrays))

    def run(self, *ops: Op) -> None:
        """Records the ops in an anonymous sequence, evaluates it and destroys it."""
        with self.sequence() as seq:
            for op in ops:
                seq.record(op)
            seq.eval()

    # -- memory and accounting -------------------------------------------------------------
    def memory_stats(self) -> dict[str, int]:
        """The tensor pool: allocated_bytes, reserved_bytes (blocks held from the device),
        peak_allocated_bytes, blocks, tensors (live), memory_limit (0: none), cached_bytes
        (empty blocks kept for reuse) and cache_limit_bytes (the most of them kept)."""
        st = self._open()
        with st.lock:
            st.collect(True)
            stats = st.pool.stats()
            stats["tensors"] = len(st.tensors)
            stats["memory_limit"] = st.pool.memory_limit or 0
            return stats

    def empty_cache(self) -> int:
        """Returns unused pool blocks (and unused cached pipelines, the command pools and
        fences kept for new sequences, and the descriptor sets kept for new algorithms) to
        the device; returns the bytes freed."""
        st = self._open()
        with st.lock:
            st.collect(True)
            st.programs.drop_unused()
            st.seq_cache.drop()
            return st.pool.empty_cache()

    def live_objects(self, *, caches: bool = True) -> dict[str, int]:
        """Live tensors, algorithms, sequences and pinned imports of this manager, the
        releases waiting for running work (pending_releases), and the Vulkan objects its
        device holds in the C shim. All zero once the manager is closed.

        The Vulkan counts are the shim's own: they include what the manager keeps for
        reuse, which cached_sequences (idle command pools and fences of destroyed
        anonymous sequences), cached_pipelines (unused pipelines, each with its shader
        module and layouts), cached_blocks (memory blocks no tensor uses, each a
        buffer and its memory) and cached_descriptor_sets (the descriptor sets of
        destroyed algorithms, kept for the next algorithms of their pipelines, each a
        descriptor pool) count. empty_cache() frees all of those.

        caches=False: the same keys for what the program itself holds, every cache's
        share taken off the Vulkan counts (and the cached_* keys 0): a program that
        creates and destroys its work in a loop is back to its baseline after every
        iteration, without empty_cache(). For every key, live_objects() equals
        live_objects(caches=False) plus the cached entries' objects; after empty_cache()
        the two forms are equal."""
        st = self._state
        with st.lock:
            if st.closed:
                counts = {name: 0 for name in _vk.LIVE_NAMES if name != "instances"}
                counts.update(dict.fromkeys(CACHED_OBJECTS, 0))
                counts.update(tensors=0, algorithms=0, sequences=0, pending_releases=0,
                              pinned=0)
                return counts
            st.collect(True)
            counts = shim_live_counts(st.dev)
            del counts["instances"]
            # Counted from the caches' own bookkeeping, under the lock that guards them.
            cached = cached_counts(st.seq_cache, st.programs, st.pool)
            if caches:
                counts.update(cached)
            else:
                for key, n in cached.items():
                    for kind in CACHED_OBJECTS[key]:
                        counts[kind] -= n
                    counts[key] = 0
            counts["tensors"] = len(st.tensors)
            counts["algorithms"] = len(st.algorithms)
            counts["sequences"] = len(st.sequences)
            counts["pending_releases"] = len(st.deferred)
            counts["pinned"] = len(st.pins)
            return counts

    def wait_idle(self) -> None:
        """Waits until the device has finished all submitted work, and completes every
        running sequence. Ctrl-C raises KeyboardInterrupt within 100 ms; what still
        runs then stays running."""
        st = self._open()
        with st.lock:
            st.check_open()
            # Under the lock: vkDeviceWaitIdle needs "host access to all VkQueue objects
            # created from device" externally synchronized, and a sequence submitted by
            # another thread after the wait must not be marked complete below. The fences
            # first, in slices (vkDeviceWaitIdle cannot be interrupted).
            drain(st, None)
            _vk.check(_vk.device_wait_idle(st.dev), "waiting for the device to be idle")
            st.collect(True)
            for seq in st.running_seqs():
                seq.finish()
            st.check_validation("waiting for the device")


def live_vulkan_objects() -> dict[str, int]:
    """Process-wide live Vulkan objects held by the shim, over all managers."""
    return shim_live_counts(None)
