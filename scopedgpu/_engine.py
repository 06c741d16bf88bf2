"""The lifetime engine of one manager: who owns what, and when it is freed.

The Engine holds, for its manager, the device, the pool, the weak sets of live children
and the handles they own (Child.handle, kept apart from the objects so that a finalizer
can release one without holding its object). It releases a handle at once, or, when a
running sequence's submission may still use it, once that sequence's fence signalled
(deferred); it polls fences at the safe points of public calls (collect) and completes
the sequences found done. close() and interpreter exit drain every submission (bounded by
wait_timeout), then shut down children before parents; work that never ends is
abandoned, never freed under the GPU. After os.fork() every inherited engine is marked
forked and nothing inherited reaches Vulkan again.
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time
import weakref
from typing import Any, Callable

from scopedgpu import _ki, _vk
from scopedgpu._base import ChildSet, Handle
from scopedgpu._device import DeviceInfo
from scopedgpu._errors import DestroyedError, ForkedError, ValidationError
from scopedgpu._pool import Pool
from scopedgpu._settings import default as setting_default, get as setting
from scopedgpu._submission import Submission
from scopedgpu._validation import Validation

__all__ = ["Engine", "Roots", "drain", "shutdown", "abandoned_managers", "fence_wait",
           "wait_timeout_from", "DEFAULT_WAIT_TIMEOUT", "SPIN_NS", "SPIN_MAX_NS", "spin_after",
           "WAIT_SLICE_NS", "HOLD_SPIN_MAX_NS", "HOLD_TIMEOUT_NS", "ALONE_RECHECK_S"]

log = logging.getLogger("scopedgpu")
_clock = time.perf_counter

# Seconds close(), Sequence.destroy(), the collector and interpreter exit wait for GPU
# work before they give up on it (Manager(wait_timeout=...), SCOPEDGPU_WAIT_TIMEOUT).
DEFAULT_WAIT_TIMEOUT = float(setting_default("SCOPEDGPU_WAIT_TIMEOUT"))
# Spin this long on the fence before blocking: a short dispatch completes within it.
SPIN_NS = 200_000
# A sequence's wait spins as long as its previous run took, and half again, up to this
# (see spin_after): a blocking wait's wake-up costs tens of microseconds on NVIDIA's
# driver, 6 to 20% of a re-evaluated chain of 100 to 1,000 small dispatches.
SPIN_MAX_NS = 5_000_000
# ... that is, SPIN_PER_S nanoseconds of spin a second of the last run.
SPIN_PER_S = 1.5e9
# collect() polls the running sequences' fences again no sooner than this after a poll
# that stopped at one still pending (seconds). A service with requests in flight calls
# it at every creation, several times a request, and the oldest submission it would poll
# again is mostly still running; the waits and the asyncio poller poll their own fences
# and are not held back.
POLL_GAP_S = 20e-6


def spin_after(took_s: float, cpu_compute: bool) -> int:
    """The spin of a sequence's next wait, given its last run took `took_s` seconds from
    submission to completion: 1.5 times that, between SPIN_NS and SPIN_MAX_NS.
    `cpu_compute`: the device is a CPU (lavapipe) and the sequence dispatches; then
    SPIN_NS, as a spinning thread takes a core from the device's compute threads (saxpy
    over 2^17 to 2^23 floats fell from 0.96-1.28 to 0.54-0.69 of the C loop with a longer
    spin). A CPU device's copies and fills run on its one queue thread, so a sequence of
    transfers only spins as on a GPU (the bench's round trips of 2 and 4 MiB on lavapipe,
    whose waits outlasted SPIN_NS and blocked, went from 0.62-0.66 and 0.76 of the C
    yardstick to 0.89-0.91 and 0.85-0.89)."""
    if cpu_compute:
        return SPIN_NS
    ns = int(took_s * SPIN_PER_S)
    return SPIN_NS if ns <= SPIN_NS else (ns if ns < SPIN_MAX_NS else SPIN_MAX_NS)
# Sequence.eval()'s short path keeps the manager's lock through its wait, and finishes in
# the same lock section, when the calling thread is the process's only Python thread (no
# other thread can want the lock) and the sequence's last run was short (its spin at most
# HOLD_SPIN_MAX_NS; a CPU device's dispatching sequence always spins SPIN_NS, so any
# run of it): one lock section instead of two and no waiter to register (on the H200
# about 0.35 us of the 2 us of Python a re-evaluation costs). Its wait takes
# HOLD_TIMEOUT_NS at most, its spin included; a run not done by then is awaited as usual,
# the lock released.
# Whether the thread is alone is checked again every ALONE_RECHECK_S at most
# (threading.active_count() takes a lock of its own): a thread started meanwhile waits
# that long, and one run, for the lock at most.
HOLD_SPIN_MAX_NS = 1_500_000
HOLD_TIMEOUT_NS = 2_000_000
ALONE_RECHECK_S = 0.001
# Waits without a limit block in slices this long: between two, a Ctrl-C raises
# KeyboardInterrupt (Python runs signal handlers only between bytecodes) and a manager
# closed by another thread is noticed.
WAIT_SLICE_NS = 50_000_000
_SG_TIMEOUT = _vk.TIMEOUT

# Every engine of this process (see after_fork), and those of managers closed while GPU
# work still ran: kept, with their device and memory, until the process exits.
STATES: weakref.WeakSet[Engine] = weakref.WeakSet()
ABANDONED: list[Engine] = []


def wait_timeout_from(value: float | None) -> float:
    """The wait timeout: the argument, else SCOPEDGPU_WAIT_TIMEOUT, else the default."""
    if value is None:
        return float(setting("SCOPEDGPU_WAIT_TIMEOUT"))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"wait_timeout must be a number of seconds, not {value!r}")
    value = float(value)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"wait_timeout: the wait timeout must be a finite number of seconds "
                         f">= 0, not {value!r}")
    return value


class Roots:
    """The strong references a Manager keeps to its children, apart from the engine
    (which holds them weakly): the named sequences until deleted, and the running
    sequences until they complete. A dropped manager and these children then form a
    cycle the collector frees (closing the manager), instead of the engine, which the
    manager's finalizer holds, keeping them alive until exit."""
    __slots__ = ("named", "running")

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}
        self.running: set[Any] = set()


