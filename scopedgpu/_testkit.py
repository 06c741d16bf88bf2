"""The body of scopedgpu.testing (see there), below scopedgpu._lifetime in the import
graph: LifetimeMachine builds on these helpers, and scopedgpu.testing re-exports both.
Imports without pytest and without hypothesis."""
from __future__ import annotations

import contextlib
import functools
import gc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Union

import numpy as np

from scopedgpu._device import DeviceInfo
from scopedgpu.manager import Manager, live_vulkan_objects
from scopedgpu.tensor import dtype_feature

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from scopedgpu.tensor import Tensor

__all__ = ["LeakError", "KernelTimeout", "live_counts", "no_leaks", "leak_checked_manager",
           "supported_dtypes", "dtypes", "shapes", "arrays", "tensors", "ALL_DTYPES", "ConstantSlot",
           "push_constant_layout", "spec_constant_layout", "push_constants", "spec_constants",
           "Binding", "Kernel", "set_default_device", "default_device"]

#: Every dtype scopedgpu can hold; the first three work on every Vulkan device.
ALL_DTYPES = tuple(np.dtype(d) for d in (
    np.float32, np.int32, np.uint32, np.float64, np.int64, np.uint64, np.float16,
    np.int16, np.uint16, np.int8, np.uint8))


class LeakError(AssertionError):
    """Objects were left alive: `diff` maps each count that changed to (before, after)."""

    def __init__(self, message: str, diff: dict[str, tuple[int, int]]):
        super().__init__(message)
        self.diff = diff


class KernelTimeout(BaseException):
    """GPU work a LifetimeMachine waited for did not finish within its `kernel_timeout`.

    A BaseException, not an AssertionError: hypothesis shrinks a failing Exception by
    replaying smaller examples, and every replay that still runs the kernel would wait the
    whole bound again (and as long again to close its manager), which is minutes for a
    kernel that never ends. A BaseException it lets through at once, as it does
    KeyboardInterrupt; pytest reports it as the test's failure. The message names the
    sequence, its kernels and the bound, and holds the example as a standalone program.
    `sequences` are the variable names of the sequences still running (as in the program)."""

    def __init__(self, message: str, sequences: list[str]):
        super().__init__(message)
        self.sequences = sequences


def live_counts(manager: Manager, *, process: bool = False) -> dict[str, int]:
    """The manager's live counts (live_objects()) and its pool's accounting
    (pool_allocations, pool_allocated_bytes, pool_reserved_bytes), after a garbage
    collection and after returning cached pool blocks and unused pipelines to the device
    (so that only objects still in use are counted). process=True adds the C shim's
    counts for the whole process as process_<kind> (every manager's Vulkan objects, and
    any a closed manager left behind)."""
    gc.collect()
    if manager.closed:
        counts = manager.live_objects()
        counts.update(pool_allocations=0, pool_allocated_bytes=0, pool_reserved_bytes=0)
    else:
        manager.empty_cache()
        counts = manager.live_objects()
        stats = manager.memory_stats()
        counts["pool_allocations"] = stats["allocations"]
        counts["pool_allocated_bytes"] = stats["allocated_bytes"]
        counts["pool_reserved_bytes"] = stats["reserved_bytes"]
    if process:
        counts.update({f"process_{k}": v for k, v in live_vulkan_objects().items()})
    return counts


@contextlib.contextmanager
def no_leaks(manager: Manager) -> Iterator[Manager]:
    """Checks that the block leaves `manager` with the live objects it had on entry:
    tensors, algorithms, sequences and the Vulkan objects behind them. Raises LeakError
    naming every count that changed. When the block raises, its exception propagates
    and nothing is checked.

    Objects that become unreachable are freed by the check's garbage collection, so a
    block leaks only what it still holds (a tensor stored in a global, a named sequence
    never deleted, a tensor kept by a list outside the block)."""
    before = live_counts(manager)
    yield manager
    if manager.closed:
        return  # closing freed everything the manager made
    after = live_counts(manager)
    if after != before:
        diff = {k: (before.get(k, 0), after.get(k, 0)) for k in sorted(set(before) | set(after))
                if before.get(k, 0) != after.get(k, 0)}
        parts = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items())
        named = manager.sequence_names()
        hint = f"; named sequences still alive: {named}" if named else ""
        raise LeakError(f"scopedgpu objects left alive: {parts}{hint}. Destroy them "
                        "(destroy(), `with`, delete_sequence()) or drop the last "
                        "reference to them.", diff)


