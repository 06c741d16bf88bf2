"""Dask scaling: one worker per GPU, a GPU-bound workload, one worker against two.

Each task fills a tensor of `--n` uint32 on its worker's GPU with `--iters` steps of a
32-bit LCG per element (shaders/lcg_fill.spv: integer work, no upload), reads it
back and returns a sample of it; the client checks every sample against numpy (by jumping
the LCG ahead). The same `--tasks` tasks run on a LocalCluster of 1 worker, then of
`--workers` workers (one per device, round-robin by worker name; a one-device machine
opens its device once per worker); the script prints the times and the speed-up, and
writes JSON. The SPIR-V is committed next to this script, so no GLSL compiler is needed.

    python -m scopedgpu.bench.dask_scaling            # two-GPU host: goal >= 1.8x
    python -m scopedgpu.bench.dask_scaling --quick    # lavapipe: checks that it runs
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
A, C, MUL = 1664525, 1013904223, 2654435761
SAMPLE = 4096


def lcg_jump(start: np.ndarray, iters: int) -> np.ndarray:
    a, c = 1, 0
    ma, mc = A, C
    while iters:
        if iters & 1:
            a, c = (ma * a) % 2**32, (ma * c + mc) % 2**32
        ma, mc = (ma * ma) % 2**32, (ma * mc + mc) % 2**32
        iters >>= 1
    return ((start.astype(np.uint64) * a + c) % 2**32).astype(np.uint32)


def expected(n: int, seed: int, iters: int) -> np.ndarray:
    i = np.arange(0, n, max(1, n // SAMPLE), dtype=np.uint64)
    return lcg_jump(((i * MUL + seed) % 2**32).astype(np.uint32), iters)


def task(seed: int, n: int, iters: int, spirv: bytes) -> tuple[np.ndarray, int]:
    """On a worker: everything scoped, on the worker's Manager."""
    import scopedgpu as sg
    import scopedgpu.dask as sgd
    mgr = sgd.manager()
    groups = -(-n // 256)
    gx = min(groups, 65535)
    with mgr.empty(n, dtype=np.uint32) as v, \
            mgr.algorithm([v], spirv, workgroup=(gx, -(-groups // gx), 1),
                          push_consts=np.array([seed, iters], dtype=np.uint32)) as algo:
        with mgr.sequence() as seq:
            seq.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([v]))
            seq.eval()
        return v.data()[:: max(1, n // SAMPLE)].copy(), mgr.device.index


def run(workers: int, args: argparse.Namespace, spirv: bytes) -> dict:
    from dask.distributed import Client, LocalCluster

    import scopedgpu.dask as sgd
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        sgd.register(client)
        # Warm up each worker (Manager open, pipeline compiled, pool grown).
        warm = [client.submit(task, 10**6 + k, args.n, 1, spirv, pure=False,
                              workers=[w]) for k, w in enumerate(client.scheduler_info()["workers"])]
        client.gather(warm)
        t0 = time.perf_counter()
        futs = [client.submit(task, seed, args.n, args.iters, spirv, pure=False)
                for seed in range(args.tasks)]
        got = client.gather(futs)
        seconds = time.perf_counter() - t0
    ok = all(np.array_equal(s, expected(args.n, seed, args.iters))
             for seed, (s, _) in enumerate(got))
    devices = sorted({d for _, d in got})
    per_device = {d: sum(1 for _, x in got if x == d) for d in devices}
    return {"workers": workers, "seconds": seconds, "ok": ok, "devices": devices,
            "tasks_per_device": per_device,
            "gops": args.tasks * args.n * args.iters * 2 / seconds / 1e9}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="workers of the scaled run")
    p.add_argument("--tasks", type=int, default=64)
    # About 35 ms of integer work per task on an H200 (2^40 multiply-adds), against a
    # 4 MiB read-back and a few ms of Dask overhead: GPU-bound.
    p.add_argument("--n", type=int, default=1 << 20, help="uint32 per task")
    p.add_argument("--iters", type=int, default=1 << 20, help="LCG steps per element")
    p.add_argument("--quick", action="store_true", help="small sizes (lavapipe)")
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks, args.n, args.iters = min(args.tasks, 8), min(args.n, 1 << 14), min(args.iters, 256)
    spirv = (HERE / "shaders" / "lcg_fill.spv").read_bytes()
    rows = [run(1, args, spirv), run(args.workers, args, spirv)]
    ratio = rows[0]["seconds"] / rows[1]["seconds"]
    for r in rows:
        print(f"{r['workers']} worker(s): {r['seconds']:.2f} s for {args.tasks} tasks "
              f"({r['gops']:.1f} G int ops/s), devices {r['devices']}, "
              f"tasks per device {r['tasks_per_device']}, results match numpy: {r['ok']}")
    print(f"speed-up, {args.workers} workers over 1: {ratio:.2f}x (goal on two GPUs: >= 1.8x)")
    ok = all(r["ok"] for r in rows)
    print("result matches numpy: OK" if ok else "result matches numpy: FAILED")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "speedup": ratio, "tasks": args.tasks,
                                               "n": args.n, "iters": args.iters}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
