"""eval()'s short path for re-evaluating an unchanged sequence (issue 24's latency and
dispatch chains): taken when nothing that the general path checks has changed since the
last submission, declined otherwise, and alike in results either way. The path taken is
seen through Sequence._submit_locked, which only the general path calls. The managers
here run without the validation layer, the configuration the short path is for (debug
mode always takes the general path, for its validation checks)."""
from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu import sequence as sequence_module
from scopedgpu._engine import ALONE_RECHECK_S, SPIN_MAX_NS, SPIN_NS, spin_after
from scopedgpu._submission import Submission
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


def _evaluate(seq, t, counts):
    """Evaluates seq once per count: each time, once eval() returned, t holds the count
    (the read-back of that evaluation, done) and seq no longer runs."""
    for i in counts:
        seq.eval()
        _expect(t, i)
        assert not seq.is_running


def test_unchanged_sequence_takes_the_short_path_and_runs_each_time(plain, glsl, general):
    t, algo, seq = _counter(plain, glsl)
    seq.eval()
    assert general(seq) == 1
    _evaluate(seq, t, range(2, 12))
    assert general(seq) == 1   # every later one took the short path
    seq.destroy()
    for o in (algo, t):
        o.destroy()


@pytest.mark.parametrize("what", ["algorithm", "tensor"])
def test_destroyed_object_is_refused_on_the_short_path_too(plain, glsl, general, what):
    t, algo, seq = _counter(plain, glsl)
    seq.eval()
    seq.eval()
    assert general(seq) == 1
    view = t.data()
    (algo if what == "algorithm" else t).destroy()
    with pytest.raises(sg.DestroyedError, match=f"refers to <{what.capitalize()}"):
        seq.eval()
    assert not seq.is_running
    np.testing.assert_array_equal(view, np.full(N, 2, dtype=np.float32))   # nothing ran
    seq.destroy()
    for o in (algo, t):
        o.destroy()


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


# -- waiting with the lock held, when the thread is alone --------------------------------
# The short path of a process's only Python thread waits for a short run inside its lock
# section and finishes there: no waiter registered, so Submission.leave (the unlocked
# wait's end) is never called. With another thread alive it waits without the lock. Other
# tests of the suite leave threads behind (thread pools, event loops' executors), so the
# count the engine reads (threading.active_count) is set here.

@pytest.fixture
def leaves(count_calls):
    """leaves(): how many unlocked waits ended (Submission.leave calls) so far."""
    calls = count_calls(Submission, "leave")
    return lambda: calls[0]


@pytest.fixture
def threads(monkeypatch):
    """threads(n): from now on threading.active_count() says n (the engine's check)."""
    count = [1]
    monkeypatch.setattr(threading, "active_count", lambda: count[0])

    def set_count(n: int) -> None:
        count[0] = n
    return set_count


def _past_the_recheck():
    """Lets ALONE_RECHECK_S pass: the next short path checks again whether its thread is
    alone."""
    time.sleep(2 * ALONE_RECHECK_S)


def _alone_counter(m, glsl, threads, monkeypatch):
    """_counter's objects, evaluated twice in a thread that the engine sees alone, with a
    hold long enough for any run of a loaded machine and any spin (the path is what is
    tested: on an H100 at idle clocks the setup's runs took over a millisecond, and the
    spin that followed, above HOLD_SPIN_MAX_NS, sent the next evaluation down the general
    path): the second evaluation, and each after it, on the short path in the lock
    section."""
    monkeypatch.setattr(sequence_module, "HOLD_TIMEOUT_NS", 10**10)
    monkeypatch.setattr(sequence_module, "HOLD_SPIN_MAX_NS", 1 << 62)
    threads(1)
    t, algo, seq = _counter(m, glsl)
    seq.eval()
    _past_the_recheck()
    seq.eval()
    return t, algo, seq


