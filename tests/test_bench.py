"""Smoke test of `python -m scopedgpu bench --quick`: it runs to the end and its JSON holds
every figure with numbers. No timing is asserted (CI machines are noisy)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from scopedgpu.bench import FIGURES


def test_bench_quick_writes_every_figure(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env.pop("SCOPEDGPU_DEBUG", None)   # validation would measure the layer, not scopedgpu
    res = subprocess.run([sys.executable, "-m", "scopedgpu", "bench", "--quick", "--no-cupy",
                          "--json", str(out)], capture_output=True, text=True, timeout=600,
                         env=env)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    data = json.loads(out.read_text())
    assert data["errors"] == {}
    for key, *_ in FIGURES:
        fig = data["figures"][key]
        assert isinstance(fig["value"], (int, float)) and math.isfinite(fig["value"]), key
        if "compiler" not in data["meta"]["c_yardstick"] and key not in ("live_delta",):
            assert isinstance(fig["yardstick"], (int, float)), key
            assert fig["ratio"] is not None, key
    for row in data["sweeps"]["saxpy"]:
        assert row["scopedgpu_gbps"] > 0
    for row in data["sweeps"]["transfer"]:
        assert row["upload_gbps"] > 0 and row["download_gbps"] > 0 and row["roundtrip_ok"]
    assert "figure" in res.stdout   # the table is printed


def test_bench_without_a_c_compiler_reports_no_ratio(monkeypatch):
    from scopedgpu import bench
    monkeypatch.setattr(bench, "_find_cc", lambda: None)
    exe, note = bench.build_yardstick(lambda msg: None)
    assert exe is None and "no C compiler" in note
    y = bench.Yardstick(exe, note, bench.Path("saxpy.spv"), 0, lambda msg: None)
    assert y.run("latency", 10) == []
    results = {"figures": {}, "errors": {}, "notes": {}, "meta": {"c_yardstick": note}}
    b = bench.Bench.__new__(bench.Bench)
    b.results = results
    b.fig("latency", 12.0, None, "C", "scopedgpu / C", None)
    assert results["figures"]["latency"]["ratio"] is None
    text = bench.table(results)
    assert "no C compiler" in text and "12.0" in text
