"""Interrupt safety (issue 9, class 6): a KeyboardInterrupt (or any exception) arriving
at any line of scopedgpu's code while a manager, tensor, algorithm or sequence is made,
while a sequence records and evaluates operations (eval, eval_async and eval_await, a
named sequence evaluated again, a sequence dropped while it runs) and while it is
destroyed leaves nothing behind: live objects, pool bytes, the shim's Vulkan objects and
the manager's lists of running sequences and pending releases return to their baseline
(once the work already submitted completed), and the manager keeps working.

The interrupt is injected with sys.settrace: for k = 1, 2, ... the k-th line executed
in the modules of those paths (INJECTED) raises KeyboardInterrupt, until a run
completes without reaching line k; a failure names the line where it fired. Every line
is swept (the collector skips the objects frozen before each sweep; CI's two passes
share the lines, see halves.py), but for the line events where a tracer's exception
behaves as no real Ctrl-C does (see untraced.py: a `with` block's exit, an inlined
comprehension's loop head).
The SPIR-V reader (an interrupted reflection leaves nothing behind) and the memory pool
are swept too (test_pool_slow_paths adds the pool's paths the others do not reach inside
their action; tests/test_pool_model.py sweeps every line of the pool on a fake device and
checks its whole bookkeeping); no line inside a step (scopedgpu._ki.step), which is one
indivisible step."""
from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu import _ki
from scopedgpu.manager import live_vulkan_objects

from halves import points
from lt_shaders import add_one_spirv
from untraced import skipped

PKG = os.path.dirname(os.path.abspath(sg.__file__))
INJECTED = tuple(os.path.join(PKG, f) for f in (
    "manager.py", "tensor.py", "algorithm.py", "sequence.py", "ops.py", "_base.py",
    "_engine.py", "_caches.py", "_transfer.py", "_record.py", "_validation.py", "stream.py",
    "pinned.py", "_spirv.py", "_pool.py", "_submission.py", "_spirv_split.py"))
# Not _vk.py, the door to C: its wrappers are one C call and a return-code check (as
# _errors.check was).
DEBUG = os.environ.get("SCOPEDGPU_DEBUG", "") not in ("", "0")
MIB = 1 << 20


class _Inject:
    """Raises KeyboardInterrupt at the k-th line executed in scopedgpu's code."""

    def __init__(self, k: int):
        self.k = k
        self.count = 0
        self.fired = False
        self.where = ""   # file:line (function) where it fired, for the failure message

    def globaltrace(self, frame, event, arg):
        # Not the weakref callback of a collected object: Python ignores (and prints) any
        # exception raised in it, so a Ctrl-C landing there is lost, not delivered.
        # Nor inside a step (scopedgpu._ki.step): one indivisible step, which no real
        # signal cuts (tests/test_architecture.py checks its bytecode); what it calls last
        # is traced in turn.
        code = frame.f_code
        if event == "call" and code.co_filename in INJECTED \
                and code.co_name != "unreachable" and code not in _ki.STEPS:
            return self.localtrace
        return None

    def localtrace(self, frame, event, arg):
        if event == "line" and not self.fired and frame.f_lasti not in skipped(frame.f_code):
            self.count += 1
            if self.count == self.k:
                self.fired = True
                code = frame.f_code
                self.where = (f"{os.path.basename(code.co_filename)}:{frame.f_lineno} "
                              f"({code.co_name})")
                if _ki._depth:
                    # Inside a protected section (scopedgpu._ki) a real SIGINT is held
                    # until its next checkpoint or its end: sent, as the signal would be.
                    self.where += " (deferred)"
                    _ki._record(signal.SIGINT, None)
                    return self.localtrace
                raise KeyboardInterrupt(f"injected at line {self.k}")
        return self.localtrace


