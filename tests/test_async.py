"""scopedgpu.aio: awaiting GPU work from asyncio, checked against numpy, leak-checked by the
`mgr` fixture, and shown not to block the event loop."""
from __future__ import annotations

import asyncio
import gc
import time
import weakref
from typing import Any, Callable

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu import aio
from scopedgpu.testing import live_counts

SCALE = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float a; float b; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(y.length())) y[i] = p.a * x[i] + p.b;
}
"""

# A dispatch as long as we like: `iters` steps of a 32-bit LCG per element (integer
# arithmetic, so the compiler cannot shorten the loop, and numpy can check it by jumping
# ahead).
LCG = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { uint iters; } p;
layout(set = 0, binding = 0) buffer V { uint v[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(v.length())) return;
    uint s = v[i];
    for (uint k = 0u; k < p.iters; ++k) s = s * 1664525u + 1013904223u;
    v[i] = s;
}
"""


def lcg_reference(v: np.ndarray, iters: int) -> np.ndarray:
    a, c = 1, 0                      # the affine map s -> a*s + c, composed iters times
    ma, mc = 1664525, 1013904223
    n = iters
    while n:
        if n & 1:
            a, c = (ma * a) % 2**32, (ma * c + mc) % 2**32
        ma, mc = (ma * ma) % 2**32, (ma * mc + mc) % 2**32
        n >>= 1
    return ((v.astype(np.uint64) * a + c) % 2**32).astype(np.uint32)


def test_lcg_reference_matches_stepping():
    v = np.arange(5, dtype=np.uint32) * 977
    s = v.astype(np.uint64)
    for k in range(1, 3001):
        s = (s * 1664525 + 1013904223) % 2**32
        if k in (1, 37, 3000):
            assert np.array_equal(lcg_reference(v, k), s.astype(np.uint32))


def test_hundred_concurrent_coroutines_no_leak(mgr, glsl):
    spirv = glsl(SCALE)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(int(rng.integers(1, 5000))).astype(np.float32)
              for _ in range(100)]
    inside = peak = 0

    async def request(i: int, x: np.ndarray) -> np.ndarray:
        nonlocal inside, peak
        with mgr.tensor(x) as tx, mgr.empty(x.size) as ty:
            with mgr.algorithm([tx, ty], spirv, push_consts=[float(i), 0.5]) as algo:
                with mgr.sequence() as seq:
                    seq.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
                    seq.record(sg.OpTensorSyncLocal([ty]))
                    inside += 1
                    peak = max(peak, inside)
                    await aio.eval(seq)
                    inside -= 1
                    return ty.numpy()

    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(request(i, x) for i, x in enumerate(inputs)))

    baseline = live_counts(mgr)
    out = asyncio.run(main())
    for i, (x, y) in enumerate(zip(inputs, out)):
        np.testing.assert_allclose(y, np.float32(i) * x + np.float32(0.5), rtol=1e-6, atol=1e-6)
    assert peak > 1                  # the awaits overlapped: all 100 were submitted at once
    assert live_counts(mgr) == baseline


def test_requests_under_load_end_without_a_future(mgr, glsl, count_calls):
    """Under load (64 requests in flight), the loop's turn that aio.eval gives the others
    after its submission outlasts a small request's GPU work: most requests then find
    their work done at their first poll, and end without a future and a poller entry
    (aio._add). Every result is checked, and nothing leaks."""
    spirv = glsl(SCALE)
    added = count_calls(aio, "_add")
    rng = np.random.default_rng(24)
    inputs = [rng.standard_normal(4096).astype(np.float32) for _ in range(400)]

    async def main() -> list[np.ndarray]:
        gate = asyncio.Semaphore(64)

        async def one(i: int, x: np.ndarray) -> np.ndarray:
            async with gate:
                return await _scale_request(mgr, spirv, x, float(i % 7), 0.25, through="eval")
        return await asyncio.gather(*(one(i, x) for i, x in enumerate(inputs)))

    baseline = live_counts(mgr)
    out = asyncio.run(main())
    for i, (x, y) in enumerate(zip(inputs, out)):
        np.testing.assert_allclose(y, np.float32(i % 7) * x + np.float32(0.25), rtol=1e-6,
                                   atol=1e-6)
    assert added[0] < len(inputs) // 2, f"{added[0]} of {len(inputs)} requests took a future"
    assert live_counts(mgr) == baseline


def _timed_run(mgr, algo, iters):
    t0 = time.perf_counter()
    mgr.run(sg.OpAlgoDispatch(algo, push_consts=np.array([iters], dtype=np.uint32)))
    return time.perf_counter() - t0


