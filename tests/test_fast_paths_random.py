"""Random create / record / eval / destroy sequences over the fast paths of issue 4
(recycled command buffers, record-time bookkeeping, the weakref registry of children,
imported host copies): results match numpy, nothing crashes, nothing leaks."""
from __future__ import annotations

import gc

import numpy as np
from hypothesis import given, strategies as st

import scopedgpu as sg

N_SMALL = 64
N_LARGE = (4 << 20) // 4      # large enough for the host-copy import


@given(st.lists(st.tuples(st.sampled_from(["tensor", "big", "mult", "copy", "named",
                                           "async", "drop", "destroy_t", "destroy_s",
                                           "gc"]),
                          st.integers(0, 7)), min_size=1, max_size=30))
def test_random_lifetimes(mgr, steps):

    tensors: list = []
    expect: dict[int, np.ndarray] = {}
    seqs: list = []
    try:
        for what, k in steps:
            if what in ("tensor", "big") or not tensors:
                n = N_LARGE if what == "big" else N_SMALL
                arr = np.full(n, float(k + 1), dtype=np.float32)
                t = mgr.tensor(arr)
                tensors.append(t)
                expect[id(t)] = arr.copy()
                with mgr.sequence() as s:
                    s.eval(sg.OpTensorSyncDevice([t]))
            elif what == "mult":
                same = [t for t in tensors if t.size == tensors[k % len(tensors)].size]
                a = same[0]
                b = same[-1]
                out = mgr.tensor(np.zeros(a.size, dtype=np.float32))
                tensors.append(out)
                with mgr.sequence() as s:
                    s.record(sg.OpMult([a, b, out])).record(sg.OpTensorSyncLocal([out]))
                    s.eval()
                expect[id(out)] = expect[id(a)] * expect[id(b)]
                np.testing.assert_array_equal(out.data(), expect[id(out)])
            elif what == "copy":
                src = tensors[k % len(tensors)]
                dst = mgr.tensor(np.zeros(src.size, dtype=np.float32))
                tensors.append(dst)
                mgr.run(sg.OpTensorCopy([src, dst]), sg.OpTensorSyncLocal([dst]))
                expect[id(dst)] = expect[id(src)].copy()
                np.testing.assert_array_equal(dst.data(), expect[id(dst)])
            elif what == "named":
                s = mgr.sequence(f"n{k % 3}")
                t = tensors[k % len(tensors)]
                s.eval(sg.OpTensorSyncLocal([t]))
                np.testing.assert_array_equal(t.data(), expect[id(t)])
            elif what == "async":
                t = tensors[k % len(tensors)]
                s = mgr.sequence()
                s.record(sg.OpTensorSyncLocal([t])).eval_async()
                seqs.append((s, t))
            elif what == "drop" and seqs:
                s, t = seqs.pop(k % len(seqs))
                if k % 2 and not s.destroyed:   # clear_sequences() may have destroyed it
                    s.eval_await()
                    if not t.destroyed and id(t) in expect:
                        np.testing.assert_array_equal(t.data(), expect[id(t)])
                    s.destroy()
                else:
                    del s          # unreachable while maybe running
            elif what == "destroy_t":
                t = tensors.pop(k % len(tensors))
                expect.pop(id(t))
                if k % 2:
                    t.destroy()
                else:
                    del t          # returns to the pool when unreachable
            elif what == "destroy_s":
                mgr.clear_sequences(named=bool(k % 2))
            elif what == "gc":
                gc.collect()
    finally:
        # Drop the loop's local aliases, so that what the steps dropped is unreachable.
        s = t = a = b = out = src = dst = same = None
        for s, _ in seqs:
            s.destroy()
        seqs.clear()
        s = _ = None
        mgr.clear_sequences(named=True)
        for t in tensors:
            t.destroy()
        tensors.clear()
        t = None
        gc.collect()
        mgr.wait_idle()
        mgr.empty_cache()
        live = mgr.live_objects()
        assert live["tensors"] == live["sequences"] == live["algorithms"] == 0, live
        assert live["pending_releases"] == 0 and live["cached_sequences"] == 0
        assert live["command_pools"] == live["fences"] == 0
        assert live["buffers"] == live["memory_blocks"] == 0
        assert mgr.memory_stats()["imported_blocks"] == 0
