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


@given(st.lists(st.tuples(st.integers(0, 8), st.sampled_from([-1, 0, 1])), min_size=1,
                max_size=12))
def test_alloc_pair_hands_out_what_alloc_would(mgr, requests):
    """alloc_pair() (a staging and a device range at once: the small-tensor fast path)
    rounds a request as alloc() does, from its bins as from fresh blocks, and counts what
    it hands out as alloc() does. Its own copy of the rounding was unchecked: a bug planted
    in it alone passed every pool test (issue 25's mutation survivors). The bins hold
    ranges of the neighbouring sizes too, so a wrong size finds a range to hand out."""
    pool = mgr._state.pool
    al = pool.align
    sizes = [max(1, k * al + r) for k, r in requests]
    with mgr._state.lock:
        allocated0 = pool.allocated
        warm = [pool.alloc(n, kind) for n in sizes for n in (n, n + al, max(1, n - al))
                for kind in ("device", "host")]
        for a in warm:
            pool.free(a)
        for n in sizes:
            for _ in range(2):       # a fresh pair, then one from the bins
                d, h = pool.alloc_pair(n)
                for a, kind in ((d, "device"), (h, "host")):
                    assert a.size == pool.round(n) and a.nbytes == n, (n, kind, a.size)
                    assert a.block.sub.kind == kind
                assert pool.allocated == allocated0 + 2 * pool.round(n)
                pool.free_pair(d, h)
                assert pool.allocated == allocated0
        pool.empty_cache()
