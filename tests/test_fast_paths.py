"""Behaviour kept by the fast paths of issue 4: recycled command pools and fences, the
work done at record time instead of at every eval, and the weakref registry of children."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import scopedgpu as sg
from tests.lifetime.endless import FLAG_GLSL, STOPPABLE, flag_tensor, set_flag


def test_recycled_sequences_run_correctly_and_are_freed_by_empty_cache(mgr):
    a = mgr.tensor(np.arange(8, dtype=np.float32))
    b = mgr.tensor(np.full(8, 2, dtype=np.float32))
    out = mgr.tensor(np.zeros(8, dtype=np.float32))
    base = mgr.live_objects()
    for i in range(40):
        a.data()[:] = i
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([a, b]))
            seq.record(sg.OpMult([a, b, out]))
            seq.record(sg.OpTensorSyncLocal([out]))
            seq.eval()
        np.testing.assert_array_equal(out.data(), np.full(8, 2 * i, dtype=np.float32))
    live = mgr.live_objects()
    cached = live["cached_sequences"]
    assert cached > 0 and live["sequences"] == 0
    # the shim's counts include the idle pools and fences kept for reuse
    assert live["command_pools"] == base["command_pools"] + cached
    assert live["fences"] == base["fences"] + cached
    mgr.empty_cache()
    after = mgr.live_objects()
    assert after["cached_sequences"] == 0
    assert after["command_pools"] == base["command_pools"]
    assert after["fences"] == base["fences"]
    for t in (a, b, out):
        t.destroy()


def test_eval_checks_destroyed_objects_every_time(mgr):
    a = mgr.tensor(np.ones(4, dtype=np.float32))
    b = mgr.tensor(np.ones(4, dtype=np.float32))
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorCopy([a, b]))
        seq.eval()
        seq.eval()
        b.destroy()
        with pytest.raises(sg.DestroyedError, match="destroyed"):
            seq.eval()
        assert not seq.is_running
    a.destroy()


def test_rerecording_after_clear_uses_the_new_ops(mgr):
    a = mgr.tensor(np.arange(4, dtype=np.float32))
    with mgr.sequence() as seq:
        seq.eval(sg.OpTensorSyncDevice([a]))
        a.data()[:] = 0
        seq.eval(sg.OpTensorSyncLocal([a]))
        np.testing.assert_array_equal(a.data(), np.arange(4, dtype=np.float32))
        seq.eval()   # re-evaluates the last recorded op only
        np.testing.assert_array_equal(a.data(), np.arange(4, dtype=np.float32))
    a.destroy()


def test_unreachable_children_return_to_the_pool(mgr):
    before = mgr.memory_stats()["allocated_bytes"]
    for _ in range(100):
        mgr.tensor(np.ones(64, dtype=np.float32))   # dropped at once
    class Cycle:
        pass
    c = Cycle()
    c.self = c
    c.t = mgr.tensor(np.ones(64, dtype=np.float32))
    del c
    gc.collect()
    assert mgr.memory_stats()["allocated_bytes"] == before
    assert mgr.live_objects()["tensors"] == 0


def test_running_sequence_defers_the_release_of_its_tensor(mgr):
    """A tensor destroyed while a sequence that uses it runs: gone for Python at once,
    its memory held (a pending release) while the sequence runs, released as soon as the
    sequence is seen complete (eval_await), not only when the sequence is destroyed. The
    sequence's first dispatch spins until the test sets a flag (tests/lifetime/endless.py),
    so it is certainly running while the intermediate states are checked."""
    flag = flag_tensor(mgr)
    busy = mgr.algorithm([flag], sg.compile_glsl(FLAG_GLSL), workgroup=STOPPABLE)
    before = mgr.memory_stats()["allocated_bytes"]
    a = mgr.tensor(np.arange(1 << 16, dtype=np.float32))
    held = mgr.memory_stats()["allocated_bytes"]
    assert held - before >= 2 * a.nbytes          # device memory and staging
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(busy))
    seq.record(sg.OpTensorSyncLocal([a]))
    assert mgr.live_objects()["pending_releases"] == 0
    seq.eval_async()
    try:
        a.destroy()
        assert a.destroyed and seq.is_running
        live = mgr.live_objects()
        assert live["tensors"] == 1                   # the flag: a is gone for Python...
        assert live["pending_releases"] == 1          # ...its release waits for the fence
        assert mgr.memory_stats()["allocated_bytes"] == held
        assert not seq.eval_await(timeout=0.05)       # a timed-out await releases nothing
        assert seq.is_running and mgr.live_objects()["pending_releases"] == 1
        assert mgr.memory_stats()["allocated_bytes"] == held
    finally:
        set_flag(flag)                                # also when an assertion failed
    assert seq.eval_await(timeout=60)
    assert not seq.is_running and not seq.destroyed
    assert mgr.live_objects()["pending_releases"] == 0          # released at the await
    assert mgr.memory_stats()["allocated_bytes"] == before
    seq.destroy()
    assert mgr.live_objects()["pending_releases"] == 0
    assert mgr.memory_stats()["allocated_bytes"] == before
    busy.destroy()
    flag.destroy()


def test_close_with_cached_sequences_leaves_nothing():
    from scopedgpu.manager import live_vulkan_objects
    before = live_vulkan_objects()
    m = sg.Manager()
    for _ in range(3):
        with m.sequence() as s:
            s.eval(sg.OpTensorSyncDevice([m.tensor([1.0])]))
    m.close()
    gc.collect()
    assert live_vulkan_objects() == before


def test_large_device_tensors_import_their_host_copy(mgr):
    n = (8 << 20) // 4
    a = mgr.tensor(np.arange(n, dtype=np.float32))
    b = mgr.tensor(np.full(n, 3, dtype=np.float32))
    out = mgr.empty(n)
    if not mgr.device.host_import_alignment:
        pytest.skip("the device cannot import host memory (VK_EXT_external_memory_host)")
    assert mgr.memory_stats()["imported_blocks"] == 3
    assert a.data().ctypes.data % mgr.device.host_import_alignment == 0
    mgr.run(sg.OpTensorSyncDevice([a, b]), sg.OpMult([a, b, out]), sg.OpTensorSyncLocal([out]))
    np.testing.assert_array_equal(out.data(), np.arange(n, dtype=np.float32) * 3)
    view = out.data()
    for t in (a, b, out):
        t.destroy()
    assert mgr.memory_stats()["imported_blocks"] == 0
    assert view[5] == 15   # the host copy outlives the tensor and its import


def test_reused_command_buffers_match_what_was_recorded(mgr):
    from scopedgpu._shaders import builtin_spirv
    spirv = builtin_spirv("saxpy")
    x = mgr.tensor(np.ones(64, dtype=np.float32))
    y = mgr.tensor(np.zeros(64, dtype=np.float32))
    mgr.run(sg.OpTensorSyncDevice([x, y]))
    algo = mgr.algorithm([x, y], spirv, workgroup=(1, 1, 1), push_consts=[2.0])
    expect = np.zeros(64, dtype=np.float32)
    for a in (2.0, 2.0, 3.0, 2.0, 5.0, 5.0):
        with mgr.sequence() as seq:      # recycled command buffers, same or other pushes
            seq.eval(sg.OpAlgoDispatch(algo, push_consts=[a]))
        expect += a
    mgr.run(sg.OpTensorSyncLocal([y]))
    np.testing.assert_array_equal(y.data(), expect)
    # A new algorithm over other tensors never reuses the old recording.
    algo.destroy()
    z = mgr.tensor(np.zeros(64, dtype=np.float32))
    mgr.run(sg.OpTensorSyncDevice([z]))
    algo2 = mgr.algorithm([x, z], spirv, workgroup=(1, 1, 1), push_consts=[2.0])
    with mgr.sequence() as seq:
        seq.eval(sg.OpAlgoDispatch(algo2))
    mgr.run(sg.OpTensorSyncLocal([y, z]))
    np.testing.assert_array_equal(z.data(), np.full(64, 2, dtype=np.float32))
    np.testing.assert_array_equal(y.data(), expect)
    for o in (algo2, x, y, z):
        o.destroy()


def test_staged_transfers_with_threaded_copies(mgr, monkeypatch):
    """Without host-memory import, large host copies go through staging with a copy split
    over threads; the data must come back intact."""
    import os

    import scopedgpu._transfer as transfer_mod
    monkeypatch.setattr(mgr._state.pool, "import_align", 0)
    monkeypatch.setattr(transfer_mod, "PARALLEL_COPY_MIN", 1 << 20)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    n = (3 << 20) // 4 + 5
    src = np.random.default_rng(0).random(n, dtype=np.float32)
    t = mgr.tensor(src)
    assert not t._zero_copy
    with mgr.sequence() as seq:
        seq.eval(sg.OpTensorSyncDevice([t]))
        t.data()[:] = 0
        seq.eval(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), src)
    t.destroy()


# -- issue 24: the per-request fast paths leave what the full paths leave --------------

GAPPED = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float a; layout(offset = 8) float b; float c; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < y.length()) y[i] = p.a * x[i] + p.b - p.c;
}
"""


