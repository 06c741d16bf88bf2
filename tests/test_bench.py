"""Smoke test of the benchmark suite (`python -m scopedgpu bench --quick`, which runs the
package's scopedgpu.bench): it runs to the end and its JSON holds every figure with
numbers, the per-size round trips from 4 KiB with the C yardstick's best path, and the
streamed saxpy. No timing is asserted (CI machines are noisy)."""
from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scopedgpu import bench
from scopedgpu.bench import report, suite, yardstick
from scopedgpu.bench import serve as serve_mod
from scopedgpu.bench.common import size_name

# Not in CI's pass under the validation layer (its time budget): the library calls the
# bench times run under the layer in the rest of the suite.
pytestmark = pytest.mark.plain_only("the bench's harness and report; the library calls it "
                                    "times (streams, serving at 1,024 in flight, sequence and "
                                    "tensor churn) run under the layer in test_stream.py, "
                                    "test_serving_load.py and the rest of the suite")

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
    assert data["meta"]["c_yardstick"].startswith(("compiled ", "cached ")), \
        "the C yardstick did not build: " + data["meta"]["c_yardstick"]
    # The host's gauge, which makes runs on different machines comparable.
    assert number(data["meta"]["python_speed_ns"]) and data["meta"]["python_speed_ns"] > 0
    assert isinstance(data["meta"]["cpu_model"], str) and data["meta"]["cpu_model"]
    assert len(data["meta"]["load_avg"]) == 3
    for fig in report.FIGURES:
        f = data["figures"][fig.key]
        assert number(f["value"]), fig.key
        if fig.key != "live_delta":
            assert number(f["yardstick"]), fig.key
            assert number(f["ratio"]), fig.key
    # the re-eval latency's rounds, each side's own medians (the quick run: one round)
    lat = data["details"]["latency"]
    assert len(lat["scopedgpu"]["rounds_median_us"]) == lat["scopedgpu"]["rounds"] == 1
    assert all(number(v) and v > 0 for v in lat["scopedgpu"]["rounds_median_us"])
    assert data["figures"]["latency"]["value"] == lat["scopedgpu"]["median_us"] \
        == statistics.median(lat["scopedgpu"]["rounds_median_us"])
    assert len(lat["c"]["rounds"]) == 1
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


