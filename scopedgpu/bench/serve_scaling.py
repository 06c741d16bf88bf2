"""How a served request's throughput scales with the requests in flight, layer by layer
(issue 24's goal: no lower at 1,024 in flight than at 16): serve_layers' variants of the
serve figure's request (`nothing`: the driver, a task and one `await asyncio.sleep(0)`,
no scopedgpu call at all; then `tensors`, `algorithm`, `sequence`, each adding its part;
`eval`: the request as the figure serves it), served by the figure's own driver
(serve.serve_level) at a low and a high level of concurrency, with Python's cyclic
collector at the process's thresholds and with it off, in rounds that alternate all of
them; requests/s (the medians of the rounds) and the high level's rate over the low's.

    python -m scopedgpu.bench.serve_scaling [--levels 16,1024] [--parts nothing,eval]
        [--seconds 0.5] [--rounds 3] [--device N] [--json FILE]

The `nothing` rows are the harness alone: their ratio is the best any library served this
way could reach. With the collector on, its objects (a task, its coroutines, the driver's
bookkeeping) alive at 1,024 in flight make the collector run where at 16 it does not.
Every result of the `eval` variant is compared with numpy's, bit for bit; exit status 1
when one differs, or when the manager's live objects (`live_objects(caches=False)`) did
not return to their baseline after the run and `empty_cache()`.
"""
from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
from typing import Any

import numpy as np

import scopedgpu as sg

from .common import add_device_json, report_failures, require_positive, served_failures
from .serve import requests, scale_spirv, warmed_level
from .serve_layers import PARTS, request

_EVAL = PARTS.index("eval")
COLLECTOR = ("on", "off")


def serve_at(mgr: sg.Manager, spirv: bytes, part: int, in_flight: int, seconds: float,
             data: tuple[list[np.ndarray], list[float], list[np.ndarray]],
             collector: str) -> dict[str, Any]:
    """Variant `part` served at `in_flight` as the figure serves a level once
    (serve.warmed_level: warmed, untimed, then for `seconds` and at least 2 x in_flight
    requests), the collector on or off for both and left as it was; warmed_level's result
    (`wrong`: the count of both runs)."""
    was_on = gc.isenabled()
    if collector == "off":
        gc.disable()
    try:
        return warmed_level(mgr, spirv, in_flight, seconds, 2 * in_flight, data,
                            handler=functools.partial(request, part=part),
                            check=part == _EVAL)
    finally:
        if was_on:
            gc.enable()


def run(levels: tuple[int, int], parts: list[str], seconds: float, rounds: int,
        device: int | None = None,
        data: tuple[list[np.ndarray], list[float], list[np.ndarray]] | None = None
        ) -> dict[str, Any]:
    data = data if data is not None else requests()
    spirv = scale_spirv()
    low, high = levels
    cells = [(p, c) for p in parts for c in COLLECTOR]
    rates: dict[tuple[str, str, int], list[float]] = {
        (p, c, lv): [] for p, c in cells for lv in levels}
    shares: dict[tuple[str, str, int], list[float]] = {k: [] for k in rates}
    wrong = 0
    with sg.Manager(device) as mgr:
        name = mgr.device.name
        before = mgr.live_objects(caches=False)
        for _ in range(rounds):
            for p, c in cells:
                for lv in levels:
                    r = serve_at(mgr, spirv, PARTS.index(p), lv, seconds, data, c)
                    rates[(p, c, lv)].append(r["per_s"])
                    shares[(p, c, lv)].append(r["gc_share"])
                    wrong += r["wrong"]
        gc.collect()
        mgr.empty_cache()
        after = mgr.live_objects(caches=False)
    rows = []
    for p, c in cells:
        lo = statistics.median(rates[(p, c, low)])
        hi = statistics.median(rates[(p, c, high)])
        rows.append({"part": p, "collector": c, "low_per_s": lo, "high_per_s": hi,
                     "ratio": hi / lo,
                     "low_rounds_per_s": rates[(p, c, low)],
                     "high_rounds_per_s": rates[(p, c, high)],
                     "low_gc_share": statistics.median(shares[(p, c, low)]),
                     "high_gc_share": statistics.median(shares[(p, c, high)])})
    failures = served_failures(wrong, before, after)
    return {"device": name, "levels": [low, high], "seconds": seconds, "rounds": rounds,
            "python": sys.version.split()[0], "gc_threshold": list(gc.get_threshold()),
            "rows": rows, "failures": failures}


def _levels(text: str) -> tuple[int, int]:
    try:
        low, high = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--levels takes two counts of requests in flight, low,high: not {text!r}"
        ) from None
    if not 1 <= low < high:
        raise argparse.ArgumentTypeError(
            f"--levels: low,high with 1 <= low < high, not {text!r}")
    return low, high


def _parts(text: str) -> list[str]:
    parts = [p for p in text.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(
            f"--parts: a comma-separated subset of {','.join(PARTS)}, not {text!r}")
    return [p for p in PARTS if p in parts]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scopedgpu.bench.serve_scaling",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", type=_levels, default=(16, 1024),
                   help="the low and the high count of requests in flight (default 16,1024)")
    p.add_argument("--parts", type=_parts, default=list(PARTS),
                   help=f"variants to serve (default all: {','.join(PARTS)})")
    p.add_argument("--seconds", type=float, default=0.5,
                   help="seconds a variant, level and collector state a round (default 0.5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    add_device_json(p)
    a = p.parse_args(argv)
    require_positive(p, a, ("rounds",))
    if not a.seconds > 0:
        p.error("--seconds must be above 0")
    low, high = a.levels
    out = run(a.levels, a.parts, a.seconds, a.rounds, a.device)
    print(f"serve variants on {out['device']} at {low:,} and {high:,} in flight, {a.rounds} "
          f"rounds of {a.seconds} s each, Python {out['python']}, collector thresholds "
          f"{tuple(out['gc_threshold'])}: requests/s (medians of the rounds) and "
          f"{high:,} over {low:,}")
    for r in out["rows"]:
        print(f"{r['part']:10s} collector {r['collector']:3s} {r['low_per_s']:10,.0f}/s "
              f"{r['high_per_s']:10,.0f}/s  {r['ratio']:.3f}"
              + (f"  (in the collector {r['low_gc_share']:.1%}, {r['high_gc_share']:.1%})"
                 if r["collector"] == "on" else ""))
    return report_failures(out, a.json)


if __name__ == "__main__":
    sys.exit(main())
