"""The pool's fast path (exact-size bins of freed small ranges): random alloc/free never
hands out overlapping ranges, freeing everything leaves nothing allocated, and the bins
merge back so that empty_cache() gives every block back."""
from __future__ import annotations


import numpy as np
from hypothesis import given, strategies as st


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 300_000)), min_size=1, max_size=200),
       st.randoms(use_true_random=False))
def test_pool_random_alloc_free(mgr, ops, rnd):
    pool = mgr._state.pool
    live = []
    with mgr._state.lock:
        allocated0 = pool.allocated
        try:
            for do_alloc, nbytes in ops:
                if do_alloc or not live:
                    live.append(pool.alloc(nbytes, "device"))
                else:
                    pool.free(live.pop(rnd.randrange(len(live))))
                spans = sorted((a.block.id, a.offset, a.offset + a.size) for a in live)
                for (b0, _, e0), (b1, s1, _) in zip(spans, spans[1:]):
                    assert b0 != b1 or e0 <= s1, "overlapping allocations"
                for a in live:
                    assert a.size >= a.nbytes and a.offset % pool.align == 0
        finally:  # hypothesis may stop an example part-way (drawing from rnd)
            for a in live:
                pool.free(a)
        assert pool.allocated == allocated0 == 0
        pool.empty_cache()
        assert pool.stats()["blocks"] == 0 and pool.reserved == 0


def test_tensor_churn_reuses_ranges(mgr):
    small = np.zeros(16, dtype=np.float32)
    keep = [mgr.tensor(small) for _ in range(100)]
    blocks = mgr.memory_stats()["blocks"]
    for _ in range(2000):
        mgr.tensor(small).destroy()
    assert mgr.memory_stats()["blocks"] == blocks
    for t in keep:
        t.destroy()
