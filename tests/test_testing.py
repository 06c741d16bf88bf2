"""scopedgpu.testing: the fixture and the pytest plugin, no_leaks(), the hypothesis
strategies (constants fitted to a module's reflection included)."""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import scopedgpu as sg
from scopedgpu.testing import (ALL_DTYPES, Binding, Kernel, LeakError, LifetimeMachine, arrays,
                               dtypes, no_leaks, push_constant_layout, push_constants, shapes,
                               spec_constant_layout, spec_constants, supported_dtypes, tensors)
from tests.conftest import source_env

pytest_plugins = ["pytester"]

KEEP: list = []


def test_no_leaks_passes_when_everything_is_freed(mgr):
    with no_leaks(mgr):
        t = mgr.tensor([1.0, 2.0])
        with mgr.sequence() as seq:
            seq.eval(sg.OpTensorSyncDevice([t]))
        del t                                   # unreachable: freed by the check


def test_no_leaks_fails_on_a_leak(mgr):
    with pytest.raises(LeakError) as exc:
        with no_leaks(mgr):
            KEEP.append(mgr.tensor(np.zeros(4, np.float32)))
    assert exc.value.diff["tensors"] == (0, 1)
    assert "tensors 0 -> 1" in str(exc.value)
    KEEP.pop().destroy()


def test_no_leaks_names_a_forgotten_named_sequence(mgr):
    with pytest.raises(LeakError, match=r"named sequences still alive: \['kept'\]"):
        with no_leaks(mgr):
            mgr.sequence("kept")
    mgr.delete_sequence("kept")


def test_no_leaks_lets_the_body_exception_through(mgr):
    with pytest.raises(ZeroDivisionError):
        with no_leaks(mgr):
            KEEP.append(mgr.empty(4))
            1 / 0
    KEEP.pop().destroy()


def test_supported_dtypes_follow_the_device(mgr):
    assert supported_dtypes(None) == [np.dtype(np.float32), np.dtype(np.int32),
                                      np.dtype(np.uint32)]
    mine = supported_dtypes(mgr)
    assert set(supported_dtypes(None)) <= set(mine) <= set(ALL_DTYPES)
    assert (np.dtype(np.float64) in mine) == mgr.device.float64
    for dt in mine:                              # every one of them makes a tensor
        with mgr.tensor(np.zeros(3, dt)) as t:
            assert t.dtype == dt


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_strategies_make_tensors_that_round_trip(mgr, data):
    with no_leaks(mgr):
        t = data.draw(tensors(mgr, shape=shapes(max_side=16)))
        expected = t.numpy()
        assert t.dtype in supported_dtypes(mgr)
        out = mgr.empty(t.shape, t.dtype)
        mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorCopy([t, out]),
                sg.OpTensorSyncLocal([out]))
        np.testing.assert_array_equal(out.data(), expected)
        t.destroy()
        out.destroy()


@settings(max_examples=30)
@given(a=arrays(np.float32), s=shapes(max_size=100), d=dtypes())
def test_arrays_are_finite_normal_and_nonempty(a, s, d):
    assert a.dtype == np.float32 and a.size >= 1
    assert np.all(np.isfinite(a))
    tiny = np.finfo(np.float32).tiny
    assert np.all((a == 0) | (np.abs(a) >= tiny))
    assert 1 <= int(np.prod(s)) <= 100
    assert d in supported_dtypes(None)


