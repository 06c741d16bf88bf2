"""Where a served request's host time goes, piece by piece: each step of the serve
figure's request (serve.py) timed alone in a loop, medians of several runs, beside the
shim's own calls for the same steps (what C pays) and the whole request awaited
synchronously and through scopedgpu.aio.

    python -m scopedgpu.bench.serve_parts [--seconds 0.3] [--runs 5] [--json FILE]

Each piece is a loop of the step and its undoing (made, then destroyed), so its figure
is the cost of both; "request, eval()" is the whole request with a plain wait, "request,
eval_async() with C in flight" C requests made and submitted, then each awaited, checked
and destroyed (the library's part of serving, without asyncio; per request), and
"request, aio.eval" the whole request awaited one at a time in an event loop.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any, Callable

import numpy as np

import scopedgpu as sg
from scopedgpu import _vk, aio

from .serve import N, scale_spirv


# Requests in flight in the synchronous pipeline pieces (per request figures).
PIPELINE_LEVELS = (1, 16, 64)


def _per_call_us(fn: Callable[[], Any], seconds: float, runs: int) -> float:
    for _ in range(50):
        fn()
    meds = []
    for _ in range(runs):
        n = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while True:
            for _ in range(20):
                fn()
            n += 20
            t = time.perf_counter()
            if t >= end:
                break
        meds.append((t - t0) / n * 1e6)
    return statistics.median(meds)


def measure(seconds: float, runs: int) -> dict[str, float]:
    spirv = scale_spirv()
    x = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    out: dict[str, float] = {}
    with sg.Manager() as mgr:
        st = mgr._state
        tx = mgr.tensor(x)
        ty = mgr.empty(N)
        algo = mgr.algorithm([tx, ty], spirv, push_consts=[2.0])
        program = st.programs.get(spirv, st.reflections.get(spirv), algo._spec, 2, algo._handle)

        def tensor() -> None:
            mgr.tensor(x).destroy()

        def empty() -> None:
            mgr.empty(N).destroy()

        def algorithm() -> None:
            mgr.algorithm([tx, ty], spirv, push_consts=[2.0]).destroy()

        ranges = [tx.gpu_range, ty.gpu_range]
        blocks = [r.block.handle for r in ranges]
        offsets = [r.offset for r in ranges]
        sizes = [tx.nbytes, ty.nbytes]
        cell = _vk.out("dset")

        def dset_c() -> None:
            _vk.dset_create(st.dev, program.handle, blocks, offsets, sizes, cell, "bench")
            _vk.dset_destroy(_vk.take(cell))

        def sequence_only() -> None:
            mgr.sequence().destroy()

        def record3() -> None:
            with mgr.sequence() as s:
                s.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
                s.record(sg.OpTensorSyncLocal([ty]))

        def record3_eval() -> None:
            with mgr.sequence() as s:
                s.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
                s.record(sg.OpTensorSyncLocal([ty]))
                s.eval()

        rec = mgr.sequence()
        rec.record(sg.OpTensorSyncDevice([tx])).record(sg.OpAlgoDispatch(algo))
        rec.record(sg.OpTensorSyncLocal([ty]))

        def reeval() -> None:
            rec.eval()

        def request() -> np.ndarray:
            with mgr.tensor(x) as a, mgr.empty(N) as b:
                with mgr.algorithm([a, b], spirv, push_consts=[2.0]) as al:
                    with mgr.sequence() as s:
                        s.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(al))
                        s.record(sg.OpTensorSyncLocal([b]))
                        s.eval()
                        return b.numpy()

        async def request_aio() -> None:
            with mgr.tensor(x) as a, mgr.empty(N) as b:
                with mgr.algorithm([a, b], spirv, push_consts=[2.0]) as al:
                    with mgr.sequence() as s:
                        s.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(al))
                        s.record(sg.OpTensorSyncLocal([b]))
                        await aio.eval(s)
                        b.numpy()

        want = np.float32(2.0) * x

        def pipeline(c: int) -> Callable[[], None]:
            """c requests made and submitted (eval_async), then each awaited, checked
            and destroyed: the library's part of serving c in flight, without asyncio."""
            def run() -> None:
                live = []
                for _ in range(c):
                    a = mgr.tensor(x)
                    b = mgr.empty(N)
                    al = mgr.algorithm([a, b], spirv, push_consts=[2.0])
                    s = mgr.sequence()
                    s.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(al))
                    s.record(sg.OpTensorSyncLocal([b])).eval_async()
                    live.append((a, b, al, s))
                for a, b, al, s in live:
                    s.eval_await()
                    if not np.array_equal(b.numpy(), want):
                        raise AssertionError("serve_parts: a request's result differs "
                                             "from numpy's")
                    s.destroy()
                    al.destroy()
                    a.destroy()
                    b.destroy()
            return run

        pieces: dict[str, Callable[[], Any]] = {
            "tensor(x) + destroy": tensor, "empty(N) + destroy": empty,
            "algorithm + destroy": algorithm, "  of which the shim's descriptor set": dset_c,
            "sequence() + destroy": sequence_only,
            "sequence + 3 records + destroy": record3,
            "sequence + 3 records + eval + destroy": record3_eval,
            "re-eval of the recorded 3 ops": reeval,
            "request, eval()": request}
        for name, fn in pieces.items():
            out[name] = _per_call_us(fn, seconds, runs)
        for c in PIPELINE_LEVELS:
            out[f"request, eval_async() with {c} in flight"] = _per_call_us(
                pipeline(c), seconds, runs) / c

        async def many(n: int) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                await request_aio()
            return (time.perf_counter() - t0) / n * 1e6

        if not np.array_equal(request(), np.float32(2.0) * x):
            raise AssertionError("serve_parts: a request's result differs from numpy's")
        asyncio.run(many(200))
        out["request, aio.eval (one at a time)"] = statistics.median(
            asyncio.run(many(max(200, int(seconds * 3000)))) for _ in range(runs))
        rec.destroy()
        algo.destroy()
        tx.destroy()
        ty.destroy()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scopedgpu.bench.serve_parts",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=0.3, help="seconds a run of a piece")
    p.add_argument("--runs", type=int, default=5, help="runs a piece (the median is shown)")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args(argv)
    out = measure(a.seconds, a.runs)
    for name, us in out.items():
        print(f"{name:42s} {us:9.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
