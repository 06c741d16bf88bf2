"""A served request's time in layers (issue 24: where a request's time goes): the serve
figure's request (serve.py) cut into parts, each variant adding one part to the one
before it, served by the figure's own driver (serve.serve_level: a task per request, at
most C in flight), rounds alternating the variants in one process with the cyclic
collector off, and the loop thread's CPU time a request (`time.thread_time()`), medians
of the rounds; then the tracked objects a request of each variant holds while it awaits.

    python -m scopedgpu.bench.serve_layers [--in-flight 16] [--requests 3000]
        [--rounds 5] [--device N] [--json FILE]

The parts, each row adding its part to the row above:
  nothing    the driver, a task and one `await asyncio.sleep(0)`
  tensors    + the request's two tensors (`mgr.tensor(x)`, `mgr.empty(n)`), its result
             read (`ty.numpy()`), both destroyed
  algorithm  + its algorithm
  sequence   + its sequence and its three ops recorded (never submitted)
  eval       + `await aio.eval(seq)` in place of `sleep(0)`: the request as served

Objects held: the cyclic collector's share grows with the objects that requests in flight
keep alive, which each collection traverses (with many requests in flight, their objects
outlive the young collections and reach the full ones). After the rounds, C requests of
each variant are started at once, and the objects the collector tracks
(`gc.get_objects()`) are counted once each of them reached its await, less the count's
own; per request, each row adding its part's to the row above.

Every result of the served variant is compared with numpy's, bit for bit. Exit status 1
when one differs, or when the manager's live objects (`live_objects(caches=False)`)
did not return to their baseline after the run and `empty_cache()`. The collector is
off so that its share (which the serve figure reports per level, and its levels with the
collector off) falls on no part; docs/benchmarks.md has the H200's table. (serve_parts.py
times each step alone in a loop, without asyncio, beside the shim's own calls; here the
parts are timed in place, as a service runs them.)
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import statistics
import sys
from typing import Any

import numpy as np

import scopedgpu as sg
from scopedgpu import aio

from .common import add_device_json, report_failures, require_positive, served_failures
from .serve import differs, requests, scale_spirv, serve_level

PARTS = ("nothing", "tensors", "algorithm", "sequence", "eval")
_EVAL = len(PARTS) - 1


async def request(mgr: sg.Manager, spirv: bytes, x: np.ndarray, a: float, *, part: int
                  ) -> np.ndarray | None:
    """serve.handle() up to part `part` (an index of PARTS), then one await."""
    if part == 0:
        await asyncio.sleep(0)
        return None
    with mgr.tensor(x) as tx, mgr.empty(x.size) as ty:
        if part == 1:
            await asyncio.sleep(0)
            return ty.numpy()
        with mgr.algorithm([tx, ty], spirv, push_consts=[a]) as algo:
            if part == 2:
                await asyncio.sleep(0)
                return ty.numpy()
            with mgr.sequence() as seq:
                seq.record(sg.OpTensorSyncDevice([tx]))
                seq.record(sg.OpAlgoDispatch(algo))
                seq.record(sg.OpTensorSyncLocal([ty]))
                if part == 3:
                    await asyncio.sleep(0)
                else:
                    await aio.eval(seq)
                return ty.numpy()


def serve_part(mgr: sg.Manager, spirv: bytes, part: int, in_flight: int, count: int,
               data: tuple[list[np.ndarray], list[float], list[np.ndarray]]
               ) -> tuple[float, int]:
    """Serves `count` requests of variant `part` with at most `in_flight` at once, through
    the serve figure's own driver (serve.serve_level); returns the loop thread's CPU time
    a request (us) and, for the served variant, the count of results that differ from
    numpy's."""
    r = asyncio.run(serve_level(mgr, spirv, in_flight, 0.0, count, data,
                                handler=functools.partial(request, part=part),
                                check=part == _EVAL))
    return r["loop_cpu_us"], len(r["wrong"])