def _sweep(action, check, limit: int = 5000) -> int:
    """Runs action() with an interrupt at line k for every k (of this pass's half) until one
    completes; check(k) after each (k then also says where it fired). Returns the k that
    completed (the count of lines swept, give or take one).

    The objects alive before the sweep are frozen (gc.freeze): each gc.collect() in
    check() then looks only at the objects made since, a thousand times faster."""
    gc.collect()
    gc.freeze()
    try:
        for k in points(limit - 1):
            inj = _Inject(k)
            sys.settrace(inj.globaltrace)
            try:
                action()
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
            check(f"{k} ({inj.where})" if inj.fired else k)
            if not inj.fired:
                return k
    finally:
        gc.unfreeze()
    raise AssertionError("the action never completed")


def _state(m: sg.Manager):
    gc.collect()
    m.empty_cache()
    counts = m.live_objects()
    stats = m.memory_stats()
    return counts, stats["allocated_bytes"], live_vulkan_objects()


@pytest.fixture
def imgr():
    m = sg.Manager(debug=DEBUG or None)
    yield m
    m.close()


def _diff(now, base):
    out = {}
    for a, b in zip(now, base):
        if isinstance(a, dict):
            out.update({key: (b.get(key), v) for key, v in a.items() if b.get(key) != v})
        elif a != b:
            out["allocated_bytes"] = (b, a)
    return out


def _check_baseline(m, base, what):
    def check(k):
        now = _state(m)
        assert now == base, f"{what}: interrupt at line {k} leaked: {_diff(now, base)}"
    return check


@pytest.mark.parametrize("kind", ["device", "host", "storage", "device-large"])
def test_tensor_creation(imgr, kind):
    size = (5 << 20) // 4 if kind == "device-large" else 64
    data = np.arange(size, dtype=np.float32)
    base = _state(imgr)
    made = []

    def action():
        made.append(imgr.tensor(data, kind=kind.split("-")[0]))

    def check(k):
        made.clear()
        _check_baseline(imgr, base, f"tensor({kind})")(k)

    assert _sweep(action, check) > 5


def test_algorithm_creation(imgr):
    a = imgr.tensor(np.arange(64, dtype=np.float32))
    b = imgr.empty(64)
    spirv = add_one_spirv(np.float32)
    base = _state(imgr)
    made = []

    def check(k):
        made.clear()
        _check_baseline(imgr, base, "algorithm")(k)

    n = _sweep(lambda: made.append(imgr.algorithm([a, b], spirv)), check)
    assert n > 5
    # Again over the path that takes what the first algorithm of the module derived.
    assert bytes(spirv) in imgr._state.reflections.derived
    assert _sweep(lambda: made.append(imgr.algorithm([a, b], spirv)), check) > 5
    a.destroy()
    b.destroy()


@pytest.mark.parametrize("what", ["device", "host", "storage", "device-large", "algorithm"])
def test_create_then_destroy(imgr, what):
    """An interrupt anywhere in creating and then destroying a tensor or an algorithm
    (release included): nothing leaks, and nothing is freed twice (a release cut short
    runs again; each range and handle is taken in the line that frees it)."""
    a = imgr.tensor(np.arange(64, dtype=np.float32))
    b = imgr.empty(64)
    spirv = add_one_spirv(np.float32)
    size = (5 << 20) // 4 if what == "device-large" else 64
    data = np.arange(size, dtype=np.float32)
    base = _state(imgr)
    made = []

    def action():
        obj = (imgr.algorithm([a, b], spirv) if what == "algorithm"
               else imgr.tensor(data, kind=what.split("-")[0]))
        made.append(obj)
        obj.destroy()

    def check(k):
        made.clear()
        _check_baseline(imgr, base, f"{what} create+destroy")(k)

    assert _sweep(action, check) > 5
    t = imgr.tensor(data)   # the pool still hands out whole, separate ranges
    u = imgr.tensor(data + 1)
    np.testing.assert_array_equal(t.data(), data)
    np.testing.assert_array_equal(u.data(), data + 1)
    t.destroy()
    u.destroy()
    a.destroy()
    b.destroy()