def _algorithm_state(algo):
    return (algo.push_bytes, algo.local_size, algo.workgroup, algo.dispatch_defaults,
            algo._spec, algo.parts)


def _message(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("push", [[1.5, 0.25, -0.0], (2.0, 1e30, 3.5), [0.5, 2, 1.0],
                                  [np.float32(2.0), 1.0, 1.0], np.array([2, 7, 1, 1], "f4")])
def test_algorithms_derived_once_per_module_match_the_full_path(mgr, glsl, push):
    """The second algorithm of a module takes what the first derived (Reflections.derived);
    clearing it gives the full path again: same bytes, sizes and results, and the same
    errors for bad arguments on either path."""
    spirv = glsl(GAPPED)
    x = np.linspace(-4, 4, 200, dtype=np.float32)
    tx = mgr.tensor(x)
    derived = mgr._state.reflections.derived
    algos, outs = [], []
    for clear in (True, False, True, False):
        if clear:
            derived.clear()
        ty = mgr.empty(200)
        algo = mgr.algorithm([tx, ty], spirv, push_consts=push)
        assert bytes(spirv) in derived
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
            seq.record(sg.OpTensorSyncLocal([ty])).eval()
        algos.append(algo)
        outs.append(ty)
    abc = [push[0], push[2], push[3]] if isinstance(push, np.ndarray) else push
    a, b, c = (np.float32(v) for v in abc)
    want = (a * x + b) - c
    # numpy's answer within rounding (a GPU may fuse a * x + b into one FMA: the H200 did,
    # 1 ulp apart at 8 of 200 elements), and every path's bit for bit the same.
    np.testing.assert_allclose(outs[0].data(), want, rtol=1e-6, atol=1e-6)
    for algo, ty in zip(algos, outs):
        assert _algorithm_state(algo) == _algorithm_state(algos[0])
        np.testing.assert_array_equal(ty.data(), outs[0].data())
    ty = outs[0]
    bad = [lambda: mgr.algorithm([tx], spirv, push_consts=push),
           lambda: mgr.algorithm([tx, ty], spirv, push_consts=[1.0, 2.0]),
           lambda: mgr.algorithm([tx, ty], spirv, push_consts=[1.0, 2.0, 1e39]),
           lambda: mgr.algorithm([tx, ty], spirv, push_consts=[1.0, "2", 3.0]),
           lambda: mgr.algorithm([tx, ty], spirv),
           lambda: mgr.algorithm([tx, ty], spirv, push_consts=[1.0, 2.0, 3.0], workgroup=0),
           lambda: sg.OpAlgoDispatch(algos[0], push_consts=[1.0, 2.0, 3.0, 4.0]),
           lambda: sg.OpAlgoDispatch(algos[0], push_consts=[float("1e39"), 2.0, 3.0])]
    for fn in bad:
        mgr.algorithm([tx, ty], spirv, push_consts=push).destroy()
        assert bytes(spirv) in derived
        memo = _message(fn)
        derived.clear()
        assert _message(fn) == memo
    for o in (*algos, *outs, tx):
        o.destroy()


@pytest.mark.parametrize("values", [[0.0], [-0.0], [1.5], [float("nan")], [float("inf")],
                                    [-float("inf")], [3.4028234663852886e38], [1e-45],
                                    [5e-324], [3.4028235e38], [3.5e38], [1e300], [2], [True],
                                    [np.float32(1.0)], [1.0, 2.0], []])
def test_float_push_packing_matches_the_general_path(mgr, glsl, values):
    """The one-struct packing of a block of float32 scalars gives the bytes push_bytes
    gives, and declines (None) every value the general path refuses or converts."""
    from scopedgpu.algorithm import _float_block, _pack_floats, push_bytes
    info = mgr.shader_info(glsl(GAPPED))
    block = _float_block(info)
    assert block is not None and block[1].size == info.push_constant_size == 16
    vals = [values[0], 1.0, 2.0] if len(values) == 1 else values
    fast = _pack_floats(block, vals)
    try:
        general = push_bytes(vals, "w", info)
    except (TypeError, ValueError):
        general = None
    if fast is not None:
        assert fast == general
    else:
        assert general is None or any(type(v) is not float for v in vals) \
            or len(vals) != 3


def test_float_push_packing_declines_other_blocks(mgr, glsl):
    from scopedgpu.algorithm import _float_block
    from tests.shaders import PUSH_INT, SAXPY
    assert _float_block(mgr.shader_info(glsl(PUSH_INT))) is None
    block = _float_block(mgr.shader_info(glsl(SAXPY)))
    assert block is not None and block[0] == 1


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32, np.float64, float, int,
                                   "float32", np.dtype(np.int32)])
