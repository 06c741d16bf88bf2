"""live_objects(caches=False): the objects a program holds, apart from the manager's caches
(idle sequences, unused pipelines, memory blocks no tensor uses, descriptor sets of
destroyed algorithms)."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg
from tests import shaders

# What one entry of each cache holds in the shim's counts (csrc/sequence.c sg_seq_create
# without timestamps, csrc/pipeline.c sg_program_create and sg_dset_create,
# csrc/memory.c sg_block_create):
# written out here, not imported, so that a wrong share in the library fails the test.
SHARES = {
    "cached_sequences": {"command_pools": 1, "fences": 1},
    "cached_pipelines": {"shader_modules": 1, "descriptor_set_layouts": 1,
                         "pipeline_layouts": 1, "pipelines": 1},
    "cached_blocks": {"buffers": 1, "memory_blocks": 1},
    "cached_descriptor_sets": {"descriptor_pools": 1},
}
BIG = 300_000          # float32: 1.2 MiB, above the small size class (no bins)
N = 256
ITERATIONS = 4


def cached_share(total: dict[str, int]) -> dict[str, int]:
    """What the caches counted in `total` (live_objects()) hold, key by key."""
    share = dict.fromkeys(total, 0)
    for key, objects in SHARES.items():
        share[key] += total[key]
        for kind, per_entry in objects.items():
            share[kind] += per_entry * total[key]
    return share


def _diff(expected: dict[str, int], got: dict[str, int]) -> str:
    return ", ".join(f"{k} {expected[k]} expected, {got[k]} counted"
                     for k in expected if expected[k] != got[k])


def _iteration(mgr: sg.Manager, glsl, i: int) -> None:
    """Tensors of both size classes, three algorithms (one of a new pipeline: its
    specialization constants change with i) and three anonymous sequences alive at once,
    evaluated, checked against numpy, and destroyed."""
    x = np.arange(N, dtype=np.float32) + i
    big = np.arange(BIG, dtype=np.float32) % 1000
    with mgr.tensor(x) as a, mgr.tensor(np.ones(N, np.float32)) as b, mgr.empty(N) as o1, \
            mgr.empty(N) as o2, mgr.tensor(x) as c, mgr.tensor(big) as g, mgr.empty(BIG) as go:
        saxpy = mgr.algorithm([a, b, o1], glsl(shaders.SAXPY), push_consts=[2.0])
        scale = mgr.algorithm([a, o2], glsl(shaders.SCALE_SPEC), spec_consts=[float(i + 2), i])
        add = mgr.algorithm([c], glsl(shaders.ADD_ONE))   # the pipeline `keep_algo` uses
        seqs = [mgr.sequence() for _ in range(3)]
        seqs[0].record(sg.OpTensorSyncDevice([a, b])).record(sg.OpAlgoDispatch(saxpy))
        seqs[0].record(sg.OpAlgoDispatch(scale)).record(sg.OpTensorSyncLocal([o1, o2]))
        seqs[1].record(sg.OpTensorSyncDevice([g])).record(sg.OpMult([g, g, go]))
        seqs[1].record(sg.OpTensorSyncLocal([go]))
        seqs[2].record(sg.OpTensorSyncDevice([c])).record(sg.OpAlgoDispatch(add))
        seqs[2].record(sg.OpTensorSyncLocal([c]))
        for s in seqs:
            s.eval_async()
        for s in seqs:
            assert s.eval_await(30)
        np.testing.assert_array_equal(o1.data(), 2 * x + 1)
        np.testing.assert_array_equal(o2.data(), x * (i + 2) + i)
        np.testing.assert_array_equal(c.data(), x + 1)
        np.testing.assert_array_equal(go.data(), big * big)
        for s in seqs:
            s.destroy()
        for algo in (saxpy, scale, add):
            algo.destroy()


def test_user_counts_stay_at_baseline_while_the_caches_fill(mgr, glsl):
    # Long-lived objects, in blocks the loop's tensors share: a storage tensor of the
    # large class (device memory only) and one of the small class (next to ranges the
    # loop frees onto the bins), and an algorithm whose pipeline the loop uses too.
    with mgr.empty(BIG, kind="storage") as keep, mgr.empty(N, kind="storage"), \
            mgr.algorithm([keep], glsl(shaders.ADD_ONE)):
        base = mgr.live_objects(caches=False)
        # one block each (the storage tensors' zero fill may leave a cached staging block)
        assert base["tensors"] == 2 and base["buffers"] == base["memory_blocks"] == 2
        assert base["algorithms"] == 1 and base["pipelines"] == 1
        pipelines = mgr.live_objects()["pipelines"]
        for i in range(ITERATIONS):
            _iteration(mgr, glsl, i)
            user = mgr.live_objects(caches=False)
            total = mgr.live_objects()
            assert user == base, f"iteration {i}: {_diff(base, user)}"
            share = cached_share(total)
            expected = {k: user[k] + share[k] for k in total}
            assert total == expected, f"iteration {i}: {_diff(expected, total)}"
            # the shim's own count grows: each iteration leaves one more unused pipeline
            assert total["pipelines"] > pipelines, f"iteration {i}"
            pipelines = total["pipelines"]
        # Every cache held something: three idle sequences, the unused pipelines (SAXPY,
        # OpMult's, one SCALE_SPEC per iteration), and blocks no tensor uses, both an
        # empty one (the large class's staging block, its ranges merged) and at least
        # one whose ranges are all on the bins (the small class's staging block).
        assert total["cached_sequences"] >= 3
        assert total["cached_pipelines"] >= ITERATIONS + 2
        # the descriptor sets of the iteration's algorithms and OpMult's (each iteration
        # takes those of the one before), but SCALE_SPEC's: a new pipeline each time
        assert total["cached_descriptor_sets"] >= 3
        empty = len(mgr._state.pool.empty)
        assert empty >= 1 and total["cached_blocks"] > empty, (total["cached_blocks"], empty)
        # empty_cache() frees exactly what the caches were counted to hold; then both
        # forms agree, and are the baseline.
        mgr.empty_cache()
        after = mgr.live_objects()
        freed = {k: total[k] - after[k] for k in total}
        assert freed == share, _diff(share, freed)
        assert after == mgr.live_objects(caches=False) == base, _diff(base, after)


def test_both_forms_have_the_same_keys_and_read_zero_once_closed(mgr):
    keys = set(mgr.live_objects())
    assert set(mgr.live_objects(caches=False)) == keys
    assert {"cached_sequences", "cached_pipelines", "cached_blocks",
            "cached_descriptor_sets"} <= keys
    with pytest.raises(TypeError):
        mgr.live_objects(False)   # keyword only
    mgr.close()
    assert mgr.live_objects() == mgr.live_objects(caches=False) == dict.fromkeys(keys, 0)