def test_sequence_creation(imgr):
    """Both paths: a new command pool and fence, and a cached one reused."""
    base = _state(imgr)
    made = []

    def check(k):
        made.clear()
        _check_baseline(imgr, base, "sequence")(k)

    assert _sweep(lambda: made.append(imgr.sequence()), check) > 5
    with imgr.sequence():
        pass   # leaves one idle set in the cache
    gc.collect()
    assert imgr.live_objects()["cached_sequences"] == 1

    def reuse_check(k):
        made.clear()
        gc.collect()
        counts = imgr.live_objects()
        assert counts["sequences"] == 0, f"interrupt at line {k} left a sequence"
        assert counts["command_pools"] == counts["cached_sequences"] <= 1, (k, counts)

    assert _sweep(lambda: made.append(imgr.sequence()), reuse_check) > 5


def test_manager_creation():
    gc.collect()
    base = live_vulkan_objects()
    made = []

    def check(k):
        for m in made:
            m.close()
        made.clear()
        gc.collect()
        now = live_vulkan_objects()
        assert now == base, f"Manager(): interrupt at line {k} leaked: {_diff((now,), (base,))}"

    assert _sweep(lambda: made.append(sg.Manager(debug=DEBUG or None)), check) > 10


# -- recording and evaluation ---------------------------------------------------------------


@pytest.fixture
def dispatch(imgr):
    """A device tensor a, a tensor b and an algorithm b = a + 1 (made once, outside the
    sweep)."""
    a = imgr.tensor(np.arange(64, dtype=np.float32))
    b = imgr.tensor(np.zeros(64, dtype=np.float32))
    algo = imgr.algorithm([a, b], add_one_spirv(np.float32))
    yield a, b, algo
    for x in (algo, a, b):
        x.destroy()


def _record(s, a, b, algo):
    s.record(sg.OpTensorSyncDevice([a]))
    s.record(sg.OpAlgoDispatch(algo))
    s.record(sg.OpTensorSyncLocal([b]))


def _settled(m):
    """The state once the work of interrupted evaluations completed, with the manager's
    lists of running sequences, of submissions (every one, and the released ones waiting
    for their fences or waiters) and of pending releases (an entry left there is a leak
    too, and slows every later call)."""
    gc.collect()
    m.wait_idle()
    st = m._state
    return (*_state(m), {"running": len(st.running), "released": len(st.released),
                         "submissions": len(st.submissions), "garbage": len(st.garbage),
                         "deferred": len(st.deferred)})


def _check_settled(m, base, what):
    def check(k):
        now = _settled(m)
        assert now == base, f"{what}: interrupt at line {k} leaked: {_diff(now, base)}"
    return check


@pytest.mark.parametrize("how", ["eval", "eval_async", "reused", "dropped", "collected"])
def test_record_and_eval(imgr, dispatch, how):
    """`with mgr.sequence() as s:` recording three ops and evaluating them, with a new
    command pool and fence each time; "reused": one dispatch, evaluated with the idle
    command pool that the same block left in the manager's cache, whose command buffer
    already holds that dispatch (it is not recorded again); "dropped": a sequence
    dropped while its work runs; "collected": one dropped after its work, released by the
    manager's next call."""
    a, b, algo = dispatch

    def action():
        if how in ("dropped", "collected"):
            s = imgr.sequence()
            _record(s, a, b, algo)
            s.eval_async()
            if how == "collected":
                s.eval_await()
                del s
                gc.collect()   # (the collector's callback is never interrupted)
                imgr.live_objects()
            return
        with imgr.sequence() as s:
            if how == "reused":
                s.record(sg.OpAlgoDispatch(algo))
            else:
                _record(s, a, b, algo)
            if how == "eval_async":
                s.eval_async()
                assert s.eval_await() is True
            else:
                s.eval()

    action()
    base = _settled(imgr)
    check = _check_settled(imgr, base, f"record + {how}")
    if how == "reused":
        check_settled = check

        def check(k):
            check_settled(k)
            action()   # leaves the command pool, holding the dispatch, in the cache
            assert imgr.live_objects()["cached_sequences"] == 1

        check(0)
    assert _sweep(action, check) > 100
    # and the manager still works
    b.data()[:] = 0
    with imgr.sequence() as s:
        _record(s, a, b, algo)
        s.eval()
    np.testing.assert_array_equal(b.data(), np.arange(64, dtype=np.float32) + 1)


