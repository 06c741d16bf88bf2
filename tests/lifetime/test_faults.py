"""Fault injection: make the k-th checked Vulkan call fail, for every k of a workload.

The workload opens a manager, makes tensors of each kind, an algorithm, records a
sequence (sync, dispatch, copy, sync, with timestamps), evaluates it, runs OpMult,
destroys everything and closes. For each k from 1 to the number N of checked calls it
makes, the k-th call returns an error without being made. Each time:
- the workload either raises a typed ScopedGPUError, or recovers by itself and its
  results are right (the pool retries a failed block allocation on another memory type
  or after emptying its cache, as the spec asks);
- once the manager is closed, no Vulkan object is left alive in the process;
- a new manager works afterwards.
A second sweep keeps one manager open across the faults and checks that it stays usable
and that its live counts return to the baseline (the spec: after any error the manager
is still usable). CI's two passes share the k (halves.py): every other one each.
"""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._ffi import lib
from scopedgpu.manager import live_vulkan_objects
from scopedgpu.testing import live_counts

from halves import points
from lt_shaders import add_one_spirv

DEBUG = os.environ.get("SCOPEDGPU_DEBUG", "") not in ("", "0")
OUT_OF_DEVICE_MEMORY = -2
INITIALIZATION_FAILED = -3
DEVICE_LOST = -4

EXERCISED: dict[str, int] = {}


def _results_ok(b, h, c):
    np.testing.assert_array_equal(b.data(), np.arange(64, dtype=np.float32) + 1)
    np.testing.assert_array_equal(h.data(), np.full(64, 7, np.float32))
    np.testing.assert_array_equal(c.data(), (np.arange(64, dtype=np.float32)) ** 2)


def _body(m: sg.Manager, spirv: bytes, seq_name: str | None) -> None:
    a = m.tensor(np.arange(64, dtype=np.float32))
    h = m.tensor(np.zeros(64, np.float32), kind="host")
    s = m.tensor(np.full(64, 7, np.float32), kind="storage")
    b = m.empty(64)
    c = m.empty(64)
    algo = m.algorithm([a, b], spirv)
    ts = m.device.timestamps
    seq = m.sequence(seq_name, timestamps=ts)
    try:
        seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorCopy([s, h])).record(sg.OpTensorSyncLocal([b, h]))
        seq.eval()
        if ts:
            assert len(seq.timestamps()) == 5
        seq.eval_async()
        seq.eval_await()
        m.run(sg.OpMult([a, a, c]), sg.OpTensorSyncLocal([c]))
        _results_ok(b, h, c)
    finally:
        if seq_name is None:
            seq.destroy()
        elif seq_name in m.sequence_names():
            m.delete_sequence(seq_name)
    for obj in (algo, a, h, s, b, c):
        obj.destroy()


def _workload(spirv: bytes) -> None:
    with sg.Manager(debug=DEBUG or None) as m:
        _body(m, spirv, None)


def _assert_nothing_alive() -> None:
    gc.collect()
    alive = {k: v for k, v in live_vulkan_objects().items() if v}
    assert not alive, f"Vulkan objects left alive: {alive}"


def _typed(exc: BaseException | None) -> None:
    if exc is None:
        return
    assert isinstance(exc, sg.ScopedGPUError), f"untyped exception {type(exc).__name__}: {exc}"
    if isinstance(exc, sg.DeviceError):
        assert exc.call and exc.result, f"DeviceError without call/result: {exc}"
        assert exc.call in str(exc)


def _run_faulted(k: int, result: int, fn) -> tuple[BaseException | None, bool]:
    """Runs fn with the k-th checked call failing; returns (exception, fired)."""
    lib.sg_fault_set(k, result)
    exc = None
    try:
        fn()
    except BaseException as e:
        exc = e
    finally:
        fired = lib.sg_fault_calls() >= k
        lib.sg_fault_set(0, 0)
    if exc is not None:
        exc.__traceback__ = None  # do not keep the workload's frames (and objects) alive
    return exc, fired


def _count_calls(fn) -> int:
    lib.sg_fault_set(0, 0)
    fn()
    n = lib.sg_fault_calls()
    assert n > 0
    return n


@pytest.fixture(scope="module")
def spirv():
    return add_one_spirv(np.float32)


@pytest.mark.parametrize("result", [OUT_OF_DEVICE_MEMORY, INITIALIZATION_FAILED, DEVICE_LOST],
                         ids=["OUT_OF_DEVICE_MEMORY", "INITIALIZATION_FAILED", "DEVICE_LOST"])