# lavapipe runs at most 65,535 iterations of a shader's loops per invocation (llvmpipe's
# loop limiter; the rest are skipped silently): a long dispatch grows in elements instead.
MAX_STEPS = 60_000


def _long_lcg(mgr, glsl, seconds):
    """(v0, tensor, algorithm, steps) of an LCG dispatch lasting about `seconds` here."""
    spirv = glsl(LCG)
    limit = min(int(mgr.device.max_storage_buffer_range), (mgr.device.memory_bytes or 1 << 30) // 8)
    n = 64 * 16
    while True:
        v0 = np.arange(n, dtype=np.uint32) * 2654435761
        t = mgr.tensor(v0)
        algo = mgr.algorithm([t], spirv, push_consts=np.array([1], dtype=np.uint32))
        took = min(_timed_run(mgr, algo, MAX_STEPS) for _ in range(2))   # a stall only adds
        if took >= seconds / 4 or n * 16 > limit:
            return v0, t, algo, max(1, min(MAX_STEPS, int(MAX_STEPS * seconds / took)))
        algo.destroy()
        t.destroy()
        n *= 4


def _until_long(mgr, glsl, seconds, run):
    """run(v0, t, algo, iters) on an LCG dispatch calibrated to `seconds`, then to 4 and 16
    times that while the dispatch took 0.1 s or less by what run() returns (the
    calibration may have run under a passing load: other processes on the CPU or the
    GPU). Returns (seconds it took, v0, t, algo, iters) of the last run; the caller
    destroys that t and algo (the earlier ones are destroyed here)."""
    for attempt in range(3):
        v0, t, algo, iters = _long_lcg(mgr, glsl, seconds * 4**attempt)
        took = run(v0, t, algo, iters)
        if took > 0.1 or attempt == 2:
            return took, v0, t, algo, iters
        algo.destroy()
        t.destroy()
    raise AssertionError("unreachable")


def test_loop_keeps_running_during_a_long_dispatch(mgr, glsl):
    async def measure(blocking: bool, v0, t, algo, iters) -> tuple[int, float, np.ndarray]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        t.data()[:] = v0
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([t]))
            seq.record(sg.OpAlgoDispatch(algo, push_consts=np.array([iters], dtype=np.uint32)))
            seq.record(sg.OpTensorSyncLocal([t]))
            task = asyncio.create_task(ticker())
            await asyncio.sleep(0.02)        # the ticker is running
            start_ticks, t0 = ticks, time.perf_counter()
            if blocking:
                seq.eval()                   # what an asyncio service must not do
            else:
                await aio.eval(seq)
            elapsed = time.perf_counter() - t0
            counted = ticks - start_ticks
            task.cancel()
        return counted, elapsed, t.numpy()

    ticks = 0

    def awaited(v0, t, algo, iters) -> float:
        nonlocal ticks
        ticks, elapsed, got = asyncio.run(measure(False, v0, t, algo, iters))
        assert np.array_equal(got, lcg_reference(v0, iters))
        return elapsed

    elapsed, v0, t, algo, iters = _until_long(mgr, glsl, 0.4, awaited)
    assert elapsed > 0.1, f"the dispatch took only {elapsed:.3f} s: not a long dispatch"
    # A 5 ms ticker over a wait of 0.1 s or more. On lavapipe the "GPU" is the CPU, which
    # a loaded machine shares with this loop: ask for a few ticks, not all of them; a
    # blocked loop gets at most one (below).
    assert ticks >= 5, (ticks, elapsed)
    # The same measure catches a blocked loop: a blocking eval (long enough for 6 ticks)
    # lets at most one tick in.
    try:
        ticks_blocked, elapsed_blocked, got = asyncio.run(measure(True, v0, t, algo, iters))
        assert np.array_equal(got, lcg_reference(v0, iters))
        assert elapsed_blocked > 0.03 and ticks_blocked <= 1, (ticks_blocked, elapsed_blocked)
    finally:
        algo.destroy()
        t.destroy()


def test_wait_with_timeout_then_to_completion(mgr, glsl):
    v0, t, algo, iters = _long_lcg(mgr, glsl, 0.4)

    async def main() -> tuple[bool, bool, bool]:
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([t]))
            seq.record(sg.OpAlgoDispatch(algo, push_consts=np.array([iters], dtype=np.uint32)))
            seq.record(sg.OpTensorSyncLocal([t]))
            seq.eval_async()
            early = await aio.wait(seq, timeout=0.01)
            still = seq.is_running
            late = await aio.wait(seq)
            return early, still, late and not seq.is_running

    t.data()[:] = v0
    early, still, late = asyncio.run(main())
    assert (early, still, late) == (False, True, True)
    assert np.array_equal(t.numpy(), lcg_reference(v0, iters))
    with pytest.raises(ValueError):
        asyncio.run(aio.wait(mgr.sequence(), timeout=-1))
    algo.destroy()
    t.destroy()