class Engine(Validation):
    """Everything the manager owns. The manager's finalizer holds this, never the Manager,
    so close() can run when the Manager object itself is gone."""
    # Slots: more than 30 attributes make an instance dict that CPython no longer shares,
    # and each of the hot paths' reads of them costs more (see Sequence).
    __slots__ = ("lock", "closed", "destroys", "streams", "closing", "pins", "pid", "forked",
                 "abandoned", "wait_timeout", "gave_up", "dev", "nqueues", "lead_all",
                 "info", "cpu_device", "alone", "alone_until", "submit_rc", "pool",
                 "tensors", "algorithms", "sequences", "named", "running", "poll_after",
                 "users", "garbage", "handles", "seq_cache", "programs", "reflections",
                 "deferred", "submissions", "released", "sync_check", "on_unreachable",
                 "__weakref__")

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.closed = False
        # How many children were destroyed so far: every `_destroyed = True` adds one.
        # A sequence whose objects were all alive at some count needs no new look at them
        # while the count stands (eval()'s short path; see Sequence._seen_destroys).
        self.destroys = 0
        # Manager.stream() calls under way (their Streamer each; their command buffers are
        # their own): close() sets `closing` and waits until they stopped and freed, and
        # Pinned.destroy() waits for those that use its arrays.
        self.streams: set[Any] = set()
        self.closing = False
        # Manager.pinned() objects not yet destroyed (scopedgpu.pinned.Pinned), weak like
        # the other children: stream() looks up its arrays here.
        self.pins = ChildSet()
        self.pid = os.getpid()
        # Set in a child process after os.fork(): nothing inherited may reach Vulkan.
        self.forked = False
        # Closed while GPU work still ran: nothing was freed (see shutdown).
        self.abandoned = False
        self.wait_timeout = DEFAULT_WAIT_TIMEOUT
        self.gave_up = False     # close() waited wait_timeout in vain
        self.dev: Any = None
        self.nqueues = 1         # compute queues the device was opened with (the manager)
        # A sequence on a queue other than 0 was made: from then on every recording starts
        # with a barrier (other queues' writes made visible; see _record.py). Never reset.
        self.lead_all = False
        self.info: DeviceInfo = None  # type: ignore[assignment]
        # info.type == "cpu" (lavapipe): waits for dispatches spin SPIN_NS only (spin_after)
        self.cpu_device = False
        # The calling thread was the process's only Python thread when last checked (see
        # HOLD_SPIN_MAX_NS), and when to check again (a perf_counter time).
        self.alone = False
        self.alone_until = 0.0
        # The submission's result of eval()'s submit-and-wait in one call (the lock held).
        self.submit_rc = _vk.status_box()
        self.pool: Pool = None  # type: ignore[assignment]
        self.tensors = ChildSet()       # of Tensor
        self.algorithms = ChildSet()    # of Algorithm
        self.sequences = ChildSet()     # of Sequence
        # Weak, like the other children: the Manager object holds the named sequences
        # strongly (Roots.named), so a dropped manager and its named sequences can be
        # collected together instead of living until exit.
        self.named: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        # Sequences whose last submission has not been seen complete, by their weak
        # references (Child.ref). The Manager holds them strongly
        # (Roots.running): a manager dropped while a sequence runs forms a cycle with
        # it that the collector frees (closing the manager), instead of this state, which
        # its finalizer holds, keeping both alive until exit.
        self.running: dict[weakref.ref, None] = {}
        # perf_counter() before which collect() does not poll them (POLL_GAP_S)
        self.poll_after = 0.0
        # Handle -> the weak references of the sequences whose last submission uses it
        # (their `inflight`), kept from submission to the sequence's next recording or
        # end (Sequence._index): which running sequences use a handle, without a pass
        # over every running sequence (release(), a host write's wait). A superset:
        # readers keep the references that are running and use the handle now. A handle
        # with one user maps to that reference itself, not to a set of one: most have
        # one, and a set per handle per request is work for the cyclic collector.
        self.users: dict[Handle, weakref.ref | set[weakref.ref]] = {}
        # Handles of objects that became unreachable; released at the next safe point.
        self.garbage: collections.deque[Handle] = collections.deque()
        # weakref to a live child -> the handle it owns (see Child.__init__)
        self.handles: dict[weakref.ref, Handle] = {}
        # The caches (scopedgpu._caches), set by the Manager: idle command buffers kept
        # for new sequences, and compiled pipelines. Emptied at close.
        self.seq_cache: Any = None
        self.programs: Any = None
        self.reflections: Any = None
        # [weak references of the sequences still running, handle] releases waiting for
        # fences
        self.deferred: list[tuple[set[weakref.ref], Handle]] = []
        # Every Submission (scopedgpu._submission: a command buffer and its fence) from
        # just before its sg_seq is made until it is freed, whoever made it (sequences,
        # storage uploads, stream()): what close() and exit drain, free or keep.
        self.submissions: set[Submission] = set()
        # The submissions released to the engine and not yet freed: a thread still waits
        # on their fence (the last one frees it as it leaves), or their work is not known
        # complete (collect() frees them once their fence signalled).
        self.released: set[Submission] = set()
        # Debug mode: the forgotten-sync checker (_synccheck.SyncCheck), set by the
        # manager; None otherwise, and nothing then costs more.
        self.sync_check: Any = None
        # The children's weakref callback, bound once: a bound method made per child
        # would be one more object for the cyclic collector to track per tensor,
        # algorithm and sequence, which a service making them per request pays for in
        # collections (a cycle engine -> method -> engine, freed by the collector once
        # the manager is gone).
        self.on_unreachable: Callable[[weakref.ref], None] = self.unreachable

    def unreachable(self, ref: weakref.ref) -> None:
        """Weakref callback of a child that became unreachable: queue its handle (no lock,
        no Python calls beyond a dict and a deque: it may run inside the garbage collector
        or at interpreter exit)."""
        try:
            handle = self.handles.pop(ref, None)
        except TypeError:   # "weak object has gone away": a reference never hashed, so
            return          # never registered (Child.__init__ was cut short before)
        if handle is None:
            return  # destroyed before: destroy() already left the sets
        self.tensors.refs.pop(ref, None)
        self.algorithms.refs.pop(ref, None)
        self.sequences.refs.pop(ref, None)
        self.pins.refs.pop(ref, None)
        self.garbage.append(handle)

    def check_alone(self, now: float) -> None:
        """Whether the process has one Python thread (see HOLD_SPIN_MAX_NS), checked now
        (`now`: perf_counter's time), and next at ALONE_RECHECK_S from now."""
        self.alone = threading.active_count() == 1
        self.alone_until = now + ALONE_RECHECK_S

    # -- safe points ------------------------------------------------------------------
    def check_open(self) -> None:
        if self.closed:
            if self.forked:
                raise ForkedError(
                    f"this manager was created in the parent process (pid {self.pid}) "
                    "before os.fork(); GPU objects do not survive a fork, so it cannot be "
                    "used in the child. Create a new Manager in this process.")
            raise DestroyedError("the manager is closed: create a new Manager")

    def running_seqs(self) -> list[Any]:
        """The running sequences. (A reference is dead only while the collector frees
        the sequence together with its manager, whose close() then waits for the device.)"""
        out = []
        for ref in list(self.running):
            seq = ref()
            if seq is not None:
                out.append(seq)
        return out

    def collect(self, fresh: bool = False) -> None:
        """Releases what finalizers queued and retires sequences whose fences signalled.
        Called with the lock held at the start of public operations; their fences are
        polled at most once per POLL_GAP_S, or now with `fresh` (the accounting calls:
        live_objects(), memory_stats(), empty_cache(), wait_idle())."""
        garbage = self.garbage
        while garbage:
            handle = garbage[0]
            if handle.requeue_safe:
                # Its release is safe to run again: it leaves the queue once it returned
                # (an interrupt inside it, or before the del, leaves it for the next call,
                # which releases it again: harmless).
                self.release(handle)
                if garbage and garbage[0] is handle:
                    del garbage[0]
            else:
                self._release_next(garbage)
        if self.running and (fresh or _clock() >= self.poll_after):
            self.poll_running()
        if self.released:
            self.free_released()
        if self.streams:
            self.reap_streams()

    @_ki.step
    def _release_next(self, garbage: collections.deque[Handle]) -> None:
        """Takes the first queued handle out (by subscript and del: a signal right after
        popleft() returned would lose it) and releases it, in one step."""
        handle = garbage[0]
        del garbage[0]
        self.release(handle)

    def free_released(self) -> None:
        """Frees the released submissions that no thread waits on and whose work
        completed (Submission.free decides; the others stay)."""
        for sub in list(self.released):
            if not sub.waiters:
                sub.free(self, False)

    def poll_running(self) -> None:
        """Completes the running sequences whose fences signalled, polling each queue's
        from its oldest submission and stopping at the first still pending: a fence
        signals only after every command submitted before it to the same queue
        completed (its first synchronization scope), so a later one there is pending
        too. O(completed + queues), not O(running): a service with a thousand requests in
        flight polls one fence per call. A sequence whose fence signalled out of that
        order (never seen) is completed by the next poll after the older ones, or by its
        own wait. A poll that fails (not known complete) leaves it running, and its
        queue is polled no further: the next wait on it reports the error. (A sequence
        destroyed while it ran keeps its sg_seq until it completes; see
        Sequence.destroy.)"""
        # (The list and the set are made only when needed: this runs at the start of
        # most public calls while anything runs.)
        done: list[Any] | None = None
        blocked: set[int] | None = None
        one_queue = self.nqueues == 1
        status = _vk.seq_status
        for ref in self.running:      # submission order: a submission enters it last
            seq = ref()
            if seq is None:
                continue
            q = 0
            if not one_queue:
                q = seq.queue
                if blocked is not None and q in blocked:
                    continue
            h = seq.fence
            if h is None:
                continue     # released (a closing manager's): nothing to poll
            if status(h) == 0:
                if done is None:
                    done = [seq]
                else:
                    done.append(seq)
            else:
                if not one_queue:
                    if blocked is None:
                        blocked = {q}
                    else:
                        blocked.add(q)
                    if len(blocked) < self.nqueues:
                        continue     # other queues may hold completed work
                # Every queue waits on a pending fence: creations poll again after the gap.
                self.poll_after = _clock() + POLL_GAP_S
                break
        if done is not None:
            for seq in done:
                seq.finish()

    def reap_streams(self, deadline: float | None = None) -> None:
        """Frees what stream() calls interrupted by Ctrl-C left, once the GPU is done with
        it (with a deadline, waiting until then). Streams under way are their own
        thread's business."""
        for s in list(self.streams):
            if not s.active:
                s.reap(deadline)

    def index(self, ref: weakref.ref, old: frozenset[Handle], new: frozenset[Handle]) -> None:
        """Moves a sequence's entries in `users` from the handles of its previous submission
        to those of its next (new: empty at its end). Safe to run again: a run cut short
        leaves extra entries, which readers ignore, and the caller repeats it."""
        users = self.users
        get = users.get
        for h in old:
            if new and h in new:
                continue
            refs = get(h)
            if refs is ref:
                del users[h]
            elif isinstance(refs, set):
                refs.discard(ref)
                if not refs:
                    users.pop(h, None)
        for h in new:
            refs = get(h)
            if refs is None:
                users[h] = ref
            elif isinstance(refs, set):
                if len(refs) > 64:   # sequences collected unreachable leave dead references
                    refs.difference_update([r for r in refs if r() is None])
                refs.add(ref)
            elif refs is not ref:
                users[h] = {refs, ref}

    def running_users(self, handle: Handle, exclude: Any = None) -> list[Any]:
        """The running sequences whose submission uses the handle (exclude: one to leave
        out)."""
        refs = self.users.get(handle)
        if not refs:
            return []
        running = self.running
        out = []
        for r in (refs if isinstance(refs, set) else (refs,)):
            if r in running:
                seq = r()
                if seq is not None and seq is not exclude and handle in seq.inflight:
                    out.append(seq)
        return out

    def release(self, handle: Handle) -> None:
        """Releases now, or once every running sequence that uses the handle completed."""
        all_users = self.users
        users = None
        if handle in all_users:   # (else no sequence's submission uses it)
            if self.running:
                users = {s.ref for s in self.running_users(handle)}
            all_users.pop(handle, None)
        if users:
            self.deferred.append((users, handle))
        else:
            handle.release(self, False)

    def completed(self, seq: Any) -> None:
        if not self.deferred:
            return
        keep: list[tuple[set[weakref.ref], Handle]] = []
        ready: list[tuple[set[weakref.ref], Handle]] = []
        ref = seq.ref
        for users, handle in self.deferred:
            users.discard(ref)
            (keep if users else ready).append((users, handle))
        self.deferred = keep
        for _, handle in ready:
            handle.release(self, False)


