"""asyncio: await GPU work without blocking the event loop.

    from scopedgpu import aio
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([x])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([out]))
        await aio.eval(seq)          # submits, then awaits the fence; the loop runs on

`eval(seq)` is `seq.eval()`, `wait(seq)` is `seq.eval_await()` and `run(mgr, *ops)` is
`mgr.run(*ops)`, each as a coroutine. The submission itself is made on the calling thread
(it takes microseconds); the wait for the fence is not.

How the wait is made. First by the awaiting coroutine itself: right after the
submission it gives the loop one turn (a bare yield, as `asyncio.sleep(0)`: no future, no
timer), then polls its own fence (not even that when another call completed the
sequence meanwhile). Under load, that turn runs the other requests' steps, which take
longer than a small request's GPU work: the work is done by then, and the request ends
with no future, no poller entry and no wake-up of its own (fewer calls a request, and
fewer objects for the cyclic collector to trace while many requests are in flight).
Work still running then (long work, or a loop with little else to do) is awaited by the
loop: while sequences it awaits are pending, a callback of the loop (`_Poller`)
re-schedules itself (the loop does not sleep), polls each queue from its oldest entry up
to the first still running (a fence signals only after the earlier submissions to its
queue completed) and sets the completed ones' futures directly; the completion work (the
host copies of `OpTensorSyncLocal`) runs there. Short GPU work is settled this way with
no other thread involved: a hand-off between threads costs tens of microseconds of
wake-up and GIL transfer on each side, more than the GPU work of a small request. After
SPIN_NS (0.2 ms, the shortest spin of a scopedgpu wait) without a completion or a new
awaited sequence, the entries left go to one waiter thread per process, shared by every
manager and loop, and the loop sleeps: the thread waits on the fence of the newest entry
of a queue (GIL and manager lock released) in slices of `SLICE` seconds, then settles it
and every entry of its queue added before it with one
`loop.call_soon_threadsafe` per loop; each coroutine checks its own sequence when it
resumes (and awaits again in the rare case that it still runs, submitted out of the
order of its entry by another thread). Why not poll from the loop with
`asyncio.sleep`: the loop's timers have a resolution of one millisecond (epoll), so
every await would cost at least that. Why not a thread per wait (`asyncio.to_thread`):
a thousand concurrent requests would park a thousand threads. The cost: a loop spins a
core while it awaits GPU work (at most 0.2 ms past the last completion or submission),
one thread asleep in `vkWaitForFences` while long work is pending, and a long sequence
of another queue or device that completes while the thread waits on one queue is seen
at the end of the current slice (at most `SLICE` late).

While a sequence is awaited, no other coroutine may use it (as with threads: one
sequence, one user at a time). Cancelling the awaiting coroutine does not stop the GPU
work: the sequence still runs, and its `with` block's exit waits for it as usual.
"""
from __future__ import annotations

import asyncio
import collections
import math
import numbers
import os
import threading
import time
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable

from scopedgpu._engine import SPIN_NS
from scopedgpu._errors import DestroyedError

if TYPE_CHECKING:
    from scopedgpu.manager import Manager
    from scopedgpu.ops import Op
    from scopedgpu.sequence import Sequence

__all__ = ["eval", "wait", "run", "SLICE"]

SLICE = 0.005   # seconds the waiter thread blocks on one fence before polling the others


class _Entry:
    """One awaited sequence, watched by its loop's _Poller, then (when the poller gave up
    spinning) by the waiter thread. Whoever settles its future empties it first (seq,
    loop, fut: None), so that nothing of the poller's or the waiter's keeps the sequence
    (and through it its manager, tensors and algorithms) alive once the wait is over."""
    __slots__ = ("seq", "loop", "fut", "key")

    def __init__(self, seq: Sequence, loop: asyncio.AbstractEventLoop, fut: asyncio.Future,
                 key: tuple[int, int]):
        self.seq: Any = seq
        self.loop: Any = loop
        self.fut: Any = fut
        # Its queue: fences of one queue signal in the order of submission (see _step).
        self.key = key

    def take(self) -> tuple[Any, Any]:
        """Empties the entry before its future is settled (the awaiting coroutine then
        resumes with nothing of its left here); returns its (loop, future)."""
        loop, fut = self.loop, self.fut
        self.seq = self.loop = self.fut = None
        return loop, fut


_Settled = dict[Any, list[tuple[asyncio.Future, BaseException | None]]]