def test_cancelled_await_leaves_the_work_to_finish(mgr, glsl):
    v0, t, algo, iters = _long_lcg(mgr, glsl, 0.3)

    async def main() -> bool:
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([t]))
            seq.record(sg.OpAlgoDispatch(algo, push_consts=np.array([iters], dtype=np.uint32)))
            seq.record(sg.OpTensorSyncLocal([t]))
            task = asyncio.create_task(aio.eval(seq))
            await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            running = seq.is_running
        # the `with` exit waited for the work; the waiter still serves later awaits
        await aio.run(mgr, sg.OpTensorSyncLocal([t]))
        return running

    t.data()[:] = v0
    assert asyncio.run(main()) is True
    assert np.array_equal(t.numpy(), lcg_reference(v0, iters))
    algo.destroy()
    t.destroy()


async def _scale_request(m: sg.Manager, spirv: bytes, x: np.ndarray, a: float, b: float,
                         *, through: str = "run") -> np.ndarray:
    """y = a * x + b (SCALE) on tensors, an algorithm and a sequence made for it, all
    destroyed before it returns y. through="run": `aio.run`; "eval": a sequence recorded
    and awaited with `aio.eval`, which must leave it completed."""
    with m.tensor(x) as tx, m.empty(x.size) as ty, \
            m.algorithm([tx, ty], spirv, push_consts=[a, b]) as al:
        ops = (sg.OpTensorSyncDevice([tx]), sg.OpAlgoDispatch(al), sg.OpTensorSyncLocal([ty]))
        if through == "run":
            await aio.run(m, *ops)
        else:
            with m.sequence() as seq:
                for op in ops:
                    seq.record(op)
                await aio.eval(seq)
                assert not seq.is_running
        return ty.numpy()


