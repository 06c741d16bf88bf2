"""Damaged SPIR-V never crashes, hangs or leaks: each case is a mutation of a valid
shader (mutations.py over corpus.py), run in a worker process (harness.py), and must end
in a ShaderError (or another typed refusal before any Vulkan call) or in an algorithm
that dispatches; live objects return to the worker's baseline after every case.

CI runs SCOPEDGPU_FUZZ_CASES (default 5,000) cases; the long profile (README,
Development) runs 100,000. Failing inputs are saved under build/fuzz-crashes/ (or
SCOPEDGPU_FUZZ_CRASH_DIR) with a JSON note of what was done to which shader; the counts
go to build/fuzz-stats.json and the terminal."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from scopedgpu._spirv_val import how_to_get, validator
from tests.conftest import ROOT
from tests.fuzz.corpus import corpus
from tests.fuzz.harness import Worker
from tests.fuzz.mutations import mutate, random_module

CASES = int(os.environ.get("SCOPEDGPU_FUZZ_CASES", "5000"))
SEED = int(os.environ.get("SCOPEDGPU_FUZZ_SEED", "0"))
CHUNK = 2500    # cases per hypothesis run (one seed each); hypothesis slows on longer runs
SIZES = [min(CHUNK, CASES - i) for i in range(0, CASES, CHUNK)]


@pytest.fixture(scope="module")
def worker(request):
    w = Worker()
    yield w
    w.close()
    summary = w.summary()
    summary["failure_files"] = [f["file"] for f in w.failures]
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    with open(os.path.join(ROOT, "build", "fuzz-stats.json"), "w") as f:
        json.dump(summary, f, indent=1)
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\nSPIR-V fuzz: {json.dumps(summary)}")


def test_validator_is_installed():
    """The fuzz suite is about the validator; without it, mutations reach the driver."""
    v = validator()
    assert v.ok, f"{v.found}; {how_to_get()}"


@pytest.mark.parametrize("chunk", range(len(SIZES)))
def test_mutated_spirv(worker, chunk):
    assert validator().ok, f"the SPIR-V validator is missing: {how_to_get()}"
    modules = corpus()
    before = Counter(worker.stats)
    nfail = len(worker.failures)

    @settings(max_examples=SIZES[chunk], database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @seed(SEED * 100_003 + chunk)
    @given(st.data())
    def one(data):
        if data.draw(st.integers(0, 19), label="random") == 0:
            name = "random"
            spirv, note = data.draw(random_module())
        else:
            name, base = data.draw(st.sampled_from(modules), label="base")
            spirv, note = data.draw(mutate(base))
        worker.run(spirv, note=f"{name}: {note}")

    one()
    ran = Counter(worker.stats)
    ran.subtract(before)
    assert ran["cases"] >= SIZES[chunk] * 0.95, f"ran only {ran['cases']} cases"
    # The suite must reach the driver: some damaged modules still validate and run.
    assert ran["dispatched"] > 0 and ran["rejected_validator"] > 0, dict(ran)
    bad = worker.failures[nfail:]
    assert not bad, f"{len(bad)} failing case(s), inputs saved:\n" + "\n".join(
        json.dumps(f)[:600] for f in bad[:10])