def _completed(seq: Any) -> bool:
    """Whether seq's last submission completed (its completion work then done here if
    nobody did it yet), polled without blocking: False also while another thread holds
    its manager's lock (wait_idle, close, an upload), which must not hold up the
    sequences of every other manager and loop. A failed fence poll raises (DeviceError)."""
    lock = seq.lock
    if not lock.acquire(blocking=False):
        return False
    try:
        return not seq.is_running
    finally:
        lock.release()


def _settle_many(futs: list[tuple[asyncio.Future, BaseException | None]]) -> None:
    """Runs on the futures' loop: settles each (one cancelled meanwhile is left alone)."""
    for fut, exc in futs:
        if fut.done():
            continue
        if exc is None:
            fut.set_result(True)
        else:
            fut.set_exception(exc)


class _Waiter:
    """The process's one waiter thread (started on first use, a daemon: it holds no
    resource, and a sequence it waits on is completed by its manager's close).

    It watches the entries that loops' pollers gave up spinning on (GPU work that runs
    longer than SPIN_NS), kept per queue (manager and queue index) in the order they were
    added, which on one event loop is the order of submission. It blocks (the GIL and
    the manager's lock released) on the NEWEST entry of the first queue, for a slice of
    SLICE seconds, and then settles every entry of that queue added before it, with one
    `loop.call_soon_threadsafe` per loop for the lot: a fence signals only after the
    earlier submissions to its queue completed, so one wake-up of this thread (one GIL
    hand-off with the loops' threads) settles a whole batch, not one entry each."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.queues: dict[tuple[int, int], collections.deque[_Entry]] = {}
        self.idle = False          # the thread sleeps on cond until an entry is added
        self.thread: threading.Thread | None = None

    def add_many(self, entries: list[_Entry]) -> None:
        """Adds entries a loop's poller gave up polling (in their order)."""
        with self.cond:
            for entry in entries:
                q = self.queues.get(entry.key)
                if q is None:
                    q = self.queues[entry.key] = collections.deque()
                q.append(entry)
            if self.idle:
                self.idle = False
                self.cond.notify()
            elif self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="scopedgpu-aio-waiter",
                                               daemon=True)
                self.thread.start()

    def _resolve(self, entry: _Entry, exc: BaseException | None, settled: _Settled) -> None:
        """Takes the entry out of its queue, unless settled already, and adds its future to
        `settled` (by loop), which _settle_all() hands to each loop in one call."""
        with self.cond:
            if entry.fut is None:
                return            # settled already
            q = self.queues.get(entry.key)
            if q is not None:
                if q and q[0] is entry:
                    q.popleft()
                else:
                    q.remove(entry)
                if not q:
                    del self.queues[entry.key]
            loop, fut = entry.take()
        settled.setdefault(loop, []).append((fut, exc))

    @staticmethod
    def _settle_all(settled: _Settled) -> None:
        """One call_soon_threadsafe per loop for every future settled in a step: one
        wake-up of the loop for a batch of completions, not one each."""
        for loop, futs in settled.items():
            try:
                loop.call_soon_threadsafe(_settle_many, futs)
            except RuntimeError:
                pass             # the loop was closed: nobody is waiting any more
        settled.clear()

    def _done(self, entry: _Entry, settled: _Settled) -> bool:
        """Polls one entry without blocking; True when it was resolved (or was settled
        already)."""
        seq, fut = entry.seq, entry.fut
        if seq is None or fut is None:
            return True               # settled already
        if fut.done():                # cancelled: stop watching (the GPU work runs on)
            self._resolve(entry, None, settled)
            return True
        try:
            done = _completed(seq)    # False: polled again next slice
        except BaseException as exc:  # a failed fence poll (DeviceError)
            self._resolve(entry, exc, settled)
            return True
        if done:
            self._resolve(entry, None, settled)
        return done

    def _loop(self) -> None:
        full = True
        while True:
            with self.cond:
                while not self.queues:
                    self.idle = True
                    self.cond.wait()
                self.idle = False
            full = self._step(full)   # its locals (the batch) are gone before the next wait

    def _step(self, full: bool) -> bool:
        """Polls the pending entries, then waits one slice on the newest entry of the first
        queue; returns whether the next step polls every entry. (No local here names a
        sequence once the step returns.)

        Each queue is polled from its oldest entry up to the first still running, not
        further: O(completed), not O(pending), per step. When the newest entry's fence
        signalled, every entry of its queue added before it is settled with it, unpolled:
        a fence signals only after every earlier submission to its queue completed. Each
        awaiting coroutine checks its own sequence when it resumes (awaiting again in the
        rare case that it still runs: entries added out of submission order, by several
        threads), and completes it there when nobody has yet. A step after a slice that
        ended without completion polls every entry, and moves the queue waited on to the
        end, so that queues take turns."""
        settled: _Settled = {}
        with self.cond:
            batch = [list(q) for q in self.queues.values()]
        for entries in batch:
            for e in entries:
                if not self._done(e, settled) and not full:
                    break
        del batch
        with self.cond:
            for key in [k for k, q in self.queues.items() if not q]:
                del self.queues[key]
            q = next(iter(self.queues.values()), None)
            target = q[-1] if q else None
            seq = target.seq if target is not None else None
        if settled:
            self._settle_all(settled)
        if target is None or seq is None:
            return False
        key = target.key
        try:
            done = seq.eval_await(SLICE)   # GIL and manager lock released
        except DestroyedError as exc:
            # Destroyed (or its manager closed) meanwhile: both complete its work first.
            if seq.is_running:
                self._resolve(target, exc, settled)
                self._settle_all(settled)
                return False
            done = True
        except BaseException as exc:
            self._resolve(target, exc, settled)
            self._settle_all(settled)
            return False
        del seq
        with self.cond:
            q = self.queues.get(key)
            if q is None:
                return False
            if not done:
                del self.queues[key]   # to the end: the next slice waits on another queue
                self.queues[key] = q
                return True
            if target.fut is not None:
                # The target and everything added to its queue before it.
                while q:
                    e = q.popleft()
                    loop, fut = e.take()
                    settled.setdefault(loop, []).append((fut, None))
                    if e is target:
                        break
            if not q:
                del self.queues[key]
        self._settle_all(settled)
        return False


