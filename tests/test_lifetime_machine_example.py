"""LifetimeMachine on a user's own pipeline: the logistic-regression kernels of
examples/logistic_regression.py (the gradient shader, and the weight update moved onto
the GPU), with a scaling kernel whose push constants come from its reflection.

docs/testing.md walks through this file. `TestLogistic` is the machine as a user would
collect it; the tests below it show that a kernel whose tail is off by one is found, shrunk
and printed as a standalone program that reproduces the failure.

    pytest tests/test_lifetime_machine_example.py                          # sg-quick
    pytest tests/test_lifetime_machine_example.py --hypothesis-profile=sg-long
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import run_state_machine_as_test

import scopedgpu as sg
from scopedgpu.testing import Binding, Kernel, LifetimeMachine, push_constants
from tests.conftest import source_env

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "logistic_regression", ROOT / "examples" / "logistic_regression.py")
assert _spec is not None and _spec.loader is not None
logistic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(logistic)

# The weight update of the example's training loop, on the GPU: one invocation walks the
# gradients in the order the host loop does.
UPDATE = """
#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { float lr; } p;
layout(set = 0, binding = 0) buffer Wi { float w_out_i[]; };
layout(set = 0, binding = 1) buffer Wj { float w_out_j[]; };
layout(set = 0, binding = 2) buffer Bo { float b_out[]; };
layout(set = 0, binding = 3) buffer W { float w[]; };
layout(set = 0, binding = 4) buffer B { float b[]; };
void main() {
    for (uint k = 0; k < b_out.length(); k++) {
        w[0] -= p.lr * w_out_i[k];
        w[1] -= p.lr * w_out_j[k];
        b[0] -= p.lr * b_out[k];
    }
}
"""

# y = a * x, four elements an invocation and a scalar tail.
SCALE = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float a; } p;
layout(set = 0, binding = 0) buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x * 4;
    uint n = x.length();
    if (i + 4 <= n) {
        for (uint j = i; j < i + 4; j++) y[j] = p.a * x[j];
    } else {
        for (uint j = i; j < n; j++) y[j] = p.a * x[j];
    }
}
"""
PLANTED = SCALE.replace("for (uint j = i; j < n; j++)", "for (uint j = i; j < n - 1; j++)")
assert PLANTED != SCALE

f32 = np.float32


def floats(lo, hi):
    """float32 values in [lo, hi], zero or normal: a device may flush denormal inputs to
    zero (Vulkan allows it, NVIDIA's do), as scopedgpu.testing.arrays() knows."""
    return st.floats(lo, hi, width=32, allow_subnormal=False)


def gradient(x_i, x_j, y, w_in, b_in, spec):
    """The example's shader in numpy, float32 throughout."""
    m = f32(spec[0])
    y_hat = f32(1) / (f32(1) + np.exp(-(w_in[0] * x_i + w_in[1] * x_j + b_in[0])))
    d_z = y_hat - y
    return {"w_out_i": f32(1) / m * x_i * d_z, "w_out_j": f32(1) / m * x_j * d_z,
            "b_out": f32(1) / m * d_z,
            "l_out": -(y * np.log(y_hat) + (f32(1) - y) * np.log(f32(1) - y_hat))}


def update(w_out_i, w_out_j, b_out, w, b, push):
    lr = f32(push[0])
    for k in range(b_out.size):
        w[0] -= lr * w_out_i[k]
        w[1] -= lr * w_out_j[k]
        b[0] -= lr * b_out[k]
    # (changed in place: returns None)


def scale(x, push):
    return f32(push[0]) * x


