"""What the SPIR-V checks cost: the first verdict on each built-in shader (validator,
structural, interface and capability checks), a cached verdict (one sha256 and a dict
look-up), and mgr.algorithm() with a module the manager has seen (no check at all).
Prints a table and writes JSON.

    python -m scopedgpu.bench.spirv_checks [--json spirv_checks.json] [--repeat 2000]

Needs only the built-in shaders (no GLSL compiler); without SPIRV-Tools it measures the
checks that remain and says so.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import scopedgpu as sg
from scopedgpu import _spirv_val
from scopedgpu._shaders import builtin_spirv

BUILTINS = ["demo_linear", "mult_f32", "mult_i32", "mult_u32", "saxpy"]


def per_call(fn, repeat: int) -> float:
    """Median of 5 runs of `repeat` calls, seconds per call."""
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        runs.append((time.perf_counter() - t) / repeat)
    return sorted(runs)[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="spirv_checks.json")
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    v = _spirv_val.validator()
    out: dict = {"validator": f"SPIRV-Tools {v.version}" if v.ok else f"none ({v.found})",
                 "shaders": {}}
    with sg.Manager() as mgr:
        out["device"] = str(mgr.device)
        for name in BUILTINS:
            spirv = builtin_spirv(name)
            _spirv_val._verdicts.clear()
            t = time.perf_counter()
            _spirv_val.check_module(spirv, mgr.device)
            cold = time.perf_counter() - t
            warm = per_call(lambda s=spirv: _spirv_val.check_module(s, mgr.device), args.repeat)
            out["shaders"][name] = {"bytes": len(spirv), "first_check_us": cold * 1e6,
                                    "cached_check_us": warm * 1e6}
        spirv = builtin_spirv("saxpy")
        x, y = mgr.tensor(np.ones(1024, np.float32)), mgr.tensor(np.ones(1024, np.float32))
        mgr.algorithm([x, y], spirv, push_consts=[2.0]).destroy()     # seen from here on
        seen = per_call(lambda: mgr.algorithm([x, y], spirv, push_consts=[2.0]).destroy(),
                        max(1, args.repeat // 10))
        out["algorithm_seen_module_us"] = seen * 1e6
        x.destroy()
        y.destroy()
    print(f"device: {out['device']}\nvalidator: {out['validator']}")
    print(f"{'shader':12s} {'bytes':>6s} {'first check':>12s} {'cached':>9s}")
    for name, r in out["shaders"].items():
        print(f"{name:12s} {r['bytes']:6d} {r['first_check_us']:9.0f} us "
              f"{r['cached_check_us']:6.1f} us")
    print(f"mgr.algorithm() + destroy() with a module seen before: "
          f"{out['algorithm_seen_module_us']:.1f} us")
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