def fence_wait(state: Engine, h: Any, timeout: float | None, spin_ns: int = SPIN_NS) -> int:
    """sg_seq_wait for at most `timeout` seconds (None: no limit), in slices of
    WAIT_SLICE_NS, polling the fence for its first `spin_ns` nanoseconds; stops early
    when the manager gave up on its work (abandoned)."""
    if timeout is None:
        rc = _vk.seq_wait(h, WAIT_SLICE_NS, spin_ns)
        while rc == _SG_TIMEOUT and not state.abandoned:
            rc = _vk.seq_wait(h, WAIT_SLICE_NS, 0)
        return rc
    deadline = time.monotonic() + timeout
    ns = min(int(timeout * 1e9), WAIT_SLICE_NS)
    rc = _vk.seq_wait(h, ns, spin_ns if spin_ns < ns else ns)
    while rc == _SG_TIMEOUT and not state.abandoned:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        rc = _vk.seq_wait(h, min(int(left * 1e9), WAIT_SLICE_NS), 0)
    return rc


def pending_submissions(state: Engine) -> list[tuple[Any, str]]:
    """Every sg_seq whose last submission may still run, with a label for the log."""
    out: dict[int, tuple[Any, str]] = {}

    def add(h: Any, label: str) -> None:
        if h is not None:
            out.setdefault(_vk.handle_id(h), (h, label))

    for seq in state.running_seqs():
        add(seq.fence, repr(seq))
    for sub in state.submissions:
        add(sub.seq, sub.label)
    return list(out.values())