@pytest.mark.parametrize("n", [1, 1000, (4 << 20) // 8 - 1, (4 << 20) // 8])
def test_empty_fast_path_matches_tensor_of_zeros(mgr, dtype, n):
    """mgr.empty() of a small 1-D shape takes numpy's zeros as its host copy; its tensor is
    what mgr.tensor(np.zeros(...)) makes, host and device zeros alike."""
    try:
        want = mgr.tensor(np.zeros(n, dtype=dtype))
    except TypeError:
        pytest.skip(f"{np.dtype(dtype)} is not supported on this device")
    t = mgr.empty(n, dtype)
    assert (t.shape, t.dtype, t.kind, t.nbytes) == (want.shape, want.dtype, want.kind,
                                                     want.nbytes)
    with mgr.sequence() as seq:
        seq.eval(sg.OpTensorSyncLocal([t, want]))
    np.testing.assert_array_equal(t.data(), want.data())
    assert not t.data().any()
    t.destroy()
    want.destroy()


def test_empty_keeps_its_errors(mgr):
    for shape, error, match in ((0, ValueError, "at least one element"),
                                (-1, ValueError, "negative"),
                                (10**13, sg.OutOfMemoryError, "40000000000000 bytes"),
                                (True, TypeError, "integers"), (2.5, TypeError, "integers")):
        with pytest.raises(error, match=match):
            mgr.empty(shape)
    with pytest.raises(TypeError):
        mgr.empty(4, [("a", np.float32), ("b", np.int8)])
    assert mgr.live_objects()["tensors"] == 0


def test_recorder_fast_accesses_match_use(monkeypatch):
    """use_copy(), use_compute() and use_fill() insert the barriers use() would, and leave
    the same state, over random access patterns."""
    import random

    from scopedgpu import _record
    calls: list = []
    monkeypatch.setattr(_record._vk, "seq_barrier", lambda h, *a: calls.append((h, a)))
    rng = random.Random(24)
    allocs = [object() for _ in range(5)]
    for _ in range(300):
        fast, slow = _record.Recorder("fast"), _record.Recorder("slow")
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.5:
                src, dst = rng.sample(allocs, 2)
                fast.use_copy(src, dst)
                slow.use([(src, _record.STAGE_TRANSFER, False),
                          (dst, _record.STAGE_TRANSFER, True)])
            elif rng.random() < 0.7:
                ranges = [rng.choice(allocs) for _ in range(rng.randint(0, 3))]
                fast.use_compute(ranges)
                slow.use([(a, _record.STAGE_COMPUTE, True) for a in ranges])
            else:
                a = rng.choice(allocs)
                fast.use_fill(a)
                slow.use([(a, _record.STAGE_TRANSFER, True)])
            assert [a for h, a in calls if h == "fast"] == [a for h, a in calls if h == "slow"]
            assert (fast.written, fast.read, fast.src_stages, fast.src_access) == \
                (slow.written, slow.read, slow.src_stages, slow.src_access)
        calls.clear()


def test_algorithm_signatures_skip_only_checks_that_passed(mgr, glsl, monkeypatch):
    """An algorithm over tensors of the count, dtypes and sizes an earlier one of the same
    module was made with (a signature in Reflections.derived) skips the binding, dtype,
    size and workgroup checks: it gets the full path's workgroup and results, and tensor
    lists that differ in any of those, or in reinterpret=, get the full path's errors."""
    from scopedgpu.algorithm import Algorithm
    spirv = glsl(GAPPED)
    derived = mgr._state.reflections.derived
    x = np.linspace(-4, 4, 200, dtype=np.float32)
    tx, ty, short = mgr.tensor(x), mgr.empty(200), mgr.empty(70)
    ints = mgr.tensor(np.arange(200, dtype=np.int32))
    push = [1.5, 0.25, -0.0]
    full_checks = []
    check = Algorithm._check_bindings
    monkeypatch.setattr(Algorithm, "_check_bindings",
                        staticmethod(lambda *a: full_checks.append(1) or check(*a)))
    cases = [([tx, ty], {}), ([short, ty], {}), ([tx, short], {}),
             ([ints, ty], {"reinterpret": True}), ([tx, ty, short], {})]
    full = []
    for tensors, kw in cases:
        states, outs = [], []
        derived.clear()
        for _ in range(3):   # the first derives, the second stores the signature
            del full_checks[:]
            algo = mgr.algorithm(tensors, spirv, push_consts=push, **kw)
            states.append(_algorithm_state(algo))
            out = tensors[1]
            with mgr.sequence() as seq:
                seq.record(sg.OpTensorSyncDevice(tensors)).record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([out])).eval()
            outs.append(out.numpy())
            algo.destroy()
        assert not full_checks   # the third took the signature
        assert states[0] == states[1] == states[2]
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])
        full.append(states[0])
    for (tensors, kw), state in zip(cases, full):   # every signature stored side by side
        algo = mgr.algorithm(tensors, spirv, push_consts=push, **kw)
        assert _algorithm_state(algo) == state
        algo.destroy()
    a, b, c = (np.float32(v) for v in push)
    np.testing.assert_allclose(ty.numpy(), (a * x + b) - c, rtol=1e-6, atol=1e-6)
    # Signatures stored for every case above; these differ from one in one respect each.
    bad = [lambda: mgr.algorithm([ints, ty], spirv, push_consts=push),
           lambda: mgr.algorithm([tx], spirv, push_consts=push),
           lambda: mgr.algorithm([tx, ints], spirv, push_consts=push),
           lambda: mgr.algorithm([tx, ty], spirv, push_consts=[1.0, 2.0]),
           lambda: mgr.algorithm([], spirv, push_consts=push)]
    for tensors, kw in cases:
        mgr.algorithm(tensors, spirv, push_consts=push, **kw).destroy()
    for fn in bad:
        memo = _message(fn)
        derived.clear()
        assert _message(fn) == memo
        for tensors, kw in cases:   # derive again, and store the signatures again
            for _ in range(2):
                mgr.algorithm(tensors, spirv, push_consts=push, **kw).destroy()
    for t in (tx, ty, short, ints):
        t.destroy()


