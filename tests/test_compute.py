"""End-to-end computations checked against numpy, and kp behaviours users rely on."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg
from tests import shaders


def test_spec_example(mgr, glsl):
    """The example of SPEC.md, verbatim apart from the shader."""
    spirv = glsl(shaders.SAXPY)
    a = mgr.tensor(np.arange(8, dtype=np.float32))
    b = mgr.tensor([2.0] * 8)
    out = mgr.tensor(np.zeros(8, dtype=np.float32))
    algo = mgr.algorithm([a, b, out], spirv, push_consts=[3.0])
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([a, b]))
        seq.record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([out]))
        seq.eval()
    np.testing.assert_array_equal(out.data(), 3.0 * np.arange(8, dtype=np.float32) + 2.0)


def test_multi_dispatch_pipeline(mgr, glsl):
    """Dependent dispatches, copies and a built-in op in one sequence: the barriers that
    scopedgpu inserts must make each step see the previous one's writes."""
    rng = np.random.default_rng(1)
    n = 10_000
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    tx, ty = mgr.tensor(x), mgr.tensor(y)
    t1 = mgr.empty(n, kind="storage")
    t2 = mgr.empty(n)
    t3 = mgr.empty(n)
    saxpy1 = mgr.algorithm([tx, ty, t1], glsl(shaders.SAXPY), push_consts=[2.0])
    add = mgr.algorithm([t1], glsl(shaders.ADD_ONE))
    saxpy2 = mgr.algorithm([t1, tx, t2], glsl(shaders.SAXPY), push_consts=[-1.0])
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([tx, ty]))
        seq.record(sg.OpAlgoDispatch(saxpy1))
        seq.record(sg.OpAlgoDispatch(add))
        seq.record(sg.OpAlgoDispatch(add))
        seq.record(sg.OpAlgoDispatch(saxpy2))
        seq.record(sg.OpMult([t2, tx, t3]))
        seq.record(sg.OpTensorCopy([t3, t2]))
        seq.record(sg.OpAlgoDispatch(add, push_consts=None))
        seq.record(sg.OpTensorSyncLocal([t2, t3]))
        seq.eval()
    s1 = 2.0 * x + y + 2.0
    s2 = -1.0 * s1 + x
    ref3 = s2 * x
    np.testing.assert_allclose(t3.data(), ref3, rtol=1e-5, atol=1e-5)
    # `add` ran on t1 again after the copy, so t2 is the plain copy of t3
    np.testing.assert_array_equal(t2.data(), t3.data())


def test_reeval_resubmits_without_rerecording(mgr, glsl):
    t = mgr.tensor(np.zeros(100, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo)).record(
        sg.OpTensorSyncLocal([t]))
    assert seq.is_recording
    seq.eval()
    assert not seq.is_recording
    np.testing.assert_array_equal(t.data(), 1.0)
    for k in range(2, 6):
        seq.eval()  # host data (k - 1) is synced up again, plus one
        assert not seq.is_recording
        np.testing.assert_array_equal(t.data(), float(k))
    t.data()[:] = 41.0  # the kp way of updating inputs
    seq.eval()
    np.testing.assert_array_equal(t.data(), 42.0)
    seq.destroy()


def test_chained_evals_keep_device_state(mgr, glsl):
    t = mgr.tensor(np.zeros(64, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    mgr.run(sg.OpTensorSyncDevice([t]))
    seq = mgr.sequence().record(sg.OpAlgoDispatch(algo))
    for _ in range(5):
        seq.eval()
    seq.destroy()
    mgr.run(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), 5.0)


@pytest.mark.parametrize("kind", ["device", "host", "storage"])
def test_tensor_kinds_round_trip(mgr, glsl, kind):
    data = np.linspace(-3, 3, 1000, dtype=np.float32)
    t = mgr.tensor(data, kind=kind)
    out = mgr.tensor(np.zeros_like(data))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    ops = [] if kind == "storage" else [sg.OpTensorSyncDevice([t])]
    mgr.run(*ops, sg.OpAlgoDispatch(algo), sg.OpTensorCopy([t, out]), sg.OpTensorSyncLocal([out]))
    np.testing.assert_array_equal(out.data(), data + 1)
    if kind == "host":
        mgr.run(sg.OpTensorSyncLocal([t]))
        np.testing.assert_array_equal(t.data(), data + 1)


def test_eval_with_op_clears_like_kp(mgr):
    a = mgr.tensor([1.0, 2.0, 3.0])
    b = mgr.tensor([4.0, 5.0, 6.0])
    out = mgr.tensor([0.0, 0.0, 0.0])
    seq = mgr.sequence("kp-style")
    seq.eval(sg.OpTensorSyncDevice([a, b]))
    seq.eval(sg.OpMult([a, b, out]))
    seq.eval(sg.OpTensorSyncLocal([out]))
    np.testing.assert_array_equal(out.data(), [4.0, 10.0, 18.0])
    mgr.delete_sequence("kp-style")


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
def test_opmult_dtypes(mgr, dtype):
    rng = np.random.default_rng(2)
    a = rng.integers(0, 1000, 333).astype(dtype)
    b = rng.integers(0, 1000, 333).astype(dtype)
    ta, tb, tc = mgr.tensor(a), mgr.tensor(b), mgr.empty(333, dtype)
    mgr.run(sg.OpTensorSyncDevice([ta, tb]), sg.OpMult([ta, tb, tc]), sg.OpTensorSyncLocal([tc]))
    np.testing.assert_array_equal(tc.data(), a * b)


# -- kp behaviours ---------------------------------------------------------------------

def test_list_gives_float32_and_tensor_t_keeps_dtype(mgr):
    assert mgr.tensor([1, 2, 3]).dtype == np.float32
    assert mgr.tensor([1.5, 2.5]).dtype == np.float32
    assert mgr.tensor(np.arange(3, dtype=np.int32)).dtype == np.int32
    t = mgr.tensor_t(np.arange(4, dtype=np.uint32))
    assert t.dtype == np.uint32 and t.shape == (4,) and len(t) == 4 and t.size_bytes() == 16
    assert mgr.tensor([1, 2], dtype=np.int32).dtype == np.int32


def test_int32_push_constants_stay_int32(mgr, glsl):
    """Kompute issue 425: int push constants were converted to float."""
    data = np.array([-5, 0, 7, 1 << 20], dtype=np.int32)
    t = mgr.tensor(data)
    push = np.array([-3, 2], dtype=np.int32)  # offset, mul
    algo = mgr.algorithm([t], glsl(shaders.PUSH_INT), push_consts=push)
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), data * 2 - 3)
    # an override at dispatch time, also int32
    mgr.run(sg.OpAlgoDispatch(algo, push_consts=np.array([100, 1], dtype=np.int32)),
            sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), data * 2 - 3 + 100)