def supported_dtypes(device: Manager | DeviceInfo | None = None) -> list[np.dtype]:
    """The dtypes a tensor can have on `device` (a Manager or DeviceInfo); None: only the
    three every Vulkan device supports."""
    info = device.device if isinstance(device, Manager) else device
    out = []
    for dt in ALL_DTYPES:
        feature = dtype_feature(dt)
        if feature is None or (info is not None and getattr(info, feature, False)):
            out.append(dt)
    return out


def _hypothesis() -> Any:
    try:
        import hypothesis.extra.numpy as hnp
        import hypothesis.strategies as st
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("scopedgpu.testing's strategies need hypothesis: "
                          "pip install hypothesis") from exc
    return st, hnp


def dtypes(device: Manager | DeviceInfo | None = None) -> SearchStrategy[np.dtype]:
    """A strategy of the dtypes `device` supports (see supported_dtypes)."""
    st, _ = _hypothesis()
    return st.sampled_from(supported_dtypes(device))


def shapes(*, min_dims: int = 1, max_dims: int = 3, min_side: int = 1, max_side: int = 64,
           max_size: int = 1 << 16) -> SearchStrategy[tuple[int, ...]]:
    """A strategy of array shapes with at least one element (a tensor cannot be empty)
    and at most `max_size` elements."""
    _, hnp = _hypothesis()
    if min_side < 1:
        raise ValueError("tensors need at least one element: min_side must be >= 1")
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side).filter(
                                lambda s: int(np.prod(s)) <= max_size)


def _elements(dtype: np.dtype, finite: bool) -> Any:
    _, hnp = _hypothesis()
    if dtype.kind == "f":
        # GPUs may flush subnormals to zero and need not honour NaN/inf in arithmetic:
        # by default draw values a shader can be compared with numpy on.
        return hnp.from_dtype(dtype, allow_nan=not finite, allow_infinity=not finite,
                              allow_subnormal=not finite)
    return hnp.from_dtype(dtype)


def arrays(dtype: Any = None, shape: Any = None, *,
           device: Manager | DeviceInfo | None = None, finite: bool = True,
           elements: Any = None) -> SearchStrategy[np.ndarray]:
    """A strategy of numpy arrays a tensor can be made from. `dtype` and `shape` are
    values or strategies (default: dtypes(device), shapes()). Floats are finite and
    normal unless finite=False, since GPUs may flush subnormals to zero. `elements`
    overrides the element strategy (e.g. st.floats(-1, 1, width=32))."""
    st, hnp = _hypothesis()
    dtype_st = dtypes(device) if dtype is None else (
        dtype if isinstance(dtype, st.SearchStrategy) else st.just(np.dtype(dtype)))
    shape_st = shapes() if shape is None else (
        shape if isinstance(shape, st.SearchStrategy) else st.just(shape))

    def build(dt: np.dtype) -> Any:
        return hnp.arrays(dt, shape_st, elements=elements if elements is not None
                          else _elements(np.dtype(dt), finite))
    return dtype_st.flatmap(build)


def tensors(manager: Manager, dtype: Any = None, shape: Any = None, *,
            kind: str = "device", finite: bool = True,
            elements: Any = None) -> SearchStrategy[Tensor]:
    """A strategy of tensors on `manager` (dtypes it supports, shapes from shapes()).
    Each example's tensor is freed when it becomes unreachable; inside no_leaks() the
    check's garbage collection frees it, or use `with tensor:` to free it at once."""
    return arrays(dtype, shape, device=manager, finite=finite, elements=elements).map(
        lambda a: manager.tensor(a, kind=kind))


# -- push and specialization constants, from what a module declares -------------------------

