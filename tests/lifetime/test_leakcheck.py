"""One leak test per kind of object the shim counts, and meta-tests of the harness."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import scopedgpu as sg
from leakcheck import check_release
from lt_shaders import add_one_spirv

SPEC = """#version 450
layout(local_size_x = 32) in;
layout(constant_id = 0) const float K = 1.0;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < a.length()) a[i] += K; }
"""


@pytest.mark.parametrize("kind", ["device", "host", "storage"])
def test_tensors_buffers_and_memory(mgr, kind):
    # 2 MiB tensors come from the large pool: at least one block (buffer + memory) each
    # kind, given back by empty_cache() once the tensors are destroyed.
    check_release(mgr, lambda: mgr.tensor(np.ones(512 * 1024, np.float32), kind=kind),
                  n=6, grows={"tensors": 6, "buffers": 1, "memory_blocks": 1,
                              "process_buffers": 1, "pool_allocations": 6})


def test_algorithms_pipelines_and_descriptor_pools(mgr):
    t = mgr.tensor(np.zeros(64, np.float32))
    spirv = sg.compile_glsl(SPEC)
    values = itertools.count(1)
    # Each specialization value is a new pipeline (module, set layout, layout, pipeline);
    # each algorithm owns one descriptor pool.
    check_release(mgr, lambda: mgr.algorithm([t], spirv, spec_consts=[float(next(values))]),
                  n=5, grows={"algorithms": 5, "pipelines": 5, "shader_modules": 5,
                              "descriptor_set_layouts": 5, "pipeline_layouts": 5,
                              "descriptor_pools": 5})
    t.destroy()


def test_anonymous_sequences_command_pools_and_fences(mgr):
    check_release(mgr, lambda: mgr.sequence(), n=8,
                  grows={"sequences": 8, "command_pools": 8, "fences": 8})


def test_timestamp_sequences_query_pools(mgr):
    if not mgr.device.timestamps:
        pytest.skip(f"{mgr.device.name} has no timestamps on its compute queue")
    check_release(mgr, lambda: mgr.sequence(timestamps=True), n=4,
                  grows={"sequences": 4, "query_pools": 4, "command_pools": 4})


def test_named_sequences_until_deleted(mgr):
    names = (f"s{i}" for i in itertools.count())
    check_release(mgr, lambda: mgr.sequence(next(names)), n=5,
                  grows={"sequences": 5, "command_pools": 5, "fences": 5},
                  release=lambda s: mgr.delete_sequence(s.name))


def test_evaluated_sequences_with_ops(mgr):
    a = mgr.tensor(np.arange(64, dtype=np.float32))
    b = mgr.empty(64)
    algo = mgr.algorithm([a, b], add_one_spirv(np.float32))

    def make():
        seq = mgr.sequence()
        seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpMult([a, a, b])).record(sg.OpTensorSyncLocal([b]))
        seq.eval()
        return seq

    # OpMult builds an algorithm the sequence owns: destroyed with the sequence.
    check_release(mgr, make, n=5, grows={"sequences": 5, "algorithms": 5, "fences": 5})
    np.testing.assert_array_equal(b.data(), np.arange(64, dtype=np.float32) ** 2)
    for o in (algo, a, b):
        o.destroy()


# -- the harness itself -------------------------------------------------------------------
class _Holder:
    kept: list = []


def test_meta_harness_fails_when_objects_are_held(mgr):
    """A test that keeps its objects alive must fail the check."""
    def make():
        t = mgr.tensor(np.ones(16, np.float32))
        _Holder.kept.append(t)
        return t
    with pytest.raises(AssertionError, match="leak"):
        check_release(mgr, make, n=3, grows={"tensors": 3}, drop_only=True)
    # Released through a function that forgets to release: the same.
    with pytest.raises(AssertionError, match="leak"):
        check_release(mgr, lambda: _Holder.kept.append(mgr.sequence()) or _Holder.kept[-1],
                      n=3, grows={"sequences": 3}, release=lambda s: None)
    for obj in _Holder.kept:
        obj.destroy()
    _Holder.kept.clear()


def test_meta_harness_fails_when_it_counts_the_wrong_thing(mgr):
    with pytest.raises(AssertionError, match="not counting"):
        check_release(mgr, lambda: mgr.tensor([1.0]), n=3, grows={"pipelines": 1})
