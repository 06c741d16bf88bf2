"""Real Ctrl-C during Manager.stream() (issue 20, classes 5 to 7): SIGINTs sent to the main
thread at random moments by another thread, in a child process (signal_child.py), so the
KeyboardInterrupt lands wherever CPython checks for signals, not only at the lines the
sweeps of test_interrupts.py choose.

- single: one SIGINT per stream() call, in each host mode (staged copies, imported pages,
  "auto", pinned arrays): once the GPU work left behind completed, the manager's live
  objects, pool bytes and the process's Vulkan objects are back to their baseline, every
  time; the results are right afterwards.
- storm: a SIGINT every 0.5 to 10 ms while streams run, for seconds: close() then leaves
  no Vulkan object in the process.
- latency: Ctrl-C while a stream's kernel never ends reaches the caller at once (it used
  to wait depth x wait_timeout).

The suite sends 150 interrupts per mode and storms of 2 s; the long profile
(SCOPEDGPU_SIGNAL_COUNT=2000 SCOPEDGPU_STORM_SECONDS=12, README) is the issue's figure."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
COUNT = int(os.environ.get("SCOPEDGPU_SIGNAL_COUNT", "150"))
STORM = float(os.environ.get("SCOPEDGPU_STORM_SECONDS", "2"))
MODES = ["stage", "import", "auto", "pinned"]


def _child(*args: str, timeout: float = 600) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SCOPEDGPU_STREAM_HOST", None)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "signal_child.py"), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"child {args} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"child {args} printed no figures:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1])


# Under the validation layer (CI's second pass) the staged mode's paths are swept line by
# line by test_interrupts.py::test_stream[copied]; the other modes run here.
_STAGE_SWEPT = pytest.mark.plain_only(
    "the staged copies' paths are swept line by line under the layer by "
    "tests/lifetime/test_interrupts.py::test_stream[copied]")


@pytest.mark.parametrize("mode", [pytest.param(m, marks=_STAGE_SWEPT) if m == "stage" else m
                                  for m in MODES])
def test_one_ctrl_c_per_stream_leaves_nothing(mode):
    got = _child("single", mode, str(COUNT), "1")
    print(json.dumps(got))
    # Most land inside stream() (the delays span its run time): the test is not vacuous.
    assert got["in_stream"] >= COUNT // 2, got
    assert got["leaks"] == 0, got
    assert got["alive_after_close"] == {}, got
    assert got["correct_after"], got


@pytest.mark.plain_only("random storms over the paths that the single-signal tests of "
                        "every mode but the staged one (swept line by line there) cut "
                        "under the layer")
@pytest.mark.parametrize("mode", MODES)
def test_a_storm_of_ctrl_c_leaves_nothing_after_close(mode):
    got = _child("storm", mode, str(STORM), "1")
    print(json.dumps(got))
    assert got["signals"] >= 50 * STORM and got["calls"] >= 10, got
    assert got["alive_after_close"] == {}, got
    assert got["correct_after"], got


@pytest.mark.plain_only("how soon Ctrl-C reaches the caller, a timing; what it leaves "
                        "is checked under the layer by the single-signal tests")
@pytest.mark.parametrize("mode", ["stage", "import", "pinned"])
def test_ctrl_c_reaches_the_caller_while_the_kernel_never_ends(mode):
    """The manager's wait_timeout is 1 s and the stream 3 deep: before, Ctrl-C came back
    after each slot's wait in turn (3 s and more). The closing note has the figures; the
    bound here only tells the two behaviours apart on a busy machine."""
    got = _child("latency", mode, timeout=300)
    print(json.dumps(got))
    assert len(got["latencies"]) == 3, got
    assert max(got["latencies"]) < 0.5, got