def test_alone_a_short_run_is_awaited_in_the_lock_section_and_finished_there(
        plain, glsl, general, leaves, threads, monkeypatch):
    t, algo, seq = _alone_counter(plain, glsl, threads, monkeypatch)
    before = leaves()
    _evaluate(seq, t, range(3, 13))
    assert leaves() == before          # no unlocked wait
    assert general(seq) == 1
    threads(2)                         # another thread started
    _past_the_recheck()
    for i in range(13, 18):
        seq.eval()
        _expect(t, i)
    assert leaves() == before + 5      # each waited without the lock
    threads(1)                         # and ended
    _past_the_recheck()
    seq.eval()
    _expect(t, 18)
    assert leaves() == before + 5      # alone again: in the lock section
    for o in (seq, algo, t):
        o.destroy()


def test_a_run_longer_than_the_hold_is_awaited_without_the_lock(plain, glsl, general,
                                                                leaves, threads,
                                                                monkeypatch):
    # A hold of no time: the wait in the lock section returns before the run is done
    # (lavapipe takes tens of microseconds), and the general wait takes over.
    monkeypatch.setattr(sequence_module, "HOLD_TIMEOUT_NS", 0)
    monkeypatch.setattr(sequence_module, "HOLD_SPIN_MAX_NS", 1 << 62)
    threads(1)
    t, algo, seq = _counter(plain, glsl)
    seq.eval()
    _past_the_recheck()
    before = leaves()
    _evaluate(seq, t, range(2, 22))
    assert leaves() > before           # some runs outlasted the hold of no time
    assert general(seq) == 1
    for o in (seq, algo, t):
        o.destroy()



@pytest.mark.parametrize("fail", ["submit", "wait"])
def test_alone_a_failed_submission_or_wait_raises_as_on_the_general_path(
        plain, glsl, general, threads, monkeypatch, fail):
    """The lock section's submit-and-wait (one call into the shim) fails as the general
    path's calls do: a failed submission raises naming it and leaves nothing running; a
    failed wait raises naming the wait and leaves the sequence running, until a later
    wait completes it."""
    from scopedgpu._ffi import lib
    t, algo, seq = _alone_counter(plain, glsl, threads, monkeypatch)
    _expect(t, 2)
    # The checked calls of the path: vkResetFences, vkQueueSubmit, then the wait.
    k, call = (2, "vkQueueSubmit") if fail == "submit" else (3, "vkWaitForFences")
    lib.sg_fault_set(k, -4)   # VK_ERROR_DEVICE_LOST
    try:
        with pytest.raises(sg.DeviceError, match=call) as info:
            seq.eval()
    finally:
        lib.sg_fault_set(0, 0)
    assert info.value.result == "VK_ERROR_DEVICE_LOST"
    assert ("submitting" if fail == "submit" else "waiting for") in str(info.value)
    if fail == "submit":
        # (the attribute: is_running would poll the fence, and complete a sequence left
        # running over a submission that never was)
        assert not seq._running, "a failed submission left the sequence running"
        _expect(t, 2)                  # nothing ran
    else:
        assert seq._running, "a failed wait marked the sequence complete"
        assert seq.eval_await() is True
        _expect(t, 3)                  # it ran, and completed with the later wait
    seq.eval()                         # the short path again, in its lock section
    _expect(t, 3 if fail == "submit" else 4)
    assert general(seq) == 1
    for o in (seq, algo, t):
        o.destroy()


def test_alone_the_spin_follows_each_run_as_spin_after_says(plain, glsl, leaves, threads,
                                                           monkeypatch):
    """The lock-held path computes the next wait's spin itself (spin_after, written out):
    on a GPU (not a CPU device, where it stays SPIN_NS) 1.5 times the run, within
    SPIN_NS and SPIN_MAX_NS. The run's time is set through the path's clock."""
    t, algo, seq = _alone_counter(plain, glsl, threads, monkeypatch)
    monkeypatch.setattr(plain._state, "cpu_device", False)
    before = leaves()
    for i, took in enumerate((1e-4, 4e-4, 1e-3, 1e-2)):
        clock = iter((100.0, 100.0 + took))
        monkeypatch.setattr(sequence_module, "_clock", lambda c=clock: next(c))
        seq.eval()
        _expect(t, 3 + i)
        seen = (100.0 + took) - 100.0   # (what the path's clock says, rounding included)
        assert seq._spin == spin_after(seen, False), (took, seq._spin)
    assert [spin_after(x, False) for x in (1e-4, 4e-4, 1e-2)] == [SPIN_NS, 600_000, SPIN_MAX_NS]
    assert leaves() == before          # each in the lock section
    for o in (seq, algo, t):
        o.destroy()


