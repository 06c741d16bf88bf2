"""Descriptor sets of destroyed algorithms are kept by their program and bound again for
its next algorithm (scopedgpu._caches.Programs: keep_spare, take_spare): one
vkUpdateDescriptorSets instead of a descriptor pool created, a set allocated and the pool
destroyed per algorithm. A kept set never serves another algorithm while submitted work
may still use it, a new algorithm computes over its own tensors, a sequence recorded with
the destroyed algorithm still refuses to run, and empty_cache() and close() free the
kept sets (live_objects()' cached_descriptor_sets)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu import _caches, _vk
from tests import shaders

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lifetime"))
from endless import busy_sequence, flag_tensor, set_flag

N = 100


def _kept(mgr: sg.Manager) -> int:
    return mgr.live_objects()["cached_descriptor_sets"]


def _saxpy(mgr: sg.Manager, glsl, seed: int):
    # Small integers: a * x + y is exact with or without a fused multiply-add (the
    # H200 fuses it, numpy does not).
    rng = np.random.default_rng(seed)
    x = mgr.tensor(rng.integers(-1000, 1000, N).astype(np.float32))
    y = mgr.tensor(rng.integers(-1000, 1000, N).astype(np.float32))
    o = mgr.empty(N)
    algo = mgr.algorithm([x, y, o], glsl(shaders.SAXPY), push_consts=[float(seed)])
    return x, y, o, algo


def _run(mgr: sg.Manager, x, y, o, algo) -> None:
    mgr.run(sg.OpTensorSyncDevice([x, y]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([o]))


def test_a_new_algorithm_takes_the_set_of_a_destroyed_one_and_binds_its_own_tensors(mgr,
                                                                                      glsl):
    x1, y1, o1, a1 = _saxpy(mgr, glsl, 2)
    _run(mgr, x1, y1, o1, a1)
    want1 = np.float32(2) * x1.data() + y1.data()
    np.testing.assert_array_equal(o1.data(), want1)
    before = _kept(mgr)
    a1.destroy()
    assert _kept(mgr) == before + 1
    x2, y2, o2, a2 = _saxpy(mgr, glsl, 3)
    assert _kept(mgr) == before, "the second algorithm did not take the kept set"
    _run(mgr, x2, y2, o2, a2)
    np.testing.assert_array_equal(o2.data(), np.float32(3) * x2.data() + y2.data())
    # The first output was not written again through the set's old bindings.
    mgr.run(sg.OpTensorSyncLocal([o1]))
    np.testing.assert_array_equal(o1.data(), want1)
    a2.destroy()
    for t in (x1, y1, o1, x2, y2, o2):
        t.destroy()


def test_a_set_is_not_kept_while_submitted_work_uses_it(mgr):
    flag = flag_tensor(mgr)
    seq = busy_sequence(mgr, flag)
    algo = seq._ops[0].algorithm
    before = _kept(mgr)
    seq.eval_async()
    try:
        algo.destroy()                 # released once the dispatch completed
        assert seq.is_running
        assert _kept(mgr) == before, "kept (for another algorithm) while still in use"
        # Another algorithm of the same program meanwhile makes a set of its own.
        other = mgr.algorithm([flag], algo._spirv, workgroup=(1, 1, 1))
        assert other._handle.dset is not None
    finally:
        set_flag(flag)
    assert seq.eval_await(60)
    assert _kept(mgr) == before + 1
    other.destroy()
    assert _kept(mgr) == before + 2
    seq.destroy()
    flag.destroy()


def test_a_sequence_recorded_with_the_destroyed_algorithm_still_refuses_to_run(mgr, glsl):
    x1, y1, o1, a1 = _saxpy(mgr, glsl, 2)
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([x1, y1])).record(sg.OpAlgoDispatch(a1))
        seq.eval()
        a1.destroy()
        x2, y2, o2, a2 = _saxpy(mgr, glsl, 5)      # takes a1's set
        with pytest.raises(sg.DestroyedError, match="Algorithm"):
            seq.eval()
    _run(mgr, x2, y2, o2, a2)
    np.testing.assert_array_equal(o2.data(), np.float32(5) * x2.data() + y2.data())
    a2.destroy()
    for t in (x1, y1, o1, x2, y2, o2):
        t.destroy()


def test_at_most_dsets_kept_and_empty_cache_frees_them(mgr, glsl, monkeypatch):
    monkeypatch.setattr(_caches, "DSETS_KEPT", 2)
    tensors = [mgr.tensor(np.arange(N, dtype=np.float32)) for _ in range(4)]
    algos = [mgr.algorithm([t], glsl(shaders.ADD_ONE)) for t in tensors]
    base = mgr.live_objects()
    for a in algos:
        a.destroy()
    after = mgr.live_objects()
    assert after["cached_descriptor_sets"] == base["cached_descriptor_sets"] + 2
    assert after["descriptor_pools"] == base["descriptor_pools"] - 4 + 2
    assert mgr.live_objects(caches=False)["descriptor_pools"] == base["descriptor_pools"] - 4
    mgr.empty_cache()
    assert mgr.live_objects()["cached_descriptor_sets"] == 0
    assert mgr.live_objects()["descriptor_pools"] == base["descriptor_pools"] - 4
    for t in tensors:
        t.destroy()


def test_close_frees_the_kept_sets(glsl):
    before = sg.live_vulkan_objects()["descriptor_pools"]
    with sg.Manager() as m:
        t = m.tensor(np.arange(N, dtype=np.float32))
        m.algorithm([t], glsl(shaders.ADD_ONE)).destroy()
        assert m.live_objects()["cached_descriptor_sets"] == 1
        assert sg.live_vulkan_objects()["descriptor_pools"] == before + 1
    assert sg.live_vulkan_objects()["descriptor_pools"] == before


def test_an_algorithm_finds_its_pipeline_by_its_signatures_key_or_builds_it_again(mgr,
                                                                                   glsl):
    # The second algorithm of a signature takes the pipeline by the key kept with the
    # signature (Programs.key_of); after empty_cache() dropped that pipeline, the next one
    # builds it again, and each computes over its own tensors.
    x1, y1, o1, a1 = _saxpy(mgr, glsl, 2)
    pipelines = mgr.live_objects()["pipelines"]
    x2, y2, o2, a2 = _saxpy(mgr, glsl, 3)
    assert mgr.live_objects()["pipelines"] == pipelines, "a second pipeline was built"
    assert a2._handle.program is a1._handle.program
    for x, y, o, a, s in ((x1, y1, o1, a1, 2), (x2, y2, o2, a2, 3)):
        _run(mgr, x, y, o, a)
        np.testing.assert_array_equal(o.data(), np.float32(s) * x.data() + y.data())
    for obj in (a1, a2, x1, y1, o1, x2, y2, o2):
        obj.destroy()
    mgr.empty_cache()
    assert mgr.live_objects()["pipelines"] == pipelines - 1
    x3, y3, o3, a3 = _saxpy(mgr, glsl, 4)
    assert mgr.live_objects()["pipelines"] == pipelines
    _run(mgr, x3, y3, o3, a3)
    np.testing.assert_array_equal(o3.data(), np.float32(4) * x3.data() + y3.data())


def test_a_kept_set_bound_to_the_same_ranges_is_not_written_again(mgr, glsl, count_calls):
    # A service's request: tensors, algorithm, run, all destroyed. The next request of
    # the same shape gets the same pool ranges back (the same Allocation objects) and the
    # set the last algorithm left: its bindings already hold those ranges.
    calls = count_calls(_vk, "dset_rebind")
    seen = []
    for seed in (2, 3, 4, 5):
        x, y, o, algo = _saxpy(mgr, glsl, seed)
        seen.append([t.gpu_range for t in (x, y, o)])
        _run(mgr, x, y, o, algo)
        np.testing.assert_array_equal(o.data(), np.float32(seed) * x.data() + y.data())
        for obj in (algo, o, y, x):
            obj.destroy()
    # (the precondition: the pool handed the same ranges out each time)
    assert all(r is s for later in seen[1:] for r, s in zip(later, seen[0]))
    assert calls[0] == 0, f"{calls[0]} descriptor sets written again for the same ranges"


def test_a_kept_set_is_written_again_when_a_range_or_a_size_differs(mgr, glsl, count_calls):
    calls = count_calls(_vk, "dset_rebind")
    x, y, o, algo = _saxpy(mgr, glsl, 2)
    _run(mgr, x, y, o, algo)
    spirv = algo._spirv
    algo.destroy()
    # The same three ranges in another order: binding 0 is y now.
    swapped = mgr.algorithm([y, x, o], spirv, push_consts=[3.0])
    assert calls[0] == 1
    _run(mgr, y, x, o, swapped)
    np.testing.assert_array_equal(o.data(), np.float32(3) * y.data() + x.data())
    swapped.destroy()
    # The same ranges (size class) again, with tensors one element shorter: the ranges'
    # sizes differ, so the set is written again.
    for t in (o, y, x):
        t.destroy()
    rng = np.random.default_rng(7)
    x2 = mgr.tensor(rng.integers(-1000, 1000, N - 1).astype(np.float32))
    y2 = mgr.tensor(rng.integers(-1000, 1000, N - 1).astype(np.float32))
    o2 = mgr.empty(N - 1)
    assert x2.gpu_range is x.gpu_range and o2.gpu_range is o.gpu_range
    short = mgr.algorithm([x2, y2, o2], spirv, push_consts=[4.0])
    assert calls[0] == 2
    _run(mgr, x2, y2, o2, short)
    np.testing.assert_array_equal(o2.data(), np.float32(4) * x2.data() + y2.data())
    for obj in (short, o2, y2, x2):
        obj.destroy()
