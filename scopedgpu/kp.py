"""Kompute 0.9's Python API (the `kp` package) over scopedgpu: `import scopedgpu.kp as kp`.

Every class, method, argument and default of kp 0.9.0's bindings, with kp's behaviour:
`mgr.tensor()` converts to float32 and flattens, `mgr.tensor_t()` keeps the dtype (float32,
uint32, int32, float64, bool), `tensor.data()` is a writable view whose `.base` is the
tensor, bindings are passed bit for bit whatever the shader declares, a workgroup of
(0, 0, 0) dispatches `tensors[0].size()` groups.

Lifetimes and errors are scopedgpu's: objects are freed when destroyed, when the manager
is destroyed, or when they become unreachable (anonymous sequences included); use after
destroy raises scopedgpu.DestroyedError where kp crashed; data() arrays stay valid after
their tensor and manager are gone. Every error raised here is also a RuntimeError, as in
kp (TypeError for arguments of the wrong type aside). As kp: importing this module calls
logging.basicConfig(), get_timestamps() gives raw ticks, str() of an enum member gives
'TensorTypes.device'. docs/migrating-from-kompute.md lists every difference.
"""
from __future__ import annotations

import enum
import functools
import logging
import math
import numbers
import operator
from typing import Any, Callable, Iterable, TypeVar

import numpy as np

import scopedgpu as _sg
from scopedgpu._base import NoCopy
from scopedgpu._errors import DestroyedError
from scopedgpu._settings import get as setting
from scopedgpu._shaders import builtin_spirv

__all__ = ["TensorTypes", "TensorDataTypes", "OpBase", "OpTensorSyncDevice",
           "OpTensorSyncLocal", "OpTensorCopy", "OpAlgoDispatch", "OpMult", "Algorithm",
           "Tensor", "Sequence", "Manager", "UnsupportedDtypeError", "SequenceRunningError"]

# The version of the kp API this module implements (scopedgpu's own is
# scopedgpu.__version__).
__version__ = "0.9.0"

log = logging.getLogger("kp")

# `import kp` calls logging.basicConfig() (in its module init), and kp programs that log
# at DEBUG or INFO rely on the root handler it installs. The native API leaves logging
# alone; only this module does what kp does.
logging.basicConfig()


# -- errors --------------------------------------------------------------------------
# kp raised RuntimeError for nearly every failure (its std::runtime_error checks, and
# vulkan-hpp's exceptions for failed Vulkan calls), and kp programs catch RuntimeError.
# scopedgpu.kp raises scopedgpu's typed errors, each with RuntimeError added: a
# scopedgpu.NoDeviceError from kp.Manager(7) is a kp-layer subclass of both. TypeError
# (pybind11's, for arguments of the wrong type) stays a TypeError.
_RUNTIME_VARIANTS: dict[type, type] = {}


def _runtime_variant(cls: type) -> type:
    """cls with RuntimeError added, made once per class, in this module."""
    if issubclass(cls, RuntimeError):
        return cls
    sub = _RUNTIME_VARIANTS.get(cls)
    if sub is None:
        doc = (f"{cls.__module__}.{cls.__qualname__}, also a RuntimeError (as kp raised "
               "it), raised by scopedgpu.kp")
        sub = type(cls.__name__, (cls, RuntimeError), {"__module__": __name__,
                                                       "__doc__": doc})
        _RUNTIME_VARIANTS[cls] = sub
    return sub


def _as_runtime(exc: BaseException) -> BaseException:
    """The error as an instance of its RuntimeError variant: the same object where its
    class can be swapped (scopedgpu's, all heap types of one layout), otherwise (a
    builtin ValueError) a new one with its args and attributes."""
    cls = _runtime_variant(type(exc))
    try:
        exc.__class__ = cls
        return exc
    except TypeError:
        new = cls(*exc.args)
        new.__dict__.update(exc.__dict__)
        return new