def test_alone_host_copies_are_done_in_the_lock_section(plain, glsl, general, leaves,
                                                        threads, monkeypatch):
    """A recording with host work at completion (OpTensorSyncLocal of a "host" tensor
    copies its mapped memory into data()) completes through _finish on the lock-held
    path: each result is in data() when eval() returns."""
    monkeypatch.setattr(sequence_module, "HOLD_TIMEOUT_NS", 10**10)
    threads(1)
    t = plain.tensor(np.zeros(N, dtype=np.float32), kind="host")
    algo = plain.algorithm([t], glsl(ADD_ONE))
    seq = plain.sequence().record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([t]))
    assert seq._copies, "no host copy recorded: the test would not reach _finish"
    seq.eval()
    _past_the_recheck()
    before = leaves()
    _evaluate(seq, t, range(2, 8))
    assert leaves() == before
    assert general(seq) == 1
    for o in (seq, algo, t):
        o.destroy()


def test_alone_a_ctrl_c_at_the_completion_leaves_nothing_running(plain, glsl, threads,
                                                                 monkeypatch):
    """A KeyboardInterrupt where a real Ctrl-C may land in the lock-held path's completion
    (right after its one call into C returns: the discard from the manager's running set)
    is raised after the completion ran again whole (_retire): the sequence is out of the
    running sets and evaluates again."""
    t, algo, seq = _alone_counter(plain, glsl, threads, monkeypatch)
    calls = [0]

    class Interrupting(set):
        def discard(self, item):
            super().discard(item)
            calls[0] += 1
            if calls[0] == 1:
                raise KeyboardInterrupt

    roots = plain._roots
    roots.running = Interrupting(roots.running)
    try:
        with pytest.raises(KeyboardInterrupt):
            seq.eval()
    finally:
        roots.running = set(roots.running)
    assert calls[0] == 2   # the completion's discard, then _retire's
    assert not seq._running and seq.ref not in plain._state.running
    assert seq not in roots.running
    _expect(t, 3)
    seq.eval()
    _expect(t, 4)
    for o in (seq, algo, t):
        o.destroy()


_RACE = r'''
import scopedgpu as sg
from pathlib import Path
from scopedgpu.testing import leak_checked_manager
from tests.racing import destroyed_on_first_entry

spirv = (Path(sg.__file__).parent / "shaders" / "saxpy.spv").read_bytes()
with leak_checked_manager(debug=False) as m:
    x = m.empty(64, kind="storage")
    y = m.empty(64, kind="storage")
    algo = m.algorithm([x, y], spirv, workgroup=(1, 1, 1), push_consts=[2.0])
    seq = m.sequence().record(sg.OpAlgoDispatch(algo))
    seq.eval()
    seq.eval()
    with destroyed_on_first_entry(m, seq):
        try:
            seq.eval()
        except sg.DestroyedError as exc:
            print("RAISED", exc)
        else:
            print("NO ERROR")
    for o in (algo, x, y):
        o.destroy()
'''


def test_a_sequence_destroyed_before_the_lock_section_raises():
    """Another thread's destroy() between eval()'s unlocked check and its lock section:
    DestroyedError. (Before, the short path took the destroyed sequence: it entered the
    running sets and handed the shim None for the freed sg_seq, a TypeError from cffi.
    Run in a child: a submission of freed Vulkan objects may crash the interpreter.)"""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]   # (the child imports tests.racing)
    res = subprocess.run([sys.executable, "-c", _RACE], capture_output=True, text=True,
                         timeout=120, cwd=root)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "RAISED" in res.stdout, res.stdout + res.stderr[-2000:]
