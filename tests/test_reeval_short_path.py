"""eval()'s short path for re-evaluating an unchanged sequence (issue 24's latency and
dispatch chains): taken when nothing that the general path checks has changed since the
last submission, declined otherwise, and alike in results either way. The path taken is
seen through Sequence._submit_locked, which only the general path calls. The managers
here run without the validation layer, the configuration the short path is for (debug
mode always takes the general path, for its validation checks)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu.sequence import Sequence
from scopedgpu.testing import leak_checked_manager
from tests.shaders import ADD_ONE

N = 256


@pytest.fixture
def plain():
    with leak_checked_manager(debug=False) as m:
        yield m


@pytest.fixture
def general(monkeypatch):
    """general(seq): how many of seq's evaluations went through the general path."""
    calls: list[Sequence] = []
    orig = Sequence._submit_locked

    def spy(self, state):
        calls.append(self)
        return orig(self, state)

    monkeypatch.setattr(Sequence, "_submit_locked", spy)
    return lambda seq: sum(s is seq for s in calls)


def _counter(m, glsl):
    """A tensor that each evaluation adds one to, its algorithm, and a sequence that
    runs it and reads it back. (Uploaded first: a recording that zeroes a fresh tensor is
    for one submission and recorded again for the next.)"""
    t = m.tensor(np.zeros(N, dtype=np.float32))
    m.run(sg.OpTensorSyncDevice([t]))
    algo = m.algorithm([t], glsl(ADD_ONE))
    seq = m.sequence()
    seq.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([t]))
    return t, algo, seq


def _expect(t, n):
    np.testing.assert_array_equal(t.data(), np.full(N, n, dtype=np.float32))


def test_unchanged_sequence_takes_the_short_path_and_runs_each_time(plain, glsl, general):
    t, algo, seq = _counter(plain, glsl)
    seq.eval()
    assert general(seq) == 1
    for i in range(2, 12):
        seq.eval()
        _expect(t, i)   # the read-back of each evaluation, done when eval() returned
        assert not seq.is_running
    assert general(seq) == 1   # every later one took the short path
    seq.destroy()
    for o in (algo, t):
        o.destroy()


def test_destroyed_object_is_refused_on_the_short_path_too(plain, glsl, general):
    t, algo, seq = _counter(plain, glsl)
    seq.eval()
    seq.eval()
    algo.destroy()
    with pytest.raises(sg.DestroyedError, match="destroyed"):
        seq.eval()
    assert not seq.is_running
    _expect(t, 2)   # nothing was submitted
    seq.destroy()
    t.destroy()


# change -> (its count after the next eval, whether that eval took the general path)
CHANGES = {
    "record": (4, True),            # two more ops: recorded again
    "clear": (2, True),             # nothing left to run (the general path finds no ops)
    "other_running": (3, True),     # another sequence's submission not known complete
    "garbage": (3, True),           # an unreachable tensor queued for release: collected
    "destroyed_unused": (3, False),  # a tensor the sequence does not use: nothing to see
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_changes_since_the_last_submission_take_the_general_path(plain, glsl, general,
                                                                 change):
    t, algo, seq = _counter(plain, glsl)
    seq.eval()
    seq.eval()
    assert general(seq) == 1
    other = plain.tensor(np.ones(N, dtype=np.float32))
    other_algo = other_seq = None
    if change == "record":
        seq.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([t]))
    elif change == "clear":
        seq.clear()
    elif change == "other_running":
        plain.run(sg.OpTensorSyncDevice([other]))
        other_algo = plain.algorithm([other], glsl(ADD_ONE))
        other_seq = plain.sequence()
        other_seq.record(sg.OpAlgoDispatch(other_algo)).record(sg.OpTensorSyncLocal([other]))
        other_seq.eval_async()
    elif change == "garbage":
        plain.tensor(np.ones(4, dtype=np.float32))   # unreachable at once: queued
        gc.collect()
    else:
        other.destroy()
    want, took_general = CHANGES[change]
    seq.eval()
    _expect(t, want)
    assert general(seq) == 1 + took_general
    if other_seq is not None:
        assert other_seq.eval_await() is True
        np.testing.assert_array_equal(other.data(), np.full(N, 2, dtype=np.float32))
    # Standing still again: the short path (none for an empty sequence).
    n = general(seq)
    seq.eval()
    _expect(t, 2 if change == "clear" else want + (2 if change == "record" else 1))
    assert general(seq) == n + (change == "clear")
    for o in (other_seq, seq, other_algo, algo, t, other):
        if o is not None:
            o.destroy()