def test_fixture_passes_a_clean_test_and_fails_a_leaky_one(pytester, monkeypatch):
    """...and its manager has the validation layer on by itself (SCOPEDGPU_DEBUG=0 in the
    run), wherever the layer is installed."""
    with sg.Manager(debug=True) as m:    # (a missing layer is logged, and allowed)
        layer = m.debug
    monkeypatch.setenv("PYTHONPATH", source_env()["PYTHONPATH"])
    monkeypatch.setenv("SCOPEDGPU_DEBUG", "0")
    monkeypatch.setenv("SG_EXPECT_LAYER", str(int(layer)))
    pytester.makeconftest('pytest_plugins = ["scopedgpu.testing"]\n')
    pytester.makepyfile("""
        import os
        import numpy as np
        import scopedgpu as sg
        KEEP = []

        def test_clean(sg_manager):
            assert sg_manager.debug == (os.environ["SG_EXPECT_LAYER"] == "1")
            t = sg_manager.tensor(np.arange(4, dtype=np.float32))
            sg_manager.run(sg.OpTensorSyncDevice([t]), sg.OpTensorSyncLocal([t]))

        def test_leaky(sg_manager):
            KEEP.append(sg_manager.tensor([1.0]))

        def test_closes_itself(sg_manager):
            sg_manager.close()
    """)
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=3, errors=1)
    res.stdout.fnmatch_lines(["*ERROR at teardown of test_leaky*",
                              "*LeakError: scopedgpu objects left alive: *tensors 0 -> 1*"])


# -- the plugin, loaded with no conftest line --------------------------------------------------
def _fake_install(tmp_path, monkeypatch):
    """Declares pyproject's pytest11 entry point in a dist-info on PYTHONPATH, as an
    installed scopedgpu does (the checkout itself provides the code)."""
    text = (Path(source_env()["PYTHONPATH"].split(os.pathsep)[0]) / "pyproject.toml").read_text()
    ep = re.search(r"^\[project\.entry-points\.pytest11\]\n\"?([\w.]+)\"? = \"([\w.]+)\"",
                   text, re.M)
    assert ep, "pyproject.toml declares no pytest11 entry point"
    info = tmp_path / "site" / "scopedgpu_plugin_probe-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scopedgpu-plugin-probe\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{ep[1]} = {ep[2]}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "site"),
                                                      source_env()["PYTHONPATH"]]))


@pytest.mark.plain_only(
    "the plugin's registration (option, profiles) in a pytest run of its "
    "own; its fixture's Vulkan work runs under the layer in this file's "
    "other tests")
def test_plugin_gives_the_fixture_option_and_profiles_with_no_conftest(pytester, monkeypatch,
                                                                       tmp_path):
    _fake_install(tmp_path, monkeypatch)
    pytester.makepyfile("""
        import numpy as np
        from hypothesis import settings
        import scopedgpu as sg
        KEEP = []

        def test_clean(sg_manager):
            assert sg_manager.device.index == 0
            t = sg_manager.tensor(np.arange(4, dtype=np.float32))
            sg_manager.run(sg.OpTensorSyncDevice([t]), sg.OpTensorSyncLocal([t]))

        def test_leaky(sg_manager):
            KEEP.append(sg_manager.tensor([1.0]))

        def test_profile():
            assert settings.default.max_examples == 1000
    """)
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--sg-device=0",
                                        "--hypothesis-profile=sg-long")
    res.assert_outcomes(passed=3, errors=1)
    res.stdout.fnmatch_lines(["*ERROR at teardown of test_leaky*",
                              "*LeakError: scopedgpu objects left alive: *tensors 0 -> 1*"])
    # HYPOTHESIS_PROFILE names a profile too; --sg-device picks the device
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "sg-long")
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-k", "test_profile")
    res.assert_outcomes(passed=1)
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-k", "test_clean",
                                        "--sg-device=no such device")
    res.assert_outcomes(errors=1)
    res.stdout.fnmatch_lines(["*NoDeviceError*no such device*"])


@pytest.mark.plain_only(
    "the plugin's registration in a pytest run of its own; its fixture's "
    "Vulkan work runs under the layer in this file's other tests")
def test_plugin_named_twice_is_loaded_once(pytester, monkeypatch, tmp_path):
    """The entry point, `-p` and a conftest's pytest_plugins (the module, or the older
    scopedgpu.testing) together: one registration, no duplicate option."""
    _fake_install(tmp_path, monkeypatch)
    pytester.makeconftest('pytest_plugins = ["scopedgpu.testing", "scopedgpu.pytest_plugin"]\n')
    pytester.makepyfile("def test_one(sg_manager, request):\n"
                        "    assert request.config.getoption('sg_device') is None\n")
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p",
                                        "scopedgpu.pytest_plugin")
    res.assert_outcomes(passed=1)