@pytest.mark.parametrize("kind", ["device", "host", "storage"])
def test_numpy_copies_what_data_holds_and_raises_what_it_raises(mgr, kind):
    """Tensor.numpy() takes its copy without making the staging range data() first: the
    same values as data().copy() at every point of a tensor's life, and the same errors
    (a storage tensor's, a destroyed one's)."""
    src = np.arange(64, dtype=np.float32)
    t = mgr.tensor(src, kind=kind)
    other = mgr.tensor(src * 3, kind="storage")
    if kind == "storage":
        want = _message(t.data)
        assert _message(t.numpy) == want and want[0] is sg.ScopedGPUError
    else:
        first = t.numpy()   # before any data(), sync or download
        np.testing.assert_array_equal(first, src)
        with mgr.sequence() as seq:
            seq.eval(sg.OpTensorSyncDevice([t]))
            seq.eval(sg.OpTensorCopy([other, t]))
            seq.eval(sg.OpTensorSyncLocal([t]))
        got = t.numpy()
        np.testing.assert_array_equal(got, src * 3)
        np.testing.assert_array_equal(got, t.data().copy())
        got[:] = 0   # a copy: data() keeps its values
        np.testing.assert_array_equal(t.numpy(), src * 3)
    view = t.data() if kind != "storage" else None
    t.destroy()
    other.destroy()
    want = _message(t.data)
    assert _message(t.numpy) == want and want[0] is sg.DestroyedError
    del view


