"""CuPy's side of the bench, in a process of its own (SPEC: "CuPy runs in a process of its
own, so that no CUDA context shares the process with the figures it sits beside").

The bench never imports CuPy. `CupyChild.run(tasks)` starts this file as a script with
the same Python, which imports CuPy, runs the tasks and prints one `RESULT {json}` line
each, as the C yardstick does; the child exits, and its CUDA context with it, before the
bench measures anything else. A task that fails returns {"task": ..., "error": ...}.

    python scopedgpu/bench/cupy_child.py '[{"task": "probe"}, {"task": "latency", "iters": 300}]'

Tasks (every kernel is an ElementwiseKernel `y = a * x + y` over float32, CuPy's saxpy):
    probe                       CuPy's version and the CUDA devices it sees
    latency ITERS               one launch over 64 floats and a stream synchronize, timed
                                ITERS times: median us
    saxpy N K REPS              K launches over N floats and a synchronize: GB/s
                                (12 bytes an element a launch), median of up to REPS
    transfer BYTES REPS         cp.asarray of a pageable numpy array (synchronized) and
                                .get() of the device copy: GB/s each way, medians
    chain N K MIN_TIME          K dependent launches over N floats then a synchronize, and
                                the same K launches captured once into a CUDA graph
                                (stream capture) launched and synchronized: median us per
                                kernel of each
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve()


# -- the bench's side: no CuPy here -------------------------------------------------------
class CupyChild:
    """Runs CuPy tasks in a child process. `available` once a probe succeeded; `note`
    says why not otherwise (not installed, no CUDA device, --no-cupy)."""

    def __init__(self, enabled: bool, say: Callable[[str], None]):
        self.say = say
        self.version: str | None = None
        self.devices: list[str] = []
        self.note = "disabled by --no-cupy"
        self.errors: list[str] = []
        if not enabled:
            return
        if importlib.util.find_spec("cupy") is None:    # finds, never imports
            self.note = "CuPy is not installed"
            return
        res = self.run([{"task": "probe"}], probe=True)
        if res and "error" not in res[0]:
            self.version = res[0].get("version")
            self.devices = res[0].get("devices") or []
            self.note = f"CuPy {self.version} in a child process ({', '.join(self.devices)})"
        else:
            err = res[0].get("error") if res else "; ".join(self.errors) or "no result"
            self.note = f"CuPy does not run here: {err}"

    @property
    def available(self) -> bool:
        return self.version is not None

    def run(self, tasks: list[dict[str, Any]], *, timeout: float = 600,
            probe: bool = False) -> list[dict[str, Any]]:
        """The tasks' results in order ([] when CuPy is unavailable or the child died: its
        error is in `errors`)."""
        if not probe and not self.available:
            return []
        cmd = [sys.executable, str(HERE), json.dumps(tasks)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.errors.append(f"{tasks[0]['task']}: {exc}")
            self.say(f"CuPy child failed: {exc}")
            return []
        out = [json.loads(line[7:]) for line in res.stdout.splitlines()
               if line.startswith("RESULT ")]
        if res.returncode != 0:
            tail = res.stderr.strip()[-400:]
            self.errors.append(f"{tasks[0]['task']}: exit {res.returncode}: {tail}")
            self.say(f"CuPy child exited {res.returncode}: {tail}")
        return out


# -- the child's side ---------------------------------------------------------------------
def _timed_reps(fn: Callable[[], Any], min_time: float, min_reps: int = 3,
                max_reps: int = 50) -> list[float]:
    """As the bench's Bench.timed_reps: one warm call, then at least min_reps and at most
    max_reps timed calls, until min_time has passed."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or
                                     time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _saxpy(cp: Any) -> Any:
    return cp.ElementwiseKernel("float32 a, float32 x", "float32 y", "y = a * x + y",
                                "sg_saxpy")


def _latency(cp: Any, np: Any, iters: int) -> dict[str, Any]:
    k = _saxpy(cp)
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
    return {"median_us": statistics.median(times) / 1e3, "iters": iters}