def test_bench_quick_serves_and_chains_against_c(quick_run):
    """The serve figure at every level (requests/s, p50 <= p99, every result right, live
    objects back to baseline, the C yardstick's same request) and the dispatch chain at
    every k against the C yardstick's same commands."""
    res, data, _ = quick_run
    figs = data["figures"]
    for c in report.SERVE_LEVELS:
        f = figs[f"serve_{c}"]
        assert number(f["value"]) and f["value"] > 0, c
        assert number(f["yardstick"]) and f["ratio"] == pytest.approx(f["value"] / f["yardstick"])
        assert f["wrong"] == 0 and f["c_wrong"] == 0, c
        assert f["requests"] >= 2 * c and 0 < f["p50_us"] <= f["p99_us"], c
        assert isinstance(f["goal_met"], bool), c     # every level has a goal
    serve = data["details"]["serve"]
    assert serve["live_delta"] == {} and serve["live_after"] == serve["live_before"]
    assert [r["in_flight"] for r in serve["levels"]] == list(report.SERVE_LEVELS)
    assert number(serve["rss_growth_mib"])
    # RSS after each round of the levels, from the phase's start
    assert len(serve["rss_rounds_mib"]) == serve_mod.ROUNDS
    assert all(number(v) for v in serve["rss_rounds_mib"])
    for r, c in zip(serve["levels"], report.SERVE_LEVELS):
        # in rounds over the levels: a level's rate is the median of its rounds' rates
        assert len(r["rounds_per_s"]) == serve_mod.ROUNDS and min(r["rounds_per_s"]) > 0, r
        assert r["per_s"] == statistics.median(r["rounds_per_s"]) == figs[f"serve_{c}"]["value"]
    assert f"serve, round {serve_mod.ROUNDS} of {serve_mod.ROUNDS}: " in res.stderr   # (progress)
    # The hypervisor's share of the CPU time (steal) over the run and in each serve round,
    # from /proc/stat, which every machine the suite runs on has (Linux).
    steal = data["meta"]["cpu_steal_share"]
    assert number(steal) and 0 <= steal <= 1, steal
    assert f"host: its hypervisor took {steal:.1%} of the CPU time" in res.stdout
    for r in serve["levels"]:
        assert len(r["rounds_steal_share"]) == serve_mod.ROUNDS, r
        assert all(number(v) and 0 <= v <= 1 for v in r["rounds_steal_share"]), r
    assert "% in its rounds" in res.stdout
    for r in serve["levels"] + [serve["gc_tuned"]]:     # the collector's share of each level
        assert len(r["gc_collections"]) == 3 and 0 <= r["gc_share"] < 1, r
        assert 0 < r["loop_cpu_us"] <= r["seconds"] / r["requests"] * 1e6 * 1.05, r
    tuned = serve["gc_tuned"]
    assert tuned["in_flight"] == report.SERVE_LEVELS[-1] and tuned["wrong"] == 0
    assert tuned["threshold"] == [50_000, 20, 20] and tuned["per_s"] > 0
    # the goal's two levels again with the collector off: not one collection in either
    off = serve["gc_off"]
    assert [r["in_flight"] for r in off] == [report.SERVE_LEVELS[1], report.SERVE_LEVELS[-1]]
    for r in off:
        assert r["gc_collections"] == [0, 0, 0] and r["gc_share"] == 0, r
        assert r["wrong"] == 0 and r["per_s"] > 0 and r["requests"] >= 2 * r["in_flight"], r
    assert "with the collector off" in res.stdout
    # the goal's level and the most in flight after gc.freeze(): the objects made before
    # serving frozen (numpy's and asyncio's thousands at least), unfrozen afterwards
    frozen = serve["gc_frozen"]
    assert [r["in_flight"] for r in frozen] == [report.SERVE_GOAL_AT, report.SERVE_LEVELS[-1]]
    for r in frozen:
        assert r["frozen_objects"] > 5_000 and len(r["gc_collections"]) == 3, r
        assert r["wrong"] == 0 and r["per_s"] > 0 and r["requests"] >= 2 * r["in_flight"], r
    # unfrozen afterwards: what is left in the permanent generation is what the collector
    # put there itself (CPython 3.12 moves the immortal objects it meets into it: some
    # hundreds on the H200's Python; none on 3.11)
    assert "after gc.freeze()" in res.stdout
    assert serve["frozen_after"] < frozen[0]["frozen_objects"] / 10, serve["frozen_after"]
    # the harness alone (no scopedgpu call) at the goal's two levels, in rounds, with the
    # collector as for the figures; its line with its ratio and the C yardstick's
    harness = serve["harness"]
    assert [r["in_flight"] for r in harness] == [report.SERVE_LEVELS[1], report.SERVE_LEVELS[-1]]
    for r in harness:
        assert len(r["rounds_per_s"]) == serve_mod.ROUNDS and min(r["rounds_per_s"]) > 0, r
        assert r["requests"] >= 2 * r["in_flight"] * serve_mod.ROUNDS and r["wrong"] == 0, r
        assert len(r["gc_collections"]) == 3 and 0 <= r["gc_share"] < 1, r
    lo, hi = harness
    c_ratio = figs["serve_1024"]["yardstick"] / figs["serve_16"]["yardstick"]
    assert (f"{lo['in_flight']:,} in flight {report.num(lo['per_s'], '1/s')}/s, "
            f"{hi['in_flight']:,} in flight {report.num(hi['per_s'], '1/s')}/s "
            f"({report.num(hi['per_s'] / lo['per_s'])} of 16;") in res.stdout
    assert f"the C yardstick's 1,024 against 16: {report.num(c_ratio)}" in res.stdout
    for k in report.CHAIN_KS:
        f = figs[f"dispatch_chain_{k}"]
        assert number(f["value"]) and f["value"] > 0 and f["k"] == k, k
        assert number(f["yardstick"]) and number(f["ratio"]), k
        assert f["yardstick"] == min(f["c_poll_us"], f["c_wait_us"]), k
    # the rows sit in the table after the figures they follow, in order
    lines = res.stdout.splitlines()
    at = [next(i for i, ln in enumerate(lines) if ln.startswith(label)) for label in
          ("re-eval latency", "1 dependent dispatches", "1,000 dependent dispatches",
           "saxpy float32", "tensors alloc+free", "serving 16 KiB requests through aio, 1 in",
           "serving 16 KiB requests through aio, 1,024 in", "RSS growth over the long churn")]
    assert at == sorted(at)
    assert "serve, 64 in flight:" in res.stdout and "live objects back to baseline" in res.stdout