def test_testing_imports_without_pytest_or_hypothesis():
    code = """
import sys
import time
sys.modules["pytest"] = None          # makes `import pytest` fail, as when not installed
sys.modules["hypothesis"] = None
ns = {}
exec("from scopedgpu.testing import *", ns)
import scopedgpu.testing as t
assert "sg_manager" not in t.__all__ and "LifetimeMachine" not in t.__all__, t.__all__
assert "no_leaks" in ns and "Kernel" in ns and "sg_manager" not in ns
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=source_env(), cwd=source_env()["PYTHONPATH"].split(os.pathsep)[0],
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


# -- push and specialization constants from reflection -----------------------------------------
CONSTS = """
#version 450
layout(local_size_x = 1) in;
layout(constant_id = 0) const float K = 1.0;
layout(constant_id = 1) const int L = 2;
layout(constant_id = 2) const uint N = 3;
layout(push_constant) uniform P { float a; int b; uvec2 c; float d[2]; } p;
layout(set = 0, binding = 0) buffer O { uint o[]; };
void main() {
    o[0] = floatBitsToUint(p.a); o[1] = uint(p.b); o[2] = p.c.x; o[3] = p.c.y;
    o[4] = floatBitsToUint(p.d[0]); o[5] = floatBitsToUint(p.d[1]);
    o[6] = floatBitsToUint(K); o[7] = uint(L); o[8] = N;
}
"""


def test_constant_layouts_follow_the_module(glsl):
    spirv = glsl(CONSTS)
    push = push_constant_layout(spirv)
    assert [(s.offset, s.kind, s.width) for s in push] == [
        (0, "float", 32), (4, "int", 32), (8, "uint", 32), (12, "uint", 32),
        (16, "float", 32), (20, "float", 32)]
    assert [(s.offset, s.kind) for s in spec_constant_layout(spirv)] == [
        (0, "float"), (1, "int"), (2, "uint")]
    assert push_constant_layout(glsl("#version 450\nlayout(local_size_x=1) in;\n"
                                     "void main() {}\n")) == []


@settings(max_examples=15)
@given(data=st.data())
def test_constant_strategies_give_values_the_shader_reads(mgr, glsl, data):
    spirv = glsl(CONSTS)
    push = data.draw(push_constants(spirv, {1: st.integers(-5, 5)}))
    spec = data.draw(spec_constants(spirv))
    assert isinstance(push, bytes) and len(push) == 24     # mixed types: the block's bytes
    slots = push_constant_layout(spirv)
    assert -5 <= np.frombuffer(push, np.int32)[1] <= 5
    with mgr.tensor(np.zeros(9, np.uint32)) as out:
        with mgr.algorithm([out], spirv, workgroup=(1, 1, 1), spec_consts=spec,
                           push_consts=push) as algo:
            mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([out]))
        want = [int(np.frombuffer(push[s.offset:s.offset + 4], s.dtype)[0].view(np.uint32))
                for s in slots]
        want += [int(np.float32(spec[0]).view(np.uint32)), spec[1] & 0xFFFFFFFF, spec[2]]
        assert out.data().tolist() == want


@settings(max_examples=5)
@given(data=st.data())
def test_one_type_push_constants_come_as_an_array(glsl, data):
    spirv = glsl("#version 450\nlayout(local_size_x=1) in;\n"
                 "layout(push_constant) uniform P { float a; vec2 b; } p;\n"
                 "layout(set=0, binding=0) buffer O { float o[]; };\n"
                 "void main() { o[0] = p.a + p.b.x + p.b.y; }\n")
    value = data.draw(push_constants(spirv))
    assert isinstance(value, np.ndarray) and value.dtype == np.float32 and value.shape == (3,)


def test_machine_budget_follows_sg_profiles():
    from hypothesis import settings as hs
    before = hs.get_current_profile_name()
    try:
        hs.load_profile("sg-long")

        class Long(LifetimeMachine):
            kernels = [Kernel("k", b"", [Binding("x")], lambda x: None)]
        hs.load_profile("default")

        class Quick(LifetimeMachine):
            kernels = Long.kernels
    finally:
        hs.load_profile(before)
    assert (Long.TestCase.settings.max_examples,
            Long.TestCase.settings.stateful_step_count) == (1000, 50)
    assert (Quick.TestCase.settings.max_examples,
            Quick.TestCase.settings.stateful_step_count) == (20, 20)
    assert Quick.TestCase.settings.deadline is None


@pytest.mark.plain_only(
    "the docs' property test in a pytest run of its own; the same "
    "strategies and fixture run under the layer in this file's other "
    "tests")
def test_the_property_test_of_the_docs_runs_under_pytest(pytester, monkeypatch):
    """docs/testing.md's property test is a test file: pytest collects and passes it
    (its manager is opened by the test, not at import)."""
    monkeypatch.setenv("PYTHONPATH", source_env()["PYTHONPATH"])
    root = Path(source_env()["PYTHONPATH"].split(os.pathsep)[0])
    blocks = re.findall(r"^```python\n(.*?)^```", (root / "docs" / "testing.md").read_text(),
                        re.S | re.M)
    code = next(b for b in blocks if "def test_scale" in b)
    pytester.makepyfile(test_scale_doc=code)
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)


def test_kernel_declarations_are_checked():
    with pytest.raises(ValueError, match=r"binding 'x' has dims \['m'\]"):
        Kernel("k", b"", [Binding("x", shape=("m", 2))], lambda x: x)
    with pytest.raises(ValueError, match="binding names repeat"):
        Kernel("k", b"", [Binding("x"), Binding("x")], lambda x: x)
    with pytest.raises(ValueError, match="role must be"):
        Binding("x", role="output")
    assert Binding("x", shape=4).shape == (4,)


# -- LifetimeMachine over a kernel that never ends (issue 20) ----------------------------------
ENDLESS_MACHINES = f"""
import sys
import time
import numpy as np
from hypothesis import settings, strategies as st
from scopedgpu.testing import Binding, Kernel, LifetimeMachine
sys.path.insert(0, {str(Path(__file__).resolve().parent / "lifetime")!r})
from endless import ENDLESS, FLAG_GLSL