def test_record_checks_its_objects_as_the_general_loop_does(mgr, glsl, monkeypatch):
    """Op.bind's one-call check of the built-in ops (every object alive and of this
    manager) passes what the general loop passes and leaves the refusals to it: the same
    errors for a destroyed or foreign tensor or algorithm, with the one-call check and
    without it."""
    from scopedgpu import ops
    spirv = glsl(GAPPED)
    with sg.Manager() as other:
        a, b = mgr.tensor(np.ones(8, np.float32)), mgr.tensor(np.zeros(8, np.float32))
        gone, foreign = mgr.tensor(np.ones(8, np.float32)), other.tensor(np.ones(8, np.float32))
        algo = mgr.algorithm([a, b], spirv, push_consts=[2.0, 1.0, 0.0])
        dead_algo = mgr.algorithm([a, b], spirv, push_consts=[2.0, 1.0, 0.0])
        gone.destroy()
        made = [lambda: sg.OpTensorSyncDevice([a, b]), lambda: sg.OpTensorSyncLocal([b]),
                lambda: sg.OpTensorCopy([a, b]), lambda: sg.OpAlgoDispatch(algo),
                lambda: sg.OpMult([a, a, b]), lambda: sg.OpMemoryBarrier([a])]
        refused = [sg.OpTensorSyncDevice([a, foreign]), sg.OpTensorSyncLocal([foreign]),
                   sg.OpTensorCopy([a, foreign]), sg.OpMemoryBarrier([b, foreign]),
                   sg.OpAlgoDispatch(dead_algo)]
        dead_algo.destroy()
        refused.append(sg.OpTensorSyncDevice([a, b]))
        refused[-1].tensors.append(gone)   # destroyed after the op was made
        results = []
        for fast in (True, False):
            if not fast:
                monkeypatch.setattr(ops, "_CHILD_OPS", frozenset())
            with mgr.sequence() as seq:
                for make in made:
                    seq.record(make())
                seq.eval()
                errors = []
                for op in refused:
                    with pytest.raises((ValueError, sg.DestroyedError)) as info:
                        seq.record(op)
                    errors.append((type(info.value), str(info.value)))
            results.append((errors, b.numpy()))
        assert results[0][0] == results[1][0]
        assert [e[0] for e in results[0][0]] == [ValueError] * 4 + [sg.DestroyedError] * 2
        np.testing.assert_array_equal(results[0][1], results[1][1])
        for t in (a, b, algo, foreign):
            t.destroy()


