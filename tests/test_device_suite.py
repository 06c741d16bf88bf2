"""scripts/device_suite.sh, the suite's runner on the device tool's GPU machines: a unit
that cannot be stopped (on a GPU, a process stuck in the driver) or that takes the
machine's memory costs that unit only. The script stops waiting SUITE_GRACE seconds
after its deadline and reports such a unit HUNG with its processes, and the units it had
no slot for as not run; a unit's process is killed when the machine's memory left falls
under SUITE_MEMORY_FLOOR_MIB. Before, the script waited on every unit until the call's
limit (six calls that ran the suite on those machines ended with "the device machine
stopped answering", nothing back; docs/benchmarks.md)."""
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


def run_suite(tmp_path: Path, tests: dict[str, str], **settings: str
              ) -> tuple[subprocess.CompletedProcess, float, dict[str, list[str]]]:
    """device_suite.sh on the test files `tests` (name: body) in a tree of its own under
    tmp_path; returns the run, its seconds and the table's rows by file."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(Path(ROOT) / "scripts" / "device_suite.sh", tmp_path / "scripts")
    (tmp_path / "tests").mkdir()
    for name, body in tests.items():
        (tmp_path / "tests" / f"test_{name}.py").write_text(body)
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
