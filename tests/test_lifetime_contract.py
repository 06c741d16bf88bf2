"""Every clause of the lifetime contract (SPEC.md), each checked with live_objects()."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu.manager import live_vulkan_objects
from scopedgpu.testing import live_counts
from tests import shaders
from tests.lifetime.endless import FLAG_GLSL, STOPPABLE, flag_tensor, set_flag


def _slow(mgr, glsl, n=4096, iters=20000):
    t = mgr.tensor(np.zeros(n, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.SLOW), push_consts=np.array([iters], np.uint32))
    return t, algo


def test_anonymous_sequence_destroyed_at_with_exit(mgr, glsl):
    t = mgr.tensor(np.zeros(256, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    base = live_counts(mgr)
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([t]))
        seq.eval_async()   # still running at block exit: exit must wait, then destroy
        during = mgr.live_objects()
        assert during["sequences"] == base["sequences"] + 1
        assert during["command_pools"] == base["command_pools"] + 1
        assert during["fences"] == base["fences"] + 1
    assert seq.destroyed
    np.testing.assert_array_equal(t.data(), 1.0)  # the host copy happened before destroy
    assert live_counts(mgr) == base
    assert not t.destroyed  # destroying a sequence never frees a tensor


def test_anonymous_sequence_destroyed_when_block_raises(mgr, glsl):
    _t, algo = _slow(mgr, glsl, iters=2000)
    base = live_counts(mgr)
    with pytest.raises(RuntimeError, match="boom"):
        with mgr.sequence() as seq:
            seq.record(sg.OpAlgoDispatch(algo)).eval_async()
            raise RuntimeError("boom")
    assert seq.destroyed and not seq.is_running
    assert live_counts(mgr) == base


def test_named_sequences_persist_until_deleted(mgr):
    t = mgr.tensor([1.0, 2.0])
    base = live_counts(mgr)
    s1 = mgr.sequence("upload")
    s1.record(sg.OpTensorSyncDevice([t]))
    with mgr.sequence("download") as s2:
        s2.record(sg.OpTensorSyncLocal([t])).eval()
    assert not s2.destroyed  # `with` on a named sequence waits and keeps it
    assert mgr.sequence("upload") is s1
    assert mgr.sequence_names() == ["download", "upload"]
    assert set(mgr.sequences()) == {s1, s2}
    assert live_counts(mgr)["sequences"] == base["sequences"] + 2
    mgr.delete_sequence("upload")
    assert s1.destroyed and mgr.sequence_names() == ["download"]
    with pytest.raises(KeyError, match="upload"):
        mgr.delete_sequence("upload")
    anon = mgr.sequence()
    assert mgr.clear_sequences() == 1          # anonymous only
    assert anon.destroyed and not s2.destroyed
    assert mgr.clear_sequences(named=True) == 1
    assert s2.destroyed and mgr.sequence_names() == [] and mgr.sequences() == []
    assert live_counts(mgr) == base
    assert not t.destroyed


def test_run_leaves_nothing_behind(mgr):
    a, b, c = mgr.tensor([1.0, 2.0]), mgr.tensor([3.0, 4.0]), mgr.tensor([0.0, 0.0])
    base = live_counts(mgr)
    mgr.run(sg.OpTensorSyncDevice([a, b]), sg.OpMult([a, b, c]), sg.OpTensorSyncLocal([c]))
    np.testing.assert_array_equal(c.data(), [3.0, 8.0])
    assert live_counts(mgr) == base


def test_tensors_belong_to_the_manager_not_to_ops(mgr):
    base = live_counts(mgr)
    t = mgr.tensor(np.arange(10, dtype=np.float32))
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([t])).eval()
    seq.destroy()
    del seq
    gc.collect()
    assert not t.destroyed and mgr.live_objects()["tensors"] == base["tensors"] + 1
    mgr.run(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), np.arange(10))
    t.destroy()
    assert live_counts(mgr) == base


def test_destroy_is_idempotent_everywhere(mgr, glsl):
    t = mgr.tensor([1.0])
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    seq = mgr.sequence("x")
    for obj in (seq, algo, t):
        obj.destroy()
        obj.destroy()
        assert obj.destroyed
    with mgr.tensor([1.0]) as t2:
        pass
    assert t2.destroyed
    t2.destroy()


def test_use_after_destroy_raises(mgr, glsl):
    t = mgr.tensor([1.0, 2.0])
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    seq = mgr.sequence()
    t2 = mgr.tensor([1.0])
    t2.destroy()
    with pytest.raises(sg.DestroyedError, match="Tensor"):
        t2.data()
    with pytest.raises(sg.DestroyedError, match="Tensor"):
        mgr.algorithm([t2], glsl(shaders.ADD_ONE))
    with pytest.raises(sg.DestroyedError, match="Tensor"):
        seq.record(sg.OpTensorSyncDevice([t2]))
    algo.destroy()
    with pytest.raises(sg.DestroyedError, match="Algorithm"):
        sg.OpAlgoDispatch(algo)
    seq.destroy()
    with pytest.raises(sg.DestroyedError, match="Sequence"):
        seq.record(sg.OpTensorSyncDevice([t]))
    with pytest.raises(sg.DestroyedError, match="Sequence"):
        seq.eval()
    # the manager is still usable
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), [1.0, 2.0])


def test_use_after_close_raises():
    with sg.Manager() as m:
        t = m.tensor([1.0, 2.0])
        view = t.data()
        seq = m.sequence("s")
    assert m.closed and t.destroyed and seq.destroyed
    with pytest.raises(sg.DestroyedError, match="closed"):
        t.data()
    with pytest.raises(sg.DestroyedError, match="closed"):
        seq.eval()
    with pytest.raises(sg.DestroyedError, match="closed"):
        m.tensor([1.0])
    with pytest.raises(sg.DestroyedError, match="closed"):
        m.sequence()
    m.close()  # idempotent
    np.testing.assert_array_equal(view, [1.0, 2.0])  # the view outlives its manager
    assert all(v == 0 for v in m.live_objects().values())


@pytest.mark.parametrize("victim", ["tensor", "algorithm"])
def test_recorded_sequence_with_destroyed_object_submits_nothing(mgr, glsl, victim):
    t = mgr.tensor(np.zeros(64, dtype=np.float32))
    other = mgr.tensor(np.full(64, 7.0, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    mgr.run(sg.OpTensorSyncDevice([t, other]))
    seq = mgr.sequence()
    seq.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorCopy([t, other]))
    seq.record(sg.OpTensorSyncLocal([other]))
    seq.eval()
    np.testing.assert_array_equal(other.data(), 1.0)
    obj = t if victim == "tensor" else algo
    obj.destroy()
    name = "Tensor" if victim == "tensor" else "Algorithm"
    with pytest.raises(sg.DestroyedError, match=f"refers to <{name} #{obj._id}"):
        seq.eval()
    assert not seq.is_running
    # nothing was submitted: `other` on the device still holds the first run's result
    mgr.run(sg.OpTensorSyncLocal([other]))
    np.testing.assert_array_equal(other.data(), 1.0)
    seq.destroy()
    if victim == "algorithm":
        t.destroy()
    else:
        algo.destroy()


def test_nothing_freed_while_gpu_uses_it(mgr, glsl):
    """Destroying a tensor and its algorithm while their sequence runs defers the release
    until the fence signals; the result is still right and the memory is not reused.
    Deterministic: the sequence's first dispatch spins until the test sets a flag (see
    tests/lifetime/endless.py), so the work is certainly running when the tensor goes."""
    data = np.arange(4096, dtype=np.float32)
    flag = flag_tensor(mgr)
    busy = mgr.algorithm([flag], glsl(FLAG_GLSL), workgroup=STOPPABLE)
    before = mgr.memory_stats()["allocated_bytes"]
    t, algo = _slow(mgr, glsl, iters=100)
    t.data()[:] = data
    held = mgr.memory_stats()["allocated_bytes"]
    footprint = held - before                # t's ranges: device memory and staging
    assert footprint >= 2 * t.nbytes
    base = live_counts(mgr)
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(busy))
    seq.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([t]))
    seq.eval_async()
    try:
        view = t.data()
        t.destroy()
        algo.destroy()
        assert seq.is_running                # the busy dispatch waits for the flag
        live = mgr.live_objects()
        assert live["tensors"] == base["tensors"] - 1
        assert live["algorithms"] == base["algorithms"] - 1
        assert live["pending_releases"] == 2
        assert mgr.memory_stats()["allocated_bytes"] == held      # not freed yet
        # A new tensor of the same size gets memory of its own, not t's (still in use).
        t2 = mgr.tensor(np.zeros(4096, dtype=np.float32))
        assert mgr.memory_stats()["allocated_bytes"] == held + footprint
        t2.destroy()
        assert seq.is_running and mgr.live_objects()["pending_releases"] == 2
    finally:
        set_flag(flag)                       # also when an assertion failed: never hang
    assert seq.eval_await(timeout=60)
    np.testing.assert_allclose(view, shaders.slow_reference(data, 100), rtol=1e-5)
    assert mgr.live_objects()["pending_releases"] == 0
    # Released once it signalled; data() may be a range of the pool (a host block of
    # imported memory), which its last view releases.
    del view
    assert mgr.memory_stats()["allocated_bytes"] == before
    seq.destroy()
    busy.destroy()
    flag.destroy()


def test_data_views_keep_memory_alive(mgr):
    t = mgr.tensor(np.arange(5, dtype=np.int32))
    view = t.data()
    mgr.run(sg.OpTensorSyncDevice([t]))
    view[:] = 9
    mgr.run(sg.OpTensorSyncLocal([t]))  # the device copy wins
    t.destroy()
    del t
    gc.collect()
    np.testing.assert_array_equal(view, np.arange(5))
    view[0] = 100  # still writable, no crash
    assert view.sum() == 110


def test_close_destroys_everything_in_order(glsl):
    before = live_vulkan_objects()
    m = sg.Manager()
    t, algo = _slow(m, glsl, iters=20000)
    m.sequence("named").record(sg.OpAlgoDispatch(algo)).eval_async()
    anon = m.sequence().record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo))
    anon.record(sg.OpTensorSyncLocal([t]))
    anon.eval_async()
    view = t.data()
    assert live_vulkan_objects()["fences"] >= before["fences"] + 2
    m.close()   # waits for both, then destroys children before parents
    assert live_vulkan_objects() == before
    assert anon.destroyed and algo.destroyed and t.destroyed
    assert view.dtype == np.float32 and np.all(view > 0)  # the running sync completed first


def test_eval_async_returns_before_the_gpu_is_done(mgr, glsl):
    _t, algo = _slow(mgr, glsl, n=1 << 14, iters=100000)
    seq = mgr.sequence()
    seq.record(sg.OpAlgoDispatch(algo))
    seq.eval_async()
    assert seq.is_running
    assert seq.eval_await(timeout=0.0) is False
    assert seq.is_running  # a timeout leaves it running
    assert seq.eval_await() is True
    assert not seq.is_running
    with pytest.raises(ValueError):
        seq.eval_await(timeout=-1)
    seq.destroy()


def test_gc_returns_unreachable_objects(mgr, glsl):
    base = live_counts(mgr)
    t = mgr.tensor(np.zeros(1024, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    seq = mgr.sequence().record(sg.OpAlgoDispatch(algo))
    seq.eval()
    assert mgr.live_objects()["tensors"] == base["tensors"] + 1
    del t, algo, seq
    gc.collect()
    assert live_counts(mgr) == base


def test_manager_usable_after_many_scoped_blocks(mgr, glsl):
    t = mgr.tensor(np.zeros(32, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    mgr.run(sg.OpTensorSyncDevice([t]))
    base = live_counts(mgr)
    for _ in range(50):
        with mgr.sequence() as seq:
            seq.eval(sg.OpAlgoDispatch(algo))
    mgr.run(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), 50.0)
    assert live_counts(mgr) == base
