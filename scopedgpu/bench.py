"""`python -m scopedgpu bench`: every figure of SPEC.md's Performance section, next to its
yardstick measured in the same run on the same device, and the ratio.

Yardsticks: a plain C program against Vulkan (scopedgpu/yardstick.c, compiled here at run
time with the system C compiler and cached under build/bench/), driving the same SPIR-V
on the same device; and CuPy where it imports. Without a C compiler, or without CuPy, the
rows stay and say so; no ratio is made up.

Sizes come from what the device reports (maxStorageBufferRange, heap size), never
hard-coded: 2^26 floats and 256 MiB where they fit, less where they do not (lavapipe).
--quick runs everything small, for CI. --json FILE writes every number, the sweeps over
sizes (for bench/plot.py) and the environment.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

MiB = 1 << 20
SAXPY_K = 10            # dependent dispatches per submission in the saxpy loops
SPEC_LATENCY_RATIO = 1.3
SPEC_SAXPY_RATIO = 0.95
SPEC_TRANSFER_RATIO = 0.80
SPEC_SEQ_CHURN = 20_000
SPEC_POOL_CHURN = 200_000
SPEC_RSS_MIB = 16

# (key, label, unit, goal text)
FIGURES = [
    ("latency", "re-eval latency, 1 dispatch, 64 floats (median)", "us",
     f"<= {SPEC_LATENCY_RATIO}x C poll loop"),
    ("saxpy", "saxpy float32, data resident", "GB/s", f">= {SPEC_SAXPY_RATIO:.0%} of C"),
    ("upload", "numpy (host copy) -> device", "GB/s", f">= {SPEC_TRANSFER_RATIO:.0%} of C DMA"),
    ("download", "device -> numpy (host copy)", "GB/s", f">= {SPEC_TRANSFER_RATIO:.0%} of C DMA"),
    ("seq_churn", "anonymous sequences create/record/eval/destroy", "1/s",
     f">= {SPEC_SEQ_CHURN:,}/s"),
    ("tensor_churn", "tensors alloc+free, with many live", "1/s", f">= {SPEC_POOL_CHURN:,}/s"),
    ("pool_churn", "pool alloc+free (no Tensor object)", "1/s", "(diagnostic)"),
    ("rss_growth", "RSS growth over the long churn", "MiB", f"<= {SPEC_RSS_MIB} MiB"),
    ("live_delta", "live Vulkan objects after the long churn - before", "objects", "0"),
]


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Progress:
    def __init__(self, quiet: bool = False):
        self.t0 = time.perf_counter()
        self.quiet = quiet
        self.last = 0.0

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(f"[bench {time.perf_counter() - self.t0:6.1f}s] {msg}", file=sys.stderr,
                  flush=True)

    def tick(self, msg: Callable[[], str], every: float = 5.0) -> None:
        now = time.perf_counter()
        if now - self.last >= every:
            self.last = now
            self.say(msg())


# -- the C yardstick ------------------------------------------------------------------------
def _find_cc() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _build_dirs() -> list[Path]:
    here = Path(__file__).resolve().parent
    dirs = []
    if (here.parent / "build_ffi.py").exists():
        dirs.append(here.parent / "build" / "bench")
    dirs.append(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scopedgpu")
    dirs.append(Path(tempfile.gettempdir()) / f"scopedgpu-bench-{os.getuid()}")
    return dirs


def build_yardstick(say: Callable[[str], None]) -> tuple[str | None, str]:
    """Compiles yardstick.c once per source version; returns (binary path or None, note)."""
    src = Path(__file__).resolve().parent / "yardstick.c"
    if not src.exists():
        return None, f"C yardstick source {src} is missing"
    cc = _find_cc()
    if cc is None:
        return None, "no C compiler found (set CC or install gcc): no C yardstick"
    digest = hashlib.sha256(src.read_bytes() + cc.encode()).hexdigest()[:12]
    errors = []
    for d in _build_dirs():
        exe = d / f"yardstick-{digest}"
        if exe.exists() and os.access(exe, os.X_OK):
            return str(exe), f"cached {exe}"
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            errors.append(f"{d}: {exc}")
            continue
        tmp = d / f".yardstick-{digest}.{os.getpid()}"
        cmd = [cc, "-O2", "-std=gnu11", str(src), "-o", str(tmp), "-ldl"]
        say(f"compiling the C yardstick: {' '.join(cmd)}")
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{cc}: {exc}")
            continue
        if res.returncode != 0:
            tmp.unlink(missing_ok=True)
            return None, f"the C yardstick failed to compile: {res.stderr.strip()[-800:]}"
        os.replace(tmp, exe)
        return str(exe), f"compiled {exe}"
    return None, "no writable build directory for the C yardstick: " + "; ".join(errors)


class Yardstick:
    def __init__(self, exe: str | None, note: str, spv: Path, device_index: int,
                 say: Callable[[str], None]):
        self.exe = exe
        self.note = note
        self.spv = spv
        self.index = device_index
        self.say = say
        self.device_name: str | None = None
        self.errors: list[str] = []

    def run(self, *tasks: Any, timeout: float = 300) -> list[dict]:
        """Runs tasks in one process; returns their results, or [] when unavailable."""
        if self.exe is None:
            return []
        cmd = [self.exe, str(self.spv), str(self.index), *map(str, tasks)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.say(f"C yardstick failed: {exc}")
            self.errors.append(f"{tasks[0]}: {exc}")
            return []
        out = []
        for line in res.stdout.splitlines():
            if line.startswith("RESULT "):
                try:
                    out.append(json.loads(line[7:]))
                except ValueError:
                    pass
        if res.returncode != 0:
            self.say(f"C yardstick exited {res.returncode}: {res.stderr.strip()[-400:]}")
            self.errors.append(f"{tasks[0]}: exit {res.returncode}: {res.stderr.strip()[-300:]}")
        for r in out:
            if r.get("task") == "device":
                self.device_name = r.get("name")
        return [r for r in out if r.get("task") != "device"]


# -- CuPy --------------------------------------------------------------------------------------
def _cupy():
    try:
        import cupy as cp  # type: ignore
        cp.cuda.runtime.getDeviceCount()
        return cp
    except Exception:
        return None


# -- the bench ---------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.quick = bool(args.quick)
        self.p = Progress(quiet=args.quiet)
        # errors: a phase that failed; notes: an optional yardstick (CuPy) that failed
        self.results: dict[str, Any] = {"figures": {}, "sweeps": {}, "details": {},
                                        "errors": {}, "notes": {}}
        self.cp = None if args.no_cupy else _cupy()

    # helpers
    def fig(self, key: str, value: float | None, yard: float | None, yard_name: str,
            ratio_kind: str, met: bool | None, **extra: Any) -> None:
        label, unit, goal = next((f[1], f[2], f[3]) for f in FIGURES if f[0] == key)
        ratio = None
        if value is not None and yard:
            ratio = value / yard
        rec = {"label": label, "unit": unit, "value": value, "yardstick": yard,
               "yardstick_name": yard_name, "ratio": ratio, "ratio_kind": ratio_kind,
               "goal": goal, "goal_met": met}
        rec.update(extra)
        self.results["figures"][key] = rec

    def timed_reps(self, fn: Callable[[], Any], min_time: float, min_reps: int = 3,
                   max_reps: int = 50) -> list[float]:
        fn()  # warm
        times = []
        start = time.perf_counter()
        while len(times) < max_reps and (len(times) < min_reps or
                                         time.perf_counter() - start < min_time):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return times

    def phase(self, name: str, fn: Callable[[], None]) -> None:
        self.p.say(f"{name} ...")
        try:
            fn()
        except Exception as exc:  # a failed phase is reported, the others still run
            import traceback
            self.results["errors"][name] = f"{type(exc).__name__}: {exc}"
            self.p.say(f"{name} FAILED: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
        finally:
            gc.collect()
            if getattr(self, "mgr", None) is not None and not self.mgr.closed:
                self.mgr.empty_cache()

    # phases
    def run(self) -> dict:
        import scopedgpu as sg
        from scopedgpu._shaders import _DIR, builtin_spirv
        self.sg = sg
        a = self.args
        self.mgr = sg.Manager(a.device)
        info = self.mgr.device
        self.info = info
        self.spirv = builtin_spirv("saxpy")
        exe, note = (None, "disabled by --no-c") if a.no_c else build_yardstick(self.p.say)
        self.p.say(f"C yardstick: {note}")
        self.c = Yardstick(exe, note, _DIR / "saxpy.spv", info.index, self.p.say)
        heap = info.memory_bytes or (1 << 30)
        rng = int(info.max_storage_buffer_range)
        self.saxpy_n = min(1 << 26, _pow2_floor(rng // 4), _pow2_floor(heap // 32))
        self.xfer_bytes = min(256 * MiB, _pow2_floor(heap // 8))
        if self.quick:
            self.saxpy_n = min(self.saxpy_n, 1 << 20)
            self.xfer_bytes = min(self.xfer_bytes, 16 * MiB)
        self.results["meta"] = {
            "command": " ".join([os.path.basename(sys.executable), "-m", "scopedgpu", "bench",
                                 *sys.argv[2:]]) if sys.argv[1:2] == ["bench"] else None,
            "quick": self.quick, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "device": str(info), "device_name": info.name, "device_type": info.type,
            "device_index": info.index, "api_version": info.api_version,
            "driver": info.driver, "memory_bytes": info.memory_bytes,
            "max_storage_buffer_range": rng,
            "max_memory_allocation_count": info.max_memory_allocation_count,
            "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "scopedgpu": sg.__version__, "c_yardstick": note,
            "cupy": getattr(self.cp, "__version__", None),
            "saxpy_n": self.saxpy_n, "transfer_bytes": self.xfer_bytes,
        }
        self.p.say(f"device: {info}; saxpy 2^{self.saxpy_n.bit_length() - 1} floats, "
                   f"transfers {self.xfer_bytes // MiB} MiB{' (quick)' if self.quick else ''}")
        try:
            self.phase("latency", self.bench_latency)
            self.phase("saxpy", self.bench_saxpy)
            self.phase("transfers", self.bench_transfers)
            self.phase("sequence churn", self.bench_seq_churn)
            self.phase("tensor churn", self.bench_tensor_churn)
            self.phase("long churn", self.bench_long_churn)
        finally:
            self.mgr.close()
        self.results["meta"]["c_device_name"] = self.c.device_name
        if self.c.errors:
            self.results["notes"]["c_yardstick"] = "; ".join(self.c.errors)
        self.results["meta"]["seconds"] = round(time.perf_counter() - self.p.t0, 1)
        return self.results

    def _saxpy_algo(self, n: int, kind: str = "storage"):
        x = self.mgr.empty(n, kind=kind)
        y = self.mgr.empty(n, kind=kind)
        from scopedgpu.ops import elementwise_groups
        groups = elementwise_groups(n, self.info.max_workgroup_count[0])
        algo = self.mgr.algorithm([x, y], self.spirv, workgroup=groups, push_consts=[2.0])
        return x, y, algo

    def bench_latency(self) -> None:
        sg = self.sg
        iters = 300 if self.quick else 5000
        rounds = 1 if self.quick else 5
        x, y, algo = self._saxpy_algo(64)
        times: list[int] = []
        c_rounds: list[dict] = []
        clock = time.perf_counter_ns
        with self.mgr.sequence() as seq:
            seq.record(sg.OpAlgoDispatch(algo))
            for _ in range(iters // 10 + 1):
                seq.eval()
            # Rounds alternate scopedgpu and the C loop, so that load from elsewhere on
            # the machine falls on both alike.
            for _ in range(rounds):
                for _ in range(iters // rounds):
                    t0 = clock()
                    seq.eval()
                    times.append(clock() - t0)
                c_rounds += self.c.run("latency", iters // rounds)
        for t in (algo, x, y):
            t.destroy()
        times.sort()
        med = times[len(times) // 2] / 1e3
        det = {"iters": len(times), "rounds": rounds, "median_us": med,
               "p10_us": times[len(times) // 10] / 1e3,
               "p90_us": times[9 * len(times) // 10] / 1e3}
        cres = None
        if c_rounds:
            cres = {k: statistics.median(r[k] for r in c_rounds)
                    for k in c_rounds[0] if k.endswith("_us")}
            cres["rounds"] = c_rounds
        cupy_us = self._cupy_latency(iters) if self.cp else None
        self.results["details"]["latency"] = {"scopedgpu": det, "c": cres, "cupy_us": cupy_us}
        cy = cres["poll_median_us"] if cres else None
        ratio = med / cy if cy else None
        self.fig("latency", med, cy, "C: submit, poll vkGetFenceStatus", "scopedgpu / C",
                 None if ratio is None else ratio <= SPEC_LATENCY_RATIO,
                 c_wait_us=cres["wait_median_us"] if cres else None, cupy=cupy_us)
        self.p.say(f"latency: scopedgpu {med:.1f} us, C poll {cy} us, CuPy {cupy_us} us")

    def _cupy_latency(self, iters: int) -> float | None:
        try:
            cp = self.cp
            k = cp.ElementwiseKernel("float32 a, float32 x", "float32 y", "y = a * x + y",
                                     "sg_saxpy")
            x = cp.ones(64, dtype=cp.float32)
            y = cp.ones(64, dtype=cp.float32)
            s = cp.cuda.get_current_stream()
            for _ in range(100):
                k(np.float32(2), x, y)
                s.synchronize()
            times = []
            for _ in range(iters):
                t0 = time.perf_counter_ns()
                k(np.float32(2), x, y)
                s.synchronize()
                times.append(time.perf_counter_ns() - t0)
            return statistics.median(times) / 1e3
        except Exception as exc:
            self.results["notes"]["cupy_latency"] = repr(exc)
            return None

    def bench_saxpy(self) -> None:
        sg = self.sg
        nmax = self.saxpy_n
        sizes = sorted({max(1 << 10, nmax >> s) for s in ((0, 3, 6) if self.quick else
                                                        (0, 2, 4, 6, 8, 10))})
        min_time = 0.05 if self.quick else 0.5
        if not self.quick:
            # Bring the GPU to its working clocks first: on the H200 a cold start measured
            # the first saxpy rows up to a quarter slower than the C loop that ran after it.
            x, y, algo = self._saxpy_algo(nmax)
            with self.mgr.sequence() as seq:
                for _ in range(SAXPY_K):
                    seq.record(sg.OpAlgoDispatch(algo))
                end = time.perf_counter() + 2.0
                while time.perf_counter() < end:
                    seq.eval()
            for t in (algo, x, y):
                t.destroy()
            self.mgr.empty_cache()
        sweep = []
        for n in sizes:
            # scopedgpu, then the C yardstick with as many repetitions, then CuPy: per
            # size, close together in time (other load on the machine shifts both alike).
            x, y, algo = self._saxpy_algo(n)
            with self.mgr.sequence() as seq:
                for _ in range(SAXPY_K):
                    seq.record(sg.OpAlgoDispatch(algo))
                times = self.timed_reps(seq.eval, min_time, min_reps=3, max_reps=50)
            for t in (algo, x, y):
                t.destroy()
            self.mgr.empty_cache()
            c = self.c.run("saxpy", n, SAXPY_K, len(times))
            traffic = 12.0 * n * SAXPY_K
            gbps = traffic / statistics.median(times) / 1e9
            row = {"n": n, "bytes": 12 * n, "reps": len(times), "scopedgpu_gbps": gbps,
                   "scopedgpu_best_gbps": traffic / min(times) / 1e9,
                   "c_gbps": c[0]["gbps"] if c else None,
                   "c_best_gbps": c[0]["best_gbps"] if c else None,
                   "cupy_gbps": self._cupy_saxpy(n, len(times)) if self.cp else None}
            sweep.append(row)
            self.p.say(f"saxpy n=2^{n.bit_length() - 1}: scopedgpu {gbps:.2f} GB/s, "
                       f"C {row['c_gbps']}, CuPy {row['cupy_gbps']}")
        self.results["sweeps"]["saxpy"] = sweep
        top = sweep[-1]
        ratio = top["scopedgpu_gbps"] / top["c_gbps"] if top["c_gbps"] else None
        roof = self._copy_roof(top["n"], top["reps"])
        self.fig("saxpy", top["scopedgpu_gbps"], top["c_gbps"],
                 f"C: same shader, {SAXPY_K} dispatches per submit", "scopedgpu / C",
                 None if ratio is None else ratio >= SPEC_SAXPY_RATIO, n=top["n"],
                 cupy=top["cupy_gbps"], copy_roof_gbps=roof,
                 roof_fraction=top["scopedgpu_gbps"] / roof if roof else None)
        if roof:
            self.p.say(f"saxpy at {top['scopedgpu_gbps'] / roof:.0%} of the copy roof "
                       f"({roof:.1f} GB/s: a C copy kernel, same access pattern)")

    def _copy_roof(self, n: int, reps: int) -> float | None:
        """The device's copy bandwidth as a kernel sees it: the C yardstick running
        copy_roof.spv (y = x, the saxpy kernel's access pattern) over n floats. The
        yardstick counts saxpy's 12 bytes an element; a copy moves 8."""
        from scopedgpu._shaders import _DIR
        if self.c.exe is None:
            return None
        copy = Yardstick(self.c.exe, self.c.note, _DIR / "copy_roof.spv", self.info.index,
                         self.p.say)
        res = copy.run("saxpy", n, SAXPY_K, max(3, reps))
        return res[0]["gbps"] * 8 / 12 if res else None

    def _cupy_saxpy(self, n: int, reps: int) -> float | None:
        try:
            cp = self.cp
            k = cp.ElementwiseKernel("float32 a, float32 x", "float32 y", "y = a * x + y",
                                     "sg_saxpy")
            x = cp.ones(n, dtype=cp.float32)
            y = cp.ones(n, dtype=cp.float32)
            s = cp.cuda.get_current_stream()

            def run():
                for _ in range(SAXPY_K):
                    k(np.float32(2), x, y)
                s.synchronize()
            times = self.timed_reps(run, 0.2, min_reps=min(reps, 10), max_reps=50)
            del x, y
            cp.get_default_memory_pool().free_all_blocks()
            return 12.0 * n * SAXPY_K / statistics.median(times) / 1e9
        except Exception as exc:
            self.results["notes"]["cupy_saxpy"] = repr(exc)
            return None

    def bench_transfers(self) -> None:
        sg = self.sg
        bmax = self.xfer_bytes
        sizes = sorted({max(MiB, bmax >> s) for s in ((0, 2, 4) if self.quick else
                                                     (0, 2, 4, 6, 8))})
        min_time = 0.05 if self.quick else 0.4
        sweep = []
        for b in sizes:
            arr = np.random.default_rng(1).random(b // 4, dtype=np.float32)
            t = self.mgr.tensor(arr)
            zero_copy = bool(getattr(t, "_zero_copy", False))   # host copy imported?
            up = self.mgr.sequence().record(sg.OpTensorSyncDevice([t]))
            down = self.mgr.sequence().record(sg.OpTensorSyncLocal([t]))
            tu = self.timed_reps(up.eval, min_time, min_reps=3, max_reps=50)
            host = t.data()
            host[...] = 0
            td = self.timed_reps(down.eval, min_time, min_reps=3, max_reps=50)
            step = max(1, host.size // 4096)
            ok = bool(np.array_equal(host[::step], arr[::step]))

            def e2e():  # a user's numpy array written into data(), then synced
                host[...] = arr
                up.eval()
            te = self.timed_reps(e2e, min_time / 2, min_reps=2, max_reps=20)
            for obj in (up, down, t):
                obj.destroy()
            del host
            self.mgr.empty_cache()
            reps = max(len(tu), len(td))
            c = self.c.run("dma", b, reps)
            cres = {b: c[0]} if c else {}
            row = {"bytes": b, "upload_gbps": b / statistics.median(tu) / 1e9,
                   "download_gbps": b / statistics.median(td) / 1e9,
                   "upload_e2e_gbps": b / statistics.median(te) / 1e9, "roundtrip_ok": ok,
                   "zero_copy": zero_copy,
                   "c_upload_gbps": cres.get(b, {}).get("upload_gbps"),
                   "c_download_gbps": cres.get(b, {}).get("download_gbps")}
            if self.cp:
                row.update(self._cupy_transfer(arr, min(reps, 10)))
            sweep.append(row)
            self.p.say(f"transfer {b // MiB} MiB{' (imported host copy)' if zero_copy else ''}: "
                       f"up {row['upload_gbps']:.2f} GB/s "
                       f"(C DMA {row['c_upload_gbps']}), down {row['download_gbps']:.2f} GB/s "
                       f"(C DMA {row['c_download_gbps']}), data ok: {ok}")
        self.results["sweeps"]["transfer"] = sweep
        top = sweep[-1]
        for d in ("upload", "download"):
            v, c = top[f"{d}_gbps"], top[f"c_{d}_gbps"]
            self.fig(d, v, c, f"C: vkCmdCopyBuffer {'staging->device' if d == 'upload' else 'device->staging'}",
                     "scopedgpu / C", None if not c else v / c >= SPEC_TRANSFER_RATIO,
                     bytes=top["bytes"], cupy=top.get(f"cupy_{d}_gbps"),
                     zero_copy=top["zero_copy"],
                     e2e_gbps=top["upload_e2e_gbps"] if d == "upload" else None)

    def _cupy_transfer(self, arr: np.ndarray, reps: int) -> dict:
        try:
            cp = self.cp
            d = cp.asarray(arr)

            def up():
                cp.asarray(arr)
                cp.cuda.Device().synchronize()
            tu = self.timed_reps(up, 0.2, min_reps=reps, max_reps=reps * 3)
            td = self.timed_reps(d.get, 0.2, min_reps=reps, max_reps=reps * 3)
            del d
            cp.get_default_memory_pool().free_all_blocks()
            return {"cupy_upload_gbps": arr.nbytes / statistics.median(tu) / 1e9,
                    "cupy_download_gbps": arr.nbytes / statistics.median(td) / 1e9}
        except Exception as exc:
            self.results["notes"]["cupy_transfer"] = repr(exc)
            return {}

    def bench_seq_churn(self) -> None:
        sg = self.sg
        seconds = 0.3 if self.quick else 3.0
        x, y, algo = self._saxpy_algo(64)
        mgr = self.mgr
        base = mgr.live_objects()
        for _ in range(50):  # warm: pipeline cached, caches filled
            with mgr.sequence() as s:
                s.record(sg.OpAlgoDispatch(algo))
                s.eval()
        count = 0
        t0 = time.perf_counter()
        while True:
            for _ in range(64):
                with mgr.sequence() as s:
                    s.record(sg.OpAlgoDispatch(algo))
                    s.eval()
            count += 64
            el = time.perf_counter() - t0
            if el >= seconds:
                break
        rate = count / el
        gc.collect()
        after = mgr.live_objects()
        for t in (algo, x, y):
            t.destroy()
        c = self.c.run("churn", seconds)
        cr = c[0]["per_s"] if c else None
        self.results["details"]["seq_churn"] = {"count": count, "seconds": el,
                                                "live_before": base, "live_after": after}
        self.fig("seq_churn", rate, cr, "C: pool+buffer+fence create, record, submit, "
                 "poll, destroy", "scopedgpu / C",
                 None if self.info.type == "cpu" else rate >= SPEC_SEQ_CHURN)
        self.p.say(f"sequence churn: scopedgpu {rate:,.0f}/s, C {cr}")

    def bench_tensor_churn(self) -> None:
        mgr = self.mgr
        live_n = 10_000 if self.quick else 100_000
        pairs = 20_000 if self.quick else 300_000
        small = np.zeros(16, dtype=np.float32)
        t0 = time.perf_counter()
        live = []
        for i in range(live_n):
            live.append(mgr.tensor(small))
            if i % 4096 == 0:
                self.p.tick(lambda: f"tensor churn: {len(live):,} live tensors")
        create_s = time.perf_counter() - t0
        stats = mgr.memory_stats()
        tensor = mgr.tensor
        # Five rounds, the median rate: one round alone is at the mercy of the machine.
        n = 0
        rates = []
        for _ in range(5):
            done = 0
            t0 = time.perf_counter()
            while done < pairs // 5:
                for _ in range(256):
                    tensor(small).destroy()
                done += 256
            rates.append(done / (time.perf_counter() - t0))
            n += done
        rate = statistics.median(rates)
        # The pool alone, without Tensor objects (Python overhead of the allocator).
        pool = mgr._state.pool
        lock = mgr._state.lock
        t0 = time.perf_counter()
        with lock:
            for _ in range(pairs // 256):
                for _ in range(256):
                    pool.free(pool.alloc(64, "device"))
        pool_rate = (pairs // 256 * 256) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for t in live:
            t.destroy()
        destroy_s = time.perf_counter() - t0
        live.clear()
        c = self.c.run("alloc", 2000 if self.quick else 20_000)
        cr = c[0]["per_s"] if c else None
        self.results["details"]["tensor_churn"] = {
            "live_tensors": live_n, "create_live_s": create_s, "destroy_live_s": destroy_s,
            "blocks_with_live": stats["blocks"],
            "max_memory_allocation_count": self.info.max_memory_allocation_count,
            "pairs": n, "round_rates": rates}
        self.fig("tensor_churn", rate, cr, "C: vkCreateBuffer+vkAllocateMemory per buffer",
                 "scopedgpu / C", None if self.info.type == "cpu" else rate >= SPEC_POOL_CHURN,
                 live_tensors=live_n, blocks=stats["blocks"])
        self.fig("pool_churn", pool_rate, cr, "C: vkCreateBuffer+vkAllocateMemory per buffer",
                 "scopedgpu / C", None)
        self.p.say(f"tensor churn with {live_n:,} live ({stats['blocks']} blocks): "
                   f"{rate:,.0f}/s; pool alone {pool_rate:,.0f}/s; C per-buffer alloc {cr}")

    def bench_long_churn(self) -> None:
        sg = self.sg
        mgr = self.mgr
        cycles = self.args.cycles if self.args.cycles else (3000 if self.quick else 1_000_000)
        cap = 10.0 if self.quick else float(self.args.max_churn_seconds)
        x, y, algo = self._saxpy_algo(64)
        small = np.ones(64, dtype=np.float32)

        def cycle():
            t = mgr.tensor(small)
            with mgr.sequence() as s:
                s.record(sg.OpTensorSyncDevice([t]))
                s.record(sg.OpAlgoDispatch(algo))
                s.eval()
            t.destroy()
        warm = min(2000, max(100, cycles // 50))
        for _ in range(warm):
            cycle()
        gc.collect()
        live0 = mgr.live_objects()
        rss0 = _rss_bytes()
        samples = [{"cycle": 0, "t": 0.0, "rss_mib": rss0 / MiB}]
        t0 = time.perf_counter()
        done = 0
        step = max(1, cycles // 100)
        while done < cycles:
            for _ in range(min(step, cycles - done)):
                cycle()
            done += min(step, cycles - done)
            el = time.perf_counter() - t0
            samples.append({"cycle": done, "t": el, "rss_mib": _rss_bytes() / MiB})
            self.p.tick(lambda: f"long churn: {done:,}/{cycles:,} cycles, RSS "
                                f"{samples[-1]['rss_mib']:.1f} MiB")
            if el > cap:
                self.p.say(f"long churn: stopping at {done:,} cycles after {el:.0f} s "
                           "(--max-churn-seconds)")
                break
        gc.collect()
        rss1 = _rss_bytes()
        live1 = mgr.live_objects()
        for t in (algo, x, y):
            t.destroy()
        keys = [k for k in live0 if k not in ("tensors", "algorithms", "sequences",
                                               "pending_releases")]
        delta = {k: live1[k] - live0[k] for k in live0 if live1.get(k) != live0[k]}
        vk_delta = sum(abs(live1[k] - live0[k]) for k in keys)
        growth = (rss1 - rss0) / MiB
        el = time.perf_counter() - t0
        self.results["details"]["long_churn"] = {
            "cycles": done, "cycles_asked": cycles, "seconds": el, "per_s": done / el,
            "cycle": "tensor create, anonymous sequence (sync + dispatch) eval, destroy",
            "live_before": live0, "live_after": live1, "delta": delta, "samples": samples}
        self.fig("rss_growth", growth, float(SPEC_RSS_MIB), "goal", "growth / limit",
                 growth <= SPEC_RSS_MIB, cycles=done)
        self.fig("live_delta", float(vk_delta), None, "baseline after warm-up", "",
                 vk_delta == 0 and not delta, cycles=done)
        self.p.say(f"long churn: {done:,} cycles in {el:.0f} s, RSS {growth:+.2f} MiB, "
                   f"live-object delta {delta or 0}")


# -- output -------------------------------------------------------------------------------------
def _num(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if unit == "1/s":
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table(results: dict) -> str:
    rows = [("figure", "unit", "scopedgpu", "yardstick", "ratio", "goal", "met", "CuPy")]
    for key, label, unit, goal in FIGURES:
        f = results["figures"].get(key)
        if f is None:
            err = results["errors"]
            rows.append((label, unit, "error" if err else "-", "-", "-", goal, "-", "-"))
            continue
        met = f["goal_met"]
        rows.append((label, unit, _num(f["value"], unit), _num(f["yardstick"], unit),
                     "-" if f["ratio"] is None else f"{f['ratio']:.2f}", goal,
                     "-" if met is None else ("yes" if met else "NO"),
                     _num(f.get("cupy"), unit)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    meta = results.get("meta", {})
    head = (f"scopedgpu bench on {meta.get('device')}{' (--quick)' if meta.get('quick') else ''}"
            f"\nyardstick: {meta.get('c_yardstick')}; CuPy: {meta.get('cupy') or 'not available'}")
    tail = []
    sax = results["figures"].get("saxpy") or {}
    if sax.get("roof_fraction"):
        tail.append(f"saxpy: {sax['roof_fraction']:.0%} of the copy roof "
                    f"({_num(sax['copy_roof_gbps'])} GB/s, a C copy kernel with the same "
                    "access pattern)")
    if meta.get("device_type") == "cpu":
        tail.append("CPU device: absolute goals (per-second figures) are llvmpipe-bound; "
                    "the ratios are the goal here.")
    for k, v in results.get("errors", {}).items():
        tail.append(f"error in {k}: {v}")
    for k, v in results.get("notes", {}).items():
        tail.append(f"note, {k}: {v}")
    return "\n".join([head, *lines, *tail])


def markdown(results: dict) -> str:
    """The table as Markdown, for docs/benchmarks.md."""
    meta = results.get("meta", {})
    out = [f"Device: {meta.get('device')}; {meta.get('cpus')} CPUs, Python "
           f"{meta.get('python')}, numpy {meta.get('numpy')}; C yardstick: "
           f"{'yes' if meta.get('c_device_name') else 'no'}; CuPy: {meta.get('cupy') or 'no'}; "
           f"{meta.get('time_utc')}; command: `{meta.get('command')}`", "",
           "| figure | unit | scopedgpu | yardstick | ratio | goal | met | CuPy |",
           "|---|---|---|---|---|---|---|---|"]
    for key, label, unit, goal in FIGURES:
        f = results["figures"].get(key)
        if f is None:
            out.append(f"| {label} | {unit} | error | - | - | {goal} | - | - |")
            continue
        met = f["goal_met"]
        out.append(f"| {label} | {unit} | {_num(f['value'], unit)} | "
                   f"{_num(f['yardstick'], unit)} | "
                   f"{'-' if f['ratio'] is None else format(f['ratio'], '.2f')} | {goal} | "
                   f"{'-' if met is None else ('yes' if met else 'NO')} | "
                   f"{_num(f.get('cupy'), unit)} |")
    return "\n".join(out)


def cmd_multi_device(args: argparse.Namespace) -> int:
    """--multi-device: the figures of several devices at once, measured by
    bench/multi_device.py of a source checkout (one Manager per device, one thread each)."""
    script = Path(__file__).resolve().parent.parent / "bench" / "multi_device.py"
    if not script.exists():
        print(f"bench --multi-device: {script} is missing (it ships with the source, not "
              "the wheel)", file=sys.stderr)
        return 1
    cmd = [sys.executable, str(script), *(["--quick"] if args.quick else []),
           *(["--json", args.json] if args.json else []),
           *(["--devices", str(args.device)] if args.device is not None else [])]
    # The script imports this very package, installed or not (a source checkout).
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    return subprocess.run(cmd, env=env).returncode


def cmd_bench(args: argparse.Namespace) -> int:
    if args.multi_device:
        return cmd_multi_device(args)
    if args.device is not None and str(args.device).isdigit():
        args.device = int(args.device)
    bench = Bench(args)
    try:
        results = bench.run()
    except Exception as exc:
        print(f"bench: cannot run: {type(exc).__name__}: {exc}", file=sys.stderr)
        results = bench.results
        results["errors"]["setup"] = f"{type(exc).__name__}: {exc}"
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        return 1
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, default=str))
        bench.p.say(f"wrote {path}")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results) + "\n")
    print(table(results))
    return 0 if not results["errors"] else 2


def add_parser(sub: Any) -> None:
    what = ("measure dispatch latency, saxpy bandwidth, host<->device transfers, object "
            "churn and memory growth, each next to a plain-C Vulkan yardstick run on the "
            "same device (and CuPy where present)")
    p = sub.add_parser("bench", help="measure the performance figures next to a plain-C "
                       "Vulkan yardstick", description=what[0].upper() + what[1:] + ". "
                       "The goal column is scopedgpu's own target for each figure.")
    p.add_argument("--device", default=None, help="index or name substring")
    p.add_argument("--quick", action="store_true", help="small sizes and short runs (CI)")
    p.add_argument("--json", metavar="FILE", default=None, help="write all results as JSON")
    p.add_argument("--markdown", metavar="FILE", default=None,
                   help="write the table as Markdown (for docs/benchmarks.md)")
    p.add_argument("--cycles", type=int, default=None,
                   help="cycles of the long churn (default 1,000,000; --quick 3,000)")
    p.add_argument("--max-churn-seconds", type=float, default=150.0,
                   help="stop the long churn after this long (default 150)")
    p.add_argument("--no-c", action="store_true", help="skip the C yardstick")
    p.add_argument("--no-cupy", action="store_true", help="skip CuPy even if importable")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--multi-device", action="store_true",
                   help="instead: saxpy and transfer rates of every device at once against "
                        "one alone (bench/multi_device.py; --device takes a list: 0,1)")
    p.set_defaults(func=cmd_bench)