# Workgroups that spin while the flag is 0, and the flag is always 0: ENDLESS of them run
# for weeks, one for a few milliseconds.
FLAG = Binding("flag", np.uint32, shape=4, role="inout", elements=st.just(0))
BUDGET = settings(max_examples=10, stateful_step_count=10, deadline=None, derandomize=True,
                  database=None)


class Endless(LifetimeMachine):
    kernel_timeout = 1.0
    kernels = [Kernel("spin", FLAG_GLSL, [FLAG], lambda flag: flag, workgroup=ENDLESS)]


class Ends(LifetimeMachine):
    kernel_timeout = 1.0
    kernels = [Kernel("spin", FLAG_GLSL, [FLAG], lambda flag: flag, workgroup=(1, 1, 1))]


Endless.TestCase.settings = Ends.TestCase.settings = BUDGET
TestEndless = Endless.TestCase
TestEnds = Ends.TestCase            # after the failure, in the same process
"""


def test_a_kernel_that_never_ends_fails_its_machine_within_the_bound(pytester, monkeypatch):
    """The machine's waits are bounded by its kernel_timeout: the first example that waits
    for the endless kernel fails with a message naming the sequence, the kernel and the
    bound, unshrunk (each replay would cost the bound again), and the process goes on
    (the next machine passes) and exits. Before, the run hung in the first wait."""
    monkeypatch.setenv("PYTHONPATH", source_env()["PYTHONPATH"])
    pytester.makepyfile(test_endless=ENDLESS_MACHINES)
    start = time.monotonic()
    # (A hang is killed at the timeout and fails this test: pytester.TimeoutExpired.)
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", timeout=90)
    took = time.monotonic() - start
    out = res.stdout.str()
    res.assert_outcomes(failed=1, passed=1)
    assert re.search(r"KernelTimeout: s\d+ \(running \['spin'\]\) did not finish within "
                     r"kernel_timeout=1 s", out), out
    assert "kernel_timeout = " in out and "Endless" in out, out     # how to raise it
    assert "def test_replay():" in out and "wait_timeout=1.0" in out, out   # the program
    assert "Falsifying example" not in out, out                      # not shrunk
    assert took < 60, f"{took:.1f} s\n{out}"


def test_kernel_timeout_is_checked():
    """The bound becomes the managers' wait_timeout, which must be a finite number."""
    kernels = [Kernel("k", b"", [Binding("x")], lambda x: None)]
    for bad, error in ((0, ValueError), (-1.0, ValueError), (float("inf"), ValueError),
                       (float("nan"), ValueError), ("10", TypeError), (True, TypeError)):
        machine = type("Bad", (LifetimeMachine,), {"kernels": kernels, "kernel_timeout": bad})
        with pytest.raises(error, match=r"Bad\.kernel_timeout must be"):
            machine()


