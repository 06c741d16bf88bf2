"""scopedgpu.dask: one Manager per worker, kernels over the blocks of a dask array, checked
against numpy; a worker killed mid-task; the Manager closed with its worker."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import scopedgpu as sg

# dask and distributed come with the dask, test and dev extras; without them, skip.
da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

import scopedgpu.dask as sgd  # noqa: E402

SAXPY = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(set = 0, binding = 2) writeonly buffer O { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(o.length())) o[i] = p.a * x[i] + y[i];
}
"""


def _counts(dask_worker) -> dict:
    """On a worker (through client.run): its Manager's live objects, cache emptied."""
    gc.collect()
    m = sgd.manager(dask_worker)
    m.empty_cache()
    return dict(m.live_objects(), device=m.device.index)


def test_worker_index_and_device_choice():
    assert sgd._worker_index(0, "tcp://a:1") == 0
    assert sgd._worker_index("worker-3", "tcp://a:1") == 3
    assert sgd._worker_index("gpu", "tcp://a:1") == sgd._worker_index("gpu", "tcp://a:1")
    n = len(sg.devices())
    assert sgd.pick_device(0) == sgd.pick_device(n)   # round-robin wraps around
    assert sgd.pick_device(1) in [d.index for d in sg.devices()]


def test_map_blocks_in_process_worker_closes_its_manager(glsl):
    """Threads-only cluster, so that the worker's Manager lives in this process: it is
    opened by the plugin, shared by the tasks, and closed with the worker."""
    before = sg.live_vulkan_objects()["devices"]
    x = np.arange(10_007, dtype=np.float32)
    y = np.linspace(-1, 1, 10_007, dtype=np.float32)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        sgd.register(client)
        ids = client.run(lambda dask_worker: id(sgd.manager(dask_worker)))
        out = sgd.map_blocks(glsl(SAXPY), da.from_array(x, chunks=1000),
                             da.from_array(y, chunks=1000), push_consts=[3.0])
        assert out.numblocks == (11,)
        got = out.compute()
        # the same Manager
        assert client.run(lambda dask_worker: id(sgd.manager(dask_worker))) == ids
        assert sg.live_vulkan_objects()["devices"] == before + 1
    np.testing.assert_allclose(got, 3 * x + y, rtol=1e-6)
    assert sg.live_vulkan_objects()["devices"] == before           # closed with the worker


def _flaky_block(block: np.ndarray, marker: str, spirv: bytes) -> np.ndarray:
    """Doubles a block on the worker's GPU; the first call anywhere kills its worker
    process mid-task: tensors made, dispatch submitted, nothing waited for."""
    m = sgd.manager()
    with m.tensor(block) as tx, m.tensor(block) as ty, m.empty(block.size) as to:
        with m.algorithm([tx, ty, to], spirv, push_consts=[1.0]) as algo:
            with m.sequence() as seq:
                seq.record(sg.OpTensorSyncDevice([tx, ty])).record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([to]))
                seq.eval_async()
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.close(fd)
                    os._exit(1)
                seq.eval_await()
                return to.numpy()


def test_worker_killed_mid_task_rerun_elsewhere_survivor_leaks_nothing(tmp_path, glsl):
    spirv = glsl(SAXPY)
    marker = str(tmp_path / "killed")
    x = np.arange(64 * 1000, dtype=np.float32)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        sgd.register(client)
        warm = sgd.map_blocks(spirv, da.from_array(x[:128], chunks=64),
                              da.from_array(x[:128], chunks=64), push_consts=[1.0])
        np.testing.assert_array_equal(warm.compute(), 2 * x[:128])
        before = client.run(_counts)
        assert len(before) == 2
        # meta given: dask must not call _flaky_block on the client to learn its output
        out = da.from_array(x, chunks=4000).map_blocks(_flaky_block, marker, spirv,
                                                       meta=np.empty((0,), np.float32))
        got = out.compute()
        assert os.path.exists(marker)                  # one worker died mid-task
        np.testing.assert_array_equal(got, 2 * x)      # and its task ran again elsewhere
        client.wait_for_workers(2, timeout=60)         # the nanny restarted it
        after = client.run(_counts)
    survivors = set(before) & set(after)
    assert len(survivors) == 1, (before.keys(), after.keys())
    for addr in survivors:
        assert after[addr] == before[addr], f"worker {addr} leaked: {after[addr]} != {before[addr]}"


def test_scaling_task_with_committed_spirv():
    """scopedgpu/bench/dask_scaling.py's task, outside a worker (the process-wide Manager), with the
    SPIR-V committed next to it: the results its client checks are right."""
    import importlib.util
    from tests.conftest import ROOT
    path = os.path.join(ROOT, "scopedgpu", "bench", "dask_scaling.py")
    spec = importlib.util.spec_from_file_location("dask_scaling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    spirv = open(os.path.join(ROOT, "scopedgpu", "bench", "shaders", "lcg_fill.spv"), "rb").read()
    assert sgd._fallback is None or sgd._fallback.closed   # no test opened it before
    before = sg.live_vulkan_objects()["devices"]
    try:
        for seed, n, iters in ((5, 70_000, 33), (2**31 + 7, 4096, 1)):
            sample, device = mod.task(seed, n, iters, spirv)
            assert np.array_equal(sample, mod.expected(n, seed, iters))
            assert device == sgd._fallback.device.index
        assert sg.live_vulkan_objects()["devices"] == before + 1
    finally:
        sgd._fallback.close()
    assert sg.live_vulkan_objects()["devices"] == before


def test_map_blocks_without_a_cluster_and_an_empty_block(glsl):
    """Dask's threaded scheduler (no worker, no plugin): the tasks share one process-wide
    Manager; an empty block dispatches nothing."""
    assert sgd._fallback is None or sgd._fallback.closed
    before = sg.live_vulkan_objects()["devices"]
    x = np.arange(3001, dtype=np.float32)
    y = -x / 2
    chunks = ((1000, 0, 2001),)
    try:
        out = sgd.map_blocks(glsl(SAXPY), da.from_array(x, chunks=chunks),
                             da.from_array(y, chunks=chunks), push_consts=[0.5])
        np.testing.assert_array_equal(out.compute(scheduler="threads"), np.zeros_like(x))
        assert sg.live_vulkan_objects()["devices"] == before + 1
        assert sgd._fallback.live_objects()["tensors"] == 0
    finally:
        sgd._fallback.close()
    assert sg.live_vulkan_objects()["devices"] == before
