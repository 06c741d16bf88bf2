"""Host blocks of imported numpy memory (devices with VK_EXT_external_memory_host): a
device tensor's data() is its staging range itself, so the sync ops copy nothing on the
host; the range stays with the user's views after destroy() and close(), and goes back to
the pool with the last view."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import scopedgpu as sg


@pytest.fixture
def importing(mgr):
    if not mgr.device.host_import_alignment:
        pytest.skip(f"{mgr.device.name} cannot import host memory "
                    "(VK_EXT_external_memory_host)")
    return mgr


@pytest.mark.parametrize("n", [16, 4096, 300_000])     # small pool class, and large
def test_writes_to_data_after_a_sync_reach_the_device(importing, n):
    mgr = importing
    a = mgr.tensor(np.zeros(n, np.float32))
    b = mgr.tensor(np.full(n, 2.0, np.float32))
    out = mgr.tensor(np.zeros(n, np.float32))
    h, ho = a.data(), out.data()             # held across evaluations, as kp users do
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([a, b])).record(sg.OpMult([a, b, out]))
    seq.record(sg.OpTensorSyncLocal([out]))
    for v in (1.0, 3.0, -5.0):
        h[:] = v
        seq.eval()
        np.testing.assert_array_equal(ho, 2.0 * v)
        assert out.data() is ho
    seq.destroy()
    for t in (a, b, out):
        t.destroy()


def test_a_view_keeps_its_range_until_it_goes(importing):
    mgr = importing
    before = mgr.memory_stats()["allocated_bytes"]
    t = mgr.tensor(np.arange(1000, dtype=np.float32))
    view = t.data()[10:20]                   # a slice: keeps data() alive
    with mgr.sequence() as seq:
        seq.eval(sg.OpTensorSyncDevice([t]))
    gpu_and_stage = mgr.memory_stats()["allocated_bytes"] - before
    t.destroy()
    held = mgr.memory_stats()["allocated_bytes"] - before
    assert 0 < held < gpu_and_stage          # the device range went; the view's stays
    # A new tensor does not get the viewed range.
    t2 = mgr.tensor(np.zeros(1000, np.float32))
    t2.data()[:] = 7
    np.testing.assert_array_equal(view, np.arange(10, 20, dtype=np.float32))
    t2.destroy()
    del view
    gc.collect()
    assert mgr.memory_stats()["allocated_bytes"] == before


def test_views_outlive_the_manager():
    with sg.Manager() as m:
        t = m.tensor(np.arange(64, dtype=np.int32))
        v = t.data()
        with m.sequence() as seq:
            seq.eval(sg.OpTensorSyncDevice([t]))
    assert m.closed
    v[:] += 1                                # numpy memory: valid, writable
    np.testing.assert_array_equal(v, np.arange(1, 65, dtype=np.int32))


def test_data_while_a_sequence_runs_keeps_the_host_copy(importing, glsl):
    """data() first called while GPU work runs is not switched to the staging range
    (a download in flight would land beside it): the host copy path, still correct."""
    from tests.lifetime.endless import FLAG_GLSL, STOPPABLE, flag_tensor, set_flag
    mgr = importing
    flag = flag_tensor(mgr)
    busy = mgr.algorithm([flag], glsl(FLAG_GLSL), workgroup=STOPPABLE)
    t = mgr.tensor(np.arange(256, dtype=np.float32))
    seq = mgr.sequence().record(sg.OpAlgoDispatch(busy))
    seq.eval_async()
    try:
        assert seq.is_running
        h = t.data()
        h[:] = 5
    finally:
        set_flag(flag)
    assert seq.eval_await(60)
    with mgr.sequence() as s2:
        s2.eval(sg.OpTensorSyncDevice([t]))
        h[:] = 0
        s2.eval(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), 5)
    for o in (seq, busy, t, flag):
        o.destroy()


def test_driver_host_blocks_still_work(monkeypatch):
    monkeypatch.setenv("SCOPEDGPU_HOST_BLOCKS", "driver")
    with sg.Manager() as m:
        a = m.tensor(np.arange(100, dtype=np.float32))
        out = m.tensor(np.zeros(100, np.float32))
        m.run(sg.OpTensorSyncDevice([a]), sg.OpTensorCopy([a, out]),
              sg.OpTensorSyncLocal([out]))
        np.testing.assert_array_equal(out.data(), np.arange(100, dtype=np.float32))


def test_a_recorded_download_copies_nothing_on_the_host(importing):
    """Recording OpTensorSyncLocal makes data() the staging range: its completions then
    copy nothing (seen on the H200: a recording made before the switch copied the range
    into the old host copy at every completion, 200 us of 300 at 2 MiB)."""
    mgr = importing
    t = mgr.tensor(np.arange(1 << 16, dtype=np.float32))
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpTensorSyncLocal([t]))
    assert seq._copies == ()       # no host copy scheduled for the completions
    seq.eval()
    np.testing.assert_array_equal(t.data(), np.arange(1 << 16, dtype=np.float32))
    seq.destroy()
    t.destroy()
