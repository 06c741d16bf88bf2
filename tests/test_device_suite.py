"""scripts/device_suite.sh, the suite's runner on the device tool's GPU machines: a unit
that cannot be stopped (on a GPU, a process stuck in the driver) or that takes the
machine's memory costs that unit only. The script stops waiting SUITE_GRACE seconds
after its deadline and reports such a unit HUNG with its processes, and the units it had
no slot for as not run; a unit's process is killed when the machine's memory left falls
under SUITE_MEMORY_FLOOR_MIB. Before, the script waited on every unit until the call's
limit, which then came back timed out without the table. Detached (SUITE_DETACH), the suite
runs on after the call, which returns its progress, as does each `--watch` after it: a
machine that stops answering (seven calls that ran the suite on those machines ended so,
nothing back; docs/benchmarks.md) then costs one short call, and the calls before it have
said what ran."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, source_env

# `timeout`, as the script calls it for each unit, except that for the units named
# *_hang* it ignores the signals that stop it and never returns: what a process stuck in
# the kernel looks like to the script (timeout's own SIGKILL goes to its child, which
# never comes).
FAKE_TIMEOUT = """#!/bin/bash
case "$*" in *_hang*) trap '' TERM INT HUP; exec sleep 1000 ;; esac
exec {real} "$@"
"""


def make_tree(tmp_path: Path, tests: dict[str, str]) -> None:
    """The script and the test files `tests` (name: body) in a tree of its own."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(Path(ROOT) / "scripts" / "device_suite.sh", tmp_path / "scripts")
    (tmp_path / "tests").mkdir()
    for name, body in tests.items():
        (tmp_path / "tests" / f"test_{name}.py").write_text(body)


