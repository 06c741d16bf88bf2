"""Shared fixtures. Every test that uses `mgr` is leak-checked: at teardown the manager's
live tensors, algorithms, sequences and shim-side Vulkan objects must be back to what
they were right after the manager opened, and closing it must leave no Vulkan object
alive in the process."""
from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, settings

import scopedgpu as sg
from scopedgpu.testing import leak_checked_manager

settings.register_profile("default", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# scopedgpu's pytest plugin (sg_manager, --sg-device, the sg-* profiles): loaded by its
# entry point where scopedgpu is installed, by this line from a plain checkout (the same
# name: never twice).
pytest_plugins = ["scopedgpu.pytest_plugin"]


def source_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python process that must import this checkout's
    scopedgpu even where it is built in place rather than installed."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


DEBUG = os.environ.get("SCOPEDGPU_DEBUG", "") not in ("", "0")


@pytest.fixture
def mgr():
    """The sg_manager fixture's checks (scopedgpu.testing.leak_checked_manager: live
    counts, pool accounting and the process-wide Vulkan objects), with the validation
    layer only under SCOPEDGPU_DEBUG=1."""
    with leak_checked_manager(debug=DEBUG or None) as m:
        yield m


@pytest.fixture
def count_calls(monkeypatch):
    """count_calls(module, name) wraps module.name, for this test, in a function that counts
    its calls; returns the one-item list holding the count."""
    def wrap(module: object, name: str) -> list[int]:
        calls = [0]
        real = getattr(module, name)

        def counted(*args, **kwargs):
            calls[0] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
        return calls
    return wrap


@pytest.fixture
def glsl():
    """Compiles GLSL (cached on disk, so machines without glslc can reuse the cache)."""
    return sg.compile_glsl


def needs_glsl_compiler(why: str) -> pytest.MarkDecorator:
    """Skips a test where compile_glsl finds no compiler (on PATH or from the glsl extra),
    for a test whose source no compile cache can hold (made at run time, or a compile
    error)."""
    from scopedgpu.glsl import _compiler
    return pytest.mark.skipif(_compiler() is None,
                              reason=f"no GLSL compiler installed ({why})")


# Validation errors raise ValidationError from the call that caused them; two kinds of
# message never reach a caller: errors the layer reports while a manager closes (logged:
# close() cannot raise at interpreter exit) and validation warnings (logged). Every test
# fails on either.
class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def fail_on_validation_messages(request):
    """Any WARNING or ERROR on the "scopedgpu" logger fails the test (validation
    errors at close, validation warnings); a test that expects one marks itself with
    @pytest.mark.allow_scopedgpu_log."""
    handler = _Collect()
    logger = logging.getLogger("scopedgpu")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
    if request.node.get_closest_marker("allow_scopedgpu_log"):
        return
    # A machine without the layer (a GPU host without vulkan-validationlayers) says so
    # once per debug manager: that is the environment, not a finding.
    bad = [f"{r.levelname}: {r.getMessage()}" for r in handler.records
           if "validation layer is not installed" not in r.getMessage()]
    assert not bad, "scopedgpu logged:\n" + "\n".join(bad)


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_scopedgpu_log: the test expects scopedgpu "
                            "to log warnings or errors")
    config.addinivalue_line("markers", "plain_only(why): run in the pass without the "
                            "validation layer only (CI's time budget); why says what "
                            "covers it under the layer")


def pytest_collection_modifyitems(config, items):
    """Under SCOPEDGPU_DEBUG=1 (CI's second pass), the tests marked plain_only skip,
    saying why: each ran in the first pass, and what it does under the validation layer is
    covered by a test that runs there (the marker's reason names it). Keeps CI's two
    passes within its time budget."""
    if not DEBUG:
        return
    for item in items:
        mark = item.get_closest_marker("plain_only")
        if mark is not None:
            why = mark.args[0] if mark.args else ""
            item.add_marker(pytest.mark.skip(
                reason=f"runs in the pass without the validation layer (CI's first): {why}"))