def scale_kernel(shader: str) -> Kernel:
    n = (lambda d: ((d["n"] + 255) // 256, 1, 1))   # 64 invocations of 4 a group
    x = Binding("x", elements=floats(-1e6, 1e6))
    return Kernel("scale", shader, [x, Binding("y", role="out")], scale,
                  dims={"n": st.integers(1, 70)}, workgroup=n,
                  # push_constants() reads the block ({ float a; }) from the SPIR-V
                  push_consts=push_constants(sg.compile_glsl(shader),
                                             {0: floats(-8, 8)}))


small = floats(-2, 2)
M = ("m",)


class LogisticMachine(LifetimeMachine):
    kernels = [
        Kernel("gradient", logistic.SHADER,
               [Binding("x_i", shape=M, elements=small),
                Binding("x_j", shape=M, elements=small),
                Binding("y", shape=M, elements=st.sampled_from([0.0, 1.0])),
                Binding("w_in", shape=2, elements=floats(-1, 1)),
                Binding("w_out_i", shape=M, role="out"),
                Binding("w_out_j", shape=M, role="out"),
                Binding("b_in", shape=1, elements=floats(-1, 1)),
                Binding("b_out", shape=M, role="out"),
                Binding("l_out", shape=M, role="out")],
               gradient, dims={"m": st.integers(1, 40)},
               spec_consts=lambda d: [d["m"]],           # M, the number of samples
               workgroup=lambda d: (d["m"], 1, 1),        # one invocation a sample
               rtol=1e-4, atol=1e-5),                     # exp and log: a few ulps
        Kernel("update", UPDATE,
               [Binding("w_out_i", shape=M, elements=small),
                Binding("w_out_j", shape=M, elements=small),
                Binding("b_out", shape=M, elements=small),
                Binding("w", shape=2, role="inout", elements=floats(-1, 1)),
                Binding("b", shape=1, role="inout", elements=floats(-1, 1))],
               update, dims={"m": st.integers(1, 40)}, workgroup=(1, 1, 1),
               push_consts=floats(0, 1).map(lambda v: [v]),
               rtol=1e-5, atol=1e-5),                     # the GPU may fuse multiply-adds
        scale_kernel(SCALE),
    ]


TestLogistic = LogisticMachine.TestCase


# -- the planted bug ---------------------------------------------------------------------------
class PlantedMachine(LifetimeMachine):
    """The scaling kernel with its tail loop off by one: the last element of a size that
    is not a multiple of 4 is never written."""
    kernels = [scale_kernel(PLANTED)]


PLANTED_SEARCH = settings(max_examples=200, stateful_step_count=10, deadline=None,
                          derandomize=True, database=None,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                          suppress_health_check=list(HealthCheck))


@pytest.mark.plain_only("it tests the search and the shrinking of a planted bug; the same "
                        "machine's Vulkan work runs under the layer in "
                        "test_the_correct_kernel_passes_the_same_search")
def test_a_tail_off_by_one_is_found_shrunk_and_printed(tmp_path, monkeypatch):
    # The failure is found in a few seconds; hypothesis then shrinks it for as long as
    # it makes progress (up to five minutes). Thirty seconds reach the one-element case
    # that the assertions below require, also on a loaded machine; a user's own run
    # shrinks to the end.
    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", 30)
    with pytest.raises(AssertionError) as exc:
        run_state_machine_as_test(PlantedMachine, settings=PLANTED_SEARCH)
    message = str(exc.value)
    # Found: the output differs from the reference at the last element only.
    m = re.search(r"\(shape \((\d+),\)\) after s\d+ ran \['scale'\]: 1 element\(s\) differ "
                  r"from the reference, at \((\d+),\)", message)
    assert m, message
    n, where = int(m.group(1)), int(m.group(2))
    assert where == n - 1 and n % 4 != 0
    notes = "\n".join(getattr(exc.value, "__notes__", []))
    lines = notes[notes.index("import numpy as np"):].splitlines()
    end = lines.index("def test_replay():") + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    program = "\n".join(lines[:end])
    print("\n" + program)                      # (the shrunk program, for the record)
    body = [ln for ln in program.splitlines() if ln.startswith("    ")]
    # Shrunk from examples of ten steps: fully shrunk, it is a manager, a sequence, two
    # tensors of one element, an algorithm, three records, one eval and its check (9
    # lines); the time allowed here may leave a step or two more (seen: two evals of the
    # empty sequence that precede the records, which hypothesis did not get to remove).
    assert len(body) <= 16 and sum(".eval" in ln for ln in body) <= 4, program
    assert body[-1].lstrip().startswith("np.testing.assert_allclose(")
    # Printed as runnable code: the program fails the same way on its own.
    test = tmp_path / "test_replay_planted.py"
    test.write_text(program + "\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(test)], capture_output=True, text=True, cwd=ROOT,
                         env=source_env(), timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 failed" in res.stdout and "Mismatched elements: 1 / " in res.stdout, res.stdout


def test_the_correct_kernel_passes_the_same_search():
    """The search that finds the planted bug (within its first 50 examples) finds
    nothing in the correct kernel: the failure above is the bug's, not the machine's."""
    class Correct(LifetimeMachine):
        kernels = [scale_kernel(SCALE)]
    run_state_machine_as_test(Correct, settings=settings(PLANTED_SEARCH, max_examples=60))