_F = TypeVar("_F", bound=Callable[..., Any])
_C = TypeVar("_C", bound=type)


def _kp_errors(fn: _F) -> _F:
    """fn, raising the RuntimeError variant of any scopedgpu error or ValueError."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (_sg.ScopedGPUError, ValueError) as exc:
            if isinstance(exc, RuntimeError):
                raise
            new = _as_runtime(exc)
            if new is exc:
                raise
            raise new.with_traceback(exc.__traceback__) from exc.__cause__
    return call  # type: ignore[return-value]


def _kp_api(cls: _C) -> _C:
    """Class decorator: every public method of cls, and __init__, raises as kp did."""
    for name, value in list(vars(cls).items()):
        if callable(value) and not isinstance(value, type) and (
                not name.startswith("_") or name in ("__init__", "__len__")):
            setattr(cls, name, _kp_errors(value))
    return cls


class UnsupportedDtypeError(TypeError, RuntimeError):
    """A dtype kp does not support (kp raised RuntimeError; this is also a TypeError)."""


class _PybindEnum(enum.IntEnum):
    """kp's enums are pybind11 enums: str() and format() give 'TensorTypes.device' (an
    IntEnum gives '0' since Python 3.11); repr, name, value and == are an IntEnum's."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        # pybind11 defines no __format__: object's, which is str() (and TypeError for a
        # non-empty format spec).
        return object.__format__(self, spec)


class TensorTypes(_PybindEnum):
    """Where a tensor's memory lives (kp.TensorTypes)."""
    device = 0    # device-local memory, with a host copy synced by the sync ops
    host = 1      # host-visible memory the device reads directly
    storage = 2   # device memory only, no host copy


device = TensorTypes.device
host = TensorTypes.host
storage = TensorTypes.storage

_KINDS = {TensorTypes.device: "device", TensorTypes.host: "host",
          TensorTypes.storage: "storage"}


class TensorDataTypes(_PybindEnum):
    """The element type of a tensor (kp::Tensor::TensorDataTypes; kp 0.9 does not bind
    it, so its data_type() raised TypeError)."""
    bool = 0
    int = 1
    unsigned_int = 2
    float = 3
    double = 4


_DATA_TYPES = {np.dtype(np.float32): TensorDataTypes.float,
               np.dtype(np.uint32): TensorDataTypes.unsigned_int,
               np.dtype(np.int32): TensorDataTypes.int,
               np.dtype(np.float64): TensorDataTypes.double,
               np.dtype(np.bool_): TensorDataTypes.bool}


def _kind(tensor_type: Any) -> str:
    try:
        return _KINDS[TensorTypes(tensor_type)]
    except ValueError:
        raise TypeError(f"tensor_type must be a kp.TensorTypes, not {tensor_type!r}") from None


def _desc(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _count(value: Any, what: str, allowed: str) -> int:
    """An integer >= 0 (kp's uint32 arguments; numpy integers too): TypeError for what is
    not an integer, ValueError below 0, each naming `what`, the value and `allowed`."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be {allowed}, not {_desc(value)}") from None
    if n < 0:
        raise ValueError(f"{what} must be {allowed}, not {_desc(value)}")
    return n


def _items(values: Any, what: str, allowed: str) -> list[Any]:
    """The items of a list argument; TypeError for a str or bytes (kp took a list of
    them) or what cannot be iterated."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a list of {allowed}, not {_desc(values)}")
    try:
        return list(values)
    except TypeError:
        raise TypeError(f"{what} must be a list of {allowed}, not {_desc(values)}") from None


# -- tensors -------------------------------------------------------------------------
@_kp_api
class Tensor(NoCopy):
    """A kp tensor: one scopedgpu tensor, flat, with kp's methods."""
    _what = "kp tensor"   # NoCopy: a copy would share the handle

    def __init__(self, manager: Manager, native: _sg.Tensor, dtype: np.dtype):
        self._manager = manager
        self._t = native
        self._dtype = dtype   # bool tensors are uint8 on the device
        # The host arrays data() views were made over: numpy makes this tensor their
        # base (kp's py::cast(&self)), so it must hold the memory itself, or a view taken
        # before destroy() would show the pool range's next tensor.
        self._held: list[np.ndarray] = []

    @property
    def __array_interface__(self) -> dict:
        # What data() wraps: numpy makes this tensor the base of the array (as kp's
        # py::array(size, ptr, py::cast(&self)) did), so the host memory stays alive.
        arr = self._t.data()
        if not any(a is arr for a in self._held):
            self._held.append(arr)
        if self._dtype == np.bool_:
            arr = arr.view(np.bool_)
        return arr.__array_interface__

    def data(self) -> np.ndarray:
        """The host data as a writable numpy array without copying; `.base` is this
        tensor. Changes reach the device with OpTensorSyncDevice. Raises
        scopedgpu.DestroyedError after destroy() (kp returned an empty array there, and
        arrays taken before pointed at freed memory; here they stay valid)."""
        self._t.data()   # raises for a destroyed or storage tensor
        return np.asarray(self)

    def size(self) -> int:
        """Number of elements (0 once destroyed, as in kp)."""
        return 0 if self._t.destroyed else self._t.size

    def __len__(self) -> int:
        return self.size()

    def tensor_type(self) -> TensorTypes:
        return {"device": TensorTypes.device, "host": TensorTypes.host,
                "storage": TensorTypes.storage}[self._t.kind]

    def data_type(self) -> TensorDataTypes:
        return _DATA_TYPES[self._dtype]

    def is_init(self) -> bool:
        """False once destroyed (or once its manager was destroyed)."""
        return not self._t.destroyed

    def destroy(self) -> None:
        """Frees the tensor's memory (after the GPU work that uses it). Idempotent."""
        self._t.destroy()

    def __repr__(self) -> str:
        return f"<kp.Tensor {self._t!r}>"


def _natives(tensors: Any, what: str) -> list[_sg.Tensor]:
    if isinstance(tensors, Tensor):
        raise TypeError(f"{what} takes a list of kp.Tensor, not a single tensor")
    try:
        items = list(tensors)
    except TypeError:
        raise TypeError(f"{what} takes a list of kp.Tensor, not {tensors!r}") from None
    out = []
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: item {i} is a {type(t).__name__}, not a kp.Tensor")
        out.append(t._t)
    return out


def _at_least(natives: list[_sg.Tensor], n: int, what: str) -> None:
    """kp's operations refuse fewer tensors than they need at construction."""
    if len(natives) < n:
        raise ValueError(f"{what} needs at least {n} tensor(s), got {len(natives)}")


# -- algorithms ------------------------------------------------------------------------
def _consts(values: Any, what: str) -> Any:
    """kp's constant overloads: a sequence of numbers (float32 values), or a numpy array
    of float32, int32, uint32 or float64."""
    if values is None:
        return None
    if isinstance(values, np.ndarray):
        if values.dtype not in (np.float32, np.int32, np.uint32, np.float64):
            raise UnsupportedDtypeError(
                f"Kompute Python no valid dtype supported: {what} of dtype {values.dtype}")
        return values.ravel() if values.size else None
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what} must be a list of numbers or a numpy array, not "
                        f"{_desc(values)}")
    values = list(values)
    for i, v in enumerate(values):
        if not isinstance(v, (numbers.Real, np.number)):
            raise TypeError(f"{what}[{i}] must be a number, not {_desc(v)}")
    return values or None


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _float32(values: list[Any], what: str) -> np.ndarray:
    """kp's list of constants: float32 values, each of a magnitude a float32 holds."""
    out = np.empty(len(values), dtype=np.float32)
    for i, v in enumerate(values):
        try:
            f = float(v)
            fits = not math.isfinite(f) or abs(f) <= _FLOAT32_MAX
        except OverflowError:   # an int beyond any float
            f, fits = 0.0, False
        if not fits:
            raise ValueError(f"{what}[{i}]={v!r} does not fit a float32 (at most "
                             f"{_FLOAT32_MAX:.6g} in magnitude); pass a numpy array for "
                             "other types")
        out[i] = f
    return out