def drain(state: Engine, timeout: float | None) -> list[str]:
    """Waits, at most `timeout` seconds in all (None: no limit), for every submission
    that may still run; returns the labels of those still running. Waits in slices, so
    that Ctrl-C raises KeyboardInterrupt within one slice (nothing is changed then)."""
    pending = pending_submissions(state)
    if not pending:
        return []
    deadline = None if timeout is None else time.monotonic() + timeout
    still = []
    for h, label in pending:
        while True:
            ns = WAIT_SLICE_NS
            if deadline is not None:
                left = deadline - time.monotonic()
                ns = max(0, min(ns, int(left * 1e9)))
            # A failed wait (device lost) ends the wait too: nothing will complete it.
            if _vk.seq_wait(h, ns, 0) != _SG_TIMEOUT:
                break
            if deadline is not None and time.monotonic() >= deadline:
                still.append(label)
                break
    return still


def abandon(state: Engine, still: list[str], why: str) -> None:
    """Closes a manager whose GPU work did not complete: every object is marked destroyed,
    but nothing is freed (the GPU may still use any of it; Vulkan forbids destroying a
    device with work pending). The device, its memory and Vulkan objects stay allocated
    until the process exits; live_vulkan_objects() still counts them."""
    state.abandoned = True
    # The arrays under Manager.pinned() imports (their handles hold them: registered, or
    # queued for release), before the objects let go of their handles.
    pinned = [a for h in itertools.chain(state.handles.values(), state.garbage)
              for a in (getattr(h, "arrays", None) or [])]
    for group in (state.sequences, state.algorithms, state.tensors, state.pins):
        for obj in list(group):
            obj.mark_destroyed()
        group.clear()
    state.named.clear()
    ABANDONED.append(state)
    # Host memory the GPU may still use and numpy owns (host blocks of imported memory,
    # imported host copies of tensors): made immortal, or numpy would free it with its last
    # reference, at the latest when the interpreter exits, under the running GPU.
    keep: list[Any] = []
    if state.pool is not None:
        keep += state.pool.host_memory()
    keep += [getattr(h, "host", None) for h in state.handles.values()]
    keep += pinned
    for arr in keep:
        if arr is not None:
            _vk.keep_forever(arr)
    # The drivers' exit handlers would wait for this work (NVIDIA's does: the process never
    # exits) or free what it uses: the process skips them at exit (sg_exit_guard).
    if _vk.exit_guard() < 0:
        log.warning("no on_exit() in this C library: the Vulkan driver's exit handlers "
                    "will run at exit, under GPU work that was given up on")
    log.warning(
        "closing the manager on %s: %d submission(s) still running %s: %s. Its device, "
        "memory and Vulkan objects stay allocated until the process exits, because the "
        "GPU may still use them (Manager(wait_timeout=...) or SCOPEDGPU_WAIT_TIMEOUT "
        "sets how long close and exit wait).",
        state.info.name if state.info else "?", len(still), why, "; ".join(still))