def _in_threads(work: Callable[[int], Any], n: int, timeout: float) -> dict[int, Any]:
    """work(k) on n threads at once (k = 0 ... n - 1); their results by k. The first
    error of any thread fails the test."""
    import threading
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            results[k] = work(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not errors, errors
    return results


def test_two_managers_two_loops(glsl):
    """The shared waiter serves sequences of several managers awaited from several loops
    (one per thread) at once."""
    spirv = glsl(SCALE)

    def work(k: int) -> np.ndarray:
        with sg.Manager() as m:
            x = np.arange(1000, dtype=np.float32) + k

            async def main() -> np.ndarray:
                return np.stack([await _scale_request(m, spirv, x, 2.0, float(rep))
                                 for rep in range(20)])
            return asyncio.run(main())

    results = _in_threads(work, 2, 60)
    for k in range(2):
        x = np.arange(1000, dtype=np.float32) + k
        want = np.stack([2 * x + rep for rep in range(20)])
        np.testing.assert_array_equal(results[k], want)
    assert sg.live_vulkan_objects()["devices"] == 0


def test_objects_dropped_after_an_await_are_collected(glsl):
    # The waiter thread once kept its last batch (the sequence, and through it the
    # manager) until the next aio call of the process: a manager dropped after an await
    # was never closed. Nothing else may run after the await: no other aio call.
    spirv = glsl(SCALE)
    before = sg.live_vulkan_objects()
    m = sg.Manager()
    x = np.arange(1000, dtype=np.float32)
    tx, ty = m.tensor(x), m.empty(x.size)
    algo = m.algorithm([tx, ty], spirv, push_consts=[2.0, 1.0])
    seq = m.sequence("kept")
    seq.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
    seq.record(sg.OpTensorSyncLocal([ty]))

    async def main(s: sg.Sequence) -> None:
        await aio.eval(s)

    asyncio.run(main(seq))
    np.testing.assert_array_equal(ty.numpy(), 2 * x + 1)
    refs = [weakref.ref(o) for o in (m, tx, ty, algo, seq)]
    del m, tx, ty, algo, seq
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert not alive, f"still referenced after the await: {alive}"
    assert sg.live_vulkan_objects() == before


def test_every_aio_argument_is_checked_with_an_error_naming_it(mgr):
    """aio.wait/eval/run refuse what is not a sequence or a manager, and a timeout that
    is not a number of seconds, naming the argument and the value (as eval_await does),
    before anything is awaited."""
    t = mgr.tensor(np.arange(4, dtype=np.float32))
    seq = mgr.sequence().record(sg.OpTensorSyncDevice([t]))

    async def main():
        for call, exc, match in (
                (lambda: aio.wait(5), TypeError, r"aio.wait\(\): seq must be a .*Sequence.*int 5"),
                (lambda: aio.wait(None), TypeError, r"aio.wait\(\): seq .*NoneType None"),
                (lambda: aio.eval(mgr), TypeError, r"aio.eval\(\): seq .*Manager"),
                (lambda: aio.run(5), TypeError, r"aio.run\(\): manager must be a .*Manager.*int 5"),
                (lambda: aio.wait(seq, "a"), TypeError, r"aio.wait\(\): timeout .*str 'a'"),
                (lambda: aio.wait(seq, True), TypeError, r"aio.wait\(\): timeout .*bool True"),
                (lambda: aio.wait(seq, float("nan")), ValueError, r"aio.wait\(\): timeout .*nan"),
                (lambda: aio.wait(seq, -1), ValueError, r"aio.wait\(\): timeout .*-1")):
            with pytest.raises(exc, match=match):
                await call()
        seq.eval_async()
        assert await aio.wait(seq, float("inf")) is True     # no limit, as eval_await
        assert await aio.wait(seq, np.float64(1.5)) is True

    asyncio.run(main())
    seq.destroy()
    t.destroy()


def test_a_loop_awaiting_long_work_sleeps_instead_of_spinning(mgr, glsl):
    """The loop polls its own sequences while they are short (no thread hand-off), but
    hands a long one to the waiter thread after aio's spin (0.2 ms) and sleeps: after the
    wait's first 20 ms its selector is called a handful of times, not once per run of a
    spinning loop (thousands). (The spin itself runs the loop some 30 to 70 times on
    lavapipe, by the speed of a fence poll: a bound on the whole wait's count of 50 failed
    once in CI at exactly 50.)"""
    import selectors

    class Counting(selectors.DefaultSelector):   # type: ignore[misc,valid-type]
        stamps: list[float] = []

        def select(self, timeout=None):
            Counting.stamps.append(time.perf_counter())
            return super().select(timeout)

    async def main(t, algo, iters) -> tuple[int, float]:
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([t]))
            seq.record(sg.OpAlgoDispatch(algo, push_consts=np.array([iters], dtype=np.uint32)))
            seq.record(sg.OpTensorSyncLocal([t]))
            t0 = time.perf_counter()
            Counting.stamps.clear()
            await aio.eval(seq)
            late = sum(1 for s in Counting.stamps if s > t0 + 0.02)
            return late, time.perf_counter() - t0

    selects = 0

    def awaited(v0, t, algo, iters) -> float:
        nonlocal selects
        t.data()[:] = v0
        loop = asyncio.SelectorEventLoop(Counting())
        try:
            selects, elapsed = loop.run_until_complete(main(t, algo, iters))
        finally:
            loop.close()
        assert np.array_equal(t.numpy(), lcg_reference(v0, iters))
        return elapsed

    elapsed, _, t, algo, _ = _until_long(mgr, glsl, 0.3, awaited)
    algo.destroy()
    t.destroy()
    assert elapsed > 0.1, f"the dispatch took only {elapsed:.3f} s: not a long dispatch"
    assert selects < 10, (f"the loop ran {selects} times after the first 20 ms of a "
                          f"{elapsed:.3f} s wait: it spun")


def test_long_and_short_work_awaited_together_on_one_loop(mgr, glsl):
    """A long dispatch and many short requests submitted behind it to the same queue,
    awaited at once from one loop: the loop spins, gives up, hands them all to the waiter
    thread, which settles the lot when the newest signals (fence order); every result
    right, the long one first to finish."""
    spirv = glsl(SCALE)
    order: list[str] = []

    async def long(t, algo, iters) -> float:
        with mgr.sequence() as seq:
            seq.record(sg.OpTensorSyncDevice([t]))
            seq.record(sg.OpAlgoDispatch(algo, push_consts=np.array([iters], dtype=np.uint32)))
            seq.record(sg.OpTensorSyncLocal([t]))
            t0 = time.perf_counter()
            await aio.eval(seq)
            took = time.perf_counter() - t0
        order.append("long")
        return took

    async def short(k: int) -> np.ndarray:
        x = np.arange(300, dtype=np.float32) * (k + 1)
        y = await _scale_request(mgr, spirv, x, 3.0, float(k), through="eval")
        order.append("short")
        return y

    async def main(t, algo, iters) -> tuple[list[np.ndarray], float]:
        task = asyncio.create_task(long(t, algo, iters))
        await asyncio.sleep(0)       # the long one is submitted first
        outs = await asyncio.gather(*(short(k) for k in range(40)))
        return outs, await task

    def awaited(v0, t, algo, iters) -> float:
        t.data()[:] = v0
        order.clear()
        outs, took = asyncio.run(main(t, algo, iters))
        for k, y in enumerate(outs):
            np.testing.assert_array_equal(y, 3 * (np.arange(300, dtype=np.float32) * (k + 1)) + k)
        assert np.array_equal(t.numpy(), lcg_reference(v0, iters))
        return took

    # The long dispatch must outlast the shorts' submissions (a few ms): on a GPU shared
    # with other processes the calibration may have run beside their work and made it
    # short (seen on the H200 with four test files at once).
    took, _, t, algo, _ = _until_long(mgr, glsl, 0.3, awaited)
    algo.destroy()
    t.destroy()
    assert took > 0.1, f"the long dispatch took only {took:.3f} s: not a long dispatch"
    assert order[0] == "long" and order.count("short") == 40, (f"long {took:.3f} s", order)