@_kp_api
class Algorithm(NoCopy):
    """A compute shader bound to tensors (kp.Algorithm)."""
    _what = "kp algorithm"   # NoCopy: a copy would share the handle

    def __init__(self, manager: Manager, tensors: list[Tensor], spirv: bytes,
                 workgroup: Any, spec_consts: Any, push_consts: Any):
        self._manager = manager
        self._a: _sg.Algorithm | None = None
        self._build(tensors, spirv, workgroup, spec_consts, push_consts)

    def _build(self, tensors: list[Tensor], spirv: bytes, workgroup: Any,
               spec_consts: Any, push_consts: Any) -> None:
        natives = _natives(tensors, "algorithm")
        allowed = "three integers >= 0 (numbers of workgroups)"
        wg: tuple[int, ...] = (0, 0, 0)
        if workgroup is not None:
            try:
                items = None if isinstance(workgroup, (str, bytes)) else list(workgroup)
            except TypeError:
                items = None
            if items is None or len(items) != 3:
                raise TypeError(f"workgroup must be {allowed}, not {_desc(workgroup)}")
            try:
                wg = tuple(operator.index(v) for v in items)
            except TypeError:
                raise TypeError(f"workgroup must be {allowed}, not "
                                f"{_desc(workgroup)}") from None
            if min(wg) < 0:
                raise ValueError(f"workgroup must be {allowed}, not {_desc(workgroup)}")
        if wg[0] <= 0:
            # kp: no x count dispatches tensors[0].size() groups (1 without tensors).
            wg = (natives[0].size if natives else 1, 1, 1)
            # Beyond the device's maxComputeWorkGroupCount[0], which kp dispatched anyway
            # (outside what the device promises), the native API dispatches it in parts.
        else:
            wg = (wg[0], wg[1] if wg[1] > 0 else 1, wg[2] if wg[2] > 0 else 1)
        if not isinstance(spirv, (bytes, bytearray, memoryview)):
            raise TypeError(f"spirv must be bytes, not {type(spirv).__name__}")
        mgr = self._manager._m
        info = mgr.shader_info(bytes(spirv))
        spec = _consts(spec_consts, "spec_consts")
        if spec is not None:
            # Vulkan ignores specialization constants the module does not declare (an
            # optimizer may have removed them), and so did kp: drop those at the end.
            n = len(spec)
            while n and (n - 1) not in info.spec_constants:
                n -= 1
            spec = spec[:n] if n else None
        push = _consts(push_consts, "push_consts")
        self._push_size = info.push_constant_size
        if push is None and self._push_size:
            # Kompute builds such a pipeline without a push-constant range and the shader
            # reads undefined values; scopedgpu.kp gives it zeros (the native API refuses).
            push = bytes(self._push_size)
        native = mgr.algorithm(natives, bytes(spirv), wg, spec, self._pushed(push),
                               reinterpret=True)
        old, self._a = self._a, native
        self._tensors = list(tensors)
        if old is not None:
            old.destroy()

    def _pushed(self, push: Any) -> Any:
        """Push constants for a shader that declares none go nowhere (kp gave them a
        push-constant range the shader did not use). A list is float32 values whatever
        the shader declares, as in kp (the native API packs a list as the shader's block
        declares it): it goes to the native API as a float32 array, taken bit for bit."""
        if not self._push_size or push is None:
            return None
        if isinstance(push, list):
            return _float32(push, "push_consts")
        return push

    def _native(self) -> _sg.Algorithm:
        if self._a is None or self._a.destroyed:
            raise DestroyedError(f"{self!r} cannot be used: destroy() was called (or its "
                                 "manager was destroyed). Create a new algorithm instead.")
        return self._a

    def get_tensors(self) -> list[Tensor]:
        return list(self._tensors)

    def is_init(self) -> bool:
        return self._a is not None and not self._a.destroyed

    def destroy(self) -> None:
        """Frees the descriptor set (after the GPU work that uses it). Idempotent."""
        if self._a is not None:
            self._a.destroy()

    def __repr__(self) -> str:
        return f"<kp.Algorithm {self._a!r}>"