def abandoned_managers() -> int:
    """How many managers of this process were closed while GPU work still ran, and so
    keep their device and memory until the process exits (see Manager.close)."""
    return len(ABANDONED)


def sleep_unlocked(state: Engine, seconds: float) -> None:
    """Sleeps with the manager's lock (held once) released, so that other threads can
    finish what they do under it."""
    state.lock.release()
    try:
        time.sleep(seconds)
    finally:
        state.lock.acquire()


def shutdown(state: Engine) -> None:
    """Closes a manager: waits for all GPU work (at most state.wait_timeout seconds), then
    destroys sequences, algorithms, tensors, pipelines, memory blocks, the device and the
    instance, children first. Work still running after the wait is abandoned, not freed
    (see abandon). Runs at most once (it is the manager's weakref.finalize callback)."""
    with state.lock:
        if state.closed:
            return
        if state.forked:
            # Inherited across os.fork(): these Vulkan objects are the parent's. No
            # Vulkan call, no wait on the parent's device.
            state.closed = True
            return
        interrupted: BaseException | None = None
        still: list[str] = []
        if state.streams:
            # stream() calls in other threads see `closing` at their next step, wait for
            # their own submissions and free what they made (the wait releases the lock);
            # what streams interrupted by Ctrl-C left is freed here once the GPU is done.
            state.closing = True
            deadline = time.monotonic() + (0.0 if state.gave_up else state.wait_timeout)
            try:
                while any(s.active for s in state.streams) and time.monotonic() < deadline:
                    sleep_unlocked(state, 0.002)   # the streams free under the lock
                state.reap_streams(deadline)
            except KeyboardInterrupt as exc:   # give up the wait: what is left is kept
                interrupted = exc
        if state.dev is not None:
            try:
                still = drain(state, 0.0 if state.gave_up or interrupted
                              else state.wait_timeout)
                why = (f"after {state.wait_timeout:g} s" if interrupted is None
                       else "when KeyboardInterrupt stopped the wait")
            except KeyboardInterrupt as exc:   # at exit or in the collector: give up now
                interrupted = exc
                still = drain(state, 0.0)
                why = "when KeyboardInterrupt stopped the wait"
            if state.streams:   # their command buffers may still run: nothing is freed
                # (one interrupted by Ctrl-C whose work completed meanwhile is freed now)
                state.reap_streams()
            if state.streams:
                still.append(f"{len(state.streams)} Manager.stream() call(s)")
                if interrupted is None:
                    why = f"after {state.wait_timeout:g} s"
        state.closed = True
        if still:
            abandon(state, still, why)
            if interrupted is not None:
                raise interrupted
            return
        if state.dev is not None:
            # Every known submission completed above: this returns at once.
            _vk.device_wait_idle(state.dev)
            for seq in state.running_seqs():
                try:
                    seq.finish()
                except Exception:  # a failed host copy must not stop the teardown
                    log.exception("completing %r while closing", seq)
            # Sequences collected with this manager while they ran: their host copies
            # (the device is idle, and the staging memory is still there).
            for h in itertools.chain(state.garbage, state.handles.values()):
                try:
                    h.complete()   # (only sequence handles have host work due)
                except Exception:
                    log.exception("completing a collected sequence while closing")
            state.running.clear()
            state.users.clear()
            for users, handle in state.deferred:
                handle.release(state, True)
            state.deferred.clear()
            while state.garbage:
                state.garbage.popleft().release(state, True)
            for group in (state.sequences, state.algorithms, state.tensors, state.pins):
                for obj in list(group):
                    h = obj.mark_destroyed()
                    if h is not None:
                        h.release(state, True)
                group.clear()
            # Children collected in one reference cycle with the manager: the collector
            # cleared the weak sets before any finalizer ran, and theirs may run after this
            # one. Release their handles now (releases are idempotent), children first.
            handles = list(state.handles.values())
            for h in sorted(handles, key=lambda h: h.close_order):
                h.release(state, True)
            state.handles.clear()
            state.named.clear()
            if state.seq_cache is not None:
                state.seq_cache.drop()
            # Threads still inside a fence wait on a destroyed sequence return at once (the
            # device is idle) and free it; the device must outlive that. Bounded: a
            # waiter that never leaves (its token outlived it) keeps the device, as work
            # given up on does, rather than hang close() or free the fence under it.
            deadline = time.monotonic() + state.wait_timeout
            while True:
                waited = [sub for sub in state.submissions if sub.waiters]
                if not waited or time.monotonic() >= deadline:
                    break
                sleep_unlocked(state, 0.001)
            if waited:
                abandon(state, [f"{len(waited)} fence wait(s) never left"],
                        f"after {state.wait_timeout:g} s")
                if interrupted is not None:
                    raise interrupted
                return
            # What is left (storage uploads cut short, released submissions): the device
            # is idle. Their staging ranges go with the pool.
            for sub in list(state.submissions):
                sub.destroy_now(state)
            state.released.clear()
            if state.programs is not None:
                state.programs.destroy_all()
            if state.pool is not None:
                state.pool.destroy()
            _vk.device_destroy(state.dev)
            state.dev = None
            # After vkDestroyDevice: the layer reports objects the device still had then.
            try:
                state.check_validation("closing the manager")
            except ValidationError as exc:
                log.error("%s", exc)
        if state.inst is not None:
            _vk.instance_destroy(state.inst)
            state.inst = None
        if interrupted is not None:
            raise interrupted


