"""Serving for a long time (issue 24: "RSS and live objects flat over 1,000,000
requests"): the serve figure's workload (serve.py: per request its two tensors,
algorithm and sequence made and destroyed, awaited through scopedgpu.aio) on one
Manager, in chunks, with RSS and the manager's live objects read after each.

    python -m scopedgpu.bench.serve_long [--requests 1000000] [--in-flight 64]
        [--chunk 50000] [--rss-growth-mib 16] [--json FILE]

A first chunk warms the manager and is the baseline: the pool, the caches and the
allocator's heap reach their working set there. Then every chunk's results are checked
against numpy, and after each the live objects (`live_objects(caches=False)`: what the
requests made, without what the manager keeps for reuse) must equal the baseline's,
and RSS may not exceed the baseline's by more than --rss-growth-mib. Prints a line a
chunk; exit status 0 when every check held, 1 otherwise (the reasons printed). Not in
CI (1,000,000 requests take some 5 minutes on lavapipe, 2 on the H200); the suite's
tests/test_serving_load.py is the bounded version.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from typing import Any

import scopedgpu as sg

from .common import MiB, add_device_json, report_failures, require_positive, rss_bytes
from .serve import requests, scale_spirv, serve_level


def verdict(chunks: list[dict[str, Any]], base: dict[str, Any],
            rss_growth_mib: float) -> list[str]:
    """What failed, one line each (empty when every check held): wrong results, live
    objects away from the baseline's, RSS above the baseline's by more than the limit."""
    bad = []
    for i, c in enumerate(chunks):
        if c["wrong"]:
            bad.append(f"chunk {i}: {c['wrong']} wrong result(s)")
        if c["live"] != base["live"]:
            diff = {k: c["live"].get(k, 0) - v for k, v in base["live"].items()
                    if c["live"].get(k, 0) != v}
            bad.append(f"chunk {i}: live objects differ from the baseline by {diff}")
        grown = c["rss_mib"] - base["rss_mib"]
        if grown > rss_growth_mib:
            bad.append(f"chunk {i}: RSS {grown:+.1f} MiB over the baseline "
                       f"(limit {rss_growth_mib:g})")
    return bad


def run(requests_total: int, in_flight: int, chunk: int, rss_growth_mib: float,
        device: int | None = None) -> dict[str, Any]:
    data = requests()
    spirv = scale_spirv()

    def one_chunk(mgr: sg.Manager, count: int) -> dict[str, Any]:
        r = asyncio.run(serve_level(mgr, spirv, in_flight, 0.0, count, data))
        gc.collect()
        return {"requests": r["requests"], "per_s": r["per_s"], "wrong": len(r["wrong"]),
                "rss_mib": rss_bytes() / MiB, "live": mgr.live_objects(caches=False)}

    with sg.Manager(device) as mgr:
        name = mgr.device.name
        before = mgr.live_objects(caches=False)
        base = one_chunk(mgr, chunk)
        print(f"baseline: {base['requests']:,} requests, {base['per_s']:,.0f}/s, RSS "
              f"{base['rss_mib']:.1f} MiB", flush=True)
        chunks = []
        done = 0
        t0 = time.perf_counter()
        while done < requests_total:
            c = one_chunk(mgr, min(chunk, requests_total - done))
            done += c["requests"]
            chunks.append(c)
            print(f"{done:,} requests: {c['per_s']:,.0f}/s, RSS {c['rss_mib']:.1f} MiB "
                  f"({c['rss_mib'] - base['rss_mib']:+.1f}), wrong {c['wrong']}, live "
                  f"objects {'as the baseline' if c['live'] == base['live'] else c['live']}",
                  flush=True)
        seconds = time.perf_counter() - t0
        mgr.empty_cache()
        after = mgr.live_objects(caches=False)
    bad = verdict(chunks, base, rss_growth_mib)
    if after != before:
        bad.append(f"after the run and empty_cache(): live objects {after}, before {before}")
    return {"device": name, "requests": done, "in_flight": in_flight,
            "chunk": chunk, "seconds": seconds, "per_s": done / seconds,
            "baseline": base, "chunks": chunks, "failures": bad}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scopedgpu.bench.serve_long",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1_000_000,
                   help="requests after the baseline chunk (default 1,000,000)")
    p.add_argument("--in-flight", type=int, default=64, help="concurrency (default 64)")
    p.add_argument("--chunk", type=int, default=50_000,
                   help="requests between two readings (default 50,000)")
    p.add_argument("--rss-growth-mib", type=float, default=16.0,
                   help="RSS allowed over the baseline's (default 16 MiB, the bench's "
                        "long-churn limit)")
    add_device_json(p)
    a = p.parse_args(argv)
    require_positive(p, a, ("requests", "in_flight", "chunk"))
    out = run(a.requests, a.in_flight, a.chunk, a.rss_growth_mib, a.device)
    print(f"{out['requests']:,} requests at {a.in_flight} in flight on {out['device']}: "
          f"{out['seconds']:.1f} s, {out['per_s']:,.0f}/s")
    return report_failures(out, a.json)


if __name__ == "__main__":
    sys.exit(main())
