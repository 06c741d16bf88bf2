"""Smoke test of the benchmark suite (`python -m scopedgpu bench --quick`, which runs the
source tree's `bench` package): it runs to the end and its JSON holds every figure with
numbers, the per-size round trips from 4 KiB with the C yardstick's best path, and the
streamed saxpy. No timing is asserted (CI machines are noisy)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bench
from bench import report, suite, yardstick
from bench.common import size_name

ROOT = Path(__file__).resolve().parent.parent
SWEEP = [size_name(4096 << i) for i in range(11)] + ["16MiB"]   # 4KiB ... 4MiB, 16MiB
C_PATHS = {"staging", "rebar", "import", "import_each"}


def number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    env = dict(os.environ)
    env.pop("SCOPEDGPU_DEBUG", None)   # validation would measure the layer, not scopedgpu
    res = subprocess.run([sys.executable, "-m", "scopedgpu", "bench", "--quick", "--no-cupy",
                          "--json", str(out), "--plot"], capture_output=True, text=True,
                         timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    return res, json.loads(out.read_text()), out


def test_bench_quick_writes_every_figure(quick_run):
    res, data, _ = quick_run
    assert data["errors"] == {}
    assert "compiler" not in data["meta"]["c_yardstick"], "the C yardstick did not build"
    for fig in report.FIGURES:
        f = data["figures"][fig.key]
        assert number(f["value"]), fig.key
        if fig.key != "live_delta":
            assert number(f["yardstick"]), fig.key
            assert number(f["ratio"]), fig.key
    for row in data["sweeps"]["saxpy"]:
        assert row["scopedgpu_gbps"] > 0
    for row in data["sweeps"]["transfer"]:
        assert row["upload_gbps"] > 0 and row["download_gbps"] > 0 and row["roundtrip_ok"]
    assert "figure" in res.stdout   # the table is printed
    assert "numpy -> device -> numpy, 4KiB" in res.stdout


def test_bench_quick_sweeps_every_transfer_size_against_the_best_c_path(quick_run):
    _, data, _ = quick_run
    keys = [k for k in data["figures"] if k.startswith("transfer_")]
    assert keys == [f"transfer_{n}" for n in SWEEP]   # --quick stops at 16 MiB
    for name in SWEEP:
        f = data["figures"][f"transfer_{name}"]
        assert number(f["value"]) and f["value"] > 0, name
        assert number(f["yardstick"]) and f["yardstick"] > 0, name
        assert f["ratio"] == pytest.approx(f["value"] / f["yardstick"]), name
        assert f["data_ok"] is True, name
        assert f["c_path"] in C_PATHS, name
        # the best path is the fastest of those that ran
        ran = {k: v for k, v in f["c_paths"].items() if number(v)}
        assert f["yardstick"] == pytest.approx(max(ran.values()), rel=1e-3), name
    rows = data["sweeps"]["transfer_sizes"]
    assert [r["bytes"] for r in rows] == [4096 << i for i in range(11)] + [16 << 20]
    assert all(r["ok"] and r["scopedgpu_gbps"] > 0 and r["c_best_gbps"] > 0 for r in rows)
    # staging is always there; lavapipe has a host-visible device-local type and
    # VK_EXT_external_memory_host, so every path runs here
    assert all(number(r["c_staging_gbps"]) for r in rows)


def test_bench_quick_streams_saxpy_against_concurrent_dma(quick_run):
    _, data, _ = quick_run
    f = data["figures"]["stream_saxpy"]
    assert f["data_ok"] is True
    assert f["bytes"] == 64 << 20 and 0 < f["chunk_bytes"] < f["bytes"]
    assert number(f["value"]) and number(f["yardstick"]) and number(f["ratio"])
    assert number(f["c_h2d_gbps"]) and number(f["c_d2h_gbps"])
    assert f["c_error"] is None and f["c_queues"]
    # the same arrays pinned (lavapipe can import): checked, timed, the pinning apart
    p = data["figures"]["stream_saxpy_pinned"]
    assert p["data_ok"] is True and p["not_pinned"] is None and p["reps"] >= 1
    assert number(p["value"]) and number(p["ratio"]) and number(p["pin_seconds"])
    assert p["yardstick"] == f["yardstick"]


PNG = b"\x89PNG\r\n\x1a\n"


def test_bench_quick_plots_the_sweep_next_to_the_json(quick_run):
    pytest.importorskip("matplotlib", reason="bench --plot draws with matplotlib, the [bench] "
                        "extra (the dev and test extras install it)")
    _, _, out = quick_run
    plots = sorted(p.name for p in out.parent.iterdir() if p.suffix == ".png")
    assert plots == ["bench.png", "bench.transfers.png"]
    for name in plots:
        data = (out.parent / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name


def test_plot_without_matplotlib_says_so_and_writes_nothing(tmp_path):
    """bench/plot.py where matplotlib is not installed (made so in a child process): a
    message that names the extra, exit status 1, and no file (the SVG fallback is gone)."""
    src = tmp_path / "r.json"
    src.write_text(json.dumps({"sweeps": {"saxpy": [{"n": 1 << 20, "scopedgpu_gbps": 1.0}],
                                          "transfer_sizes": [{"bytes": 4096, "ok": True,
                                                              "scopedgpu_gbps": 1.0}]}}))
    code = ("import sys; sys.modules['matplotlib'] = None; from bench import plot; "
            f"sys.exit(plot.main([{str(src)!r}]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == "plot: matplotlib is not installed, so no plot was written " \
        "(pip install 'scopedgpu[bench]', or pip install matplotlib)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_rss_through_psutil_and_without_it():
    """The bench's RSS (the long churn's figure): psutil's, which is the resident pages of
    /proc/self/statm on Linux; without psutil, getrusage's peak (never below the current)."""
    psutil = pytest.importorskip("psutil", reason="the [bench] extra's psutil (the dev and "
                                 "test extras install it)")
    import resource

    from bench.common import rss_bytes
    big = np.ones(64 << 20, dtype=np.uint8)   # 64 MiB touched, then returned (munmap)
    del big
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rss = rss_bytes()
    assert rss == psutil.Process().memory_info().rss and rss < peak - (32 << 20)
    code = ("import resource, sys, psutil\n"
            "current = psutil.Process().memory_info().rss\n"
            "sys.modules['psutil'] = None\n"
            "from bench.common import rss_bytes\n"
            "scale = 1 if sys.platform == 'darwin' else 1024\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale\n"
            "rss = rss_bytes()\n"
            "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale\n"
            "print(rss >= current, before <= rss <= after)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.split() == ["True", "True"], res.stderr


def test_only_runs_the_phases_named(tmp_path):
    """SPEC's `bench --only`: the named phases and no other (their figures, no error)."""
    out = tmp_path / "only.json"
    env = dict(os.environ)
    env.pop("SCOPEDGPU_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "scopedgpu", "bench", "--quick", "--no-cupy",
                          "--no-c", "--only", "sequence churn", "--json", str(out)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["errors"] == {}
    assert "sequence churn ..." in res.stderr and "latency ..." not in res.stderr
    assert data["details"].keys() == {"seq_churn"}
    bad = subprocess.run([sys.executable, "-m", "scopedgpu", "bench", "--only", "saxpyy"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "invalid choice: 'saxpyy'" in bad.stderr


def test_python_m_bench_help_from_the_checkout():
    res = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: python -m bench")
    assert "--stream-gib" in res.stdout and "plain-C Vulkan yardstick" in res.stdout


def test_scopedgpu_stream_matches_numpy(sg_manager):
    from bench.stream import scopedgpu_stream
    rng = np.random.default_rng(3)
    for n, chunk in ((10_000, 4096 * 4), (4097, 1 << 20), (3, 16)):
        x = rng.standard_normal(n, dtype=np.float32)
        y = rng.standard_normal(n, dtype=np.float32)
        out = scopedgpu_stream(sg_manager, x, y, 1.5, chunk)
        np.testing.assert_allclose(out, np.float32(1.5) * x + y, rtol=1e-6, atol=1e-6)


def test_bench_without_a_c_compiler_reports_no_ratio(monkeypatch):
    monkeypatch.setattr(yardstick, "find_cc", lambda: None)
    exe, note = yardstick.build_yardstick(lambda msg: None)
    assert exe is None and "no C compiler" in note
    y = yardstick.Yardstick(exe, note, Path("saxpy.spv"), 0, lambda msg: None)
    assert y.run("latency", 10) == []
    results = {"figures": {}, "errors": {}, "notes": {}, "meta": {"c_yardstick": note}}
    b = suite.Bench.__new__(suite.Bench)
    b.results = results
    b.fig("latency", 12.0, None, "C", "scopedgpu / C", None)
    b.fig(report.transfer_figure("4KiB"), 0.5, None, "C best path", "scopedgpu / C", None,
          bytes=4096)
    assert results["figures"]["latency"]["ratio"] is None
    assert results["figures"]["transfer_4KiB"]["ratio"] is None
    text = report.table(results)
    assert "no C compiler" in text and "12.0" in text and "4KiB" in text


def test_the_package_is_the_one_of_this_checkout():
    assert Path(bench.__file__).resolve().parent == ROOT / "bench"