PNG = b"\x89PNG\r\n\x1a\n"


def test_steal_share_reads_proc_stat_lines(tmp_path):
    """cpu_ticks() reads (busy, steal) from /proc/stat's first line, guest time left in
    user and nice; steal_share() is the stolen part of the time the CPUs wanted between two
    readings. A missing or foreign file gives None, and so does the share."""
    from scopedgpu.bench.common import cpu_ticks, steal_share
    a, b = tmp_path / "a", tmp_path / "b"
    # user nice system idle iowait irq softirq steal guest guest_nice
    a.write_text("cpu  100 5 20 1000 3 1 2 30 7 0\ncpu0 50 2 10 500 1 0 1 15 3 0\n")
    b.write_text("cpu  200 5 40 1100 3 1 2 90 9 0\ncpu0 90 2 20 550 1 0 1 45 4 0\n")
    assert cpu_ticks(str(a)) == (128, 30)
    assert cpu_ticks(str(b)) == (248, 90)
    assert steal_share(cpu_ticks(str(a)), cpu_ticks(str(b))) == pytest.approx(60 / 180)
    assert steal_share((128, 30), (128, 30)) == 0.0       # nothing ran in between
    assert cpu_ticks(str(tmp_path / "missing")) is None
    (tmp_path / "odd").write_text("intr 1 2 3\n")
    assert cpu_ticks(str(tmp_path / "odd")) is None
    (tmp_path / "short").write_text("cpu 1 2 3\n")
    assert cpu_ticks(str(tmp_path / "short")) is None
    assert steal_share(None, (1, 1)) is None and steal_share((1, 1), None) is None


