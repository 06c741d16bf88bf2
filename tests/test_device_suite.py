"""scripts/device_suite.sh, the suite's runner on the device tool's GPU machines: a unit
that cannot be stopped (on a GPU, a process stuck in the driver) costs that unit only.
The script stops waiting SUITE_GRACE seconds after its deadline, reports the unit HUNG
with its processes, and the units it had no slot for as not run, instead of waiting on
it until the call's limit (six calls that ran the suite on those machines ended with "the
device machine stopped answering", nothing back; docs/benchmarks.md)."""
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
exec timeout "$@"
"""


def test_a_unit_that_never_ends_is_reported_hung_and_the_script_returns(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(Path(ROOT) / "scripts" / "device_suite.sh", tmp_path / "scripts")
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("a_hang", "b_ok", "c_hang", "d_late"):
        (tests / f"test_{name}.py").write_text(f"def test_{name}():\n    assert sum(range(4)) == 6\n")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    real = shutil.which("timeout")
    assert real, "coreutils' timeout"
    (fake / "timeout").write_text(FAKE_TIMEOUT.replace("exec timeout", f"exec {real}"))
    (fake / "timeout").chmod(0o755)
    env = source_env(PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", PYTHON=sys.executable,
                     SUITE_DEADLINE="15", SUITE_GRACE="2", JOBS="2", FILE_TIMEOUT="60",
                     SUITE_OUT=str(tmp_path / "out"), SUITE_LABEL="test")
    env.pop("OUT", None)
    logs = tmp_path / "build" / "device-suite" / "files"
    start = time.monotonic()
    try:
        res = subprocess.run(["bash", "scripts/device_suite.sh", "tests/test_a_hang.py",
                              "tests/test_b_ok.py", "tests/test_c_hang.py",
                              "tests/test_d_late.py"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - start
    finally:
        for sid in logs.glob("*_hang.py.sid"):     # the never-ending units' sessions
            try:
                os.killpg(int(sid.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    out = res.stdout
    assert res.returncode == 1, (res.returncode, out, res.stderr)
    assert took < 15 + 2 + 20, f"{took:.1f} s\n{out}"
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("tests/")}
    assert set(rows) == {f"tests/test_{n}.py" for n in ("a_hang", "b_ok", "c_hang", "d_late")}, out
    ok = rows["tests/test_b_ok.py"].split()
    assert ok[1:5] == ["1", "0", "0", "0"] and ok[6:] == ["ok"], out   # passed ... errors
    for hung in ("tests/test_a_hang.py", "tests/test_c_hang.py"):
        assert "HUNG" in rows[hung], out
    assert "NOT RUN (suite deadline)" in rows["tests/test_d_late.py"], out
    report = (tmp_path / "out" / "device-suite-hung.txt").read_text()
    for hung in ("tests/test_a_hang.py", "tests/test_c_hang.py"):
        assert f"======== {hung}: still running" in report, report
    assert report.count("sleep 1000") >= 2, report       # each hung unit's processes
    assert "test_b_ok" not in report and "test_d_late" not in report, report