# -- operations -----------------------------------------------------------------------
class OpBase:
    """Base of the kp operations. Each builds its scopedgpu operation when recorded, so
    a sequence recorded again (rerecord()) sees rebuilt algorithms."""

    def _native(self) -> _sg.Op:  # pragma: no cover - abstract
        raise NotImplementedError


@_kp_api
class OpTensorSyncDevice(OpBase):
    """Copies each tensor's host data to its device memory."""

    def __init__(self, tensors: list[Tensor]):
        self._natives = _natives(tensors, "OpTensorSyncDevice")
        _at_least(self._natives, 1, "OpTensorSyncDevice")

    def _native(self) -> _sg.Op:
        return _sg.OpTensorSyncDevice(self._natives)


@_kp_api
class OpTensorSyncLocal(OpBase):
    """Copies each tensor's device memory to its host data."""

    def __init__(self, tensors: list[Tensor]):
        self._natives = _natives(tensors, "OpTensorSyncLocal")
        _at_least(self._natives, 1, "OpTensorSyncLocal")

    def _native(self) -> _sg.Op:
        return _sg.OpTensorSyncLocal(self._natives)


@_kp_api
class OpTensorCopy(OpBase):
    """Copies the first tensor's device memory into each of the others, and, once the
    sequence completed, its host data into theirs (storage tensors have none), as kp."""

    def __init__(self, tensors: list[Tensor]):
        self._natives = _natives(tensors, "OpTensorCopy")
        _at_least(self._natives, 2, "OpTensorCopy")
        # kp refuses copies between tensors of other types or sizes at construction.
        # (The natives' dtypes: a kp bool tensor is the only uint8 one.)
        src = self._natives[0]
        for t in self._natives[1:]:
            if t.dtype != src.dtype:
                raise ValueError(f"OpTensorCopy: {t!r} is {t.dtype}, the source {src!r} "
                                 f"is {src.dtype}: copy between tensors of one type")
            if t.size != src.size:
                raise ValueError(f"OpTensorCopy: {t!r} has {t.size} elements, the source "
                                 f"{src!r} has {src.size}: copy between tensors of one "
                                 "size")

    def _native(self) -> _sg.Op:
        return _sg.OpTensorCopy(self._natives)

    def _post(self) -> None:
        src = self._natives[0]
        if src.kind == "storage" or src.destroyed:
            return
        raw = src.data().view(np.uint8).reshape(-1)
        for t in self._natives[1:]:
            if t.kind != "storage" and not t.destroyed:
                np.copyto(t.data().view(np.uint8).reshape(-1), raw)


