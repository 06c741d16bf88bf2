"""Small helpers shared by the bench's modules: units, progress lines, RSS, the built-in
shaders' SPIR-V files, and CuPy where it imports."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def require_positive(p: argparse.ArgumentParser, args: argparse.Namespace,
                     names: tuple[str, ...]) -> None:
    """An argparse error for the first of `names` (attributes of args) below 1."""
    for name in names:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")


def add_device_json(p: argparse.ArgumentParser) -> None:
    """The check commands' (serve_long, serve_layers, serve_scaling) --device and --json."""
    p.add_argument("--device", type=int, default=None,
                   help="device index (default: the default device)")
    p.add_argument("--json", metavar="FILE")


def served_failures(wrong: int, before: dict, after: dict) -> list[str]:
    """The failures of a run that served checked requests (serve_layers, serve_scaling):
    results that differ from numpy's, and live objects (after the run and empty_cache())
    that differ from those before it."""
    failures = []
    if wrong:
        failures.append(f"{wrong} result(s) differ from numpy's")
    if after != before:
        failures.append(f"after the run and empty_cache(): live objects {after}, "
                        f"before {before}")
    return failures


def report_failures(out: dict, json_path: str | None) -> int:
    """The ending of a check command (serve_long, serve_layers, serve_scaling): prints each line of
    out["failures"], writes `out` as JSON where asked, and returns the exit status: 1 when
    anything failed."""
    for line in out["failures"]:
        print("FAILED:", line)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if out["failures"] else 0


def pow2_floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def size_name(b: int) -> str:
    """4096 -> '4KiB', 16 MiB -> '16MiB' (the names of the transfer figures)."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if b >= scale and b % scale == 0:
            return f"{b // scale}{unit}"
    return f"{b}B"


def rss_bytes() -> int:
    """This process's resident set size in bytes, through psutil (the `[bench]` extra).
    Without psutil: the peak RSS from resource.getrusage (equal to the current RSS while
    the process only grows, above it after memory is returned), and RuntimeError where
    there is neither."""
    try:
        import psutil
    except ImportError:
        pass
    else:
        return int(psutil.Process().memory_info().rss)
    try:
        import resource
    except ImportError:
        raise RuntimeError("RSS unavailable: install psutil (pip install 'scopedgpu[bench]')") \
            from None
    # ru_maxrss is in KiB on Linux and the BSDs, in bytes on macOS
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def mem_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_model() -> str | None:
    """The processor's name ("model name" of /proc/cpuinfo; platform.processor() elsewhere),
    None where neither says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or None


def cpu_ticks(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(busy, steal) clock ticks of all the machine's CPUs since boot, from the first line
    of /proc/stat (Linux): busy is user + nice + system + irq + softirq (guest time is
    inside user and nice), steal the time a hypervisor ran something else while a virtual
    CPU of this machine wanted to run. None where there is no such file."""
    try:
        with open(path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    try:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    except ValueError:
        return None
    if fields[0] != "cpu":
        return None
    return user + nice + system + irq + softirq, steal


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None
                ) -> float | None:
    """The share of the CPU time this machine's processors wanted between two cpu_ticks()
    readings that the hypervisor gave to something else: steal / (busy + steal), 0 to 1.
    Not a figure: a virtual machine whose host is busy runs everything slower, and the
    device tool's machines are virtual (the same code's figures moved by up to 1.8x
    between rounds of one run). /proc/stat counts in ticks of 10 ms, so over a fraction
    of a second the share is coarse. None when a reading is missing; 0.0 when nothing
    ran."""
    if before is None or after is None:
        return None
    busy = after[0] - before[0]
    steal = after[1] - before[1]
    return steal / (busy + steal) if busy + steal > 0 else 0.0


_GAUGE = """
import sys, time
class Box:
    __slots__ = ("v",)
    def __init__(self):
        self.v = 0
    def add(self, k):
        self.v += k
def loop(n):
    d = {}
    b = Box()
    for i in range(n):
        k = i & 255
        d[k] = d.get(k, 0) + b.v
        b.add(k)
n, rounds, warm = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
end = time.perf_counter() + warm
while time.perf_counter() < end:
    loop(n)
best = None
for _ in range(rounds):
    t0 = time.perf_counter_ns()
    loop(n)
    t = time.perf_counter_ns() - t0
    best = t if best is None or t < best else best
print(round(best / n, 1))
"""


def python_speed_ns(rounds: int = 15, n: int = 20_000, warm_s: float = 0.2) -> float | None:
    """Nanoseconds per iteration of a fixed pure-Python loop (a dict update, an attribute
    read, a method call: the kinds of work scopedgpu's hot paths do), in a child process
    of its own: the fastest of `rounds` after `warm_s` seconds of the same loop (the
    first tens of milliseconds of a process on the H200's host ran it at half speed).
    Not a figure: a gauge of the host, stored with every run, because the machines the
    device tool lends differ (the same code's serve and churn figures read 20-30% apart
    from one call to the next, their C yardsticks with them). None when the child failed."""
    import subprocess
    try:
        out = subprocess.run([sys.executable, "-c", _GAUGE, str(n), str(rounds), str(warm_s)],
                             capture_output=True, text=True, timeout=60)
        return float(out.stdout.strip()) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


class Progress:
    def __init__(self, quiet: bool = False):
        self.t0 = time.perf_counter()
        self.quiet = quiet
        self.last = 0.0

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(f"[bench {time.perf_counter() - self.t0:6.1f}s] {msg}", file=sys.stderr,
                  flush=True)

    def tick(self, msg: str, every: float = 5.0) -> None:
        """Says msg if nothing was said for `every` seconds (progress of long loops)."""
        now = time.perf_counter()
        if now - self.last >= every:
            self.last = now
            self.say(msg)


def builtin_shader(name: str) -> Path:
    """The file of scopedgpu's built-in shader `name` (shipped as package data,
    scopedgpu/shaders/NAME.spv), as a path the C yardstick can open. A package that is not
    on the file system (a zip) has its bytes copied to a temporary file."""
    res = files("scopedgpu") / "shaders" / f"{name}.spv"
    if not res.is_file():
        raise FileNotFoundError(f"scopedgpu's built-in shader {name}.spv is missing: build "
                                "the package with `python build_ffi.py` (needs glslc)")
    if isinstance(res, Path):
        return res
    out = Path(tempfile.gettempdir()) / f"scopedgpu-bench-{os.getuid()}" / f"{name}.spv"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(res.read_bytes())
    return out