_waiter = _Waiter()


class _Poller:
    """One event loop's own polling of its awaited sequences, a callback on the loop
    re-scheduled while any is pending (the loop does not sleep meanwhile): each run polls
    every queue from its oldest entry up to the first still running, and settles the
    completed ones' futures directly. It sees the sequences whose coroutine's own poll
    (one turn of the loop after the submission) found them running: short GPU work on a
    loop with little else to do, or longer work; it settles them with no thread hand-off
    at all. After SPIN_NS seconds without a completion or a new entry, the entries left
    go to the waiter thread, which waits for them with the GIL released, and the loop
    sleeps again. It holds its loop weakly (the loop holds it, in _pollers, by a weak key): a
    finished loop is collected with its poller."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.queues: dict[tuple[int, int], collections.deque[_Entry]] = {}
        self.scheduled = False
        self.since = 0.0          # when the last completion (or the first entry) was seen

    def add(self, entry: _Entry) -> None:
        q = self.queues.get(entry.key)
        if q is None:
            q = self.queues[entry.key] = collections.deque()
        q.append(entry)
        self.since = time.perf_counter()   # a new entry: its own spin
        if not self.scheduled:
            self.scheduled = True
            entry.loop.call_soon(self.tick)

    def tick(self) -> None:
        self.scheduled = False
        progress = False
        for q in self.queues.values():
            while q:
                e = q[0]
                fut = e.fut
                if not fut.done():
                    try:
                        done = _completed(e.seq)
                    except Exception as exc:        # a failed fence poll (DeviceError)
                        q.popleft().take()
                        fut.set_exception(exc)
                        continue
                    if not done:
                        break             # polled again next run
                    fut.set_result(True)
                    progress = True
                q.popleft().take()
        if not any(self.queues.values()):
            self.queues.clear()
            return
        now = time.perf_counter()
        if progress:
            self.since = now
        elif now - self.since > _SPIN:
            left = [e for q in self.queues.values() for e in q]
            self.queues.clear()
            _waiter.add_many(left)
            return
        loop = self.loop()
        if loop is not None:
            self.scheduled = True
            loop.call_soon(self.tick)


_SPIN = SPIN_NS / 1e9
_pollers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Poller] = (
    weakref.WeakKeyDictionary())


def _nothing() -> None:
    return None


# The loop _add() served last and its poller, both weakly (a finished loop is still
# collected with its poller, and the poller's entries with it).
_last: tuple[Callable[[], Any], Callable[[], Any]] = (_nothing, _nothing)


def _reset_after_fork() -> None:
    global _waiter, _pollers, _last
    _waiter = _Waiter()   # the thread did not survive the fork; its entries are the parent's
    _pollers = weakref.WeakKeyDictionary()
    _last = (_nothing, _nothing)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


_sequence_class: Any = None   # scopedgpu.sequence.Sequence, imported on first use


def _check_seq(seq: Any, what: str) -> None:
    cls = _sequence_class
    if cls is None or type(seq) is not cls:
        if cls is None:
            cls = _import_sequence()
        if not isinstance(seq, cls):
            raise TypeError(f"{what}: seq must be a scopedgpu Sequence (manager.sequence()), "
                            f"not {type(seq).__name__} {seq!r}")


def _import_sequence() -> Any:
    global _sequence_class
    from scopedgpu.sequence import Sequence
    _sequence_class = Sequence
    return Sequence


def _timeout(timeout: Any, what: str) -> float | None:
    """eval_await's rule: None or math.inf (no limit), or a number of seconds >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"{what}: timeout must be None or a number of seconds, not "
                        f"{type(timeout).__name__} {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"{what}: timeout must be None or >= 0 seconds, not {timeout!r}")
    return None if math.isinf(timeout) else float(timeout)