def run_suite(tmp_path: Path, tests: dict[str, str], **settings: str
              ) -> tuple[subprocess.CompletedProcess, float, dict[str, list[str]]]:
    """device_suite.sh on the test files `tests` (name: body) in a tree of its own under
    tmp_path; returns the run, its seconds and the table's rows by file."""
    make_tree(tmp_path, tests)
    fake = tmp_path / "fakebin"
    fake.mkdir()
    real = shutil.which("timeout")
    assert real, "coreutils' timeout"
    (fake / "timeout").write_text(FAKE_TIMEOUT.format(real=real))
    (fake / "timeout").chmod(0o755)
    env = source_env(PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", PYTHON=sys.executable,
                     SUITE_OUT=str(tmp_path / "out"), SUITE_LABEL="test", FILE_TIMEOUT="60",
                     **settings)
    env.pop("OUT", None)
    logs = tmp_path / "build" / "device-suite" / "files"
    start = time.monotonic()
    try:
        res = subprocess.run(["bash", "scripts/device_suite.sh",
                              *(f"tests/test_{name}.py" for name in tests)],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - start
    finally:
        for sid in logs.glob("*.sid"):     # the never-ending units' sessions
            try:
                os.killpg(int(sid.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    rows = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines()
            if line.startswith("tests/")}
    assert set(rows) == {f"tests/test_{name}.py" for name in tests}, res.stdout
    return res, took, rows


def test_a_unit_that_never_ends_is_reported_hung_and_the_script_returns(tmp_path):
    body = "def test_it():\n    assert sum(range(4)) == 6\n"
    res, took, rows = run_suite(
        tmp_path, {"a_hang": body, "b_ok": body, "c_hang": body, "d_late": body},
        SUITE_DEADLINE="15", SUITE_GRACE="2", JOBS="2")
    out = res.stdout
    assert res.returncode == 1, (res.returncode, out, res.stderr)
    assert took < 15 + 2 + 20, f"{took:.1f} s\n{out}"
    ok = rows["tests/test_b_ok.py"]
    assert ok[:4] == ["1", "0", "0", "0"] and ok[5:] == ["ok"], out   # passed ... errors
    for hung in ("tests/test_a_hang.py", "tests/test_c_hang.py"):
        assert rows[hung][5] == "HUNG", out
    assert " ".join(rows["tests/test_d_late.py"][5:]) == "NOT RUN (suite deadline)", out
    report = (tmp_path / "out" / "device-suite-hung.txt").read_text()
    for hung in ("tests/test_a_hang.py", "tests/test_c_hang.py"):
        assert f"======== {hung}: still running" in report, report
    assert report.count("sleep 1000") >= 2, report       # each hung unit's processes
    assert "test_b_ok" not in report and "test_d_late" not in report, report


def test_a_unit_is_killed_when_the_memory_left_falls_under_the_floor(tmp_path):
    """A floor above any machine's memory: the first check kills the unit's largest
    process (its pytest), the file names it, the table says so and fails the run."""
    res, took, rows = run_suite(
        tmp_path, {"a_big": "import time\n\ndef test_it():\n    time.sleep(30)\n"},
        SUITE_DEADLINE="50", JOBS="1", SUITE_MEMORY_FLOOR_MIB=str(1 << 40))
    out = res.stdout
    assert res.returncode == 1, (res.returncode, out, res.stderr)
    assert took < 25, f"{took:.1f} s\n{out}"                 # not the test's 30 s
    assert rows["tests/test_a_big.py"][5] == "KILLED", out
    killed = [line for line in (tmp_path / "out" / "device-suite-memory.txt").read_text()
              .splitlines() if "KILLED" in line]
    assert killed and "of tests_test_a_big.py" in killed[0], killed
    assert "KILLED pid" in out, out


def test_a_detached_suite_runs_on_after_the_call_and_is_watched_to_its_end(tmp_path):
    """SUITE_DETACH: the call returns within its seconds while a unit still runs (exit
    status 3, the unit and the test it is in named in the progress file); a second detached
    start is refused while it runs; `--watch` returns once the suite has ended, with the
    suite's exit status and its table. Before, the script ran the suite to its end within
    the call, whatever SUITE_DETACH said (on the device tool's machines, a call that never
    returns, because the machine stopped answering, brings nothing back)."""
    make_tree(tmp_path, {"slow": "import time\n\ndef test_slowly():\n    time.sleep(20)\n"
                                 "    assert sum(range(4)) == 6\n"})
    env = source_env(PYTHON=sys.executable, SUITE_LABEL="test", FILE_TIMEOUT="60",
                     SUITE_DEADLINE="60", SUITE_DETACH="6", OUT=str(tmp_path / "out1"))
    env.pop("SUITE_OUT", None)

    def script(*args: str, **more: str) -> tuple[subprocess.CompletedProcess, float]:
        start = time.monotonic()
        res = subprocess.run(["bash", "scripts/device_suite.sh", *args], cwd=tmp_path,
                             env={**env, **more}, capture_output=True, text=True, timeout=90)
        return res, time.monotonic() - start

    try:
        first, took = script("tests/test_slow.py")
        assert first.returncode == 3, (first.returncode, first.stdout, first.stderr)
        assert took < 15, f"{took:.1f} s\n{first.stdout}"    # not the test's 20 s
        progress = (tmp_path / "out1" / "device-suite-progress.txt").read_text()
        running = progress.split("-- running")[1].split("-- memory")[0]
        assert "tests/test_slow.py::test_slowly" in running, progress
        again, _ = script("tests/test_slow.py")
        assert again.returncode == 2 and "still running" in again.stdout, again.stdout
        watched, _ = script("--watch", SUITE_WATCH="60", OUT=str(tmp_path / "out2"))
        assert watched.returncode == 0, (watched.returncode, watched.stdout, watched.stderr)
        rows = [line.split() for line in watched.stdout.splitlines()
                if line.startswith("tests/test_slow.py")]
        assert rows and rows[0][1:5] == ["1", "0", "0", "0"] and rows[0][6] == "ok", \
            watched.stdout
        table = (tmp_path / "out2" / "device-suite.txt").read_text()
        assert "tests/test_slow.py" in table and " ok" in table, table
        ended = (tmp_path / "out2" / "device-suite-progress.txt").read_text()
        assert "ended, exit status 0" in ended and "1 passed" in ended, ended
    finally:
        rc = tmp_path / "build" / "device-suite" / "detached" / "rc"
        deadline = time.monotonic() + 30
        while not rc.exists() and time.monotonic() < deadline:   # never leave it behind
            time.sleep(0.5)