@dataclass(frozen=True)
class ConstantSlot:
    """One scalar a shader reads from its push constants or a specialization constant:
    its byte offset in the push-constant block (for a specialization constant: its id),
    and its type ("float", "int", "uint" or "bool", and a width in bits)."""
    offset: int
    kind: str
    width: int

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the slot (bool: uint32, as the shader reads it)."""
        if self.kind == "bool":
            return np.dtype(np.uint32)
        return np.dtype({"float": "f", "int": "i", "uint": "u"}[self.kind] + str(self.width // 8))


def push_constant_layout(spirv: bytes) -> list[ConstantSlot]:
    """The scalars of the module's push-constant block, in offset order (members,
    vector components, matrix elements and array elements each count as one), as the
    module's reflection lays them out (the one the native API packs push constants by).
    Empty if it has none; ValueError for a nested struct member, which neither reads."""
    from scopedgpu._spirv import reflect
    out: list[ConstantSlot] = []
    for m in reflect(spirv).push_constant_members:
        if m.kind == "struct":
            raise ValueError(f"push constants of a type scopedgpu.testing cannot read: "
                             f"member {m.label} of the block is a struct")
        out += [ConstantSlot(off, m.kind, m.width) for off in m.slots]
    return sorted(out, key=lambda s: s.offset)


def spec_constant_layout(spirv: bytes) -> list[ConstantSlot]:
    """The specialization constants a list can set (ids 0, 1, ... up to the first id the
    module does not declare), each as a ConstantSlot whose offset is its id."""
    from scopedgpu._spirv import reflect
    decl = reflect(spirv).spec_constants
    out: list[ConstantSlot] = []
    while len(out) in decl:
        sc = decl[len(out)]
        out.append(ConstantSlot(sc.id, sc.kind, sc.width))
    return out


def _scalar(slot: ConstantSlot) -> Any:
    st, _ = _hypothesis()
    if slot.kind == "bool":
        return st.booleans()
    if slot.kind == "float":
        big = 1e4 if slot.width > 16 else 1e3
        return st.floats(-big, big, width=slot.width, allow_subnormal=False)
    info = np.iinfo(slot.dtype)
    return st.integers(int(info.min), int(info.max))


def push_constants(spirv: bytes, overrides: dict[int, Any] | None = None
                   ) -> SearchStrategy[Any]:
    """A strategy of push-constant values that fit what the module declares (see
    push_constant_layout): a numpy array of the members' dtype when they all share one
    4-byte type (what `push_consts=` takes), else the block's bytes. `overrides` maps a
    slot's index (its place in offset order) to a strategy for it; the default is any
    integer of the type, or a finite, normal float in [-1e4, 1e4]."""
    st, _ = _hypothesis()
    slots = push_constant_layout(spirv)
    if not slots:
        return st.none()
    parts = [(overrides or {}).get(k, _scalar(s)) for k, s in enumerate(slots)]
    dtypes = {s.dtype for s in slots}
    if len(dtypes) == 1 and slots[0].width == 32:
        dt = dtypes.pop()
        return st.tuples(*parts).map(lambda v: np.array(v, dtype=dt))
    from scopedgpu._spirv import reflect
    size = reflect(spirv).push_constant_size

    def pack(values: tuple) -> bytes:
        blob = bytearray(size)
        for s, v in zip(slots, values):
            raw = np.array(v, dtype=s.dtype).tobytes()
            blob[s.offset:s.offset + len(raw)] = raw
        return bytes(blob)
    return st.tuples(*parts).map(pack)


def spec_constants(spirv: bytes, overrides: dict[int, Any] | None = None
                   ) -> SearchStrategy[list[Any]]:
    """A strategy of `spec_consts=` lists that fit what the module declares (see
    spec_constant_layout). `overrides` maps an id to a strategy for it. Ids that size the
    workgroup (local_size_x_id = ...) default to 1..64; others to any value of the type
    (floats finite, normal, in [-1e4, 1e4])."""
    st, _ = _hypothesis()
    from scopedgpu._spirv import reflect
    sizing = set(reflect(spirv).local_size_spec.values())
    slots = spec_constant_layout(spirv)
    parts = [(overrides or {}).get(s.offset, st.integers(1, 64) if s.offset in sizing
                                   else _scalar(s)) for s in slots]
    return st.tuples(*parts).map(list)


# -- LifetimeMachine's declarations ---------------------------------------------------------

#: A dimension of a binding's shape: a number, or the name of one of the kernel's dims.
Dim = Union[int, str]


@dataclass
class Binding:
    """One storage buffer of a kernel, in binding order.

    `shape`: a tuple of ints and dim names (names come from Kernel.dims, so that
    bindings share sizes), one int or name, or a hypothesis strategy of shapes.
    `role`: "in" (read by the kernel), "out" (written) or "inout". Out and inout
    bindings are compared with the reference after every evaluation. `elements`: a
    strategy for the values of new tensors (default: as arrays() draws them)."""
    name: str
    dtype: Any = np.float32
    shape: Any = ("n",)
    role: str = "in"
    elements: Any = None

    def __post_init__(self) -> None:
        if self.role not in ("in", "out", "inout"):
            raise ValueError(f"binding {self.name!r}: role must be 'in', 'out' or 'inout', "
                             f"not {self.role!r}")
        self.dtype = np.dtype(self.dtype)
        if isinstance(self.shape, (int, str)):
            self.shape = (self.shape,)


@dataclass
class Kernel:
    """A compute shader under test, for LifetimeMachine.

    `shader`: SPIR-V bytes, or GLSL source (compiled with sg.compile_glsl).
    `bindings`: the storage buffers in binding order (see Binding).
    `reference(**arrays, spec=..., push=...)`: the kernel in numpy. It gets a copy of
    the array of each binding it names as a parameter (as the GPU sees it when the
    kernel starts; all of them if it takes **kwargs), plus `spec`/`push` if it takes
    them, and returns a dict of the arrays it writes (or one array when the kernel has
    a single out binding), or changes them in place and returns None.
    `dims`: named sizes shared by bindings: name -> int or strategy of ints (default:
    n in 1..300).
    `spec_consts`, `push_consts`: None (not passed), a value, a strategy, the string
    "auto" (spec_constants()/push_constants() of the module), or a function of the
    drawn dims returning one of those.
    `workgroup`: None (the library's default: cover binding 0), a tuple, or a function
    of the dims (and the spec constants, if it takes `spec`) returning one.
    `rtol`/`atol`: the tolerance of the comparison with the reference (exact by
    default; GPUs round transcendental functions differently from numpy). A float
    difference below the smallest normal number always passes: Vulkan lets a device
    flush denormal results to zero (NVIDIA's do)."""
    name: str
    shader: bytes | str
    bindings: list[Binding]
    reference: Callable[..., Any]
    dims: dict[str, Any] = field(default_factory=dict)
    spec_consts: Any = None
    push_consts: Any = None
    workgroup: Any = None
    rtol: float = 0.0
    atol: float = 0.0

    def __post_init__(self) -> None:
        names = [b.name for b in self.bindings]
        if len(set(names)) != len(names):
            raise ValueError(f"kernel {self.name!r}: binding names repeat: {names}")
        dims = set(self.dims) or {"n"}
        for b in self.bindings:
            unknown = [d for d in b.shape if isinstance(d, str) and d not in dims] \
                if isinstance(b.shape, tuple) else []
            if unknown:
                raise ValueError(f"kernel {self.name!r}: binding {b.name!r} has dims "
                                 f"{unknown} that `dims` does not define ({sorted(dims)})")

    @functools.cached_property
    def spirv(self) -> bytes:
        """The module, compiled once if it was given as GLSL."""
        if isinstance(self.shader, str):
            from scopedgpu.glsl import compile_glsl
            return compile_glsl(self.shader)
        return bytes(self.shader)


_DEFAULT_DEVICE: list[Any] = [None]


def set_default_device(device: int | str | None) -> None:
    """The device the `sg_manager` fixture and LifetimeMachine open (an index or a name
    substring; None: SCOPEDGPU_DEVICE, else the best device). pytest's --sg-device sets
    it."""
    _DEFAULT_DEVICE[0] = device


def default_device() -> int | str | None:
    """The device set by set_default_device() (or --sg-device), else None."""
    return _DEFAULT_DEVICE[0]


@contextlib.contextmanager
def leak_checked_manager(device: int | str | None = None, *,
                         debug: bool | None = True) -> Iterator[Manager]:
    """A Manager (`device` and `debug` as Manager takes them; device None: the default
    device, see set_default_device) that must leave nothing alive: at the end of the block
    it must be back to the live counts it had when it opened (no_leaks), and closing it
    must leave no Vulkan object alive in the process. Raises LeakError otherwise. The
    manager is closed at the end of the block in any case; a block that closes it itself
    skips the first check."""
    before = live_vulkan_objects()
    mgr = Manager(default_device() if device is None else device, debug=debug)
    try:
        with no_leaks(mgr):
            yield mgr
    finally:
        mgr.close()
    gc.collect()
    after = live_vulkan_objects()
    if after != before:
        raise LeakError(f"Vulkan objects alive after the manager closed: {after} "
                        f"(before: {before})",
                        {k: (before[k], after[k]) for k in after if before[k] != after[k]})


def _sg_manager() -> Iterator[Manager]:
    """A Manager on the default device (--sg-device, else SCOPEDGPU_DEVICE) with the
    validation layer on, leak-checked at teardown: the manager must be back to the live
    counts it had when it opened, and closing it must leave no Vulkan object alive in the
    process. scopedgpu's pytest plugin provides it (loaded by pytest when scopedgpu is
    installed)."""
    with leak_checked_manager(debug=True) as mgr:
        yield mgr
