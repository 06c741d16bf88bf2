"""The serve figure (issue 24): a request-serving workload on one Manager, at several
levels of concurrency, next to the C yardstick's `serve` task.

A request is a float32 array of 4,096 elements (16 KiB) in, `y = a * x` on the device
(shaders/scale.comp: local size 64, one push constant `a`), the result out. Its
two tensors, its algorithm and its sequence are made and destroyed in `with` blocks per
request, as examples/async_service.py does, and the GPU is awaited through
`scopedgpu.aio.eval`. At most C requests are in flight (an asyncio.Semaphore): a driver
admits a new request whenever one finishes, for `seconds` per level and at least
`min_requests`. Every result is compared with numpy's (bit for bit: one float multiply
is correctly rounded on every Vulkan device). Latency is a request's time from its
admission to its result. The figure serves its levels in rounds (serve_rounds: up, down,
up), a level's rate the median of its rounds'.
"""
from __future__ import annotations

import asyncio
import functools
import gc
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import numpy as np

import scopedgpu as sg
from scopedgpu import aio

from .common import MiB, cpu_ticks, rss_bytes, steal_share
from .report import (
    SERVE_GOAL_AT,
    SERVE_LEVELS,
    SERVE_P99_UP_TO,
    SPEC_SERVE_P99,
    SPEC_SERVE_RATE,
    serve_figure,
)

if TYPE_CHECKING:
    from .suite import Bench

SCALE = Path(__file__).resolve().parent / "shaders" / "scale.spv"
N = 4096            # floats per request: 16 KiB
INPUTS = 64         # distinct requests, used in turn
# The collector's thresholds the guide suggests to a service with many requests in flight.
SERVICE_GC_THRESHOLD = (50_000, 20, 20)
# Rounds over the levels: a level's rate is the median of its rounds' rates, each round
# visiting every level (up, then down, then up), so that a host whose speed drifts during
# the run (the H200's moved by half within a minute) weighs on every level alike.
ROUNDS = 3


@functools.lru_cache(maxsize=1)
def scale_spirv() -> bytes:
    return SCALE.read_bytes()


def requests(n: int = N, count: int = INPUTS, seed: int = 24
             ) -> tuple[list[np.ndarray], list[float], list[np.ndarray]]:
    """count inputs of n floats, their push constants and numpy's answers."""
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(n) * 4).astype(np.float32) for _ in range(count)]
    alphas = [float(np.float32(a)) for a in rng.uniform(0.5, 2.0, count)]
    refs = [np.float32(a) * x for a, x in zip(alphas, xs)]
    return xs, alphas, refs


async def handle(mgr: sg.Manager, spirv: bytes, x: np.ndarray, a: float) -> np.ndarray:
    """One request: its tensors, algorithm and sequence live only inside this call."""
    with mgr.tensor(x) as tx, mgr.empty(x.size) as ty:
        with mgr.algorithm([tx, ty], spirv, push_consts=[a]) as algo:
            with mgr.sequence() as seq:
                seq.record(sg.OpTensorSyncDevice([tx]))
                seq.record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([ty]))
                await aio.eval(seq)
                return ty.numpy()


