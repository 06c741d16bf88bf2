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
from typing import Any

import scopedgpu as sg
from scopedgpu import aio

from . import serve


def _run(mgr: sg.Manager, c: int, n: int, data: Any) -> float:
    """n requests of the serve figure's workload at c in flight (serve.serve_level: a
    request admitted whenever one ends, every result checked); their rate."""
    r = asyncio.run(serve.serve_level(mgr, serve.scale_spirv(), c, 0.0, n, data))
    if r["wrong"]:
        raise SystemExit(f"{len(r['wrong'])} wrong results at {c} in flight")
    return float(r["per_s"])


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
    data = serve.requests()
    try:
        with sg.Manager() as mgr:
            _run(mgr, 4, 200, data)   # warm: pipeline, pool, caches
            for c in (int(v) for v in args.levels.split(",")):
                steps.update(n=0, seconds=0.0)
                prof = cProfile.Profile()
                prof.enable()
                rate = _run(mgr, c, args.requests, data)
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
