"""Runs Kompute 0.9.0's own Python tests against scopedgpu.kp: `import kp` in them gets
scopedgpu.kp (see NOTICE.md for every change made to Kompute's files). Each test is
leak-checked: once its objects are unreachable, every Vulkan object it made is freed."""
from __future__ import annotations

import gc
import sys

import pytest

import scopedgpu.kp
from scopedgpu.manager import live_vulkan_objects

# Kompute's test modules bind `kp` when they are imported, at collection; the real kp
# package, if installed, gets its name back once collection is over.
_previous = sys.modules.get("kp")
sys.modules["kp"] = scopedgpu.kp


def pytest_collection_finish(session):
    if _previous is None:
        sys.modules.pop("kp", None)
    else:
        sys.modules["kp"] = _previous


@pytest.fixture(autouse=True)
def no_leaks():
    gc.collect()
    before = live_vulkan_objects()
    yield
    gc.collect()
    assert live_vulkan_objects() == before
