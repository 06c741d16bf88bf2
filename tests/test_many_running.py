"""Many sequences running at once (issue 24: a service with a thousand requests in
flight): the engine's bookkeeping costs O(1) per call, not O(running), and misses
nothing. Deterministic: the first submission on the queue spins until the test sets a
flag (tests/lifetime/endless.py), so everything submitted after it is still pending."""
from __future__ import annotations

import numpy as np

import scopedgpu as sg
from scopedgpu import _vk
from tests.lifetime.endless import FLAG_GLSL, STOPPABLE, flag_tensor, set_flag

N = 40


def _behind_a_busy_dispatch(mgr, glsl, n):
    """A busy sequence on queue 0, then n sequences each uploading, doubling and
    downloading a tensor of its own, all submitted behind it."""
    flag = flag_tensor(mgr)
    busy = mgr.algorithm([flag], glsl(FLAG_GLSL), workgroup=STOPPABLE)
    head = mgr.sequence().record(sg.OpAlgoDispatch(busy))
    head.eval_async()
    tensors, seqs = [], []
    for i in range(n):
        t = mgr.tensor(np.full(64, i, np.float32))
        seq = mgr.sequence()
        seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpMult([t, t, t]))
        seq.record(sg.OpTensorSyncLocal([t])).eval_async()
        tensors.append(t)
        seqs.append(seq)
    return flag, busy, head, tensors, seqs


def test_polling_stops_at_the_oldest_pending_submission(mgr, glsl, monkeypatch):
    """While the oldest submission of the queue runs, a public call polls one fence per
    queue, not the 41 of every running sequence; once the newest signalled, one public
    call completes them all (their downloads done)."""
    flag, busy, head, tensors, seqs = _behind_a_busy_dispatch(mgr, glsl, N)
    polls = []
    real = _vk.seq_status
    monkeypatch.setattr(_vk, "seq_status", lambda h: polls.append(h) or real(h))
    try:
        extra = mgr.tensor(np.zeros(4, np.float32))    # a public call: collects
        assert 1 <= len(polls) <= mgr.queue_count, len(polls)
        assert polls[0] == head.fence                  # the oldest, still spinning
        extra.destroy()
    finally:
        set_flag(flag)
    # The queue runs its submissions in order: once the newest signalled, all have.
    while real(seqs[-1].fence) != 0:
        _vk.seq_wait(seqs[-1].fence, 50_000_000, 0)
    assert all(s._running for s in seqs)   # (is_running would poll each one itself)
    polls.clear()
    mgr.tensor(np.zeros(4, np.float32)).destroy()   # one public call
    assert not any(s._running for s in seqs) and not head._running
    assert len(polls) == N + 1
    for i, t in enumerate(tensors):
        np.testing.assert_array_equal(t.data(), np.full(64, i * i, np.float32))
    for o in (*seqs, head, busy, flag, *tensors):
        o.destroy()


def test_a_destroyed_tensor_waits_for_every_running_user(mgr, glsl):
    """A tensor read by many running sequences is released once the last of them
    completed: not when the first did (the index of users must hold them all). The
    queue: busy, the first user, busy again (a flag of its own), four more users."""
    flag, busy, head, tensors, seqs = _behind_a_busy_dispatch(mgr, glsl, 4)
    flag2 = flag_tensor(mgr)
    busy2 = mgr.algorithm([flag2], glsl(FLAG_GLSL), workgroup=STOPPABLE)
    gate = mgr.sequence().record(sg.OpAlgoDispatch(busy2))
    shared = mgr.tensor(np.arange(64, dtype=np.float32))
    users = []
    try:
        for i in range(5):
            if i == 1:
                gate.eval_async()
            out = mgr.tensor(np.zeros(64, np.float32))
            s = mgr.sequence()
            if i == 0:   # one upload: the others' would wait for it (a host write)
                s.record(sg.OpTensorSyncDevice([shared]))
            s.record(sg.OpMult([shared, shared, out]))
            s.record(sg.OpTensorSyncLocal([out])).eval_async()
            users.append((s, out))
        base = mgr.live_objects()["pending_releases"]
        shared.destroy()
        assert mgr.live_objects()["pending_releases"] == base + 1
        set_flag(flag)
        first, _ = users[0]
        assert first.eval_await(timeout=60)
        mgr.tensor(np.zeros(4, np.float32)).destroy()   # collects: the first user done
        assert not first._running and all(s._running for s, _ in users[1:])
        assert mgr.live_objects()["pending_releases"] == base + 1   # still held
    finally:
        set_flag(flag)
        set_flag(flag2)
    mgr.wait_idle()
    assert mgr.live_objects()["pending_releases"] == 0
    for s, out in users:
        np.testing.assert_array_equal(out.data(), np.arange(64, dtype=np.float32) ** 2)
        s.destroy()
        out.destroy()
    for o in (*seqs, head, gate, busy, busy2, flag, flag2, *tensors):
        o.destroy()
