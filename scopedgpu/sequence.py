"""Sequences: recorded operations, submitted to a queue, awaited through a fence."""
from __future__ import annotations

import logging
import math
import numbers
import time
import weakref
from time import perf_counter as _clock
from typing import Any

from scopedgpu import _ki, _vk
from scopedgpu._base import Child, Handle, first_destroyed, handles_of
from scopedgpu._engine import (HOLD_SPIN_MAX_NS, HOLD_TIMEOUT_NS, SPIN_MAX_NS, SPIN_NS,
                               SPIN_PER_S, WAIT_SLICE_NS, Engine, Roots, fence_wait,
                               spin_after)
from scopedgpu._errors import DestroyedError
from scopedgpu._submission import Submission
from scopedgpu._record import record_commands
from scopedgpu._transfer import copy as _copy
from scopedgpu.algorithm import Algorithm
from scopedgpu.ops import Op, OpAlgoDispatch

__all__ = ["Sequence"]

log = logging.getLogger("scopedgpu")
TIMESTAMP_QUERIES = 64
_SG_TIMEOUT = _vk.TIMEOUT
_EMPTY: frozenset = frozenset()
_seq_submit = _vk.seq_submit
_seq_wait = _vk.seq_wait
_seq_submit_wait = _vk.seq_submit_wait


class _SeqHandle(Handle):
    """What a sequence owns: its Submission (command buffer, fence, waiters, host copies)
    and the algorithms built for its ops (OpMult's)."""
    __slots__ = ("sub", "owned")
    close_order = 0     # before the algorithms and tensors its commands use
    requeue_safe = True

    def __init__(self) -> None:
        self.sub: Submission = None  # type: ignore[assignment]   # set by Sequence()
        # Weak: the handle outlives its sequence in the manager's bookkeeping, and a strong
        # reference from it to an algorithm (which holds the manager) would keep the
        # manager alive for good. The recorded ops keep the algorithms alive as long as
        # the sequence lives.
        # (An empty tuple until own() adds one: most sequences own none, and an empty
        # list is one more object for the cyclic collector per sequence.)
        self.owned: list[weakref.ref[Algorithm]] | tuple[()] = ()

    def complete(self) -> None:
        """The host copies of the submission that completed (Submission.complete)."""
        sub = self.sub
        if sub is not None and sub.copies:
            sub.complete(_copy)

    def release(self, state: Engine, closing: bool) -> None:
        # The submission goes to the engine, which frees it once no thread waits on its
        # fence and its work completed (Submission.release: a no-op once it is not this
        # handle's any more, so this may run again).
        sub = self.sub
        if sub is not None:
            sub.release(state, closing, self)
        for ref in self.owned:
            algo = ref()
            if algo is None:
                continue   # collected with the sequence: its own release follows
            algo.release_now()   # Ctrl-C-safe; no validation check inside cleanup
        self.owned = ()


def _leave(state: Engine, sub: Submission, token: object) -> None:
    """A thread's fence wait ended: the last waiter frees a submission released
    meanwhile. Idempotent."""
    with state.lock:
        sub.leave(state, token)