def test_every_call_fails_once_fresh_manager(spirv, result):
    _assert_nothing_alive()
    n = _count_calls(lambda: _workload(spirv))
    fired = 0
    raised = 0
    ks = points(n)
    for k in ks:
        exc, hit = _run_faulted(k, result, lambda: _workload(spirv))
        fired += hit
        raised += exc is not None
        _typed(exc)
        if result == OUT_OF_DEVICE_MEMORY and isinstance(exc, sg.DeviceError) \
                and not isinstance(exc, sg.OutOfMemoryError):
            pytest.fail(f"k={k}: VK_ERROR_OUT_OF_DEVICE_MEMORY raised {type(exc).__name__}")
        _assert_nothing_alive()
        if k % 8 < 2 or (exc is not None and k == ks[-1]):
            _workload(spirv)          # a new manager works afterwards
            _assert_nothing_alive()
    _workload(spirv)
    _assert_nothing_alive()
    assert fired == len(ks)
    assert raised > len(ks) // 2, f"only {raised} of {len(ks)} faults raised"
    EXERCISED[f"fresh manager, {result}"] = fired
    print(f"\nfault injection, fresh manager, result {result}: {fired} of {n} points, "
          f"{raised} raised")


def test_every_call_fails_once_same_manager(spirv):
    _assert_nothing_alive()
    with sg.Manager(debug=DEBUG or None) as m:
        def counts():
            return live_counts(m)
        base = counts()
        n = _count_calls(lambda: _body(m, spirv, "named"))
        assert counts() == base
        fired = 0
        ks = points(n)
        for k in ks:
            exc, hit = _run_faulted(k, OUT_OF_DEVICE_MEMORY, lambda: _body(m, spirv, "named"))
            fired += hit
            _typed(exc)
            del exc
            assert counts() == base, f"k={k}: live objects not back to the baseline"
            assert m.sequence_names() == []
            _body(m, spirv, "named")  # the same manager still works
            assert counts() == base
        assert fired == len(ks)
        EXERCISED["same manager"] = fired
        print(f"\nfault injection, same manager: {fired} of {n} points")
    _assert_nothing_alive()


def test_a_failed_fence_wait_leaves_the_sequence_running(mgr):
    """A wait or poll that fails does not say the GPU work is done: the sequence still
    counts as running, what it uses stays allocated, and a later wait completes it."""
    before = mgr.live_objects()
    a = mgr.tensor(np.arange(64, dtype=np.float32))
    out = mgr.empty(64)
    seq = mgr.sequence().record(sg.OpTensorSyncDevice([a]))
    seq.record(sg.OpMult([a, a, out])).record(sg.OpTensorSyncLocal([out]))
    for call, fail in (("vkWaitForFences", lambda: seq.eval_await()),
                       ("vkGetFenceStatus", lambda: seq.is_running)):
        seq.eval_async()
        lib.sg_fault_set(1, DEVICE_LOST)
        try:
            with pytest.raises(sg.DeviceError, match=call) as info:
                fail()
        finally:
            lib.sg_fault_set(0, 0)
        assert info.value.result == "VK_ERROR_DEVICE_LOST"
        assert seq._running, "a failed wait marked the sequence complete"
        assert seq.eval_await() is True
        np.testing.assert_array_equal(out.data(), np.arange(64, dtype=np.float32) ** 2)
        out.data()[:] = 0
    # destroy() after a failed wait: the destruction waits, then completes it (also with
    # timestamps, which can no longer be read then)
    seq.destroy()
    for ts in (False, True) if mgr.device.timestamps else (False,):
        out.data()[:] = 0
        seq = mgr.sequence(timestamps=ts).record(sg.OpTensorSyncDevice([a]))
        seq.record(sg.OpMult([a, a, out])).record(sg.OpTensorSyncLocal([out]))
        seq.eval_async()
        lib.sg_fault_set(1, DEVICE_LOST)
        try:
            with pytest.raises(sg.DeviceError, match="vkWaitForFences"):
                seq.destroy()
        finally:
            lib.sg_fault_set(0, 0)
        assert seq.destroyed and not seq._running
        np.testing.assert_array_equal(out.data(), np.arange(64, dtype=np.float32) ** 2)
    a.destroy()
    out.destroy()
    mgr.empty_cache()
    assert mgr.live_objects() == before