def test_a_sequence_settled_early_by_its_queues_order_is_awaited_again(mgr, glsl):
    """Awaited out of submission order: a shorter sequence submitted first, a long one
    after it on the same queue and awaited before it. The waiter thread waits on a queue's
    newest entry (the shorter one) and, once its fence signals, settles it and every entry
    added before it, the long one included, which still runs: that coroutine checks
    again on resuming and waits on (aio's _rewatch). Its await returns once it completed,
    with its results. (With the check planted away, the await returned with the long
    sequence still running.)"""
    v0, t, algo, iters = _long_lcg(mgr, glsl, 0.4)
    v1, t1, algo1, iters1 = _long_lcg(mgr, glsl, 0.08)
    seqs = []
    for tt, al, k in ((t1, algo1, iters1), (t, algo, iters)):
        seq = mgr.sequence()
        seq.record(sg.OpTensorSyncDevice([tt]))
        seq.record(sg.OpAlgoDispatch(al, push_consts=np.array([k], dtype=np.uint32)))
        seq.record(sg.OpTensorSyncLocal([tt]))
        seqs.append(seq)
    short, long = seqs
    t.data()[:] = v0
    t1.data()[:] = v1

    async def main() -> tuple[bool, bool, bool]:
        short.eval_async()                  # submitted first
        long.eval_async()                   # then the long one, behind it
        waiting = asyncio.create_task(aio.wait(long))
        await asyncio.sleep(0)              # the long one's entry is added first
        assert short.is_running             # (so that the shorter one is added too)
        await aio.wait(short)
        short_done = not short.is_running
        done = await waiting
        return short_done, done, long.is_running

    try:
        short_done, done, running = asyncio.run(main())
        assert short_done and done is True and running is False
        assert np.array_equal(t.numpy(), lcg_reference(v0, iters))
        assert np.array_equal(t1.numpy(), lcg_reference(v1, iters1))
    finally:
        for obj in (short, long, algo, algo1, t, t1):
            obj.destroy()


def test_one_manager_one_queue_awaited_from_two_loops(mgr, glsl):
    """Two threads, each with its own loop, await many sequences of one manager on one
    queue at once: each loop polls its own (their submissions interleave on the queue),
    and every result is right."""
    spirv = glsl(SCALE)

    def work(k: int) -> list[np.ndarray]:
        async def one(rep: int) -> np.ndarray:
            x = np.arange(500, dtype=np.float32) + 1000 * k
            return await _scale_request(mgr, spirv, x, 2.0, float(rep), through="eval")

        async def main() -> list[np.ndarray]:
            return list(await asyncio.gather(*(one(rep) for rep in range(60))))
        return asyncio.run(main())

    results = _in_threads(work, 2, 120)
    for k in range(2):
        x = np.arange(500, dtype=np.float32) + 1000 * k
        for rep, y in enumerate(results[k]):
            np.testing.assert_array_equal(y, 2 * x + rep)


def test_a_finished_event_loop_is_collected(mgr, glsl):
    """aio's per-loop poller holds its loop weakly: each asyncio.run() makes a loop, and
    a service's or a test suite's many runs must not keep every loop (and what its last
    callbacks referenced) alive."""
    spirv = glsl(SCALE)
    x = np.arange(256, dtype=np.float32)
    loops: list[weakref.ref] = []

    async def main() -> np.ndarray:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        return await _scale_request(mgr, spirv, x, 2.0, 1.0)

    for _ in range(3):
        np.testing.assert_array_equal(asyncio.run(main()), 2 * x + 1)
    gc.collect()
    alive = [r for r in loops if r() is not None]
    assert not alive, f"{len(alive)} of {len(loops)} finished loops still referenced"
