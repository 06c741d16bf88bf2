"""Behaviour kept by the fast paths of issue 4: recycled command pools and fences, the
work done at record time instead of at every eval, and the weakref registry of children."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import scopedgpu as sg
from tests.lifetime.endless import FLAG_GLSL, STOPPABLE, flag_tensor, set_flag


def test_recycled_sequences_run_correctly_and_are_freed_by_empty_cache(mgr):
    a = mgr.tensor(np.arange(8, dtype=np.float32))
    b = mgr.tensor(np.full(8, 2, dtype=np.float32))
    out = mgr.tensor(np.zeros(8, dtype=np.float32))
    base = mgr.live_objects()
    for i in range(40):
        a.data()[:] = i
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([a, b]))
            seq.record(sg.OpMult([a, b, out]))
            seq.record(sg.OpTensorSyncLocal([out]))
            seq.eval()
        np.testing.assert_array_equal(out.data(), np.full(8, 2 * i, dtype=np.float32))
    live = mgr.live_objects()
    cached = live["cached_sequences"]
    assert cached > 0 and live["sequences"] == 0
    # the shim's counts include the idle pools and fences kept for reuse
    assert live["command_pools"] == base["command_pools"] + cached
    assert live["fences"] == base["fences"] + cached
    mgr.empty_cache()
    after = mgr.live_objects()
    assert after["cached_sequences"] == 0
    assert after["command_pools"] == base["command_pools"]
    assert after["fences"] == base["fences"]
    for t in (a, b, out):
        t.destroy()


def test_eval_checks_destroyed_objects_every_time(mgr):
    a = mgr.tensor(np.ones(4, dtype=np.float32))
    b = mgr.tensor(np.ones(4, dtype=np.float32))
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorCopy([a, b]))
        seq.eval()
        seq.eval()
        b.destroy()
        with pytest.raises(sg.DestroyedError, match="destroyed"):
            seq.eval()
        assert not seq.is_running
    a.destroy()


def test_rerecording_after_clear_uses_the_new_ops(mgr):
    a = mgr.tensor(np.arange(4, dtype=np.float32))
    with mgr.sequence() as seq:
        seq.eval(sg.OpTensorSyncDevice([a]))
        a.data()[:] = 0
        seq.eval(sg.OpTensorSyncLocal([a]))
        np.testing.assert_array_equal(a.data(), np.arange(4, dtype=np.float32))
        seq.eval()   # re-evaluates the last recorded op only
        np.testing.assert_array_equal(a.data(), np.arange(4, dtype=np.float32))
    a.destroy()


def test_unreachable_children_return_to_the_pool(mgr):
    before = mgr.memory_stats()["allocated_bytes"]
    for _ in range(100):
        mgr.tensor(np.ones(64, dtype=np.float32))   # dropped at once
    class Cycle:
        pass
    c = Cycle()
    c.self = c
    c.t = mgr.tensor(np.ones(64, dtype=np.float32))
    del c
    gc.collect()
    assert mgr.memory_stats()["allocated_bytes"] == before
    assert mgr.live_objects()["tensors"] == 0


def test_running_sequence_defers_the_release_of_its_tensor(mgr):
    """A tensor destroyed while a sequence that uses it runs: gone for Python at once,
    its memory held (a pending release) while the sequence runs, released as soon as the
    sequence is seen complete (eval_await), not only when the sequence is destroyed. The
    sequence's first dispatch spins until the test sets a flag (tests/lifetime/endless.py),
    so it is certainly running while the intermediate states are checked."""
    flag = flag_tensor(mgr)
    busy = mgr.algorithm([flag], sg.compile_glsl(FLAG_GLSL), workgroup=STOPPABLE)
    before = mgr.memory_stats()["allocated_bytes"]
    a = mgr.tensor(np.arange(1 << 16, dtype=np.float32))
    held = mgr.memory_stats()["allocated_bytes"]
    assert held - before >= 2 * a.nbytes          # device memory and staging
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(busy))
    seq.record(sg.OpTensorSyncLocal([a]))
    assert mgr.live_objects()["pending_releases"] == 0
    seq.eval_async()
    try:
        a.destroy()
        assert a.destroyed and seq.is_running
        live = mgr.live_objects()
        assert live["tensors"] == 1                   # the flag: a is gone for Python...
        assert live["pending_releases"] == 1          # ...its release waits for the fence
        assert mgr.memory_stats()["allocated_bytes"] == held
        assert not seq.eval_await(timeout=0.05)       # a timed-out await releases nothing
        assert seq.is_running and mgr.live_objects()["pending_releases"] == 1
        assert mgr.memory_stats()["allocated_bytes"] == held
    finally:
        set_flag(flag)                                # also when an assertion failed
    assert seq.eval_await(timeout=60)
    assert not seq.is_running and not seq.destroyed
    assert mgr.live_objects()["pending_releases"] == 0          # released at the await
    assert mgr.memory_stats()["allocated_bytes"] == before
    seq.destroy()
    assert mgr.live_objects()["pending_releases"] == 0
    assert mgr.memory_stats()["allocated_bytes"] == before
    busy.destroy()
    flag.destroy()


def test_close_with_cached_sequences_leaves_nothing():
    from scopedgpu.manager import live_vulkan_objects
    before = live_vulkan_objects()
    m = sg.Manager()
    for _ in range(3):
        with m.sequence() as s:
            s.eval(sg.OpTensorSyncDevice([m.tensor([1.0])]))
    m.close()
    gc.collect()
    assert live_vulkan_objects() == before


def test_large_device_tensors_import_their_host_copy(mgr):
    n = (8 << 20) // 4
    a = mgr.tensor(np.arange(n, dtype=np.float32))
    b = mgr.tensor(np.full(n, 3, dtype=np.float32))
    out = mgr.empty(n)
    if not mgr.device.host_import_alignment:
        pytest.skip("the device cannot import host memory (VK_EXT_external_memory_host)")
    assert mgr.memory_stats()["imported_blocks"] == 3
    assert a.data().ctypes.data % mgr.device.host_import_alignment == 0
    mgr.run(sg.OpTensorSyncDevice([a, b]), sg.OpMult([a, b, out]), sg.OpTensorSyncLocal([out]))
    np.testing.assert_array_equal(out.data(), np.arange(n, dtype=np.float32) * 3)
    view = out.data()
    for t in (a, b, out):
        t.destroy()
    assert mgr.memory_stats()["imported_blocks"] == 0
    assert view[5] == 15   # the host copy outlives the tensor and its import


def test_reused_command_buffers_match_what_was_recorded(mgr):
    from scopedgpu._shaders import builtin_spirv
    spirv = builtin_spirv("saxpy")
    x = mgr.tensor(np.ones(64, dtype=np.float32))
    y = mgr.tensor(np.zeros(64, dtype=np.float32))
    mgr.run(sg.OpTensorSyncDevice([x, y]))
    algo = mgr.algorithm([x, y], spirv, workgroup=(1, 1, 1), push_consts=[2.0])
    expect = np.zeros(64, dtype=np.float32)
    for a in (2.0, 2.0, 3.0, 2.0, 5.0, 5.0):
        with mgr.sequence() as seq:      # recycled command buffers, same or other pushes
            seq.eval(sg.OpAlgoDispatch(algo, push_consts=[a]))
        expect += a
    mgr.run(sg.OpTensorSyncLocal([y]))
    np.testing.assert_array_equal(y.data(), expect)
    # A new algorithm over other tensors never reuses the old recording.
    algo.destroy()
    z = mgr.tensor(np.zeros(64, dtype=np.float32))
    mgr.run(sg.OpTensorSyncDevice([z]))
    algo2 = mgr.algorithm([x, z], spirv, workgroup=(1, 1, 1), push_consts=[2.0])
    with mgr.sequence() as seq:
        seq.eval(sg.OpAlgoDispatch(algo2))
    mgr.run(sg.OpTensorSyncLocal([y, z]))
    np.testing.assert_array_equal(z.data(), np.full(64, 2, dtype=np.float32))
    np.testing.assert_array_equal(y.data(), expect)
    for o in (algo2, x, y, z):
        o.destroy()


def test_staged_transfers_with_threaded_copies(mgr, monkeypatch):
    """Without host-memory import, large host copies go through staging with a copy split
    over threads; the data must come back intact."""
    import os

    import scopedgpu._transfer as transfer_mod
    monkeypatch.setattr(mgr._state.pool, "import_align", 0)
    monkeypatch.setattr(transfer_mod, "PARALLEL_COPY_MIN", 1 << 20)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    n = (3 << 20) // 4 + 5
    src = np.random.default_rng(0).random(n, dtype=np.float32)
    t = mgr.tensor(src)
    assert not t._zero_copy
    with mgr.sequence() as seq:
        seq.eval(sg.OpTensorSyncDevice([t]))
        t.data()[:] = 0
        seq.eval(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), src)
    t.destroy()
