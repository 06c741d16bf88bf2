"""Every example in examples/ runs (small sizes) and agrees with numpy."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import source_env

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# distributed's shutdown race (dask/distributed#7105, #7891, open): a worker's heartbeat in
# flight when the LocalCluster closes its scheduler logs this record, with a traceback
# made only of distributed's and tornado's frames. It is upstream's log noise, not the
# example's failure; any other traceback still fails the test.
HEARTBEAT_RACE = re.compile(
    r"^[\d-]+ [\d:,]+ - distributed\.worker - ERROR - "
    r"Failed to communicate with scheduler during heartbeat\.\n"
    r"(?P<body>(?:(?![\d-]+ [\d:,]+ - ).*\n)*?)"
    r"distributed\.comm\.core\.CommClosedError: in <TCP \(closed\) "
    r"ConnectionPool\.heartbeat_worker [^\n]*>: Stream is closed$\n?", re.M)


def without_heartbeat_race(out: str) -> str:
    """`out` without distributed's shutdown heartbeat records whose frames are all in
    distributed or tornado."""
    def drop(m: re.Match) -> str:
        files = re.findall(r'^ *File "([^"]*)"', m["body"], re.M)
        upstream = all(re.search(r"/(distributed|tornado)/", f) for f in files)
        return "" if files and upstream else m[0]
    return HEARTBEAT_RACE.sub(drop, out)

CASES = {
    "array_multiplication.py": ["--size", "4099"],
    "logistic_regression.py": [],                       # Kompute's data: already tiny
    "reduction.py": ["--size", "300001"],
    "matmul.py": ["--m", "37", "--k", "45", "--n", "29"],  # not multiples of the tile
    "embedding_worker.py": ["--requests", "120", "--vocab", "500", "--dim", "96"],
    "async_service.py": ["--requests", "150", "--size", "5000"],
    "dask_histogram.py": ["--size", "1000000", "--blocks", "12", "--workers", "2"],
    "stream_saxpy.py": ["--size", "1000003", "--chunk-mib", "1"],
}


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example(name):
    if name == "dask_histogram.py":
        for module in ("dask", "distributed"):
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"{module} is not installed (pip install 'scopedgpu[dask]')")
    res = subprocess.run([sys.executable, str(EXAMPLES / name), *CASES[name]],
                         capture_output=True, text=True, timeout=300, env=source_env())
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "result matches numpy: OK" in res.stdout, out
    assert "Traceback" not in without_heartbeat_race(out), out
    if name == "embedding_worker.py":
        assert "memory flat: OK" in res.stdout
    if name == "logistic_regression.py":
        assert "Kompute's checks (0 < w0 < 0.01, w1 > 1.5, b < 0.7): OK" in res.stdout


RACE_RECORD = "".join(line + "\n" for line in (
    "2026-12-04 19:28:38,144 - distributed.worker - ERROR - "
    "Failed to communicate with scheduler during heartbeat.",
    "Traceback (most recent call last):",
    '  File "/v/lib/python3.11/site-packages/distributed/comm/tcp.py", line 226, in read',
    "    frames_nosplit_nbytes_bin = await stream.read_bytes(fmt_size)",
    "tornado.iostream.StreamClosedError: Stream is closed",
    "",
    "The above exception was the direct cause of the following exception:",
    "",
    "Traceback (most recent call last):",
    '  File "/v/lib/python3.11/site-packages/distributed/worker.py", line 1165, in heartbeat',
    "    response = await retry_operation(",
    '  File "/v/lib/python3.11/site-packages/distributed/comm/tcp.py", line 137, in '
    "convert_stream_closed_error",
    '    raise CommClosedError(f"in {obj}: {exc}") from exc',
    "distributed.comm.core.CommClosedError: in <TCP (closed) ConnectionPool.heartbeat_worker "
    "local=tcp://127.0.0.1:54540 remote=tcp://127.0.0.1:45087>: Stream is closed"))
OUR_TRACEBACK = """\
Traceback (most recent call last):
  File "/w/scopedgpu/dask.py", line 96, in teardown
    self.manager.close()
scopedgpu.errors.DeviceLostError: the device was lost
"""


def test_heartbeat_race_filter_drops_only_upstream_records():
    """The filter test_example applies to the output: distributed's shutdown heartbeat
    records go (a shortened copy of the record CI printed, once per worker, in session 46),
    and nothing else."""
    info = "2026-12-04 19:28:38,150 - distributed.nanny - INFO - Closing Nanny\n"
    assert without_heartbeat_race("result matches numpy: OK\n" + RACE_RECORD + RACE_RECORD
                                  + info) == "result matches numpy: OK\n" + info
    for kept in (OUR_TRACEBACK,                                # not a heartbeat record
                 RACE_RECORD.replace("/distributed/worker.py", "/scopedgpu/dask.py"),
                 RACE_RECORD.replace("Stream is closed\n", "timed out\n")):
        assert "Traceback" in without_heartbeat_race(RACE_RECORD + kept + info), kept
    # a traceback of ours between the record's head and an upstream tail is not swallowed
    head, tail = RACE_RECORD.split("The above exception", 1)
    mixed = head + OUR_TRACEBACK + "The above exception" + tail
    assert "scopedgpu/dask.py" in without_heartbeat_race(mixed)


def test_stream_example_with_pinned_arrays():
    res = subprocess.run([sys.executable, str(EXAMPLES / "stream_saxpy.py"), "--size",
                          "1000003", "--chunk-mib", "1", "--pinned"],
                         capture_output=True, text=True, timeout=300, env=source_env())
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "result matches numpy: OK" in res.stdout, out
    # x and y, 3.8 MiB each, page-rounded
    assert re.search(r"^pinned [78] MiB in ", res.stdout, re.M) and "not pinned" not in out, out