@pytest.mark.parametrize("how", ["eval", "eval_async"])
def test_named_reeval(imgr, dispatch, how):
    """A named sequence, recorded once, evaluated again and again: an interrupted
    evaluation leaks nothing and leaves it ready to evaluate again."""
    a, b, algo = dispatch
    want = np.arange(64, dtype=np.float32) + 1
    s = imgr.sequence("again")
    _record(s, a, b, algo)
    s.eval()

    def action():
        if how == "eval":
            s.eval()
        else:
            s.eval_async()
            assert s.eval_await() is True

    base = _settled(imgr)

    def check(k):
        now = _settled(imgr)
        assert now == base, f"named {how}: interrupt at line {k} leaked: {_diff(now, base)}"
        b.data()[:] = 0
        s.eval()
        np.testing.assert_array_equal(b.data(), want, err_msg=f"named {how}: after line {k}")

    assert _sweep(action, check) > 10
    imgr.delete_sequence("again")


def test_timestamps(imgr, dispatch, monkeypatch):
    """A sequence with timestamps, whose query pool grows at its first recording (its
    command pool and fence are replaced), then evaluated again and read."""
    a, b, algo = dispatch
    monkeypatch.setattr(sg.sequence, "TIMESTAMP_QUERIES", 2)   # 4 needed: it grows

    def action():
        with imgr.sequence(timestamps=True) as s:
            _record(s, a, b, algo)
            s.eval()
            s.eval()
            assert len(s.timestamps()) == 4

    action()
    base = _settled(imgr)
    assert _sweep(action, _check_settled(imgr, base, "timestamps")) > 100


def test_named_create_record_delete(imgr, dispatch):
    """A named sequence made, recorded, evaluated and deleted."""
    a, b, algo = dispatch
    want = np.arange(64, dtype=np.float32) + 1

    def action():
        s = imgr.sequence("made")
        _record(s, a, b, algo)
        s.eval()
        imgr.delete_sequence("made")

    action()
    base = _settled(imgr)

    def check(k):
        if "made" in imgr.sequence_names():
            imgr.delete_sequence("made")
        _check_settled(imgr, base, "named")(k)

    assert _sweep(action, check) > 100
    b.data()[:] = 0
    action()
    np.testing.assert_array_equal(b.data(), want)


@pytest.mark.allow_scopedgpu_log   # one message only: see the end
@pytest.mark.parametrize("pinned", [False, True], ids=["copied", "pinned"])
def test_stream(imgr, monkeypatch, pinned, fail_on_validation_messages):
    """Manager.stream() cut at every line of its own code and of what it calls: nothing
    leaks (its command buffers, imports, staging, device chunks), and the manager works.
    Pinned: inside Manager.pinned() of its arrays (a few imports each), which is swept
    too: the imports are freed (or recorded and freed by close)."""
    import scopedgpu.pinned as spn
    from scopedgpu._shaders import builtin_spirv
    monkeypatch.setattr(spn, "PIECE_BYTES", 8192)
    saxpy = builtin_spirv("saxpy")
    x = np.arange(4096, dtype=np.float32)
    y = np.ones(4096, dtype=np.float32)
    base = _state(imgr)

    def action():
        y[:] = 1
        with imgr.pinned(x, y) if pinned else contextlib.nullcontext():
            imgr.stream(saxpy, inputs=[x, y], outputs=[y], push_consts=[2.0],
                        chunk_bytes=6000 if pinned else 8192, depth=2, workers=2)

    what = "pinned stream()" if pinned else "stream()"
    check = _check_baseline(imgr, base, what)

    def settled(k):
        # What an interrupted stream left while the GPU still used it is freed by the
        # manager's next call once that work completed.
        imgr.wait_idle()
        check(k)

    assert _sweep(action, settled, limit=20000) > 5
    np.testing.assert_array_equal(y, 2 * x + 1)
    # An interrupted stream whose copies outlast its grace says so (the H200 showed it
    # once in some 2,000 interrupts); nothing else may be logged.
    other = [r.getMessage() for r in fail_on_validation_messages.records
             if "stream() interrupted while its GPU work still ran" not in r.getMessage()]
    assert not other, other