def _poll_reference(engine, status):
    """Engine.poll_running as it was before its one-queue path: the sequences it
    completes (in order), polling through `status`."""
    done, blocked = [], set()
    for ref in engine.running:
        seq = ref()
        if seq is None or seq.queue in blocked or seq.fence is None:
            continue
        if status(seq.fence) == 0:
            done.append(seq)
        else:
            blocked.add(seq.queue)
            if len(blocked) >= engine.nqueues:
                break
    return done


def test_poll_running_completes_and_polls_what_the_reference_does(monkeypatch):
    """Engine.poll_running (no list or set made unless needed, no queue read with one
    queue) completes the sequences the reference loop completes and polls the same
    fences in the same order, over random queues, fences and dead references."""
    import random
    import weakref

    from scopedgpu import _engine

    class FakeSeq:
        def __init__(self, queue, fence):
            self.queue, self.fence, self.finished = queue, fence, 0

        def finish(self):
            self.finished += 1

    rng = random.Random(24)
    for _ in range(400):
        engine = _engine.Engine.__new__(_engine.Engine)
        engine.nqueues = rng.randint(1, 3)
        seqs = [FakeSeq(rng.randrange(engine.nqueues), rng.choice([None, 1, 2, 3, 4]))
                for _ in range(rng.randint(0, 8))]
        dead = FakeSeq(0, 1)
        refs = [weakref.ref(s) for s in seqs]
        refs.insert(rng.randint(0, len(refs)), weakref.ref(dead))
        engine.running = dict.fromkeys(refs)   # (hashed while alive, as Child refs are)
        del dead
        signalled = {h for h in (1, 2, 3, 4) if rng.random() < 0.6}
        polls: list = []

        def status(h, polls=polls, signalled=signalled):
            polls.append(h)
            return 0 if h in signalled else 1

        monkeypatch.setattr(_engine._vk, "seq_status", status)
        want = _poll_reference(engine, _engine._vk.seq_status)
        want_polls = list(polls)
        polls.clear()
        engine.poll_running()
        assert [s for s in seqs if s.finished] == want
        assert all(s.finished <= 1 for s in seqs)
        assert polls == want_polls


