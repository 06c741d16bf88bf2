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
    assert "Traceback" not in out
    if name == "embedding_worker.py":
        assert "memory flat: OK" in res.stdout
    if name == "logistic_regression.py":
        assert "Kompute's checks (0 < w0 < 0.01, w1 > 1.5, b < 0.7): OK" in res.stdout


def test_stream_example_with_pinned_arrays():
    res = subprocess.run([sys.executable, str(EXAMPLES / "stream_saxpy.py"), "--size",
                          "1000003", "--chunk-mib", "1", "--pinned"],
                         capture_output=True, text=True, timeout=300, env=source_env())
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "result matches numpy: OK" in res.stdout, out
    # x and y, 3.8 MiB each, page-rounded
    assert re.search(r"^pinned [78] MiB in ", res.stdout, re.M) and "not pinned" not in out, out