class Sequence(Child):
    """Recorded operations and the command buffer, fence and query pool that run them.

    Anonymous sequences (name None) are destroyed at the end of their `with` block, after
    their GPU work completes, and when they become unreachable. Named ones persist until
    Manager.delete_sequence() or clear_sequences(named=True). Destroying a sequence never
    frees a tensor.
    """
    _what = "sequence"
    # Slots, as Tensor's: an instance dict of 30 keys or more is no longer shared, and each
    # attribute read of eval()'s short path costs more. "__dict__" keeps room for
    # attributes of the user's own.
    __slots__ = ("_roots", "_name", "_queue", "_want_timestamps", "_nqueries", "_state",
                 "_sub", "_h", "_ops", "_dirty", "_quick", "_running", "_gen", "_t_submit",
                 "_spin", "_zombie", "_inflight", "_indexed", "_timestamps", "_nts",
                 "_ts_due", "_objs", "_seen_destroys", "_pre_ops", "_copies",
                 "_host_written", "_rec_inflight", "_touched", "_zeroes", "_sig", "_computes",
                 "__dict__")

    def __init__(self, manager: object, engine: Engine, roots: Roots, name: str | None,
                 queue: int, timestamps: bool):
        state = engine
        self._roots = roots
        self._name = name
        self._queue = queue
        self._want_timestamps = timestamps
        self._nqueries = TIMESTAMP_QUERIES if timestamps else 0
        with state.lock:
            if state.closed:
                state.check_open()
            if state.garbage or state.running:
                state.collect()
            if queue:
                state.lead_all = True
            # A command pool, command buffer and fence of a destroyed anonymous sequence
            # are reused when there is one (Manager.empty_cache() frees them).
            handle = _SeqHandle()
            sub = None
            try:
                if not timestamps:
                    sub = state.seq_cache.take(queue, handle)
                h = None if sub is None else sub.seq
                if sub is None or h is None:   # (an entry the cache's drop() cut short)
                    sub = Submission(queue, self._nqueries, owner=handle,
                                     recyclable=not timestamps, label="a sequence")
                    sub.create(state, f"creating sequence {name!r} on queue {queue}")
                    h = sub.seq
                handle.sub = sub
                super().__init__(manager, engine, handle)
                state.sequences.add(self)
            except BaseException:
                # Anything (Ctrl-C included): free what was made, registered or not.
                ref = getattr(self, "_ref", None)
                if ref is not None:
                    state.sequences.refs.pop(ref, None)
                    state.handles.pop(ref, None)
                if sub is not None:
                    sub.release(state, False, handle)
                raise
        self._state = state
        self._sub = sub
        self._h = h            # the sg_seq (None once destroyed), for the hot paths
        self._ops: list[Op] = []      # the ops recorded (Op.bind: the user's, or built for it)
        self._dirty = True
        self._quick = False      # eval() may take its short path (see _submit_locked)
        self._running = False
        self._gen = 0            # submissions so far: a wait completes only its own
        # When its last submission was made, and how long its next wait spins before it
        # blocks (spin_after: from how long the last run took).
        self._t_submit = 0.0
        self._spin = SPIN_NS
        self._computes = True    # its recording dispatches (see spin_after), until recorded
        self._zombie: Handle | None = None   # see destroy()
        self._inflight: frozenset[Handle] = _EMPTY
        self._indexed: frozenset[Handle] = _EMPTY   # its entries in state.users
        self._timestamps: list[int] | None = None
        self._nts = 0    # timestamps the command buffer writes (its last recording)
        self._ts_due = False   # the last submission writes them (see eval_async)
        # What eval needs, gathered at record time so that re-evaluation does no more
        # Python work than it must (see _note_recorded).
        self._objs: list[Any] = []               # must be alive at eval
        # state.destroys when the general path last found every one of them alive (they
        # still are while the count stands: the short path then skips the look).
        self._seen_destroys = -1
        self._pre_ops: list[Op] = []
        # host copies of the OpTensorSyncLocal ops (Tensor._read_back), due at completion
        self._copies: tuple[tuple[Any, Any, int], ...] = ()
        self._host_written: set[Handle] = set()
        self._rec_inflight: frozenset[Handle] = _EMPTY   # handles of _objs, made at record
        # Fresh tensors the command buffer zeroes or overwrites whole (Recorder.touch),
        # marked written once it is submitted; and whether it zeroes any.
        self._touched: list[Any] | tuple[()] = ()   # (a tuple: no object to track)
        self._zeroes = False
        # Signature of the recorded ops when they are all plain dispatches: an anonymous
        # sequence that reuses a command buffer already holding exactly these commands
        # (same live algorithms, push constants, workgroups) need not record it again.
        # None: not cacheable.
        self._sig: tuple | None = None if timestamps else ()

    # -- properties -----------------------------------------------------------------
    @property
    def name(self) -> str | None:
        """The name of a named sequence; None when anonymous."""
        return self._name

    @property
    def is_recording(self) -> bool:
        """True while it holds recorded operations not yet evaluated since recording."""
        return bool(self._ops) and self._dirty

    @property
    def is_running(self) -> bool:
        """True while its last submission has not completed."""
        if not self._running:
            return False
        state = self._engine
        with state.lock:
            if self._running and self._h is not None:
                rc = _vk.seq_status(self._h)
                if rc == 0:
                    self._finish()
                elif rc != _SG_TIMEOUT:
                    # Not known to be complete: it still counts as running, and what it
                    # uses stays allocated.
                    _vk.check(rc, f"polling {self!r}")
        return self._running

    def __repr__(self) -> str:
        label = f"{self._name!r}" if self._name is not None else "anonymous"
        state = " destroyed" if self._destroyed else (" running" if self._running else "")
        return f"<Sequence #{self._id} {label} ops={len(self._ops)}{state}>"

    # -- recording --------------------------------------------------------------------
    def record(self, op: Op) -> Sequence:
        """Appends an operation; returns the sequence for chaining."""
        if self._destroyed:
            self._check()
        if not isinstance(op, Op):
            raise TypeError(f"{self!r}.record() takes an operation (Op...), not "
                            f"{type(op).__name__}")
        state = self._state
        with state.lock:
            if state.closed:
                state.check_open()
            if self._destroyed:   # (by another thread since the check above)
                self._check()
            recorded = op.bind(self)
            self._ops.append(recorded)
            self._note_recorded(recorded)
            self._dirty = True
        return self

    def _note_recorded(self, op: Op) -> None:
        if self._sig is not None:
            if type(op) is OpAlgoDispatch:
                # Algorithm ids are never reused; a live algorithm's pipeline and
                # descriptor set never change.
                self._sig += ((op.algorithm.number, op.push, op.workgroup),)
            else:
                self._sig = None
        self._objs.extend(op.objects())
        cls = type(op)
        if cls.pre_submit is not Op.pre_submit:
            self._pre_ops.append(op)
        if cls.host_read is not Op.host_read:
            copies = []
            for t in op.host_read():
                c = t.read_back()
                if c is not None:
                    copies.append(c)
            if copies:
                self._copies += tuple(copies)
        if cls.host_written is not Op.host_written:   # (the default writes none)
            written = op.host_written()
            if written:
                self._host_written.update(handles_of(written))

    def clear(self) -> None:
        """Forgets the recorded operations (waiting for a running submission first) and
        destroys the algorithms built for them (OpMult's)."""
        self._check()
        self._wait(None)
        state = self._engine
        with state.lock:
            if self._destroyed:   # (by another thread since the check above)
                self._check()
            self._drop_ops()
            self._sig = None if self._want_timestamps else ()
            self._dirty = True

    def own(self, algo: Algorithm) -> None:
        """Takes ownership of an algorithm built for one of its ops (OpMult): destroyed
        with the sequence, or at clear() (package-internal)."""
        handle: _SeqHandle = self._handle  # type: ignore[assignment]
        if not handle.owned:
            handle.owned = []
        handle.owned.append(weakref.ref(algo))  # type: ignore[union-attr]

    # -- evaluation ---------------------------------------------------------------------
    def eval(self, op: Op | None = None) -> Sequence:
        """Submits the recorded operations and waits for them. With an op: clears the
        sequence, records the op, then evaluates (as kp does)."""
        if op is not None or self._running or self._destroyed:
            self.eval_async(op)
            self._wait(None)
            return self
        # The re-evaluation of an idle sequence (the latency figure): eval_async() and
        # _wait() in two lock sections instead of three, the submission and the waiter's
        # registration in the first. Its Python time is the whole gap to a C loop (the
        # GPU idles meanwhile), so the common case is written out here: a sequence
        # submitted before whose commands and checks have not changed since (_quick) and
        # with nothing else running, no garbage, no waiter and no destroyed object, is
        # submitted with the steps _submit_locked takes then, and a wait that completes
        # in its first slice finishes without _await's calls; anything else takes the
        # general path. In a process of one Python thread, a short run is awaited in the
        # submission's lock section and finished there (see HOLD_SPIN_MAX_NS).
        state = self._state
        token: object = None
        sub = self._sub
        try:
            with state.lock:
                if (self._quick and not self._dirty and not state.closed
                        and not (state.garbage or state.running or sub.waiters)
                        and (sub.led or not state.lead_all)
                        and (self._seen_destroys == state.destroys
                             or first_destroyed(self._objs) is None)):
                    # (_submit_locked's steps for a sequence of no timestamps, host
                    # writes, pre-submit ops, fresh tensors or sync checks: see _quick)
                    self._t_submit = t = _clock()
                    if t >= state.alone_until:
                        state.check_alone(t)
                    # (no call from here to the submission but _enter_running's step)
                    self._inflight = self._rec_inflight
                    self._gen += 1
                    sub.copies = self._copies
                    self._enter_running(state)
                    if state.alone and self._spin <= HOLD_SPIN_MAX_NS:
                        # No other thread can want the lock: submit and wait holding it,
                        # in one call. Not done by HOLD_TIMEOUT_NS: awaited below as any
                        # other submission. A failed wait raises, as _await's: the
                        # sequence still counts as running.
                        box = state.submit_rc
                        rc = _seq_submit_wait(self._h, HOLD_TIMEOUT_NS, self._spin, box)
                        if not rc:
                            # spin_after(), _finish() and _retire() written out: on this
                            # path each Python call is some 5% of the evaluation's own
                            # work. (On a CPU device a dispatching sequence's spin
                            # stays SPIN_NS; no timestamps here.)
                            if not (state.cpu_device and self._computes):
                                ns = (_clock() - t) * SPIN_PER_S
                                self._spin = (SPIN_NS if ns <= SPIN_NS else int(ns)
                                              if ns < SPIN_MAX_NS else SPIN_MAX_NS)
                            if sub.copies:
                                self._finish()
                                return self
                            sub.done = True   # (_finish without host work)
                            try:
                                # _retire() for a sequence that is not destroyed (the
                                # lock was held since the check above): out of the
                                # running sets as _leave_running takes it out (the
                                # engine's first: no check before the discard's
                                # return), then what waited for it, if anything did.
                                self._running = False
                                running = state.running
                                ref = self._ref
                                if ref in running:
                                    del running[ref]
                                self._roots.running.discard(self)
                                self._inflight = _EMPTY
                                if state.deferred or self._zombie is not None:
                                    self._retire()
                            except BaseException:   # a Ctrl-C after the discard (or in
                                self._retire()      # _retire): again (safe to rerun)
                                raise
                            return self
                        if rc != _SG_TIMEOUT:
                            if box[0]:
                                self._retire()
                                _vk.check(rc, f"submitting {self!r}")
                            _vk.check(rc, f"waiting for {self!r}")
                    else:
                        rc = _seq_submit(self._h)
                        if rc:
                            self._retire()
                            _vk.check(rc, f"submitting {self!r}")
                elif not self._submit_locked(state):
                    return self
                gen = self._gen
                sub = self._sub
                h = self._h
                token = object()
                sub.waiters.add(token)
            rc = _seq_wait(h, WAIT_SLICE_NS, self._spin)   # GIL and lock released
            if rc:   # not complete in one slice, or a failed wait: the general wait
                self._await(state, sub, token, h, gen, None)
                return self
            self._spin = spin_after(_clock() - self._t_submit,
                                    state.cpu_device and self._computes)
            with state.lock:
                sub.leave(state, token)
                if self._gen == gen:   # not submitted again by another thread meanwhile
                    self._finish()
                if state.debug:
                    state.check_validation(f"waiting for {self!r}")
        finally:
            if token is not None and token in sub.waiters:   # not left above or in
                _leave(state, sub, token)                       # _await (Ctrl-C)
        return self

    def eval_async(self, op: Op | None = None) -> Sequence:
        """Submits and returns at once; eval_await() waits. A sequence still running from
        an earlier submission is waited for first."""
        if self._destroyed:
            self._check()
        if op is not None:
            self.clear()
            self.record(op)
        if self._running:
            self._wait(None)
        state = self._state
        with state.lock:
            self._submit_locked(state)
        return self

    def _submit_locked(self, state: Engine) -> bool:
        """eval_async()'s work under the lock: checks, records when needed, submits.
        False when there was nothing to submit."""
        if state.closed:
            state.check_open()
        if self._destroyed:
            self._check()
        if state.garbage or state.running:
            state.collect()
        while self._running or self._sub.waiters:
            # Another thread submitted it since the wait above, or still waits on its
            # fence: a pending command buffer must not be submitted again, nor a
            # fence reset while it is in use or waited on. Wait, without the lock.
            state.lock.release()
            try:
                if self._running:
                    self._wait(None)
                else:
                    time.sleep(0.0002)   # the waiters are returning
            finally:
                state.lock.acquire()
            if self._destroyed:
                self._check()
        obj = first_destroyed(self._objs)
        if obj is not None:
            raise DestroyedError(
                    f"{self!r} refers to {obj!r}, which was destroyed; nothing was "
                f"submitted. Record the sequence again with live objects "
                f"(clear() and record()).")
        self._seen_destroys = state.destroys
        if not self._ops:
            return False
        # Host writes below must not race GPU work of other running sequences that
        # use the same memory: wait for those first.
        written = self._host_written
        if written and state.running:
            users = state.users
            for th in written:
                if th not in users:
                    continue   # (no submission uses it)
                for other in state.running_users(th, self):
                    if other._running:
                        other._wait_locked()
        if self._zeroes and not all(th.fresh for th in self._touched):
            # Recorded (with its zeros) and not submitted (an interrupt, a failed
            # submission), and since then another submission wrote those tensors.
            self._dirty = True
        if state.lead_all and not self._sub.led:
            # Recorded without the leading barrier before another queue came into use.
            self._dirty = True
        if self._dirty:
            sig = self._sig
            if sig and sig == self._sub.sig and (self._sub.led or not state.lead_all):
                # The command buffer already holds exactly these commands (dispatches
                # only: any other op makes the signature None, and a recording of other
                # commands leaves the submission's None, so _computes is still True).
                self._rec_inflight = handles_of(self._objs)
                self._dirty = False
            else:
                self._record_commands()
        for op_ in self._pre_ops:
            op_.pre_submit()
        inflight = self._rec_inflight
        if inflight is not self._indexed:   # a new recording: its handles' users
            state.index(self._ref, self._indexed, inflight)
            self._indexed = inflight
        self._inflight = inflight
        self._gen += 1
        if self._want_timestamps:
            self._timestamps = None
            self._ts_due = False
        copies = self._copies
        if state.sync_check is not None:   # debug mode: forgotten syncs
            after = state.sync_check.submitted(self._ops, self)
            if after is not None:
                copies += ((after, None, -1),)
        # Running before the submission, in one line (a Ctrl-C cannot split it): cut
        # short before the submit, it completes at once (its fence is still signalled);
        # after it, the submission is waited for like any other, never submitted
        # again while pending, and the manager holds the sequence until it completes.
        self._enter_running(state)
        rc = _seq_submit(self._h)
        if rc:
            self._retire()
            _vk.check(rc, f"submitting {self!r}")
        self._t_submit = _clock()
        self._sub.copies = copies
        if self._touched:
            for th in self._touched:
                th.fresh = False
            self._touched = ()
            if self._zeroes:   # the zeros were for this submission only
                self._zeroes = False
                self._dirty = True
        if self._want_timestamps:
            self._ts_due = True   # submitted: its queries will be written
        # Whether the next evaluation may take eval()'s short path: nothing below changes
        # while the recording stands (record() and clear() set _dirty, which the short
        # path checks), so the general checks above would find the same.
        self._quick = (not self._dirty and not self._want_timestamps and not self._pre_ops
                       and not self._host_written and not self._zeroes and not self._touched
                       and state.sync_check is None and not state.debug)
        if state.debug:
            state.check_validation(f"evaluating {self!r}")
        return True

    def eval_await(self, timeout: float | None = None) -> bool:
        """Waits for the last submission, at most `timeout` seconds (None or math.inf: no
        limit). True when it completed (the host copies of OpTensorSyncLocal are then
        done); False on timeout, and the sequence still counts as running. A wait the
        driver fails raises DeviceError, and the sequence also still counts as running."""
        self._check()
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
                raise TypeError(f"{self!r}.eval_await(): timeout must be None or a number "
                                f"of seconds, not {type(timeout).__name__} {timeout!r}")
            if math.isnan(timeout) or timeout < 0:
                raise ValueError(f"{self!r}.eval_await(): timeout must be None or >= 0 "
                                 f"seconds, not {timeout!r}")
            if timeout >= 2**64 / 1e9:   # math.inf, or beyond what a fence wait counts
                timeout = None
        return self._wait(timeout)

    def _wait(self, timeout: float | None) -> bool:
        """Waits for the running submission, at most `timeout` seconds (None: no limit), in
        slices of WAIT_SLICE_NS: Ctrl-C raises KeyboardInterrupt within one slice and
        leaves the sequence running (it can be awaited again)."""
        if not self._running:
            return True
        state = self._state
        token = object()
        sub = self._sub
        try:
            with state.lock:
                sub = self._sub
                h = sub.seq
                if not self._running or h is None:
                    return True  # completed, or destroyed/closed meanwhile
                gen = self._gen
                sub.waiters.add(token)
            return self._await(state, sub, token, h, gen, timeout)
        finally:
            if token in sub.waiters:   # not left in _await (Ctrl-C)
                _leave(state, sub, token)

    def _await(self, state: Engine, sub: Submission, token: object, h: Any, gen: int,
               timeout: float | None) -> bool:
        """The rest of a wait registered in sub.waiters as `token` for submission `gen`
        of its sg_seq h; the caller's finally leaves when this did not."""
        rc = fence_wait(state, h, timeout, self._spin)   # GIL and lock released
        if rc == 0:
            # (Longer than the run when the wait began after its end: a longer spin, cut
            # short by the fence.)
            self._spin = spin_after(_clock() - self._t_submit,
                                    state.cpu_device and self._computes)
            # The common case in one lock section (re-evaluation latency): leave, then
            # complete. Cut short, the caller's finally leaves and the sequence stays
            # running until the next wait or collect completes it.
            with state.lock:
                sub.leave(state, token)
                if self._gen == gen:   # not submitted again by another thread meanwhile
                    self._finish()
                if state.debug:
                    state.check_validation(f"waiting for {self!r}")
            return True
        _leave(state, sub, token)      # a failed wait, or a timeout
        if rc == _SG_TIMEOUT:
            if state.abandoned:
                raise DestroyedError(
                    f"{self!r}: its manager was closed while this sequence still ran, and "
                    f"gave up on it after {state.wait_timeout:g} s (its memory stays "
                    f"allocated until the process exits)")
            return False
        if rc:
            # The wait failed: not known to be complete, so it still counts as running
            # and what it uses stays allocated (destroy() waits again).
            _vk.check(rc, f"waiting for {self!r}")
        with state.lock:
            if self._gen == gen:   # not submitted again by another thread meanwhile
                self._finish()
            if state.debug:
                state.check_validation(f"waiting for {self!r}")
        return True

    def _wait_locked(self) -> None:
        """Waits and completes while the caller holds the manager's lock (in slices, so
        that Ctrl-C raises KeyboardInterrupt and leaves the sequence running)."""
        h = self._sub.seq
        rc = _vk.seq_wait(h, WAIT_SLICE_NS, SPIN_NS)
        while rc == _SG_TIMEOUT:
            rc = _vk.seq_wait(h, WAIT_SLICE_NS, 0)
        if rc:
            _vk.check(rc, f"waiting for {self!r}")   # still running (see _wait)
        self._finish()

    def _finish(self) -> None:
        """Completion work, once per submission, under the manager's lock: host copies of
        OpTensorSyncLocal, timestamps, then the releases that waited for this fence."""
        if not self._running:
            return
        retired = False
        try:
            try:
                self._running = False
                sub = self._sub
                sub.done = True   # (every caller saw its fence signalled, or the device idle)
                if sub.copies:
                    sub.complete(_copy)
                if self._want_timestamps and self._h is not None and self._ts_due:
                    # (not destroyed, and submitted: an eval cut short before it was not)
                    self._ts_due = False
                    # As many as the recording wrote: ops recorded while it ran have none.
                    raw = _vk.seq_timestamps(self._h, self._nts,
                                             f"reading timestamps of {self!r}")
                    period = self._state.info.timestamp_period
                    self._timestamps = [int(v * period) for v in raw]
            finally:
                self._retire()
                retired = True   # (cut short before this: the finally below runs it again)
        finally:
            if not retired:   # the cleanup above was interrupted (Ctrl-C): run it again
                self._retire()

    def _retire(self) -> None:
        """Leaves the running set and does the releases that waited for this fence.
        Safe to run again."""
        state = self._state
        self._running = False
        self._leave_running(state)
        self._inflight = _EMPTY
        if self._destroyed:   # (destroyed while it ran: see _drop_ops)
            self._unindex()
        if state.deferred:
            state.completed(self)
        zombie = self._zombie
        if zombie is not None:   # destroyed while it ran (see destroy())
            zombie.release(state, False)   # idempotent: cleared only once it returned
            self._zombie = None

    @_ki.step
    def _enter_running(self, state: Engine) -> None:
        """Running, in the engine's (weak, in submission order) and the manager's (strong)
        sets, in one step (and its submission no longer known complete)."""
        self._sub.done = False
        self._running = True
        state.running[self._ref] = None
        self._roots.running.add(self)

    @_ki.step
    def _leave_running(self, state: Engine) -> None:
        """Out of both sets, in one step; safe to run again."""
        running = state.running
        ref = self._ref
        if ref in running:
            del running[ref]
        self._roots.running.discard(self)

    def _record_commands(self) -> None:
        n = len(self._ops)
        if self._want_timestamps and n + 1 > self._nqueries:
            self._grow_queries(n + 1)
        h = self._h
        self._sub.sig = None
        ts = self._want_timestamps
        lead = self._state.lead_all
        rec = record_commands(h, self._ops, ts, self, lead)
        self._sub.led = lead
        self._touched = rec.touched or ()
        self._zeroes = rec.zeroed
        if rec.computes != self._computes:
            self._computes = rec.computes
            self._spin = SPIN_NS   # the last run's spin was for other commands
        self._rec_inflight = handles_of(self._objs)
        # A command buffer that zeroes fresh tensors is for one submission: never reused.
        self._sub.sig = None if rec.zeroed else self._sig
        self._nts = n + 1 if ts else 0
        self._dirty = False

    def _grow_queries(self, need: int) -> None:
        """Replaces the submission by one with more timestamp queries. The new one is
        the engine's (released) until the sequence adopts it, and the old one the
        engine's from the same store on (each hand-over: into Engine.released first,
        then one store of owners): an interrupt at any line leaves each either in use or
        released, and collect() frees a released one."""
        state = self._engine
        handle: _SeqHandle = self._handle  # type: ignore[assignment]
        old = handle.sub
        n = max(need, 2 * self._nqueries)
        new = Submission(self._queue, n, owner=handle, label="a sequence")
        state.released.add(new)
        new.owner = None
        new.create(state, f"growing the timestamp queries of {self!r}")
        h = new.seq
        state.released.add(old)
        handle.sub, self._sub, self._h, self._nqueries, new.owner, old.owner = \
            new, new, h, n, handle, None
        state.free_released()   # frees the old one (complete: eval waited for it)

    def timestamps(self) -> list[int]:
        """Nanosecond GPU timestamps of the last completed evaluation: one at the start and
        one after each op. Needs `timestamps=True` at creation."""
        self._check()
        if not self._want_timestamps:
            raise ValueError(f"{self!r} was created without timestamps=True")
        self._wait(None)
        if self._timestamps is None:
            raise ValueError(f"{self!r} has no completed evaluation to read timestamps from")
        return list(self._timestamps)

    # -- life ----------------------------------------------------------------------------
    def destroy(self) -> None:
        """Waits for the GPU work of the sequence, then frees its command pool, fence and
        query pool, and the algorithms built for its ops. Tensors are not freed.

        The wait lasts at most the manager's wait_timeout. Work still running then (or a
        wait the driver failed) leaves the sequence destroyed for the caller, with a
        warning on the "scopedgpu" logger, but its command buffer, fence and everything
        its work uses stay allocated until the work completes (freed by a later call of
        the manager) or until the manager closes. Ctrl-C during the wait raises
        KeyboardInterrupt and destroys nothing."""
        state = self._state
        if self._destroyed and (state.closed or self._ref not in state.handles):
            return   # (still there: an earlier destroy() was interrupted; finish it)
        error: Exception | None = None
        if self._running:
            try:
                done = self._wait(state.wait_timeout)
            except DestroyedError:
                return   # the manager closed meanwhile
            except Exception as exc:   # the wait failed: wait once more, then raise it
                error = exc
                try:
                    done = self._wait(state.wait_timeout)
                except Exception:
                    done = False
            if not done:
                self._destroy_running(error)
                return
        self._release()
        if error is not None:
            raise error

    def _release(self) -> None:
        """Child.destroy for a sequence that does not run, safe against an interrupt at
        any line: the handle stays in state.handles until its release returned, so a
        destroy() cut short is finished by the next destroy() or, once the sequence is
        unreachable, by the collector's callback (releasing again is harmless)."""
        state = self._state
        with state.lock:
            if state.closed:
                return   # close() destroyed it, and released what it could
            self._destroyed = True
            state.destroys += 1
            self._forget()   # idempotent
            handle = state.handles.get(self._ref)
            if handle is not None:
                state.release(handle)
                state.handles.pop(self._ref, None)
            if state.debug:
                state.check_validation(f"destroying {self!r}")

    def _destroy_running(self, error: Exception | None) -> None:
        state = self._state
        with state.lock:
            if not self._running or self._destroyed:
                pass
            else:
                if error is None:
                    log.warning("%r still runs after %g s (wait_timeout): destroyed without "
                                "freeing its command buffer, fence or the memory its work "
                                "uses; they are freed once it completes, or kept until the "
                                "process exits", self, state.wait_timeout)
                # It stays in state.running, which keeps its releases deferred; collect()
                # polls its fence through the handle and _finish() releases the handle.
                zombie = self._zombie = self._mark_destroyed()
                if zombie is not None:
                    # Its downloads would land in the tensors' host copies whenever the
                    # work ends, over what the program wrote there meanwhile: dropped.
                    self._sub.copies = ()
                self._forget()
                if error is not None:
                    raise error
                return
        self._release()
        if error is not None:
            raise error

    def _forget(self) -> None:
        state = self._state
        state.sequences.discard(self)
        # The manager's strong reference first: cut short after it, the sequence is
        # still found by name (weakly), or collected and released.
        named = self._roots.named
        if self._name is not None and named.get(self._name) is self:
            del named[self._name]
        if self._name is not None and state.named.get(self._name) is self:
            del state.named[self._name]
        self._quick = False   # (eval()'s short path: another thread's eval() may be
        self._h = None        # past its unlocked check, waiting for the lock)
        # A destroyed sequence must not keep its ops' tensors and algorithms alive: the
        # `seq` name of a finished `with mgr.sequence() as seq:` block outlives the block.
        self._drop_ops()

    def _drop_ops(self) -> None:
        """Forgets the recorded ops and everything gathered from them at record time, and
        destroys the algorithms built for them (first: once the ops are gone, nothing but
        the collector would find them; released after the work that uses them)."""
        handle: _SeqHandle = self._handle  # type: ignore[assignment]
        if handle.owned:
            for algo in (ref() for ref in handle.owned):
                if algo is not None:
                    algo.release_now()
            handle.owned = ()
        if not self._running:   # (else at its completion: what it runs stays in use)
            self._unindex()
        self._ops.clear()
        self._objs.clear()
        self._pre_ops.clear()
        self._copies = ()
        self._host_written.clear()
        self._rec_inflight = _EMPTY
        self._touched = ()
        self._zeroes = False

    def _unindex(self) -> None:
        """Takes its entries out of state.users. Safe to run again."""
        if self._indexed:
            self._state.index(self._ref, self._indexed, _EMPTY)
            self._indexed = _EMPTY

    # -- the package's interface (the engine) ---------------------------------------
    @property
    def fence(self) -> Any:
        """The sg_seq of its last submission (kept by a sequence destroyed while it ran,
        until that completes); None once released (package-internal)."""
        sub = self._sub
        return sub.seq if sub.owner is self._handle else None

    @property
    def submitted(self) -> bool:
        """Whether a submission was made that nobody has seen complete yet: is_running
        without its fence poll (package-internal: aio.eval right after eval_async)."""
        return self._running

    @property
    def queue(self) -> int:
        """The index of the queue it is submitted to (package-internal)."""
        return self._queue

    @property
    def inflight(self) -> frozenset[Handle]:
        """The handles its running submission uses (package-internal)."""
        return self._inflight

    def finish(self) -> None:
        """Completion work of a submission seen complete (package-internal; the caller
        holds the manager's lock)."""
        self._finish()

    def __exit__(self, *exc: object) -> None:
        if self._name is None:
            self.destroy()
        elif not self._destroyed:
            self._wait(None)