def test_push_constant_layout_is_the_reflections(glsl):
    """One layout for the testing strategies and the native packing (the reflection's,
    with its strides): vectors, a float after a vec3, matrix columns; a nested struct is
    refused by name."""
    spirv = glsl("#version 450\nlayout(local_size_x=1) in;\n"
                 "layout(push_constant) uniform P { vec3 v; float f; mat2 m; int k[2]; } p;\n"
                 "layout(binding = 0) buffer O { float o[]; };\n"
                 "void main() { o[0] = p.v.x + p.f + p.m[1][1] + float(p.k[1]); }\n")
    assert [(s.offset, s.kind) for s in push_constant_layout(spirv)] == [
        (0, "float"), (4, "float"), (8, "float"), (12, "float"),
        (16, "float"), (20, "float"), (24, "float"), (28, "float"), (32, "int"), (36, "int")]
    nested = glsl("#version 450\nlayout(local_size_x=1) in;\nstruct S { float a; };\n"
                  "layout(push_constant) uniform P { S s; } p;\n"
                  "layout(binding = 0) buffer O { float o[]; };\n"
                  "void main() { o[0] = p.s.a; }\n")
    with pytest.raises(ValueError, match="is a struct"):
        push_constant_layout(nested)


ZEROS = """
#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
void main() { if (gl_GlobalInvocationID.x < y.length()) y[gl_GlobalInvocationID.x] = 0.0; }
"""
TINY = float(np.finfo(np.float32).tiny)          # the smallest normal float32


DIFFERS = r"element\(s\) differ from the reference"


@pytest.mark.parametrize("reference, outcome", [
    (TINY / 2, contextlib.nullcontext()), (-TINY / 8, contextlib.nullcontext()),
    (2 * TINY, pytest.raises(AssertionError, match=DIFFERS))])
def test_machine_lets_a_device_flush_denormal_results(reference, outcome):
    """A kernel that writes zeros, against a reference that says denormal: a device that
    flushes denormal results to zero (Vulkan allows it; the H200 does) passes. The same
    search against a normal reference fails, so the passing runs did compare results."""
    from hypothesis.stateful import run_state_machine_as_test

    class Flush(LifetimeMachine):
        kernels = [Kernel("zeros", ZEROS, [Binding("x"), Binding("y", role="out")],
                          lambda y: np.full_like(y, reference), dims={"n": st.integers(1, 8)})]
    search = settings(max_examples=10, stateful_step_count=10, deadline=None,
                      derandomize=True, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
    with outcome:
        run_state_machine_as_test(Flush, settings=search)