def _saxpy_rate(cp: Any, np: Any, n: int, k: int, reps: int) -> dict[str, Any]:
    def timed() -> list[float]:    # the arrays are freed when it returns
        kern = _saxpy(cp)
        x = cp.ones(n, dtype=cp.float32)
        y = cp.ones(n, dtype=cp.float32)
        s = cp.cuda.get_current_stream()

        def run() -> None:
            for _ in range(k):
                kern(np.float32(2), x, y)
            s.synchronize()
        return _timed_reps(run, 0.2, min_reps=min(reps, 10), max_reps=50)
    times = timed()
    cp.get_default_memory_pool().free_all_blocks()
    return {"n": n, "k": k, "reps": len(times),
            "gbps": 12.0 * n * k / statistics.median(times) / 1e9}


def _transfer(cp: Any, np: Any, nbytes: int, reps: int) -> dict[str, Any]:
    arr = np.random.default_rng(1).random(nbytes // 4, dtype=np.float32)

    def timed() -> tuple[list[float], list[float]]:   # the device copy is freed on return
        d = cp.asarray(arr)

        def up() -> None:
            cp.asarray(arr)
            cp.cuda.Device().synchronize()
        tu = _timed_reps(up, 0.2, min_reps=reps, max_reps=reps * 3)
        td = _timed_reps(d.get, 0.2, min_reps=reps, max_reps=reps * 3)
        return tu, td
    tu, td = timed()
    cp.get_default_memory_pool().free_all_blocks()
    return {"bytes": nbytes, "upload_gbps": arr.nbytes / statistics.median(tu) / 1e9,
            "download_gbps": arr.nbytes / statistics.median(td) / 1e9}


def _chain(cp: Any, np: Any, n: int, k: int, min_time: float) -> dict[str, Any]:
    kern = _saxpy(cp)
    x = cp.ones(n, dtype=cp.float32)
    y = cp.zeros(n, dtype=cp.float32)
    a = np.float32(1e-3)
    max_reps = max(10, 20_000 // k)
    s = cp.cuda.Stream(non_blocking=True)   # capture needs a stream other than the default
    with s:
        def launches() -> None:
            for _ in range(k):
                kern(a, x, y)
            s.synchronize()
        tl = _timed_reps(launches, min_time, min_reps=5, max_reps=max_reps)
        s.begin_capture()
        try:
            for _ in range(k):
                kern(a, x, y)
        finally:
            graph = s.end_capture()

        def replay() -> None:
            graph.launch(s)
            s.synchronize()
        tg = _timed_reps(replay, min_time, min_reps=5, max_reps=max_reps)
    ok = bool(np.isfinite(float(y[0].get())))
    return {"n": n, "k": k, "launch_reps": len(tl), "graph_reps": len(tg), "ok": ok,
            "launch_us_per_kernel": statistics.median(tl) * 1e6 / k,
            "graph_us_per_kernel": statistics.median(tg) * 1e6 / k}


def _child(tasks: list[dict[str, Any]]) -> int:
    import importlib

    import numpy as np
    try:
        cp: Any = importlib.import_module("cupy")   # no stubs needed: CuPy is Any here
        devices = [cp.cuda.runtime.getDeviceProperties(i)["name"].decode()
                   for i in range(cp.cuda.runtime.getDeviceCount())]
        if not devices:
            raise RuntimeError("no CUDA device")
    except Exception as exc:
        for t in tasks:
            _emit({"task": t.get("task"), "error": f"{type(exc).__name__}: {exc}"})
        return 0
    for t in tasks:
        name = t.get("task")
        try:
            if name == "probe":
                r: dict[str, Any] = {"version": cp.__version__, "devices": devices,
                                     "pid": os.getpid()}
            elif name == "latency":
                r = _latency(cp, np, int(t["iters"]))
            elif name == "saxpy":
                r = _saxpy_rate(cp, np, int(t["n"]), int(t["k"]), int(t["reps"]))
            elif name == "transfer":
                r = _transfer(cp, np, int(t["bytes"]), int(t["reps"]))
            elif name == "chain":
                r = _chain(cp, np, int(t["n"]), int(t["k"]), float(t["min_time"]))
            else:
                raise ValueError(f"unknown task {name!r}")
        except Exception as exc:
            r = {"error": f"{type(exc).__name__}: {exc}"}
        _emit({"task": name, **r})
    return 0


def _emit(r: dict[str, Any]) -> None:
    print("RESULT " + json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(_child(json.loads(sys.argv[1])))