def test_spec_consts_list_and_array(mgr, glsl):
    x = np.arange(20, dtype=np.float32)
    ti, to = mgr.tensor(x), mgr.empty(20)
    spirv = glsl(shaders.SCALE_SPEC)
    a1 = mgr.algorithm([ti, to], spirv, spec_consts=[2.5, 3])
    mgr.run(sg.OpTensorSyncDevice([ti]), sg.OpAlgoDispatch(a1), sg.OpTensorSyncLocal([to]))
    np.testing.assert_array_equal(to.data(), x * 2.5 + 3)
    a2 = mgr.algorithm([ti, to], spirv, spec_consts=np.array([0.5], dtype=np.float32))
    mgr.run(sg.OpAlgoDispatch(a2), sg.OpTensorSyncLocal([to]))
    np.testing.assert_array_equal(to.data(), x * 0.5)


@pytest.mark.parametrize("local", [1, 7, 64])
def test_default_workgroup_covers_tensor0_with_local_size(mgr, glsl, local):
    n = 1000
    t = mgr.tensor(np.zeros(n, dtype=np.uint32))
    algo = mgr.algorithm([t], glsl(shaders.INDEX), spec_consts=[local])
    assert algo.local_size == (local, 1, 1)
    assert algo.workgroup == ((n + local - 1) // local, 1, 1)
    mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), np.arange(1, n + 1, dtype=np.uint32))


def test_pipeline_cache_reuses_pipelines(mgr, glsl):
    spirv = glsl(shaders.ADD_ONE)
    t = mgr.tensor(np.zeros(4, dtype=np.float32))
    a1 = mgr.algorithm([t], spirv)
    pipelines = mgr.live_objects()["pipelines"]
    a2 = mgr.algorithm([t], spirv)
    assert mgr.live_objects()["pipelines"] == pipelines
    a1.destroy()
    a2.destroy()


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float16, np.int16, np.uint16,
                                   np.int8, np.uint8])
def test_optional_dtypes(mgr, dtype):
    feature = {np.float64: "float64", np.int64: "int64", np.float16: "float16",
               np.int16: "int16", np.uint16: "int16", np.int8: "int8", np.uint8: "int8"}[dtype]
    data = (np.arange(50) % 100).astype(dtype)
    if not getattr(mgr.device, feature):
        with pytest.raises(TypeError, match=feature):
            mgr.tensor(data)
        return
    t = mgr.tensor(data)
    out = mgr.empty(50, dtype)
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorCopy([t, out]), sg.OpTensorSyncLocal([out]))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.data(), data)


def test_timestamps(mgr, glsl):
    if not mgr.device.timestamps:
        pytest.skip("device has no timestamps on its compute queue")
    t = mgr.tensor(np.zeros(1000, dtype=np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    with mgr.sequence(timestamps=True) as seq:
        seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo)).record(
            sg.OpTensorSyncLocal([t]))
        seq.eval()
        ts = seq.timestamps()
    assert len(ts) == 4
    assert all(b >= a for a, b in zip(ts, ts[1:]))
    np.testing.assert_array_equal(t.data(), 1.0)


def test_devices_and_info(mgr):
    devs = sg.devices()
    assert devs and any(d.name == mgr.device.name for d in devs)
    d = mgr.device
    assert d.type in ("discrete", "integrated", "virtual", "cpu", "other")
    assert d.memory_bytes > 0 and d.max_workgroup_invocations > 0
    assert len(d.max_workgroup_size) == 3 and len(d.max_workgroup_count) == 3
    assert isinstance(d.api_version, str) and d.api_version.count(".") == 2


def test_atomic_add_histogram(mgr, glsl):
    """atomicAdd on a storage buffer (Device scope): passes the validation layer and counts
    right (VUID-RuntimeSpirv-vulkanMemoryModel-06265 when the device scope of the memory
    model is not enabled alongside the model)."""
    src = """
    #version 450
    layout(local_size_x = 64) in;
    layout(binding = 0) readonly buffer V { uint v[]; };
    layout(binding = 1) buffer H { uint h[]; };
    void main() {
        uint i = gl_GlobalInvocationID.x;
        if (i < v.length()) atomicAdd(h[v[i] % 16u], 1u);
    }"""
    vals = np.random.default_rng(3).integers(0, 1000, 5000).astype(np.uint32)
    v = mgr.tensor(vals)
    h = mgr.tensor(np.zeros(16, dtype=np.uint32))
    algo = mgr.algorithm([v, h], glsl(src))
    mgr.run(sg.OpTensorSyncDevice([v, h]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([h]))
    np.testing.assert_array_equal(h.data(), np.bincount(vals % 16, minlength=16))