@_kp_api
class OpAlgoDispatch(OpBase):
    """Dispatches an algorithm; push_consts (a list: float32 values; a numpy array of
    float32, int32, uint32 or float64) override the algorithm's for this dispatch."""

    def __init__(self, algorithm: Algorithm, push_consts: Any = None):
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"OpAlgoDispatch takes a kp.Algorithm, not "
                            f"{type(algorithm).__name__}")
        algorithm._native()
        self._algorithm = algorithm
        self._push = _consts(push_consts if push_consts is not None else [], "push_consts")

    def _native(self) -> _sg.Op:
        algo = self._algorithm
        return _sg.OpAlgoDispatch(algo._native(), algo._pushed(self._push))


@_kp_api
class OpMult(OpAlgoDispatch):
    """out = a * b elementwise: rebuilds `algorithm` with kp's multiplication shader over
    [a, b, out] (as kp does) and dispatches it."""
    _SHADERS = {np.dtype(np.float32): "mult_f32", np.dtype(np.int32): "mult_i32",
                np.dtype(np.uint32): "mult_u32"}

    def __init__(self, tensors: list[Tensor], algorithm: Algorithm):
        natives = _natives(tensors, "OpMult")
        if len(natives) != 3:
            raise ValueError(f"OpMult takes [a, b, out], got {len(natives)} tensors")
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"OpMult takes a kp.Algorithm, not {type(algorithm).__name__}")
        name = self._SHADERS.get(natives[0].dtype)
        if name is None or any(t.dtype != natives[0].dtype for t in natives):
            raise UnsupportedDtypeError(f"OpMult needs three float32, int32 or uint32 tensors, "
                                   f"not {[str(t.dtype) for t in natives]}")
        algorithm._build(list(tensors), builtin_spirv(name), None, None, None)
        super().__init__(algorithm)


