"""Where a served request's time goes: the serve figure's workload (serve.py) at a few
levels of concurrency, the main thread under cProfile, and the aio waiter thread's
steps timed, printed as requests/s and the functions with the most time of their own.

    python -m scopedgpu.bench.profile_serve [--levels 16,256] [--requests 2000] [--top 22]

This is how issue 24's cost at 256 in flight was found on the H200 (2026-12-01): 2.0 of
4.3 s in sg_seq_destroy and sg_seq_create, with 16 idle sequences kept a queue.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import time
from pathlib import Path
from typing import Any

import numpy as np

import scopedgpu as sg
from scopedgpu import aio

N = 4096


def _spirv() -> bytes:
    return (Path(__file__).parent / "shaders" / "scale.spv").read_bytes()


async def _one(mgr: sg.Manager, spirv: bytes, x: np.ndarray, a: float,
               gate: asyncio.Semaphore) -> None:
    try:
        with mgr.tensor(x) as tx, mgr.empty(N) as ty:
            with mgr.algorithm([tx, ty], spirv, push_consts=[a]) as algo:
                with mgr.sequence() as seq:
                    seq.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
                    seq.record(sg.OpTensorSyncLocal([ty]))
                    await aio.eval(seq)
                    y = ty.numpy()
        if not np.array_equal(y, np.float32(a) * x):
            raise SystemExit(f"a wrong result at a = {a}")
    finally:
        gate.release()


async def _run(mgr: sg.Manager, spirv: bytes, c: int, n: int) -> float:
    """n requests, a new one admitted whenever one ends (serve.py's admission: one
    coroutine waits on the semaphore at a time; n coroutines all waiting on it would
    cost asyncio's Semaphore O(waiters) a release, which the profile would show)."""
    x = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    gate = asyncio.Semaphore(c)
    tasks: set[asyncio.Task] = set()
    t0 = time.perf_counter()
    for i in range(n):
        await gate.acquire()
        task = asyncio.create_task(_one(mgr, spirv, x, float(i % 7 + 1), gate))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scopedgpu.bench.profile_serve",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", default="16,256", help="requests in flight, comma-separated")
    p.add_argument("--requests", type=int, default=2000, help="requests a level")
    p.add_argument("--top", type=int, default=22, help="functions printed a level")
    args = p.parse_args(argv)
    steps = {"n": 0, "seconds": 0.0}
    step = aio._Waiter._step

    def timed(self: Any, full: bool) -> bool:
        t0 = time.perf_counter()
        try:
            return step(self, full)
        finally:
            steps["n"] += 1
            steps["seconds"] += time.perf_counter() - t0

    aio._Waiter._step = timed   # type: ignore[method-assign]
    spirv = _spirv()
    try:
        with sg.Manager() as mgr:
            asyncio.run(_run(mgr, spirv, 4, 200))   # warm: pipeline, pool, caches
            for c in (int(v) for v in args.levels.split(",")):
                steps.update(n=0, seconds=0.0)
                prof = cProfile.Profile()
                prof.enable()
                rate = asyncio.run(_run(mgr, spirv, c, args.requests))
                prof.disable()
                print(f"{c} in flight: {rate:,.0f} requests/s under the profiler; the aio "
                      f"waiter: {steps['n']} steps, {steps['seconds']:.3f} s")
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
                print(out.getvalue())
    finally:
        aio._Waiter._step = step   # type: ignore[method-assign]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