async def wait(seq: Sequence, timeout: float | None = None) -> bool:
    """Awaits the last submission of `seq` (made with `eval_async`), at most `timeout`
    seconds (None or math.inf: no limit), without blocking the event loop. True when it
    completed (the host copies of its OpTensorSyncLocal ops are then done), False on
    timeout (the sequence still runs). A wait the driver fails raises DeviceError; an
    argument of the wrong type or value raises TypeError or ValueError naming it."""
    _check_seq(seq, "aio.wait()")
    timeout = _timeout(timeout, "aio.wait()")
    fut = _watch(seq)
    if timeout is None:
        while fut is not None:
            await fut
            fut = _rewatch(seq)
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while fut is not None:
        try:
            await asyncio.wait_for(fut, max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            return False  # wait_for cancelled the future: the waiter drops it
        fut = _rewatch(seq)
    return True


async def eval(seq: Sequence, op: Op | None = None) -> Sequence:
    """`seq.eval(op)` as a coroutine: submits the recorded operations (with an op: clears
    the sequence and records it first, as kp does), then awaits their completion without
    blocking the event loop. A submission still running is awaited before resubmitting."""
    _check_seq(seq, "aio.eval()")
    if seq.is_running:
        await wait(seq)
    seq.eval_async(op)
    if not seq.submitted:
        return seq   # nothing was recorded, nothing submitted
    # One turn of the loop before the first poll (none right after the submission: the
    # work cannot be done yet); then wait(seq)'s work, without its argument checks (done
    # above) and its coroutine. The poll does not block on the manager's lock (another
    # thread's wait_idle() or close() may hold it): held, the poller polls later.
    await _one_turn()
    fut = None if _completed(seq) else _add(seq)
    while fut is not None:
        await fut
        fut = _rewatch(seq)
    return seq


@types.coroutine
def _one_turn() -> Any:
    """Gives the event loop one turn: the awaiting task is scheduled again at once, after
    the callbacks already due (asyncio.sleep(0)'s bare yield, without its call)."""
    yield


def _rewatch(seq: Sequence) -> asyncio.Future[Any] | None:
    """After a settled future: None when seq's submission completed (its completion work
    done here when nobody did it yet); otherwise (settled by the fence order of its
    queue, but added out of it) a new future to await."""
    if not seq.is_running:
        return None
    return _add(seq)


def _add(seq: Sequence) -> asyncio.Future[Any]:
    global _last
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    last_loop, last_poller = _last
    poller = last_poller()
    if last_loop() is not loop or poller is None:
        # (a WeakKeyDictionary lookup makes a weakref each time: once per loop here)
        poller = _pollers.get(loop)
        if poller is None:
            poller = _pollers[loop] = _Poller(loop)
        _last = (weakref.ref(loop), weakref.ref(poller))
    poller.add(_Entry(seq, loop, fut, (id(seq.lock), seq.queue)))
    return fut


def _watch(seq: Sequence) -> asyncio.Future[Any] | None:
    """A future of the running loop that is settled when seq's last submission completed
    (by the loop's own poller, or by the waiter thread); None when it is not running.
    DestroyedError when destroyed."""
    seq.check_alive()
    return _rewatch(seq)


async def run(manager: Manager, *ops: Op) -> None:
    """`manager.run(*ops)` as a coroutine: records the ops in an anonymous sequence,
    evaluates it without blocking the event loop, and destroys it."""
    from scopedgpu.manager import Manager
    if not isinstance(manager, Manager):
        raise TypeError(f"aio.run(): manager must be a scopedgpu Manager, not "
                        f"{type(manager).__name__} {manager!r}")
    with manager.sequence() as seq:
        for op in ops:
            seq.record(op)
        await eval(seq)