# -- sequences -----------------------------------------------------------------------
class SequenceRunningError(_sg.ScopedGPUError, RuntimeError):
    """record() or eval*() on a sequence evaluated with eval_async() and not yet awaited
    (kp raised RuntimeError; this is also a RuntimeError)."""


@_kp_api
class Sequence(NoCopy):
    """Recorded operations (kp.Sequence), over a scopedgpu sequence. Freed by destroy(),
    by Manager.destroy(), or when it becomes unreachable (after its GPU work)."""
    _what = "kp sequence"   # NoCopy: a copy would share the handle

    def __init__(self, manager: Manager, native: _sg.Sequence):
        self._manager = manager
        self._s = native
        self._ops: list[Any] = []
        self._awaiting = False   # kp's isRunning(): eval_async() not yet awaited

    def _op(self, op: Any) -> _sg.Op:
        if isinstance(op, OpBase):
            return op._native()
        if isinstance(op, _sg.Op):
            return op
        raise TypeError(f"record() takes a kp operation (kp.OpBase), not {type(op).__name__}")

    def _not_running(self, what: str) -> None:
        if self._awaiting:
            raise SequenceRunningError(
                f"{what} on {self!r}, which was evaluated with eval_async() and not yet "
                "awaited: call eval_await() first")

    def _post_eval(self) -> None:
        for op in self._ops:
            post = getattr(op, "_post", None)
            if post is not None:
                post()

    def record(self, op: OpBase) -> Sequence:
        """Appends an operation; returns the sequence."""
        self._not_running("record()")
        native = self._op(op)
        self._s.record(native)
        self._ops.append(op)
        return self

    def eval(self, op: OpBase | None = None) -> Sequence:
        """Submits the recorded operations and waits. With an op: clears, records it,
        evaluates."""
        self._not_running("eval()")
        if op is not None:
            self.clear()
            self.record(op)
        self._s.eval()
        self._post_eval()
        return self

    def eval_async(self, op: OpBase | None = None) -> Sequence:
        """Submits and returns before the GPU is done; eval_await() waits."""
        self._not_running("eval_async()")
        if op is not None:
            self.clear()
            self.record(op)
        self._s.eval_async()
        self._awaiting = True
        return self

    def eval_await(self, wait: int | None = None) -> Sequence:
        """Waits for the last eval_async(), at most `wait` nanoseconds (kp's unit; None: no
        limit, nor math.inf). On timeout the sequence still runs: is_running() stays
        True."""
        if wait is not None:
            if isinstance(wait, bool) or not isinstance(wait, (numbers.Real, np.number)):
                raise TypeError(f"eval_await(): wait must be None or a number of "
                                f"nanoseconds, not {_desc(wait)}")
            if not wait >= 0:   # nan included
                raise ValueError(f"eval_await(): wait must be None or a number of "
                                 f"nanoseconds >= 0, not {wait!r}")
        if not self._awaiting:
            log.warning("Kompute Sequence evalAwait called without existing eval")
            self._s.check_alive()
            return self
        # The native eval_await takes seconds; math.inf and more than a fence can count
        # are no limit there.
        if not self._s.eval_await(None if wait is None else float(wait) / 1e9):
            log.warning("Kompute Sequence evalAwait reached timeout of %s", wait)
            return self
        self._awaiting = False
        self._post_eval()
        return self

    def is_recording(self) -> bool:
        """True when operations were recorded since the last evaluation."""
        return not self._s.destroyed and self._s.is_recording

    def is_running(self) -> bool:
        """True from eval_async() until eval_await() returned (kp's meaning)."""
        return self._awaiting and not self._s.destroyed

    def is_init(self) -> bool:
        return not self._s.destroyed

    def clear(self) -> None:
        """Forgets the recorded operations (after a running submission)."""
        self._s.clear()
        self._ops.clear()
        self._awaiting = False

    def rerecord(self) -> None:
        """Records the same operations again (picking up rebuilt algorithms)."""
        ops = list(self._ops)
        self.clear()
        for op in ops:
            self.record(op)

    def get_timestamps(self) -> list[int]:
        """GPU timestamps of the last evaluation in raw ticks of the device's counter, as
        kp returns them (times the device's timestampPeriod: nanoseconds; the native
        Sequence.timestamps() gives nanoseconds), one at the start and one after each
        operation. Needs sequence(total_timestamps=n) with n > 0."""
        period = self._manager._m.device.timestamp_period
        return [_ticks(ns, period) for ns in self._s.timestamps()]

    def destroy(self) -> None:
        """Waits for its GPU work, then frees it. Idempotent."""
        self._s.destroy()
        self._ops.clear()
        self._awaiting = False

    def __repr__(self) -> str:
        return f"<kp.Sequence {self._s!r}>"


