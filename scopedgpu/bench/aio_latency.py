"""asyncio waits compared: latency and CPU of `await scopedgpu.aio.eval(seq)` (one shared
waiter thread) against a blocking `seq.eval()`, polling from the loop with
`asyncio.sleep` backing off (50 us doubling to 2 ms), and a thread per wait
(`asyncio.to_thread(seq.eval_await)`), for dispatches of a few lengths. One request at a
time, then 64 at once. CPU is process CPU seconds per wall second (1.0 = one core busy).

    python -m scopedgpu.bench.aio_latency [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import scopedgpu as sg
from scopedgpu import aio

HERE = Path(__file__).resolve().parent


async def _poll(seq: sg.Sequence) -> None:
    seq.eval_async()
    delay = 5e-5
    while seq.is_running:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2e-3)


async def _thread(seq: sg.Sequence) -> None:
    seq.eval_async()
    await asyncio.to_thread(seq.eval_await)


WAYS = {"aio.eval": lambda s: aio.eval(s), "sleep-poll": _poll, "to_thread": _thread}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default=None, metavar="FILE")
    a = p.parse_args(argv)
    spirv = (HERE / "shaders" / "lcg_fill.spv").read_bytes()
    reps, conc = (30, 8) if a.quick else (300, 64)
    rows = []
    with sg.Manager() as mgr:
        print(f"device: {mgr.device.name}")
        n = 1 << 12 if a.quick else 1 << 16
        tensors = [mgr.empty(n, dtype=np.uint32) for _ in range(conc)]
        for iters in ((16, 4096) if a.quick else (16, 4096, 60000)):
            pc = np.array([1, iters], dtype=np.uint32)
            seqs = [mgr.sequence().record(sg.OpAlgoDispatch(
                mgr.algorithm([t], spirv, workgroup=(max(1, n // 256), 1, 1), push_consts=pc)))
                for t in tensors]
            seqs[0].eval()
            ts, c0, w0 = [], time.process_time(), time.perf_counter()
            for _ in range(reps):
                t0 = time.perf_counter()
                seqs[0].eval()
                ts.append(time.perf_counter() - t0)
            row = {"iters": iters, "blocking_us": statistics.median(ts) * 1e6,
                   "blocking_cpu": (time.process_time() - c0) / (time.perf_counter() - w0)}
            for name, way in WAYS.items():
                async def one(way=way, seqs=seqs) -> list[float]:
                    out = []
                    for _ in range(reps):
                        t0 = time.perf_counter()
                        await way(seqs[0])
                        out.append(time.perf_counter() - t0)
                    return out

                async def many(way=way, seqs=seqs) -> float:
                    t0 = time.perf_counter()
                    for _ in range(max(1, reps // conc)):
                        await asyncio.gather(*(way(s) for s in seqs))
                    return (time.perf_counter() - t0) / max(1, reps // conc)

                c0, w0 = time.process_time(), time.perf_counter()
                ts = asyncio.run(one())
                row[f"{name}_us"] = statistics.median(ts) * 1e6
                row[f"{name}_cpu"] = (time.process_time() - c0) / (time.perf_counter() - w0)
                row[f"{name}_{conc}_at_once_ms"] = asyncio.run(many()) * 1e3
            rows.append(row)
            print(f"dispatch of {iters} LCG steps: blocking eval {row['blocking_us']:.0f} us "
                  f"(cpu {row['blocking_cpu']:.2f}); " + "; ".join(
                      f"{k} {row[f'{k}_us']:.0f} us (cpu {row[f'{k}_cpu']:.2f}, "
                      f"{conc} at once {row[f'{k}_{conc}_at_once_ms']:.2f} ms)" for k in WAYS))
            for s in seqs:
                s.destroy()
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