async def serve_level(mgr: sg.Manager, spirv: bytes, concurrency: int, seconds: float,
                      min_requests: int, data: tuple[list[np.ndarray], list[float],
                                                     list[np.ndarray]] | None = None,
                      handler: Callable[[sg.Manager, bytes, np.ndarray, float],
                                        Awaitable[Any]] = handle,
                      check: bool = True) -> dict[str, Any]:
    """Serves requests with at most `concurrency` in flight, for `seconds` and at least
    `min_requests`; returns the count, the rate, the sorted latencies (seconds) and the
    indices of wrong results. An error in a request propagates once the others ended.
    `handler` serves one request (serve_layers passes parts of it); `check` False: its
    results are not compared with numpy's."""
    xs, alphas, refs = data if data is not None else requests()
    # The answers' bytes: a result's check is one copy and a compare (np.array_equal's
    # reduction costs several times the request's kernel on the host).
    want = [r.tobytes() for r in refs]
    shape = refs[0].shape
    gate = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    wrong: list[int] = []
    tasks: set[asyncio.Task] = set()
    clock = time.perf_counter

    async def one(i: int, t0: float) -> None:
        try:
            y = await handler(mgr, spirv, xs[i % INPUTS], alphas[i % INPUTS])
            lat.append(clock() - t0)
            if check and differs(y, want[i % INPUTS], shape):
                wrong.append(i)
        finally:
            gate.release()

    # The cyclic garbage collector's share of the level: with many requests in flight,
    # their objects outlive collections, and the full ones traverse them all.
    in_gc = [0.0, 0.0]

    def gc_timer(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            in_gc[1] = clock()
        else:
            in_gc[0] += clock() - in_gc[1]

    stats0 = gc.get_stats()
    ticks0 = cpu_ticks()
    gc.callbacks.append(gc_timer)
    try:
        cpu0 = time.thread_time()   # the loop's thread: every request's Python runs on it
        start = clock()
        deadline = start + seconds
        count = 0
        while count < min_requests or clock() < deadline:
            await gate.acquire()
            task = asyncio.create_task(one(count, clock()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            count += 1
        await asyncio.gather(*tasks)
        elapsed = clock() - start
        cpu = time.thread_time() - cpu0
    finally:
        gc.callbacks.remove(gc_timer)
    steal = steal_share(ticks0, cpu_ticks())
    lat.sort()
    return {"in_flight": concurrency, "requests": count, "seconds": elapsed,
            "per_s": count / elapsed, "latencies": lat, "wrong": wrong,
            "gc_collections": [b["collections"] - a["collections"]
                               for a, b in zip(stats0, gc.get_stats())],
            "gc_share": in_gc[0] / elapsed, "loop_cpu_us": cpu / count * 1e6,
            "steal_share": steal}


def differs(y: Any, want: bytes, shape: tuple[int, ...]) -> bool:
    """Whether a served result is not numpy's answer (`want`: its bytes), bit for bit."""
    return y is None or y.shape != shape or y.tobytes() != want


def pct(sorted_values: list[float], p: float) -> float:
    """The p-quantile of sorted values (the C yardstick's rounding: nearest rank)."""
    return sorted_values[int(p * (len(sorted_values) - 1) + 0.5)]


def warmed_level(mgr: sg.Manager, spirv: bytes, c: int, seconds: float, least: int,
                 data: tuple[list[np.ndarray], list[float], list[np.ndarray]],
                 handler: Callable[[sg.Manager, bytes, np.ndarray, float],
                                   Awaitable[Any]] = handle,
                 check: bool = True) -> dict[str, Any]:
    """One level served once (serve_rounds in one round): warmed first, untimed, by
    max(2 C, 16) requests, then served for `seconds` and at least max(2 C, least); its
    latency percentiles, and the count of wrong results of both runs. `handler` and
    `check`: as serve_level's."""
    return serve_rounds(mgr, spirv, (c,), seconds, least, data, rounds=1, handler=handler,
                        check=check)[0]


def _summary(runs: list[dict[str, Any]], warm_wrong: int) -> dict[str, Any]:
    """A level from its runs (serve_level's results): the medians of their rates and of
    their latency percentiles and p99/p50 ratios, each run's own (in `rounds_per_s`,
    `rounds_p50_us`, `rounds_p99_us`: latencies of runs made in different host states
    are not pooled, and `rounds_steal_share`: the share of the machine's CPU time its
    hypervisor took during each, common.steal_share, None where unknown); over all of them
    together, the loop's CPU a request and the collector's share of the time; counts
    summed."""
    med = statistics.median
    lats = [r["latencies"] for r in runs]
    p50s = [pct(lat, 0.5) * 1e6 for lat in lats]
    p99s = [pct(lat, 0.99) * 1e6 for lat in lats]
    requests = sum(r["requests"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    out = {"in_flight": runs[0]["in_flight"], "requests": requests, "seconds": seconds,
           "per_s": med(r["per_s"] for r in runs),
           "rounds_per_s": [r["per_s"] for r in runs],
           "rounds_p50_us": p50s, "rounds_p99_us": p99s,
           "rounds_steal_share": [r.get("steal_share") for r in runs],
           "loop_cpu_us": sum(r["loop_cpu_us"] * r["requests"] for r in runs) / requests,
           "gc_share": sum(r["gc_share"] * r["seconds"] for r in runs) / seconds,
           "gc_collections": [sum(g) for g in zip(*(r["gc_collections"] for r in runs))],
           "wrong": sum(len(r["wrong"]) for r in runs) + warm_wrong,
           "p50_us": med(p50s), "p99_us": med(p99s),
           "p99_over_p50": med(b / a for a, b in zip(p50s, p99s)),
           "mean_us": sum(sum(lat) for lat in lats) / requests * 1e6}
    return out


def serve_rounds(mgr: sg.Manager, spirv: bytes, levels: tuple[int, ...], seconds: float,
                 least: int, data: tuple[list[np.ndarray], list[float], list[np.ndarray]],
                 rounds: int = ROUNDS, say: Callable[[str], None] | None = None,
                 rss_rounds: list[float] | None = None,
                 handler: Callable[[sg.Manager, bytes, np.ndarray, float],
                                   Awaitable[Any]] = handle,
                 check: bool = True) -> list[dict[str, Any]]:
    """The figure's levels in `rounds` rounds (up, down, up, ...), each level warmed at its
    first visit, untimed, by max(2 C, 16) requests, then served in each round for
    seconds / rounds and at least max(2 C, least / rounds) requests; a level's summary
    (_summary) over its rounds, in the order of `levels`, with RSS after its last round.
    `rss_rounds`: RSS in MiB after each round is appended to it (the first round reaches
    the working set of the most in flight; a later round that grows it again would be
    memory kept per request). `handler` and `check`: as serve_level's."""
    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in levels}
    warm_wrong = dict.fromkeys(levels, 0)
    rss = {}
    for k in range(rounds):
        order = levels if k % 2 == 0 else levels[::-1]
        for c in order:
            if k == 0:
                warm = asyncio.run(serve_level(mgr, spirv, c, 0.0, max(2 * c, 16), data,
                                               handler=handler, check=check))
                warm_wrong[c] = len(warm["wrong"])
            r = asyncio.run(serve_level(mgr, spirv, c, seconds / rounds,
                                        max(2 * c, -(-least // rounds)), data,
                                        handler=handler, check=check))
            runs[c].append(r)
            rss[c] = rss_bytes() / MiB   # where RSS grows: the working set of a level
        if rss_rounds is not None:
            rss_rounds.append(rss[order[-1]])   # (read after the round's last level)
        if say is not None:
            say(f"serve, round {k + 1} of {rounds}: " + ", ".join(
                f"{c:,} in flight {runs[c][-1]['per_s']:,.0f}/s" for c in order))
    out = []
    for c in levels:
        r = _summary(runs[c], warm_wrong[c])
        r["rss_mib"] = rss[c]
        out.append(r)
    return out


def bench_serve(b: Bench) -> None:
    mgr = b.m
    spirv = scale_spirv()
    # Per level: this long, and at least two requests a slot and enough for a p99.
    seconds, least = (0.1, 200) if b.quick else (0.5, 1000)
    data = requests()
    asyncio.run(serve_level(mgr, spirv, 16, 0.0, 200, data))      # pipeline, pool, caches
    gc.collect()
    mgr.empty_cache()
    live0 = mgr.live_objects()
    rss0 = rss_bytes()
    # Each level warmed first, untimed, as the C yardstick warms its slots (2 C
    # requests): the first time C requests are in flight, the manager makes the command
    # buffers, fences and pool blocks that so many need (a command buffer and fence cost
    # about 0.4 ms on NVIDIA's driver), and keeps them for reuse; the figure is a
    # service's steady state. The warm-up's results are checked too. The levels run in
    # rounds (ROUNDS), a level's rate the median of its rounds'.
    rss_rounds: list[float] = []
    levels = serve_rounds(mgr, spirv, SERVE_LEVELS, seconds, least, data, say=b.p.say,
                          rss_rounds=rss_rounds)
    for r in levels:
        c = r["in_flight"]
        b.p.say(f"serve, {c:,} in flight: {r['per_s']:,.0f} requests/s, p50 "
                f"{r['p50_us']:,.0f} us, p99 {r['p99_us']:,.0f} us, {r['requests']:,} "
                f"requests, {r['wrong']} wrong, {r['loop_cpu_us']:,.0f} us of the loop's "
                f"CPU a request, {r['gc_share']:.0%} of the time in the garbage collector")
    # Not a figure: the most requests in flight again, with the collector's thresholds
    # raised as a service may raise them (docs/scale.md, the asyncio section).
    c = SERVE_LEVELS[-1]
    old = gc.get_threshold()
    gc.set_threshold(*SERVICE_GC_THRESHOLD)
    try:
        tuned = warmed_level(mgr, spirv, c, seconds, least, data)
    finally:
        gc.set_threshold(*old)
    tuned["threshold"] = list(SERVICE_GC_THRESHOLD)
    b.p.say(f"serve, {c:,} in flight, gc.set_threshold{SERVICE_GC_THRESHOLD}: "
            f"{tuned['per_s']:,.0f} requests/s, {tuned['loop_cpu_us']:,.0f} us of the loop's "
            f"CPU a request, {tuned['gc_share']:.0%} in the collector, {tuned['wrong']} wrong")
    # Nor these: the goal's two levels (16 and the most in flight) with the collector off
    # (gc.disable() for the level, its warm-up included): what the rest of a request costs
    # as more are in flight, the collector's part set apart.
    gc_off: list[dict[str, Any]] = []
    was_on = gc.isenabled()
    for c in (SERVE_LEVELS[1], SERVE_LEVELS[-1]):
        gc.collect()
        gc.disable()
        try:
            gc_off.append(warmed_level(mgr, spirv, c, seconds, least, data))
        finally:
            if was_on:
                gc.enable()
    b.p.say("serve with the collector off (gc.disable()): " + ", ".join(
        f"{r['in_flight']:,} in flight {r['per_s']:,.0f} requests/s "
        f"({r['loop_cpu_us']:,.0f} us of the loop's CPU a request)" for r in gc_off))
    # Nor these: the goal's level and the most in flight after gc.freeze(), the collector's
    # thresholds the default (docs/scale.md): the objects made before serving (the
    # imports', the manager's, some 40,000 here) leave the collector's generations, so
    # that its full collections traverse the requests' objects alone.
    gc_frozen: list[dict[str, Any]] = []
    gc.collect()
    gc.freeze()
    try:
        frozen_objects = gc.get_freeze_count()
        for c in (SERVE_GOAL_AT, SERVE_LEVELS[-1]):
            r = warmed_level(mgr, spirv, c, seconds, least, data)
            r["frozen_objects"] = frozen_objects
            gc_frozen.append(r)
    finally:
        gc.unfreeze()
    b.p.say(f"serve after gc.freeze() ({frozen_objects:,} objects frozen): " + ", ".join(
        f"{r['in_flight']:,} in flight {r['per_s']:,.0f} requests/s, {r['gc_share']:.0%} in "
        f"the collector" for r in gc_frozen))
    # Nor these: the harness alone at the goal's two levels, the collector as for the
    # figures: serve_layers' `nothing` variant (the driver, a task and one
    # `await asyncio.sleep(0)` a request, no scopedgpu call), in rounds as the figures.
    # Its rate at the most in flight against 16 is the best any library served this way
    # could reach: the objects of a thousand waiting tasks make the collector run where
    # 16 do not (docs/benchmarks.md, session 58).
    from .serve_layers import request
    harness = serve_rounds(mgr, spirv, (SERVE_LEVELS[1], SERVE_LEVELS[-1]), seconds, least,
                           data, handler=functools.partial(request, part=0), check=False)
    b.p.say("serve, the harness alone (no scopedgpu call): " + ", ".join(
        f"{r['in_flight']:,} in flight {r['per_s']:,.0f} requests/s, {r['gc_share']:.0%} in "
        f"the collector" for r in harness))
    gc.collect()
    mgr.empty_cache()
    live1 = mgr.live_objects()
    rss1 = rss_bytes()
    # The C yardstick: the same request count per level, in one process after scopedgpu's.
    tasks: list[Any] = []
    for r in levels:
        tasks += ["serve", N, r["requests"], r["in_flight"]]
    cres = {x["inflight"]: x for x in b.c.with_shader(SCALE).run(*tasks)
            if x.get("task") == "serve" and "error" not in x}
    for r in levels:
        r["c"] = cres.get(r["in_flight"])
    delta = {k: live1[k] - live0[k] for k in live0 if live1.get(k) != live0[k]}
    # RSS after each round, from the phase's start: the first round takes the working set
    # of its deepest level (the allocator keeps it for the next), the later ones serve as
    # many requests again in the same working set.
    rss_rounds_mib = [v - rss0 / MiB for v in rss_rounds]
    total = sum(r["requests"] for r in levels)
    b.results["details"]["serve"] = {
        "request": f"{N} float32 in, y = a * x (local size 64, push constant a), out; "
                   "tensors, algorithm and sequence per request in with blocks; "
                   "awaited through scopedgpu.aio.eval",
        "levels": levels, "gc_tuned": tuned, "gc_off": gc_off, "gc_frozen": gc_frozen,
        "harness": harness,
        # (not 0 on CPython 3.12, whose collections move the immortal objects they meet
        # into the permanent generation)
        "frozen_after": gc.get_freeze_count(), "requests": total,
        "rss_growth_mib": (rss1 - rss0) / MiB,
        "rss_rounds_mib": rss_rounds_mib,
        "live_before": live0, "live_after": live1, "live_delta": delta}
    by_c = {r["in_flight"]: r for r in levels}
    cpu = b.info.type == "cpu"
    for r in levels:
        c = r["in_flight"]
        checks = []
        if c <= SERVE_P99_UP_TO:
            checks.append(r["p99_over_p50"] <= SPEC_SERVE_P99)
        if c == SERVE_GOAL_AT and not cpu:
            checks.append(r["per_s"] >= SPEC_SERVE_RATE)
        if c == SERVE_LEVELS[-1]:
            checks.append(r["per_s"] >= by_c[SERVE_LEVELS[1]]["per_s"])
        cr = r["c"]
        b.fig(serve_figure(c), r["per_s"], cr["per_s"] if cr else None,
              f"C: the same request, {c:,} in flight", "scopedgpu / C",
              all(checks) and r["wrong"] == 0 and not delta if checks else None,
              in_flight=c, requests=r["requests"], p50_us=r["p50_us"], p99_us=r["p99_us"],
              wrong=r["wrong"], c_p50_us=cr["p50_us"] if cr else None,
              c_p99_us=cr["p99_us"] if cr else None, c_wrong=cr["bad"] if cr else None)
    b.p.say(f"serve: RSS {(rss1 - rss0) / MiB:+.1f} MiB over {total:,} requests (after "
            f"each round: " + ", ".join(f"{v:+.1f}" for v in rss_rounds_mib)
            + f"), live objects {'flat' if not delta else delta}")
    wrong = sum(r["wrong"] for r in levels + gc_off + gc_frozen) + tuned["wrong"]
    if wrong:
        raise AssertionError(f"serve: {wrong} results differ from numpy's")
