"""Threads sharing one manager (what docs/threads.md promises)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu.testing import live_counts

from lt_shaders import add_one_spirv, slow_spirv

THREADS = 4
ITERATIONS = int(os.environ.get("SCOPEDGPU_THREAD_ITERATIONS", "600"))  # per thread


def _run_threads(target, n):
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def wrapped(i):
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:
            errors.append(exc)
    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


def _close_under_threads(m: sg.Manager, step, delay: float) -> None:
    """Runs step() over and over in 3 threads, closes m under them after `delay` seconds,
    and checks that each thread stopped with DestroyedError and nothing else."""
    errors: list[BaseException] = []

    def loop():
        try:
            while True:
                step()
        except sg.DestroyedError:
            pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop) for _ in range(3)]
    for th in threads:
        th.start()
    time.sleep(delay)
    m.close()
    for th in threads:
        th.join(timeout=60)
        assert not th.is_alive()
    assert not errors, errors


def test_threads_create_evaluate_destroy(mgr):
    baseline = live_counts(mgr, process=True)
    spirv = {dt: add_one_spirv(dt) for dt in (np.float32, np.int32, np.uint32)}
    done = [0] * THREADS

    def work(i):
        rng = np.random.default_rng(i)
        dtypes = list(spirv)
        for it in range(ITERATIONS):
            dt = dtypes[(i + it) % 3]
            n = int(rng.integers(1, 200))
            x = rng.integers(0, 1000, n).astype(dt)
            kind = ("device", "host")[it % 2]
            a = mgr.tensor(x, kind=kind)
            b = mgr.empty(n, dt, kind=kind)
            algo = mgr.algorithm([a, b], spirv[dt])
            mode = it % 3
            if mode == 0:     # anonymous, scoped
                with mgr.sequence() as seq:
                    seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(algo))
                    seq.record(sg.OpTensorSyncLocal([b])).eval()
            elif mode == 1:   # named per thread, evaluated asynchronously, then deleted
                seq = mgr.sequence(f"thread{i}")
                seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([b])).eval_async()
                while not seq.eval_await(0.001):
                    pass
                mgr.delete_sequence(f"thread{i}")
            else:             # run(), OpMult, objects left to the garbage collector
                c = mgr.empty(n, dt, kind=kind)
                mgr.run(sg.OpTensorSyncDevice([a]), sg.OpAlgoDispatch(algo),
                        sg.OpMult([a, b, c]), sg.OpTensorSyncLocal([b, c]))
                np.testing.assert_array_equal(c.data(), x * (x + dt(1)))
                del c
            np.testing.assert_array_equal(b.data(), x + dt(1))
            if it % 4:
                algo.destroy()
                b.destroy()
                a.destroy()
            del a, b, algo
            done[i] += 1

    _run_threads(work, THREADS)
    assert sum(done) == THREADS * ITERATIONS
    assert mgr.sequence_names() == []
    assert live_counts(mgr, process=True) == baseline


def test_waiting_thread_while_another_destroys(mgr):
    """One thread waits on a running sequence (no lock held) while another destroys it or
    clears the sequences; found a use-after-free of the fence (see docs/threads.md)."""
    baseline = live_counts(mgr, process=True)
    t = mgr.tensor(np.array([0, 1_000_000, 0, 0], np.uint32))
    algo = mgr.algorithm([t], slow_spirv(), workgroup=(16, 1, 1))
    for round_ in range(6):
        seq = mgr.sequence("w" if round_ % 2 else None)
        seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo)).eval_async()
        results = []

        def waiter():
            results.append(seq.eval_await())

        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.002)
        if round_ % 3 == 2:
            mgr.clear_sequences(named=True)
        else:
            seq.destroy()
        th.join(timeout=60)
        assert not th.is_alive()
        assert results == [True]
        assert seq.destroyed
    algo.destroy()
    t.destroy()
    assert live_counts(mgr, process=True) == baseline


@pytest.mark.parametrize("delay", [0.0, 0.002, 0.02])
def test_close_while_threads_wait(delay):
    before = sg.live_vulkan_objects()
    m = sg.Manager()
    t = m.tensor(np.array([0, 1_000_000, 0, 0], np.uint32))
    algo = m.algorithm([t], slow_spirv(), workgroup=(16, 1, 1))

    def step():
        with m.sequence() as seq:
            seq.record(sg.OpAlgoDispatch(algo)).eval()

    _close_under_threads(m, step, delay)
    assert sg.live_vulkan_objects() == before


def test_wait_idle_while_other_threads_submit(mgr):
    """vkDeviceWaitIdle needs every queue of the device externally synchronized: it must not
    run while another thread submits."""
    baseline = live_counts(mgr, process=True)
    a = mgr.tensor(np.arange(64, dtype=np.float32))
    b = mgr.empty(64)
    algo = mgr.algorithm([a, b], add_one_spirv(np.float32))
    stop = threading.Event()

    def work(i):
        if i == 0:
            for _ in range(150):
                mgr.wait_idle()
            stop.set()
        else:
            with mgr.sequence() as seq:
                seq.record(sg.OpAlgoDispatch(algo))
                while not stop.is_set():
                    seq.eval_async()
                    seq.eval_await()

    _run_threads(work, 3)
    for o in (algo, a, b):
        o.destroy()
    assert live_counts(mgr, process=True) == baseline


@pytest.mark.parametrize("kind", ["device", "host", "storage"])
def test_close_while_threads_create_tensors(kind):
    """Found a segfault: Tensor() checked that the manager was open outside the lock, then
    allocated from (and wrote into) a pool another thread's close() had destroyed; storage
    uploads ran a one-off command buffer close() did not know about."""
    before = sg.live_vulkan_objects()
    for _ in range(8):
        m = sg.Manager()

        def step():
            t = m.tensor(np.ones(4096, np.float32), kind=kind)
            if kind != "storage":
                assert t.data()[0] == 1
            t.destroy()

        _close_under_threads(m, step, 0.005)
    assert sg.live_vulkan_objects() == before


def test_record_into_a_sequence_another_thread_destroyed_raises(mgr):
    """Another thread's destroy() between record()'s unlocked check and its lock section:
    DestroyedError, and nothing recorded into the destroyed sequence (its ops would keep
    their tensors referenced by an object the program considers gone)."""
    from tests.racing import destroyed_on_first_entry
    t = mgr.tensor(np.zeros(16, dtype=np.float32))
    seq = mgr.sequence()
    with destroyed_on_first_entry(mgr, seq):
        with pytest.raises(sg.DestroyedError):
            seq.record(sg.OpTensorSyncDevice([t]))
    assert not seq._ops and not seq._objs
    t.destroy()


def test_clear_of_a_sequence_another_thread_destroyed_raises(mgr):
    """clear() while another thread destroys the sequence (past clear()'s check):
    DestroyedError, as record() raises."""
    from tests.racing import destroyed_on_first_entry
    seq = mgr.sequence()
    with destroyed_on_first_entry(mgr, seq):
        with pytest.raises(sg.DestroyedError):
            seq.clear()


def test_data_of_a_tensor_another_thread_destroyed_keeps_its_own_memory(mgr):
    """data() while another thread destroys the tensor (past data()'s check, in the lock
    section that makes the staging range data()): the array is the tensor's own host
    copy, not the freed staging range, which the pool hands to the next tensor (whose
    sync wrote into the array)."""
    from tests.racing import destroyed_on_first_entry
    x = mgr.tensor(np.ones(64, dtype=np.float32))
    with destroyed_on_first_entry(mgr, x):
        a = x.data()
    assert x.destroyed
    z = mgr.tensor(np.full(64, 7, dtype=np.float32))
    mgr.run(sg.OpTensorSyncDevice([z]))
    np.testing.assert_array_equal(a, np.ones(64, dtype=np.float32))
    z.destroy()


def test_algorithm_over_a_tensor_another_thread_destroyed_raises(mgr):
    """An algorithm made while another thread destroys one of its tensors (past the
    binding checks, before the descriptor set is written): DestroyedError, not an
    algorithm whose set holds the freed range."""
    from tests.racing import destroyed_on_first_entry
    x = mgr.tensor(np.ones(64, dtype=np.float32))
    y = mgr.tensor(np.ones(64, dtype=np.float32))
    spirv = add_one_spirv(np.float32)
    with destroyed_on_first_entry(mgr, x):
        with pytest.raises(sg.DestroyedError):
            mgr.algorithm([y, x], spirv)
    assert mgr.live_objects()["algorithms"] == 0
    y.destroy()
