"""Runs SPIR-V cases in a worker process (worker.py) where a crash or a hang is observed,
not suffered: the worker is restarted after either, and the input is saved to a file
for reproduction (`python tests/fuzz/worker.py --replay FILE`)."""
from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, source_env

# Seconds one stage may take before the worker counts as hung. Creating a pipeline on
# lavapipe takes well under a second; the validation layer and a busy machine add a few.
STAGE_TIMEOUT = float(os.environ.get("SCOPEDGPU_FUZZ_TIMEOUT", "60"))
CRASH_DIR = Path(os.environ.get("SCOPEDGPU_FUZZ_CRASH_DIR",
                                os.path.join(ROOT, "build", "fuzz-crashes")))
# Outcomes that pass: a refusal (ShaderError from one of the checks) or a working algorithm.
# "endless": a module that validates and loops for ever (say, a mutated loop bound) is
# a program that never finishes, not a crash: eval_await() says so, as documented.
# "device_lost": on a real GPU, a valid module that faults (an index far out of bounds)
# loses the device, which the DeviceError of the dispatch's wait reports (lavapipe runs
# such a module into its own memory instead: a crash there, see docs/troubleshooting.md).
PASS = {"rejected_validator", "rejected_structure", "rejected_capability",
        "rejected_interface", "rejected_other", "rejected_driver", "rejected_layer",
        "dispatched", "endless", "device_lost"}


class Worker:
    """One worker process at a time; `run` restarts it after a crash or a hang."""

    def __init__(self, **env: str) -> None:
        self.env = source_env(**env)
        # Another scopedgpu to run the cases against (e.g. an older checkout, to see what
        # these checks fix): its directory goes first on the worker's path.
        other = os.environ.get("SCOPEDGPU_FUZZ_PYTHONPATH")
        if other:
            self.env["PYTHONPATH"] = os.pathsep.join([other, self.env["PYTHONPATH"]])
        self.proc: subprocess.Popen | None = None
        self.buf = b""
        self.eof = False      # the worker closed its output: it died
        self.stats: Counter[str] = Counter()
        self.failures: list[dict[str, Any]] = []
        self.started = time.monotonic()

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "fuzz", "worker.py")], cwd=ROOT, env=self.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf = b""
        self.eof = False
        line = self._line(STAGE_TIMEOUT * 2)
        if line != "S ready":
            raise RuntimeError(f"the fuzz worker did not start: {line!r} "
                               f"(exit {self._stop()})")

    def _line(self, timeout: float) -> str | None:
        """The next line from the worker; None on EOF (it died) or after `timeout` s."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.eof = True
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()

    def _stop(self) -> int | None:
        """Ends the worker (killing it if it still runs); its exit status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait()
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                f.close()
        return rc

    def run(self, spirv: bytes, note: str = "") -> dict[str, Any]:
        """The outcome of one case: a worker result, or crash/hang (input saved)."""
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        stage = "send"
        try:
            self.proc.stdin.write(len(spirv).to_bytes(4, "little") + spirv)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        while True:
            line = self._line(STAGE_TIMEOUT)
            if line is None:
                # EOF is a crash even where poll() still sees the process: its output
                # closes as it exits, a moment before its exit status is there (crashes
                # were counted as hangs, their exit status a signal all the same)
                dead = self.eof or self.proc.poll() is not None
                rc = self._stop()
                res = {"outcome": "crash" if dead else "hang", "stage": stage, "exit": rc}
                break
            if line.startswith("S "):
                stage = line[2:]
            elif line.startswith("R "):
                res = json.loads(line[2:])
                if res.pop("restart", False):
                    self._stop()      # it exits by itself; a new one serves the next case
                break
        self.stats[res["outcome"]] += 1
        self.stats["cases"] += 1
        if res["outcome"] not in PASS or "leak" in res:
            res["file"] = str(save(spirv, res, note))
            self.failures.append(res)
        return res

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b"\xff\xff\xff\xff")
                self.proc.stdin.flush()
                self.proc.wait(timeout=STAGE_TIMEOUT)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self._stop()

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.stats)
        out["seconds"] = round(time.monotonic() - self.started, 1)
        out["failures"] = len(self.failures)
        return out


def save(spirv: bytes, res: dict[str, Any], note: str) -> Path:
    """Writes a failing input (and what happened to it) to CRASH_DIR."""
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    name = f"{res['outcome']}-{hashlib.sha256(spirv).hexdigest()[:16]}"
    path = CRASH_DIR / f"{name}.spv"
    path.write_bytes(spirv)
    (CRASH_DIR / f"{name}.json").write_text(json.dumps(dict(res, note=note), indent=1))
    return path