def _ticks(ns: int, period: float) -> int:
    """The counter value t that the native API turned into int(t * period) nanoseconds:
    exact for a period of at least 1 ns (t -> int(t * period) is then one to one); for a
    shorter period, the last of the ticks that give those nanoseconds."""
    if period == 1.0:
        return ns
    t = max(0, int(ns / period))
    while t > 0 and int(t * period) > ns:
        t -= 1
    while int((t + 1) * period) <= ns:
        t += 1
    return t


# -- the manager -----------------------------------------------------------------------
def _properties(info: _sg.DeviceInfo) -> dict[str, Any]:
    return {"device_name": info.name,
            "max_work_group_count": tuple(info.max_workgroup_count),
            "max_work_group_invocations": info.max_workgroup_invocations,
            "max_work_group_size": tuple(info.max_workgroup_size),
            "timestamps_supported": bool(info.timestamps)}


@_kp_api
class Manager(NoCopy):
    """One Vulkan device (kp.Manager). `device` is an index as in kp (default 0;
    SCOPEDGPU_DEVICE overrides the default). `family_queue_indices`: one queue per entry
    (sequence(queue_index=i) runs on the i-th); scopedgpu takes them from the device's
    compute family. `desired_extensions` are checked to be names, not enabled."""
    _what = "kp manager"   # NoCopy: a copy would share the handle

    def __init__(self, device: int = 0, family_queue_indices: Iterable[int] = (),
                 desired_extensions: Iterable[str] = ()):
        device = _count(device, "device", "a device index (an integer >= 0)")
        allowed = "queue family indices (integers >= 0)"
        queues = [_count(q, "family_queue_indices", allowed)
                  for q in _items(family_queue_indices, "family_queue_indices", allowed)]
        exts = _items(desired_extensions, "desired_extensions", "extension names (strings)")
        for e in exts:
            if not isinstance(e, str):
                raise TypeError(f"desired_extensions must be a list of extension names "
                                f"(strings), not {_desc(exts)}: {e!r}")
        # Device 0, kp's default, gives way to SCOPEDGPU_DEVICE (which Manager(None) reads).
        env_device = device == 0 and setting("SCOPEDGPU_DEVICE") is not None
        self._m = _sg.Manager(None if env_device else device)
        self._queues = max(1, len(queues))
        if self._queues > self._m.queue_count:
            self._m.close()
            raise ValueError(f"{len(queues)} queues were asked for (family_queue_indices="
                             f"{queues}); {self._m.device.name} offers "
                             f"{self._m.queue_count} compute queue(s)")

    def destroy(self) -> None:
        """Waits for all GPU work, then frees every tensor, algorithm and sequence of this
        manager, and the device. Idempotent; data() arrays stay valid."""
        self._m.close()

    def sequence(self, queue_index: int = 0, total_timestamps: int = 0) -> Sequence:
        """A new sequence on queue `queue_index`, with GPU timestamps when
        total_timestamps > 0."""
        allowed = (f"a queue index below {self._queues} (one queue per "
                   "family_queue_indices entry)")
        queue = _count(queue_index, "queue_index", allowed)
        if queue >= self._queues:
            raise ValueError(f"queue_index must be below {self._queues} (one queue per "
                             f"family_queue_indices entry), not {_desc(queue_index)}")
        stamps = _count(total_timestamps, "total_timestamps",
                        "a number of timestamps (an integer >= 0)")
        return Sequence(self, self._m.sequence(queue=queue, timestamps=stamps > 0))

    def tensor(self, data: Any, tensor_type: TensorTypes = TensorTypes.device) -> Tensor:
        """A float32 tensor of `data` flattened (kp converts any array to float32)."""
        try:
            arr = np.ravel(np.asarray(data, dtype=np.float32))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"tensor(): cannot convert {type(data).__name__} to float32: "
                            f"{exc}") from exc
        return Tensor(self, self._m.tensor(arr, kind=_kind(tensor_type)), arr.dtype)

    def tensor_t(self, data: Any, tensor_type: TensorTypes = TensorTypes.device) -> Tensor:
        """A tensor of `data` flattened, keeping its dtype: float32, uint32, int32,
        float64 or bool (others raise, as in kp)."""
        arr = np.ravel(np.asarray(data))
        if arr.dtype not in _DATA_TYPES:   # byte order included: native order only
            raise UnsupportedDtypeError(
                f"Kompute Python no valid dtype supported: {arr.dtype} (tensor_t takes "
                "float32, uint32, int32, float64, bool)")
        dtype = arr.dtype
        stored = arr.view(np.uint8) if dtype == np.bool_ else arr
        return Tensor(self, self._m.tensor(stored, kind=_kind(tensor_type)), dtype)

    def algorithm(self, tensors: list[Tensor], spirv: bytes, workgroup: Any = (0, 0, 0),
                  spec_consts: Any = (), push_consts: Any = ()) -> Algorithm:
        """A shader bound to tensors (binding i is tensors[i]; bindings the shader does
        not use are skipped). workgroup (0, 0, 0): tensors[0].size() groups. Constants: a
        list gives float32 values (spec constants take the type the shader declares), a
        numpy array of float32, int32, uint32 or float64 is passed bit for bit. Tensors
        are bound bit for bit whatever element type the shader declares, as in kp."""
        return Algorithm(self, list(tensors), spirv, workgroup, spec_consts, push_consts)

    def list_devices(self) -> list[dict[str, Any]]:
        """Properties of every Vulkan device, as kp's dicts."""
        return [_properties(d) for d in _sg.devices()]

    def get_device_properties(self) -> dict[str, Any]:
        """Properties of this manager's device: device_name, max_work_group_count,
        max_work_group_invocations, max_work_group_size, timestamps_supported."""
        return _properties(self._m.device)

    def __repr__(self) -> str:
        return f"<kp.Manager {self._m!r}>"
