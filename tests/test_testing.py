"""scopedgpu.testing: the fixture, no_leaks() and the hypothesis strategies."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scopedgpu as sg
from scopedgpu.testing import (ALL_DTYPES, LeakError, arrays, dtypes, no_leaks, shapes,
                               supported_dtypes, tensors)
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
    monkeypatch.setenv("PYTHONPATH", source_env()["PYTHONPATH"])
    pytester.makeconftest('pytest_plugins = ["scopedgpu.testing"]\n')
    pytester.makepyfile("""
        import numpy as np
        import scopedgpu as sg
        KEEP = []

        def test_clean(sg_manager):
            assert sg_manager.debug or True
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
