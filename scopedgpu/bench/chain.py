"""The dispatch-chain figure (issue 24): k dependent saxpy dispatches over 4,096 floats in
one recorded sequence (scopedgpu inserts the barrier between each two), re-evaluated; the
median time of one evaluation divided by k. Next to it the C yardstick's `chain` task,
the same commands and barriers in one command buffer re-submitted (the faster of its
polled and waited medians), in rounds alternating with scopedgpu's; and, where CuPy runs
(in a child process), k kernel launches and a CUDA graph of the same k launches captured
from a stream."""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import scopedgpu as sg

from .report import CHAIN_KS, SPEC_CHAIN_RATIO, chain_figure

if TYPE_CHECKING:
    from .suite import Bench

N = 4096


def bench_dispatch_chain(b: Bench) -> None:
    min_time = 0.05 if b.quick else 0.5
    rounds = 1 if b.quick else 3
    x, y, algo = b.saxpy_algo(N)
    rows: list[dict[str, Any]] = []
    try:
        for k in CHAIN_KS:
            # Rounds alternate scopedgpu and the C yardstick, so that load from elsewhere
            # on the machine falls on both alike; the medians of the round medians.
            ours: list[float] = []
            theirs: list[dict[str, Any]] = []
            reps = 0
            with b.m.sequence() as seq:
                for _ in range(k):
                    seq.record(sg.OpAlgoDispatch(algo))
                for _ in range(rounds):
                    times = b.timed_reps(seq.eval, min_time / rounds, min_reps=5,
                                         max_reps=max(10, 20_000 // k // rounds),
                                         warm_tenth=True)
                    ours.append(statistics.median(times) * 1e6 / k)
                    reps += len(times)
                    theirs += [r for r in b.c.run("chain", N, k, len(times))
                               if "error" not in r]
            us = statistics.median(ours)
            cres = {f"{w}_us": statistics.median(r[f"{w}_us_per_dispatch"] for r in theirs)
                    for w in ("poll", "wait")} if theirs else {}
            c_us = min(cres.values(), default=None)
            rows.append({"k": k, "reps": reps, "rounds": rounds, "scopedgpu_us": us,
                         "round_us": ours, "c_us": c_us, "c_poll_us": cres.get("poll_us"),
                         "c_wait_us": cres.get("wait_us")})
            b.p.say(f"dispatch chain, k = {k:,}: scopedgpu {us:.2f} us a dispatch, C {c_us}")
    finally:
        for t in (algo, x, y):
            t.destroy()
    cupy = b.cupy_tasks("cupy_chain", [{"task": "chain", "n": N, "k": r["k"],
                                        "min_time": min_time} for r in rows])
    for r, cu in zip(rows, cupy):
        r["cupy_launch_us"] = cu.get("launch_us_per_kernel") if cu else None
        r["cupy_graph_us"] = cu.get("graph_us_per_kernel") if cu else None
        ratio = r["scopedgpu_us"] / r["c_us"] if r["c_us"] else None
        checks = []
        if ratio is not None:
            checks.append(ratio <= 1 / SPEC_CHAIN_RATIO)
        if r["cupy_graph_us"] is not None:
            checks.append(r["scopedgpu_us"] <= r["cupy_graph_us"])
        b.fig(chain_figure(r["k"]), r["scopedgpu_us"], r["c_us"],
              "C: the same commands, faster of poll and wait", "scopedgpu / C",
              all(checks) if checks else None, k=r["k"], n=N, reps=r["reps"],
              c_poll_us=r["c_poll_us"], c_wait_us=r["c_wait_us"], cupy=r["cupy_graph_us"],
              cupy_launch_us=r["cupy_launch_us"])
    b.results["sweeps"]["dispatch_chain"] = rows