def test_algorithm_signatures_keep_dispatches_in_parts(mgr, glsl, monkeypatch):
    """A stored signature keeps whether its default workgroup exceeds the device's
    maxComputeWorkGroupCount: an algorithm that takes it is dispatched in the same parts,
    with the same results, as the one that derived it (a device limit of 2 groups here,
    so that 200 elements in groups of 64 run in two parts)."""
    import dataclasses
    state = mgr._state
    monkeypatch.setattr(state, "info", dataclasses.replace(
        state.info, max_workgroup_count=(2, *state.info.max_workgroup_count[1:])))
    spirv = glsl(GAPPED)
    state.reflections.derived.clear()
    x = np.linspace(-4, 4, 200, dtype=np.float32)
    tx = mgr.tensor(x)
    states, outs = [], []
    for _ in range(3):   # the first derives, the second stores, the third takes
        ty = mgr.empty(200)
        algo = mgr.algorithm([tx, ty], spirv, push_consts=[2.0, 1.0, 0.5])
        states.append(_algorithm_state(algo))
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
            seq.record(sg.OpTensorSyncLocal([ty])).eval()
        outs.append(ty.numpy())
        algo.destroy()
        ty.destroy()
    assert states[0][2] == (4, 1, 1) and states[0][5] is not None   # in parts
    assert states[0] == states[1] == states[2]
    want = (np.float32(2.0) * x + np.float32(1.0)) - np.float32(0.5)
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    tx.destroy()
