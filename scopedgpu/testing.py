"""Helpers for testing your own GPU code with pytest and hypothesis.

    # conftest.py
    pytest_plugins = ["scopedgpu.testing"]        # provides the `sg_manager` fixture

    # test_my_shader.py
    import numpy as np
    from hypothesis import HealthCheck, given, settings
    import scopedgpu as sg
    from scopedgpu.testing import arrays, no_leaks

    @settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(x=arrays(np.float32))
    def test_double(sg_manager, x):
        with no_leaks(sg_manager):                 # this example frees all it made
            with sg_manager.tensor(x) as t:
                ...

- `sg_manager`: a Manager on the default device (SCOPEDGPU_DEVICE overrides) with the
  Khronos validation layer on (validation errors raise sg.ValidationError from the call
  that caused them); at teardown the manager must be back to the live counts it had
  when it opened (no tensor, algorithm, sequence, pipeline, buffer... left), and closing
  it must leave no Vulkan object alive in the process. Otherwise the test fails.
- `no_leaks(manager)`: the same check around any block; raises LeakError (an
  AssertionError) naming what was left alive.
- hypothesis strategies (hypothesis is imported only when you call them): `dtypes()`,
  `shapes()`, `arrays()` and `tensors()`, limited to what the device supports.

Everything here runs real Vulkan: there are no mocks.
"""
from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from scopedgpu._device import DeviceInfo
from scopedgpu.manager import Manager, live_vulkan_objects
from scopedgpu.tensor import dtype_feature

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from scopedgpu.tensor import Tensor

__all__ = ["LeakError", "live_counts", "no_leaks", "supported_dtypes", "dtypes", "shapes",
           "arrays", "tensors", "sg_manager", "ALL_DTYPES"]

#: Every dtype scopedgpu can hold; the first three work on every Vulkan device.
ALL_DTYPES = tuple(np.dtype(d) for d in (
    np.float32, np.int32, np.uint32, np.float64, np.int64, np.uint64, np.float16,
    np.int16, np.uint16, np.int8, np.uint8))


class LeakError(AssertionError):
    """Objects were left alive: `diff` maps each count that changed to (before, after)."""

    def __init__(self, message: str, diff: dict[str, tuple[int, int]]):
        super().__init__(message)
        self.diff = diff


def live_counts(manager: Manager) -> dict[str, int]:
    """The manager's live counts after a garbage collection and after returning cached
    pool blocks and unused pipelines to the device (so that only objects still in use
    are counted)."""
    gc.collect()
    manager.empty_cache()
    return manager.live_objects()


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


try:
    import pytest
except ImportError:  # pragma: no cover - pytest is optional
    pass
else:
    @pytest.fixture
    def sg_manager() -> Iterator[Manager]:
        """A Manager on the default device with validation on, leak-checked at teardown
        (see the module docstring). Activate with `pytest_plugins = ["scopedgpu.testing"]`
        in your conftest.py."""
        before = live_vulkan_objects()
        mgr = Manager(debug=True)
        try:  # (a test may close the manager itself: then there is nothing to check)
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
