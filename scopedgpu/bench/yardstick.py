"""The C yardstick's driver: compiles yardstick.c (package data, next to this file) once
per source version and runs its tasks in a child process, reading one `RESULT {json}` line
per result.

What it needs: a C compiler ($CC, cc, gcc or clang) and Vulkan's headers: those vendored in
csrc/vendor where the bench runs from a source tree (a checkout or the sdist), else the
system's (`vulkan/vulkan.h`: libvulkan-dev, vulkan-headers); at run time only the Vulkan
loader, which the yardstick opens itself (dlopen of libvulkan.so.1, as scopedgpu does).
Without either, the bench says so and runs without it. The binary is cached in the source
tree's build/bench/, else in $XDG_CACHE_HOME/scopedgpu (~/.cache/scopedgpu), else in the
temporary folder."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "yardstick.c"
# scopedgpu/bench/ -> the source tree's top (meaningful in a checkout or an unpacked sdist)
TREE = HERE.parent.parent
VENDORED_HEADERS = TREE / "csrc" / "vendor"
NO_CC = "no C compiler found (set CC or install gcc): no C yardstick"
NO_HEADERS = ("no Vulkan headers for the C yardstick (vulkan/vulkan.h: install libvulkan-dev, "
              "or vulkan-headers; a source checkout carries its own): no C yardstick")


def find_cc() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def build_dirs() -> list[Path]:
    dirs = []
    if (TREE / "build_ffi.py").exists():
        dirs.append(TREE / "build" / "bench")
    dirs.append(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scopedgpu")
    dirs.append(Path(tempfile.gettempdir()) / f"scopedgpu-bench-{os.getuid()}")
    return dirs


def build_yardstick(say: Callable[[str], None]) -> tuple[str | None, str]:
    """Compiles yardstick.c once per source version; returns (binary path or None, note)."""
    if not SOURCE.exists():
        return None, f"C yardstick source {SOURCE} is missing"
    cc = find_cc()
    if cc is None:
        return None, NO_CC
    includes = ["-I", str(VENDORED_HEADERS)] if (VENDORED_HEADERS / "vulkan").is_dir() else []
    digest = hashlib.sha256(SOURCE.read_bytes() + cc.encode()
                            + " ".join(includes).encode()).hexdigest()[:12]
    errors = []
    for d in build_dirs():
        exe = d / f"yardstick-{digest}"
        if exe.exists() and os.access(exe, os.X_OK):
            return str(exe), f"cached {exe}"
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            errors.append(f"{d}: {exc}")
            continue
        tmp = d / f".yardstick-{digest}.{os.getpid()}"
        cmd = [cc, "-O2", "-std=gnu11", *includes, str(SOURCE), "-o", str(tmp), "-ldl"]
        say(f"compiling the C yardstick: {' '.join(cmd)}")
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{cc}: {exc}")
            continue
        if res.returncode != 0:
            tmp.unlink(missing_ok=True)
            if not includes and "vulkan/vulkan.h" in res.stderr and (
                    "No such file" in res.stderr or "not found" in res.stderr):
                return None, NO_HEADERS
            return None, f"the C yardstick failed to compile: {res.stderr.strip()[-800:]}"
        os.replace(tmp, exe)
        return str(exe), f"compiled {exe}"
    return None, "no writable build directory for the C yardstick: " + "; ".join(errors)


class Yardstick:
    """Runs tasks of the compiled yardstick against one device and shader."""

    def __init__(self, exe: str | None, note: str, spv: Path, device_index: int,
                 say: Callable[[str], None]):
        self.exe = exe
        self.note = note
        self.spv = spv
        self.index = device_index
        self.say = say
        self.device_name: str | None = None
        self.device: dict[str, Any] = {}
        self.errors: list[str] = []

    def with_shader(self, spv: Path) -> Yardstick:
        return Yardstick(self.exe, self.note, spv, self.index, self.say)

    def run(self, *tasks: Any, timeout: float = 300) -> list[dict[str, Any]]:
        """Runs tasks in one process; returns their results, or [] when unavailable.
        A task that failed inside the yardstick returns a result with an "error" key."""
        if self.exe is None:
            return []
        cmd = [self.exe, str(self.spv), str(self.index), *map(str, tasks)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.say(f"C yardstick failed: {exc}")
            self.errors.append(f"{tasks[0]}: {exc}")
            return []
        out: list[dict[str, Any]] = []
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
                self.device = r
            elif r.get("error"):
                self.errors.append(f"{r.get('task')}: {r['error']}")
        return [r for r in out if r.get("task") != "device"]