# Set in a child of os.fork() whose parent had loaded the Vulkan driver: the child's copy
# of the driver's state may not give it a device (see fork_hint).
FORKED_FROM_DRIVER = False


def fork_hint() -> str:
    """What to tell the user when opening a device failed in such a child, else ""."""
    if not FORKED_FROM_DRIVER:
        return ""
    return (f"This process is a child of os.fork() (pid {os.getpid()}) of a process that had already "
            "opened the Vulkan driver, and this driver cannot open a device in such a child. "
            "Start worker processes with multiprocessing's 'spawn' or 'forkserver' start "
            "method (multiprocessing.get_context('spawn')), or fork before the first "
            "Manager or sg.devices() call")


def after_fork() -> None:
    """In the child of os.fork(): every inherited manager becomes unusable (ForkedError),
    and nothing inherited reaches Vulkan, not even at exit: the Vulkan objects belong to
    the parent, and the child's copy of the driver's state is not to be trusted.

    Nor do the drivers' own exit handlers run in the child, where a driver was loaded:
    NVIDIA's tear down, through the device files the child shares with its parent, the
    parent's device (VK_ERROR_DEVICE_LOST there, and a crash here); lavapipe's join
    threads that exist only in the parent (a crash). The shim registers an exit handler
    that ends the child with its own status once Python has finalized, before theirs
    (docs/troubleshooting.md, "fork and multiprocessing")."""
    global FORKED_FROM_DRIVER
    rc = _vk.exit_guard()
    if rc != 0:
        FORKED_FROM_DRIVER = True
    if rc < 0:
        log.warning("os.fork() after the Vulkan driver was loaded, on a C library without "
                    "on_exit(): the driver's exit handlers will run in this child process")
    for state in list(STATES):
        state.forked = True
        state.closed = True
        # Another thread of the parent may have held it at the fork.
        state.lock = threading.RLock()
        for group in (state.sequences, state.algorithms, state.tensors, state.pins):
            for obj in list(group):
                obj.mark_destroyed()
    ABANDONED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork)