async def _count(mgr: sg.Manager, spirv: bytes, part: int, n: int,
                 data: tuple[list[np.ndarray], list[float], list[np.ndarray]]
                 ) -> tuple[int, int]:
    """Objects the collector tracks above those before, once n requests of variant
    `part`, started at once, have each reached their await: counted by a task started
    after them, whose turn comes once each of them has had its own (n = 0: the count's
    own objects); and, for the served variant, how many results differ from numpy's."""
    xs, alphas, refs = data
    seen: list[int] = []

    async def probe() -> None:
        seen.append(len(gc.get_objects()))

    base = len(gc.get_objects())
    tasks = [asyncio.ensure_future(request(mgr, spirv, xs[i % len(xs)],
                                           alphas[i % len(alphas)], part=part))
             for i in range(n)]
    await asyncio.ensure_future(probe())
    wrong = 0
    for i, task in enumerate(tasks):
        y = await task
        ref = refs[i % len(refs)]
        if part == _EVAL and differs(y, ref.tobytes(), ref.shape):
            wrong += 1
    return seen[0] - base, wrong


def held_objects(mgr: sg.Manager, spirv: bytes, part: int, in_flight: int,
                 data: tuple[list[np.ndarray], list[float], list[np.ndarray]]
                 ) -> tuple[float, int]:
    """Tracked objects a request of variant `part` holds while it awaits: `in_flight`
    requests started at once (see _count), less the count's own objects, per request;
    and the count of wrong results among them (the served variant's). The caller turns
    the collector off (a collection meanwhile would free what the count should see, or
    untrack it)."""
    async def both() -> tuple[float, int]:
        gc.collect()
        own, _ = await _count(mgr, spirv, part, 0, data)
        gc.collect()
        held, wrong = await _count(mgr, spirv, part, in_flight, data)
        return (held - own) / in_flight, wrong
    return asyncio.run(both())


def run(in_flight: int, count: int, rounds: int, device: int | None = None,
        data: tuple[list[np.ndarray], list[float], list[np.ndarray]] | None = None
        ) -> dict[str, Any]:
    data = data if data is not None else requests()
    spirv = scale_spirv()
    times: dict[str, list[float]] = {p: [] for p in PARTS}
    held: dict[str, float] = {}
    wrong = 0
    with sg.Manager(device) as mgr:
        name = mgr.device.name
        before = mgr.live_objects(caches=False)
        for part in range(len(PARTS)):   # warm: pipeline, pool, caches at this depth
            wrong += serve_part(mgr, spirv, part, in_flight, max(2 * in_flight, 100),
                                data)[1]
        gc.collect()
        was_on = gc.isenabled()
        gc.disable()
        try:
            for _ in range(rounds):
                for part, label in enumerate(PARTS):
                    us, bad = serve_part(mgr, spirv, part, in_flight, count, data)
                    times[label].append(us)
                    wrong += bad
            for part, label in enumerate(PARTS):
                held[label], bad = held_objects(mgr, spirv, part, in_flight, data)
                wrong += bad
        finally:
            if was_on:
                gc.enable()
        mgr.empty_cache()
        after = mgr.live_objects(caches=False)
    medians = {p: statistics.median(v) for p, v in times.items()}
    rows = []
    prev = prev_held = 0.0
    for p in PARTS:
        rows.append({"part": p, "us": medians[p], "added_us": medians[p] - prev,
                     "rounds_us": times[p], "held": held[p],
                     "added_held": held[p] - prev_held})
        prev, prev_held = medians[p], held[p]
    failures = served_failures(wrong, before, after)
    return {"device": name, "in_flight": in_flight, "requests": count, "rounds": rounds,
            "python": sys.version.split()[0], "parts": rows, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scopedgpu.bench.serve_layers",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--in-flight", type=int, default=16, help="concurrency (default 16)")
    p.add_argument("--requests", type=int, default=3000,
                   help="requests a variant a round (default 3,000)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    add_device_json(p)
    a = p.parse_args(argv)
    require_positive(p, a, ("in_flight", "requests", "rounds"))
    out = run(a.in_flight, a.requests, a.rounds, a.device)
    print(f"a served request by part on {out['device']}, {a.in_flight} in flight, "
          f"{a.rounds} rounds of {a.requests:,} requests, the collector off, Python "
          f"{out['python']}: the loop's CPU time a request (medians), and the objects the "
          "collector tracks that a request holds while it awaits")
    for r in out["parts"]:
        print(f"{r['part']:10s} {r['us']:8.1f} us  (+{r['added_us']:.1f})  "
              f"{r['held']:6.1f} objects held  (+{r['added_held']:.1f})")
    return report_failures(out, a.json)


if __name__ == "__main__":
    sys.exit(main())
