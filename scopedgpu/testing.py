"""Helpers for testing your own GPU code with pytest and hypothesis.

    # test_my_shader.py (no conftest needed: installing scopedgpu registers its
    # pytest plugin, which provides the `sg_manager` fixture)
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

- `sg_manager` (where pytest is installed): a Manager on the default device
  (`--sg-device`, else SCOPEDGPU_DEVICE) with the Khronos validation layer on
  (validation errors raise sg.ValidationError from the call that caused them); at
  teardown the manager must be back to the live counts it had when it opened (no
  tensor, algorithm, sequence, pipeline, buffer... left), and closing it must leave no
  Vulkan object alive in the process. Otherwise the test fails.
- `no_leaks(manager)`: the same check around any block; raises LeakError (an
  AssertionError) naming what was left alive. `leak_checked_manager()`: the fixture's
  manager as a context manager; `live_counts()`: the counts these checks compare.
- hypothesis strategies (hypothesis is imported only when you call them): `dtypes()`,
  `shapes()`, `arrays()` and `tensors()`, limited to what the device supports;
  `push_constants()` and `spec_constants()`, fitted to what a SPIR-V module declares.
- `LifetimeMachine` (where hypothesis is installed): a rule-based state machine over
  your own kernels (`Kernel`, `Binding`), checked against their numpy references; GPU
  work that outlives its `kernel_timeout` raises `KernelTimeout`.

Everything here runs real Vulkan: there are no mocks. The module imports without pytest
and without hypothesis.
"""
from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

# The helpers live in scopedgpu._testkit, which scopedgpu._lifetime (LifetimeMachine)
# builds on: this module sits above both, so the package's import graph has no cycle.
from scopedgpu._testkit import (ALL_DTYPES, Binding, ConstantSlot, Kernel, KernelTimeout,
                                LeakError, _sg_manager, arrays, default_device, dtypes,
                                leak_checked_manager, live_counts, no_leaks,
                                push_constant_layout, push_constants, set_default_device,
                                shapes, spec_constant_layout, spec_constants,
                                supported_dtypes, tensors)

if TYPE_CHECKING:
    from scopedgpu._lifetime import LifetimeMachine  # noqa: F401

# sg_manager is listed where pytest is installed, LifetimeMachine where hypothesis is.
__all__ = ["LeakError", "KernelTimeout", "live_counts", "no_leaks", "leak_checked_manager",
           "supported_dtypes", "dtypes", "shapes", "arrays", "tensors", "ALL_DTYPES", "ConstantSlot",
           "push_constant_layout", "spec_constant_layout", "push_constants", "spec_constants",
           "Binding", "Kernel", "set_default_device", "default_device"]


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


if _installed("pytest"):
    import pytest
    sg_manager = pytest.fixture(_sg_manager, name="sg_manager")
    __all__.append("sg_manager")
    # `pytest_plugins = ["scopedgpu.testing"]` in a conftest (the older way to get the
    # fixture) loads the whole plugin: --sg-device and the profiles too.
    pytest_plugins = ["scopedgpu.pytest_plugin"]

if _installed("hypothesis"):
    __all__.append("LifetimeMachine")


def __getattr__(name: str) -> Any:
    if name == "LifetimeMachine":   # imported on first use: it needs hypothesis
        from scopedgpu._lifetime import LifetimeMachine
        return LifetimeMachine
    raise AttributeError(f"module 'scopedgpu.testing' has no attribute {name!r}")
