"""The compatibility corpus (issue 22): kp programs of the styles kp users write, under
tests/kompute_wild/, each run unchanged in a child process (as a script, the way it
would run under kp) and its printed results checked against numpy references computed
here. A child also runs with SCOPEDGPU_DEBUG=1 when the suite does (the validation
layer on): no warning of scopedgpu's may reach its stderr."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.conftest import source_env

WILD = Path(__file__).resolve().parent / "kompute_wild"


def run(name: str, *args: str) -> tuple[dict, str]:
    """Runs kompute_wild/<name>.py; returns its last stdout line (JSON) and its stderr."""
    proc = subprocess.run([sys.executable, str(WILD / f"{name}.py"), *args],
                          capture_output=True, text=True, env=source_env(), timeout=120,
                          cwd=WILD)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stderr}"
    assert "WARNING:scopedgpu" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def close(got, want) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=2e-6, atol=2e-6)


def test_corpus_is_all_checked():
    """Every program of the corpus has its test below (at least ten programs)."""
    names = {p.stem for p in WILD.glob("*.py")}
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")} - {"corpus_is_all_checked"}
    assert len(names) >= 10 and names == tested


def test_default_workgroup():
    out, _ = run("default_workgroup")
    n = 65_535
    a = (np.arange(n) % 97).astype(np.float32)
    b = (np.arange(n) % 13 - 6).astype(np.float32)
    assert len(out["out"]) == n
    close(out["out"], a * b + 1)


def test_vec4_saxpy():
    out, _ = run("vec4_saxpy")
    x = np.linspace(-1.0, 1.0, 16384, dtype=np.float32)
    close(out["y"], (2.0 * x + 0.5) - 0.25 * x)


def test_async_eval():
    out, _ = run("async_eval")
    assert out["running"] == [True, True] and out["done"] == [False, False]
    n = 4096
    for key, start, factor in (("a", np.arange(n, dtype=np.float32) / n, 0.5),
                               ("b", np.ones(n, dtype=np.float32), 0.25)):
        acc = start.astype(np.float64)
        for _ in range(64):
            acc = acc * factor + 1.0
        close(out[key], acc)


def test_push_override():
    out, _ = run("push_override")
    x = np.arange(1, 9, dtype=np.float64)
    assert out["data"] == (((x * 2 + 3) * 0.5 - 1) * 3 + 1).tolist()


def test_timestamps():
    out, _ = run("timestamps")
    assert out["supported"] is True
    assert out["count"] == 5 and out["ints"] and out["nondecreasing"]
    x = np.arange(1024, dtype=np.float64)
    close(out["v"], np.sqrt(np.sqrt(x) + 1.0) + 1.0)


def test_logging_prog():
    out, err = run("logging_prog")
    close(out["v"], np.arange(10.0) ** 2)
    lines = err.splitlines()
    assert lines[0].startswith("INFO:myapp:starting on ")
    assert "WARNING:kp:Kompute Sequence evalAwait called without existing eval" in lines
    assert "INFO:myapp:squares computed: 10" in lines
    assert "hidden" not in err


def test_error_handling():
    out, _ = run("error_handling")
    assert out["fallback"] is True
    assert out["caught"] == dict.fromkeys(
        ["queue", "empty", "copy_sizes", "copy_one", "mult_two", "dtype", "push_dtype",
         "no_timestamps"], True)
    assert out["a"] == [10.0, 20.0, 30.0]


def test_opmult():
    out, _ = run("opmult")
    assert out["types"] == ["TensorTypes.device", "TensorTypes.host", "TensorTypes.device"]
    assert out["host"] == "TensorTypes.host"
    a = np.arange(1, 257, dtype=np.float32)
    b = np.linspace(0.0, 2.0, 256, dtype=np.float32)
    close(out["out"], a * b)


def test_tensor_t_ints():
    out, _ = run("tensor_t_ints")
    assert out["dtypes"] == ["uint32", "uint32", "int32"]
    n = np.arange(1, 1001, dtype=np.int64)
    steps = np.zeros_like(n)
    while (n != 1).any():
        moving = n != 1
        n = np.where(moving, np.where(n % 2 == 0, n // 2, 3 * n + 1), n)
        steps += moving
    assert out["steps"] == steps.tolist()
    s = np.arange(-500, 500, dtype=np.int32)
    assert out["signed"] == (s * -3 + 7).tolist()


def test_reused_sequence():
    out, _ = run("reused_sequence")
    n = 512
    assert out["sums"] == [n * 0.5 * it * it for it in range(12)]
    assert out["last"] == [-12.0] * n and out["x"] == [13.0] * n


def test_spec_consts():
    out, _ = run("spec_consts")
    assert out["f"] == (np.arange(16) * 3.0 + 0.25).tolist()
    assert out["u"] == (np.arange(100, 132) % 7).tolist()


def test_storage_copy():
    out, _ = run("storage_copy")
    assert out["kinds"] == ["TensorTypes.device", "TensorTypes.storage", "TensorTypes.host"]
    x = np.arange(2048, dtype=np.float64) % 50
    assert out["dst"] == ((x * 2 - 1) * 2 - 1).tolist()


def test_transpose_2d():
    out, _ = run("transpose_2d")
    m = np.arange(48 * 80, dtype=np.float64).reshape(48, 80)
    assert out["t"] == m.T.ravel().tolist()
