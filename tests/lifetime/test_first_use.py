"""A Ctrl-C during the first algorithm() of a process (issue 20, class 3): the first
algorithm() loads the SPIR-V validator, which imports cffi and its C parser, pycparser,
and parses the validator's declarations. An interrupt inside such a first, lazy import
left a half-made module in sys.modules (pycparser.c_ast without its package), and every
later algorithm() raised "AttributeError: module 'pycparser' has no attribute 'c_ast'".

Each case runs in a fresh process (first_use_child.py): the first algorithm() is
interrupted at the k-th line it runs in that code (sys.settrace), then a second one must
work, with the validator loaded as in a process never interrupted. k is spread over
every line there (about 50,000 with pycparser 2.x): the first four, FIRST_USE_POINTS
(default 16) evenly over the lines run in module bodies (the imports, where the
half-made modules came from: k = 1,000 to 2,400 of them failed) and as many over all;
a child that does not return within its time fails the test."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import scopedgpu as sg
from tests.conftest import source_env

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "first_use_child.py")
POINTS = int(os.environ.get("FIRST_USE_POINTS", "16"))


def _child(mode: str, k: int) -> dict:
    try:
        res = subprocess.run([sys.executable, CHILD, mode, str(k)], env=source_env(),
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": f"k={k}: the child did not return within 120 s"}
    if res.returncode != 0:
        return {"error": f"k={k}: exit {res.returncode}: {res.stderr[-1500:]}"}
    return json.loads(res.stdout.splitlines()[-1])


def _spread(lo: int, hi: int, n: int) -> set[int]:
    return {lo + i * (hi - lo) // (n - 1) for i in range(n)}


@pytest.mark.parametrize("mode", ["native", pytest.param("kp", marks=pytest.mark.plain_only(
    "scopedgpu.kp's first algorithm over the native path, whose sweep runs under the layer"))])
def test_an_interrupted_first_algorithm_leaves_nothing_half_made(mode):
    sg.compile_glsl(open(CHILD).read().split('ADD_ONE = """')[1].split('"""')[0])  # cached
    ref = _child(mode, 0)
    assert "error" not in ref, ref["error"]
    assert ref["out"] == [2.0, 3.0, 4.0] and not ref["fired"]
    n = ref["count"]
    assert n > 100, f"only {n} lines traced: the first algorithm() loads nothing lazily?"
    lo, hi = ref["bodies"]
    assert 0 < lo < hi, ref
    ks = sorted(set(range(1, 5)) | _spread(lo, hi, POINTS) | _spread(1, n, POINTS))
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda k: (k, _child(mode, k)), ks))
    bad = []
    for k, r in results:
        if "error" in r:
            bad.append(r["error"])
        elif not r["fired"] or r["out"] != ref["out"] or r["validator"] != ref["validator"]:
            bad.append(f"k={k}: {r}")
    assert not bad, f"{len(bad)} of {len(ks)} interrupted first algorithm()s:\n" + \
        "\n".join(bad)


def test_first_use_drops_what_an_interrupted_import_left(tmp_path, monkeypatch):
    """The mechanism, in this process: a package whose body is interrupted after it
    imported a submodule leaves the submodule without its package; first_use() drops it,
    and the next attempt imports the package whole."""
    import importlib

    from scopedgpu import _lazy
    pkg = tmp_path / "sg_half_made"
    pkg.mkdir()
    (pkg / "sub.py").write_text("X = 1\n")
    (pkg / "__init__.py").write_text(
        "from . import sub\nimport os\n"
        "if os.environ.get('SG_CUT'): raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SG_CUT", "1")

    def load():
        return importlib.import_module("sg_half_made").sub.X

    try:
        with pytest.raises(KeyboardInterrupt):
            _lazy.first_use(load)
        assert "sg_half_made" not in sys.modules and "sg_half_made.sub" not in sys.modules
        monkeypatch.delenv("SG_CUT")
        assert _lazy.first_use(load) == 1
        assert _lazy._before is None
    finally:
        for name in ("sg_half_made", "sg_half_made.sub"):
            sys.modules.pop(name, None)
