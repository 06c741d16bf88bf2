"""Fence polls a service does not need: creation calls (which collect() completed work)
poll a pending fence again only POLL_GAP_S after they last found one pending, while a
sequence's own waits and is_running, and the accounting calls (live_objects(),
memory_stats(), empty_cache(), wait_idle()) and a pool out of memory, poll at once; and a
sequence seen complete is freed (or kept for reuse) without polling its fence again."""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import scopedgpu as sg
from scopedgpu import _engine, _vk

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lifetime"))
from endless import FLAG_GLSL, STOPPABLE, busy_sequence, flag_tensor, set_flag


def test_creations_poll_a_pending_fence_once_per_gap_and_accounting_polls_at_once(
        mgr, monkeypatch, count_calls):
    monkeypatch.setattr(_engine, "POLL_GAP_S", 3600.0)
    flag = flag_tensor(mgr)
    seq = busy_sequence(mgr, flag)
    algo = seq._ops[0].algorithm
    calls = count_calls(_vk, "seq_status")
    seq.eval_async()
    made = []
    try:
        for _ in range(4):
            made.append(mgr.tensor(np.ones(16, np.float32)))   # each one collect()s
        assert calls[0] == 1, "creations polled the pending fence again within the gap"
        assert seq.is_running          # its own poll is not held back
        assert calls[0] == 2
        assert mgr.live_objects()["sequences"] >= 1   # nor the accounting calls'
        assert calls[0] == 3
        mgr.memory_stats()
        assert calls[0] == 4
    finally:
        set_flag(flag)
    assert seq.eval_await(120)
    # Completed (seen by its wait): the data of the tensors made meanwhile is intact.
    for t in made:
        np.testing.assert_array_equal(t.numpy(), np.ones(16, np.float32))
        t.destroy()
    seq.destroy()
    algo.destroy()
    flag.destroy()


def test_a_sequence_seen_complete_is_released_without_polling_its_fence(mgr, count_calls):
    x = np.arange(64, dtype=np.float32)
    with mgr.tensor(x) as a, mgr.tensor(x) as b, mgr.empty(64) as out:
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([a, b])).record(sg.OpMult([a, b, out]))
            seq.record(sg.OpTensorSyncLocal([out]))
            seq.eval()
            calls = count_calls(_vk, "seq_status")
        assert calls[0] == 0, f"{calls[0]} polls of a fence seen signalled"
        np.testing.assert_array_equal(out.data(), x * x)
        # The sequence's command buffer and fence went back to the cache, and the next
        # sequence runs on them.
        with mgr.sequence() as again:
            again.record(sg.OpMult([out, a, b])).record(sg.OpTensorSyncLocal([b]))
            again.eval()
        np.testing.assert_array_equal(b.data(), x * x * x)


def test_out_of_memory_polls_at_once_and_frees_what_completed_work_held(monkeypatch):
    # A tensor destroyed while a sequence used it is freed once that sequence is seen
    # complete. A creation that finds the pool full lets the manager retire finished work
    # first: it must poll then, whatever the gap says.
    monkeypatch.setattr(_engine, "POLL_GAP_S", 3600.0)
    n = 16 << 20   # floats: 64 MiB
    with sg.Manager(memory_limit=160 << 20) as mgr:
        big = mgr.tensor(np.ones(n, np.float32), kind="storage")
        flag = flag_tensor(mgr)
        # The flag kernel with `big` bound too (binding 1, which it does not use).
        algo = mgr.algorithm([flag, big], sg.compile_glsl(FLAG_GLSL), workgroup=STOPPABLE)
        seq = mgr.sequence().record(sg.OpAlgoDispatch(algo))
        seq.eval_async()
        try:
            big.destroy()                  # in use: freed once the sequence completes
            mgr.tensor(np.ones(4, np.float32)).destroy()   # finds it pending: the gap
        finally:
            set_flag(flag)
        h = seq.fence
        deadline = time.monotonic() + 60   # (the flag kernel ends within a second once set)
        while _vk.seq_status(h) != 0:     # complete, and not yet seen by the manager
            assert time.monotonic() < deadline, "the flag kernel did not end once stopped"
        # 64 MiB of device memory and 64 of staging for its upload: within the limit only
        # with the destroyed tensor's range given back.
        again = mgr.tensor(np.full(n, 2.0, np.float32), kind="storage")
        assert not seq.is_running
        assert mgr.memory_stats()["allocated_bytes"] < 2 * n * 4
        for obj in (again, seq, algo, flag):
            obj.destroy()
