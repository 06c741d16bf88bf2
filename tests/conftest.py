"""Shared fixtures. Every test that uses `mgr` is leak-checked: at teardown the manager's
live tensors, algorithms, sequences and shim-side Vulkan objects must be back to what
they were right after the manager opened, and closing it must leave no Vulkan object
alive in the process."""
from __future__ import annotations

import gc
import os

import pytest
from hypothesis import HealthCheck, settings

import scopedgpu as sg
from scopedgpu.manager import live_vulkan_objects

settings.register_profile("default", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python process that must import this checkout's
    scopedgpu even where it is built in place rather than installed."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


DEBUG = os.environ.get("SCOPEDGPU_DEBUG", "") not in ("", "0")


def leak_counts(mgr: sg.Manager) -> dict[str, int]:
    """Live counts after collecting garbage and emptying the pool's cache."""
    gc.collect()
    mgr.empty_cache()
    return mgr.live_objects()


@pytest.fixture
def mgr():
    before = live_vulkan_objects()
    m = sg.Manager(debug=DEBUG or None)
    baseline = leak_counts(m)
    yield m
    if not m.closed:
        after = leak_counts(m)
        named = len(m.sequence_names())
        assert named == 0, f"test left named sequences {m.sequence_names()}"
        assert after == baseline, f"leak: {after} != baseline {baseline}"
        m.close()
    gc.collect()
    assert live_vulkan_objects() == before


@pytest.fixture
def glsl():
    """Compiles GLSL (cached on disk, so machines without glslc can reuse the cache)."""
    return sg.compile_glsl