def test_bench_quick_plots_the_sweep_next_to_the_json(quick_run):
    pytest.importorskip("matplotlib", reason="bench --plot draws with matplotlib, the [bench] "
                        "extra (the dev and test extras install it)")
    _, _, out = quick_run
    plots = sorted(p.name for p in out.parent.iterdir() if p.suffix == ".png")
    assert plots == ["bench.png", "bench.transfers.png"]
    for name in plots:
        data = (out.parent / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name


def _python_c(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`python -c code` in a fresh interpreter, from the checkout's root."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_plot_without_matplotlib_says_so_and_writes_nothing(tmp_path):
    """scopedgpu.bench.plot where matplotlib is not installed (made so in a child process): a
    message that names the extra, exit status 1, and no file (the SVG fallback is gone)."""
    src = tmp_path / "r.json"
    src.write_text(json.dumps({"sweeps": {"saxpy": [{"n": 1 << 20, "scopedgpu_gbps": 1.0}],
                                          "transfer_sizes": [{"bytes": 4096, "ok": True,
                                                              "scopedgpu_gbps": 1.0}]}}))
    code = ("import sys; sys.modules['matplotlib'] = None; from scopedgpu.bench import plot; "
            f"sys.exit(plot.main([{str(src)!r}]))")
    res = _python_c(code, timeout=120)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == "plot: matplotlib is not installed, so no plot was written " \
        "(pip install 'scopedgpu[bench]', or pip install matplotlib)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_rss_through_psutil_and_without_it():
    """The bench's RSS (the long churn's figure): psutil's, which is the resident pages of
    /proc/self/statm on Linux; without psutil, getrusage's peak (never below the current)."""
    psutil = pytest.importorskip("psutil", reason="the [bench] extra's psutil (the dev and "
                                 "test extras install it)")
    assert psutil is not None
    # In a process of its own: in the suite's, pages freed by earlier tests but kept by
    # the allocator can take the 64 MiB without raising the peak.
    code = ("import resource, numpy as np, psutil\n"
            "from scopedgpu.bench.common import rss_bytes\n"
            "big = np.ones(64 << 20, dtype=np.uint8)\n"   # 64 MiB touched, then munmap'd
            "del big\n"
            "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
            "rss = rss_bytes()\n"
            "print(rss == psutil.Process().memory_info().rss, rss < peak - (32 << 20))\n")
    res = _python_c(code)
    assert res.returncode == 0 and res.stdout.split() == ["True", "True"], (res.stdout,
                                                                           res.stderr)
    code = ("import resource, sys, psutil\n"
            "current = psutil.Process().memory_info().rss\n"
            "sys.modules['psutil'] = None\n"
            "from scopedgpu.bench.common import rss_bytes\n"
            "scale = 1 if sys.platform == 'darwin' else 1024\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale\n"
            "rss = rss_bytes()\n"
            "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale\n"
            "print(rss >= current, before <= rss <= after)\n")
    res = _python_c(code)
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


def test_only_takes_comma_lists_and_underscores():
    from scopedgpu.bench import cli
    args = cli.parser().parse_args(["--only", "serve,dispatch_chain", "--only", "latency",
                                    "--only", "serve"])
    assert args.only == ["serve", "dispatch chain", "latency"]
    assert cli.parser().parse_args([]).only is None


def test_python_m_bench_help_from_the_checkout():
    # The shim of the checkout's top (bench/) runs scopedgpu.bench, under its old name.
    res = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: python -m bench")
    assert "--stream-gib" in res.stdout and "plain-C Vulkan yardstick" in res.stdout


def test_scopedgpu_stream_matches_numpy(sg_manager):
    from scopedgpu.bench.stream import scopedgpu_stream
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


def test_without_vulkan_headers_the_yardstick_says_what_to_install(monkeypatch, tmp_path):
    """Installed from a wheel, the bench has no csrc/vendor: the yardstick builds against
    the system's Vulkan headers, and where there are none it says what to install (the
    real compiler, its system include path replaced by a folder without vulkan/)."""
    cc = yardstick.find_cc()
    if cc is None:
        pytest.skip("needs a C compiler")
    (tmp_path / "include").mkdir()
    wrapper = tmp_path / "cc-without-vulkan-headers"
    wrapper.write_text(f'#!/bin/sh\nexec {cc} -nostdinc -isystem {tmp_path / "include"} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setattr(yardstick, "VENDORED_HEADERS", tmp_path / "no-vendor")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    said: list[str] = []
    exe, note = yardstick.build_yardstick(said.append)
    assert (exe, note) == (None, yardstick.NO_HEADERS)
    assert "install libvulkan-dev" in note and "-I" not in said[0].split()


def test_the_package_is_the_one_of_this_checkout():
    assert Path(bench.__file__).resolve().parent == ROOT / "scopedgpu" / "bench"


# A stand-in for CuPy, over numpy, with the calls the bench's CuPy child makes. Each
# process that imports it appends its pid to $FAKE_CUPY_LOG: the bench must never be one.
FAKE_CUPY = '''
import os
import numpy as _np

__version__ = "0.0+fake"
float32 = _np.float32
with open(os.environ["FAKE_CUPY_LOG"], "a") as _f:
    _f.write(f"{os.getpid()}\\n")
_capturing = []


class ndarray:
    def __init__(self, a):
        self.a = a

    def get(self):
        return _np.array(self.a)

    def __getitem__(self, i):
        return ndarray(_np.asarray(self.a[i]))


def ones(n, dtype=_np.float32):
    return ndarray(_np.ones(n, dtype))


def zeros(n, dtype=_np.float32):
    return ndarray(_np.zeros(n, dtype))


def asarray(a):
    return ndarray(_np.array(a))


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name):
        assert operation == "y = a * x + y"

    def __call__(self, a, x, y):
        if _capturing:
            _capturing[-1].append((a, x, y))
        else:
            y.a[...] = a * x.a + y.a


class _Pool:
    def free_all_blocks(self):
        pass


def get_default_memory_pool():
    return _Pool()


class _Graph:
    def __init__(self, calls):
        self.calls = calls

    def launch(self, stream=None):
        for a, x, y in self.calls:
            y.a[...] = a * x.a + y.a


class _Stream:
    def __init__(self, non_blocking=False):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass

    def begin_capture(self):
        _capturing.append([])

    def end_capture(self):
        return _Graph(_capturing.pop())


class _Device:
    def synchronize(self):
        pass


class _Runtime:
    @staticmethod
    def getDeviceCount():
        return 1

    @staticmethod
    def getDeviceProperties(i):
        return {"name": b"Fake CUDA device"}


class cuda:
    runtime = _Runtime
    Stream = _Stream
    Device = _Device

    @staticmethod
    def get_current_stream():
        return _Stream()
'''


def test_cupy_runs_in_a_child_process_and_fills_todays_keys(tmp_path):
    """Every CuPy figure (latency, saxpy, transfers, the dispatch chain's launches and
    graph) comes from a process other than the bench's, into the JSON keys of before."""
    pkg = tmp_path / "fake" / "cupy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_CUPY)
    log = tmp_path / "imports.log"
    out = tmp_path / "cupy.json"
    env = dict(os.environ, FAKE_CUPY_LOG=str(log),
               PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path / "fake"), str(ROOT),
                                                      os.environ.get("PYTHONPATH")) if p))
    env.pop("SCOPEDGPU_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "scopedgpu", "bench", "--quick", "--no-c",
                             "--only", "latency,dispatch_chain,saxpy,transfers", "--json",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["errors"] == {} and data["notes"] == {}, (data["errors"], data["notes"])
    pids = {int(p) for p in log.read_text().split()}
    assert proc.pid not in pids and len(pids) >= 2   # the probe, then the measurements
    assert data["meta"]["cupy"] == "0.0+fake"
    figs = data["figures"]
    assert number(figs["latency"]["cupy"])
    assert number(data["details"]["latency"]["cupy_us"])
    assert all(number(r["cupy_gbps"]) for r in data["sweeps"]["saxpy"])
    assert number(figs["saxpy"]["cupy"])
    for r in data["sweeps"]["transfer"]:
        assert number(r["cupy_upload_gbps"]) and number(r["cupy_download_gbps"])
    assert number(figs["upload"]["cupy"]) and number(figs["download"]["cupy"])
    for k in report.CHAIN_KS:
        f = figs[f"dispatch_chain_{k}"]
        assert number(f["cupy"]) and number(f["cupy_launch_us"]), k
    assert "CuPy" in stdout and "a kernel in a CUDA graph" in stdout


def test_profile_serve_prints_the_rate_and_the_profile(capsys):
    """scopedgpu.bench.profile_serve (how issue 24's serving cost was found): a level's
    rate, the waiter's steps and a profile table; every result checked inside."""
    from scopedgpu.aio import _Waiter
    from scopedgpu.bench import profile_serve
    step = _Waiter._step
    assert profile_serve.main(["--levels", "2,8", "--requests", "40", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "2 in flight:" in out and "8 in flight:" in out and "requests/s" in out
    assert out.count("Ordered by: internal time") == 2
    assert _Waiter._step is step   # put back


def test_serve_parts_times_every_piece(tmp_path, capsys):
    """scopedgpu.bench.serve_parts: each piece of a served request timed (a positive
    figure, printed and in the JSON); a request's result is checked inside."""
    from scopedgpu.bench import serve_parts
    path = tmp_path / "parts.json"
    assert serve_parts.main(["--seconds", "0.01", "--runs", "1", "--json", str(path)]) == 0
    figures = json.loads(path.read_text())
    out = capsys.readouterr().out
    assert len(figures) == 13
    for name, us in figures.items():
        assert us > 0, name
        assert name in out


def test_serve_long_checks_every_chunk_against_the_baseline(tmp_path, capsys):
    """scopedgpu.bench.serve_long (issue 24's flat RSS and live objects over a long run):
    a baseline chunk, then chunks whose results, live objects and RSS are read; here a
    short run, in which every check holds (no wrong result, live objects as the
    baseline's, RSS within a generous limit), printed a line a chunk and in the JSON."""
    from scopedgpu.bench import serve_long
    path = tmp_path / "long.json"
    rc = serve_long.main(["--requests", "600", "--chunk", "200", "--in-flight", "32",
                          "--rss-growth-mib", "256", "--json", str(path)])
    out = capsys.readouterr().out
    got = json.loads(path.read_text())
    assert rc == 0, out
    assert got["failures"] == [] and got["requests"] == 600
    assert [c["requests"] for c in got["chunks"]] == [200, 200, 200]
    assert all(c["wrong"] == 0 and c["live"] == got["baseline"]["live"]
               for c in got["chunks"])
    assert out.count("live objects as the baseline") == 3


def test_serve_long_verdict_names_each_failure():
    """serve_long.verdict: a wrong result, live objects away from the baseline (by how
    many of which kind) and RSS over the limit are each a line naming the chunk."""
    from scopedgpu.bench.serve_long import verdict
    base = {"live": {"tensors": 0, "sequences": 0}, "rss_mib": 100.0}
    ok = {"wrong": 0, "live": {"tensors": 0, "sequences": 0}, "rss_mib": 110.0}
    assert verdict([ok, ok], base, 16) == []
    bad = [ok, {"wrong": 2, "live": {"tensors": 3, "sequences": 0}, "rss_mib": 130.5}]
    lines = verdict(bad, base, 16)
    assert lines == ["chunk 1: 2 wrong result(s)",
                     "chunk 1: live objects differ from the baseline by {'tensors': 3}",
                     "chunk 1: RSS +30.5 MiB over the baseline (limit 16)"]


def test_serve_layers_times_each_part_of_a_served_request(tmp_path, capsys):
    """scopedgpu.bench.serve_layers (issue 24: where a served request's time goes): the five
    variants, each adding a part, timed in rounds with the collector off; every result of
    the served variant right, live objects back to their baseline, a row a part; and the
    objects a request of each holds while it awaits: some for the task alone, more for
    each part that makes objects which live through the await (tensors, algorithm,
    sequence and ops)."""
    from scopedgpu.bench import serve_layers
    path = tmp_path / "parts.json"
    was_on = gc.isenabled()
    rc = serve_layers.main(["--in-flight", "8", "--requests", "150", "--rounds", "2",
                           "--json", str(path)])
    out = capsys.readouterr().out
    assert gc.isenabled() == was_on      # the collector as it was
    got = json.loads(path.read_text())
    assert rc == 0 and got["failures"] == [], out
    assert [r["part"] for r in got["parts"]] == list(serve_layers.PARTS)
    for r in got["parts"]:
        assert len(r["rounds_us"]) == 2 and all(v > 0 for v in r["rounds_us"]), r
        assert r["us"] == pytest.approx(statistics.median(r["rounds_us"]))
    assert sum(r["added_us"] for r in got["parts"]) == pytest.approx(got["parts"][-1]["us"])
    assert all(f"\n{p} " in out for p in serve_layers.PARTS), out
    held = {r["part"]: r["held"] for r in got["parts"]}
    assert held["nothing"] >= 2, held          # its task and coroutine at least
    # Two tensors and their handles; an algorithm and its handle; a sequence, its handle
    # and three ops.
    assert held["tensors"] - held["nothing"] >= 4, held
    assert held["algorithm"] - held["tensors"] >= 2, held
    assert held["sequence"] - held["algorithm"] >= 5, held
    assert held["eval"] >= held["sequence"] - 1, held
    assert sum(r["added_held"] for r in got["parts"]) == pytest.approx(held["eval"])
    assert "objects held" in out, out


def test_serve_layers_fails_on_a_wrong_result():
    """Its check can fail: with numpy's answers made wrong, every served result (the
    warm-up's, the rounds' and the held-objects count's) is counted as a failure, on
    which main() exits with 1."""
    from scopedgpu.bench import serve, serve_layers
    xs, alphas, refs = serve.requests()
    bad = (xs, alphas, [r + np.float32(1) for r in refs])
    out = serve_layers.run(4, 20, 1, data=bad)
    assert out["failures"] and "differ from numpy's" in out["failures"][0]
    # the warm-up's, the round's and the 4 of the held-objects count's
    assert out["failures"][0].startswith(f"{20 + max(2 * 4, 100) + 4} result(s)")


def test_serve_scaling_serves_each_part_at_two_levels_with_the_collector_on_and_off(
        tmp_path, capsys):
    """scopedgpu.bench.serve_scaling (issue 24: throughput at 1,024 in flight against 16):
    each variant asked for at the low and the high level, with the collector on and off,
    a rate a round for each; the high level's rate over the low's; every served result
    right, live objects back to their baseline, the collector as it was, a line each."""
    from scopedgpu.bench import serve_scaling
    path = tmp_path / "scaling.json"
    was_on = gc.isenabled()
    rc = serve_scaling.main(["--levels", "2,12", "--parts", "eval,nothing", "--seconds",
                             "0.02", "--rounds", "2", "--json", str(path)])
    out = capsys.readouterr().out
    assert gc.isenabled() == was_on
    got = json.loads(path.read_text())
    assert rc == 0 and got["failures"] == [], out
    assert got["levels"] == [2, 12] and got["gc_threshold"] == list(gc.get_threshold())
    # In PARTS' order, whatever the order asked; each collector state.
    assert [(r["part"], r["collector"]) for r in got["rows"]] == [
        ("nothing", "on"), ("nothing", "off"), ("eval", "on"), ("eval", "off")]
    for r in got["rows"]:
        for side in ("low", "high"):
            rounds = r[f"{side}_rounds_per_s"]
            assert len(rounds) == 2 and all(v > 0 for v in rounds), r
            assert r[f"{side}_per_s"] == pytest.approx(statistics.median(rounds))
        assert r["ratio"] == pytest.approx(r["high_per_s"] / r["low_per_s"])
        if r["collector"] == "off":
            assert r["low_gc_share"] == r["high_gc_share"] == 0.0, r
        assert f"\n{r['part']:10s} collector {r['collector']}" in out, out
    assert "12 over 2" in out, out


def test_serve_scaling_fails_on_a_wrong_result_and_refuses_bad_arguments(capsys):
    """Its check can fail: with numpy's answers made wrong, every served result of the
    eval variant is a failure (the warm-ups' and the timed ones'), and main() would exit
    with 1; levels not low < high and unknown parts are argument errors."""
    from scopedgpu.bench import serve, serve_scaling
    xs, alphas, refs = serve.requests()
    bad = (xs, alphas, [r + np.float32(1) for r in refs])
    out = serve_scaling.run((1, 3), ["nothing", "eval"], 0.01, 1, data=bad)
    assert len(out["failures"]) == 1 and "differ from numpy's" in out["failures"][0]
    assert [r["collector"] for r in out["rows"] if r["part"] == "eval"] == ["on", "off"]
    # at least the warm-ups' 2 x C and the timed levels' 2 x C, per collector state
    assert int(out["failures"][0].split()[0]) >= 2 * (2 * 1 + 2 * 1 + 2 * 3 + 2 * 3)
    for argv in (["--levels", "16"], ["--levels", "64,16"], ["--levels", "0,4"],
                 ["--parts", "eval,bogus"], ["--parts", ","], ["--seconds", "0"],
                 ["--rounds", "0"]):
        with pytest.raises(SystemExit) as exc:
            serve_scaling.main(argv)
        assert exc.value.code == 2, argv
    assert "--levels" in capsys.readouterr().err


def test_ab_steady_leaves_out_the_workers_of_a_disturbed_machine_within_each_version():
    from scopedgpu.bench import ab
    # Session 43's H200 call: whole worker processes at 46-52 us against 16-18.
    a = [{"latency_us": v} for v in (16.1, 46.3, 17.9, 18.0, 52.0)]
    b = [{"latency_us": v} for v in (48.0, 51.0, 47.5)]   # all disturbed alike: all kept
    assert [r["latency_us"] for r in ab.steady(a)] == [16.1, 17.9, 18.0]
    assert ab.steady(b) == b
    # A version that is slower itself keeps every worker (its best is slow too).
    slow = [{"latency_us": v} for v in (30.0, 31.0, 29.5)]
    assert ab.steady(slow) == slow
