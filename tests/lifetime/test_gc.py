"""Unreachable tensors, algorithms and anonymous sequences give their resources back,
after the GPU work that uses them; named sequences stay until deleted."""
from __future__ import annotations

import gc

import numpy as np

import scopedgpu as sg
from scopedgpu.testing import live_counts

from leakcheck import check_release
from lt_shaders import add_one_spirv, slow_spirv


def test_unreachable_tensors(mgr):
    check_release(mgr, lambda: mgr.tensor(np.ones(1024, np.float32)), n=20,
                  grows={"tensors": 20, "pool_allocations": 40}, drop_only=True)
    check_release(mgr, lambda: mgr.tensor(np.ones(8, np.int32), kind="host"), n=5,
                  grows={"tensors": 5}, drop_only=True)
    check_release(mgr, lambda: mgr.tensor(np.ones(8, np.uint32), kind="storage"), n=5,
                  grows={"tensors": 5}, drop_only=True)


def test_unreachable_algorithms_and_sequences(mgr):
    a = mgr.tensor(np.arange(32, dtype=np.float32))
    b = mgr.empty(32)
    spirv = add_one_spirv(np.float32)
    check_release(mgr, lambda: mgr.algorithm([a, b], spirv), n=5,
                  grows={"algorithms": 5, "descriptor_pools": 5}, drop_only=True)

    def evaluated():
        seq = mgr.sequence()
        seq.record(sg.OpMult([a, a, b])).eval()
        return seq
    check_release(mgr, evaluated, n=5, grows={"sequences": 5, "fences": 5, "algorithms": 5},
                  drop_only=True)
    a.destroy()
    b.destroy()


def test_unreachable_objects_wait_for_their_gpu_work(mgr):
    from endless import FLAG_GLSL, STOPPABLE, set_flag
    baseline = live_counts(mgr, process=True)
    # The dispatch runs until the test sets the flag (endless.py): still running at the
    # checks below however long the collection takes. (A kernel of fixed length, about
    # 0.2 s, once ended before them in a loaded CI run.)
    flag = mgr.tensor(np.zeros(4, np.uint32), kind="host")
    t = mgr.tensor(np.array([0, 7, 0, 0], np.uint32))
    out = mgr.tensor(np.zeros(4, np.uint32))
    algo = mgr.algorithm([flag], sg.compile_glsl(FLAG_GLSL), workgroup=STOPPABLE)
    seq = mgr.sequence()
    seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo))
    seq.record(sg.OpTensorCopy([t, out])).record(sg.OpTensorSyncLocal([out]))
    seq.eval_async()
    view = out.data()
    del t, algo, seq, out
    gc.collect()
    during = mgr.live_objects()
    stats = mgr.memory_stats()
    # Still running: the sequence is held by the manager until its fence signals, and the
    # memory and descriptor set it uses are not freed.
    assert during["sequences"] == baseline["sequences"] + 1
    assert during["descriptor_pools"] == baseline["descriptor_pools"] + 1
    assert stats["allocations"] >= 3
    set_flag(flag)
    mgr.wait_idle()
    np.testing.assert_array_equal(view, [0, 7, 0, 0])  # the OpTensorSyncLocal happened
    # data() may be a range of the pool (a host block of imported memory): its last view
    # releases it.
    del view
    flag.destroy()
    assert live_counts(mgr, process=True) == baseline


def test_named_sequences_stay_until_deleted(mgr):
    baseline = live_counts(mgr, process=True)
    a = mgr.tensor(np.arange(8, dtype=np.float32))
    mgr.sequence("kept").record(sg.OpTensorSyncDevice([a])).eval()
    mgr.sequence("also kept")
    gc.collect()
    assert mgr.sequence_names() == ["also kept", "kept"]
    c = live_counts(mgr, process=True)
    assert c["sequences"] == baseline["sequences"] + 2
    assert c["command_pools"] == baseline["command_pools"] + 2
    # The named sequence found again is the same object, still recorded.
    seq = mgr.sequence("kept")
    assert seq.eval() is seq
    del seq
    a.destroy()
    mgr.delete_sequence("kept")
    assert mgr.clear_sequences(named=True) == 1
    assert mgr.sequence_names() == []
    assert live_counts(mgr, process=True) == baseline


def test_unreachable_manager_closes(mgr):
    before = sg.live_vulkan_objects()
    m = sg.Manager()
    t = m.tensor(np.ones(4, np.float32))
    view = t.data()
    with m.sequence() as seq:
        seq.eval(sg.OpTensorSyncDevice([t]))
    # Found a leak: the manager's state held its named sequences strongly, and they hold
    # the manager, so a manager that ever had a named sequence lived until exit.
    m.sequence("named").eval(sg.OpTensorSyncDevice([t]))
    del m, t, seq
    gc.collect()  # the children held the manager; all unreachable now
    assert sg.live_vulkan_objects() == before
    view[:] = 2   # the view outlives its manager


def test_manager_in_a_reference_cycle_with_its_children(mgr):
    """Found a leak: when the manager and its children were collected as one cycle, the
    collector emptied the manager's weak sets of children before close() ran, so their
    command pools, fences and descriptor pools outlived the device (and the validation
    layer reported it at vkDestroyDevice)."""
    before = sg.live_vulkan_objects()
    spirv = add_one_spirv(np.float32)

    class Node:
        pass

    for _ in range(3):
        m = sg.Manager()
        n = Node()
        n.m = m
        n.t = m.tensor(np.ones(16, np.float32))
        n.o = m.empty(16)
        n.algo = m.algorithm([n.t, n.o], spirv)
        n.seq = m.sequence().record(sg.OpAlgoDispatch(n.algo)).record(sg.OpMult([n.t, n.t, n.o]))
        n.seq.eval()
        for obj in (n, n.t, n.algo, n.seq, m):
            obj.cycle = n
        del n, m, obj
        gc.collect()
        assert sg.live_vulkan_objects() == before


def test_unreachable_manager_with_a_running_sequence_closes(mgr):
    """Found a leak: the manager's state held its running sequences strongly, the state is
    held by the manager's finalizer, and a sequence holds its manager, so a manager
    dropped while a sequence ran stayed alive (device, memory and all) until exit: nothing
    polls the fence of a manager nobody can reach."""
    before = sg.live_vulkan_objects()
    spirv = slow_spirv()
    for named in (False, True):
        m = sg.Manager()
        n = 1_000_000 if m.device.type == "cpu" else 200_000_000
        t = m.tensor(np.array([0, n, 0, 0], np.uint32))
        out = m.tensor(np.zeros(4, np.uint32))
        seq = m.sequence("named" if named else None)
        seq.record(sg.OpTensorSyncDevice([t]))
        seq.record(sg.OpAlgoDispatch(m.algorithm([t], spirv, workgroup=(128, 1, 1))))
        seq.record(sg.OpTensorCopy([t, out])).record(sg.OpTensorSyncLocal([out]))
        seq.eval_async()
        view = out.data()
        running = seq.is_running
        del m, t, out, seq
        gc.collect()   # closes the manager: waits for the device, then frees everything
        assert sg.live_vulkan_objects() == before, f"named={named}, running={running}"
        # The copy back to the host ran to completion before the memory was freed.
        np.testing.assert_array_equal(view, [0, n, 0, 0])