def test_waits_on_a_running_sequence(imgr):
    """eval_await(timeout) and eval() of a sequence that is still running, cut at every
    line: no thread's waiter token is left behind and no submission waits in `released` (a
    token left behind made the later destroy() hand the sequence to a waiter that never
    comes, and close() waited for it forever: a hang seen in test_stream under load).
    The sweeps above see sequences that complete at once and never take these paths."""
    from endless import busy_sequence, flag_tensor, set_flag
    f = flag_tensor(imgr)
    seq = busy_sequence(imgr, f, long_on_gpu=True)
    sub = seq._sub
    seq.eval_async()
    try:
        def check(k):
            assert not imgr._state.lock._is_owned(), f"interrupt at line {k} left the lock held"
            assert not sub.waiters, f"interrupt at line {k} left a waiter token"
            assert not imgr._state.released, f"interrupt at line {k} left a released submission"
            assert seq.is_running

        assert _sweep(lambda: seq.eval_await(0.002), check) > 5
    finally:
        set_flag(f)
    assert seq.eval_await(60)
    # eval() of it again: its flag is set, so it ends at once
    def check_eval(k):
        assert not imgr._state.lock._is_owned(), f"interrupt at line {k} left the lock held"
        assert not sub.waiters, f"interrupt at line {k} left a waiter token"
        assert not imgr._state.released, f"interrupt at line {k} left a released submission"
        seq.eval_await(60)

    assert _sweep(seq.eval, check_eval) > 5
    seq.destroy()
    closer = threading.Thread(target=imgr.close)
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), "close() hung"


# -- the memory pool's slow paths -----------------------------------------------------------


@pytest.mark.parametrize("path", ["empty_cache", "flush+trim", "out_of_memory"])
def test_pool_slow_paths(path, monkeypatch):
    """The pool's slow paths cut at every line (the sweeps above reach new blocks, carving,
    imports and the merge of a big range freed; not these): nothing leaks (no block made
    and not recorded, no range lost, nothing given back twice), the bookkeeping is whole
    (every block back to the driver once all is freed) and the pool still hands out whole,
    separate ranges. "empty_cache": blocks cached and ranges binned, then empty_cache().
    "flush+trim": no cache (each emptied block goes back at once), 1 MiB blocks (under a
    memory limit of 8 MiB), a freed range filling one on its bin, then a request of another
    size (the bins merged, the emptied block destroyed, a new one made). "out_of_memory":
    under a memory limit, a request that fits only once the cached blocks of another size
    class went back (on_oom, then empty_cache(), then a new block)."""
    limit = {"out_of_memory": 16 << 20, "flush+trim": 8 << 20}.get(path)
    m = sg.Manager(debug=DEBUG or None, memory_limit=limit)
    try:
        pool = m._state.pool
        if path == "flush+trim":
            monkeypatch.setattr(pool, "cache_bound", 0)
        base = _state(m)
        assert base[0]["memory_blocks"] == 0

        def action():
            if path == "out_of_memory":
                m.empty((3 << 20) // 4).destroy()    # a 3 MiB block of each kind, cached
                m.empty((14 << 20) // 4).destroy()   # 14 MiB: 20 > 16 until they go back
            elif path == "flush+trim":
                m.empty(MIB // 4).destroy()          # a whole block, onto the bins
                m.empty((MIB - 4096) // 4).destroy()  # fits once the bins are merged
            else:
                m.empty(64).destroy()
                m.empty((2 << 20) // 4, kind="storage").destroy()
                m.empty_cache()

        def check(k):
            _check_baseline(m, base, f"pool {path}")(k)
            assert not pool.freed and pool.making is None, f"line {k}: {pool.making}"

        assert _sweep(action, check) > 20
        t = m.tensor(np.arange(64, dtype=np.float32))
        u = m.tensor(np.arange(64, dtype=np.float32) + 1)
        np.testing.assert_array_equal(t.numpy() + 1, u.numpy())
        assert t._gpu.block is not u._gpu.block or t._gpu.offset != u._gpu.offset
    finally:
        m.close()
