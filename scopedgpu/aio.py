"""asyncio: await GPU work without blocking the event loop.

    from scopedgpu import aio
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([x])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([out]))
        await aio.eval(seq)          # submits, then awaits the fence; the loop runs on

`eval(seq)` is `seq.eval()`, `wait(seq)` is `seq.eval_await()` and `run(mgr, *ops)` is
`mgr.run(*ops)`, each as a coroutine. The submission itself is made on the calling thread
(it takes microseconds); the wait for the fence is not.

How the wait is made: one waiter thread per process, shared by every awaited sequence of
every manager and every event loop, waits on the fence of the oldest pending sequence
(the manager's lock released, as `eval_await` does) in slices of `SLICE` seconds and
polls the others between slices, each queue from its oldest entry up to the first still
running (a fence signals only after the earlier submissions to its queue completed); the
sequences completed in one step resolve their futures through one
`loop.call_soon_threadsafe` per event loop. Why not poll from the loop with
`asyncio.sleep`: the loop's timers have a resolution of one millisecond (epoll), so
every await would cost at least that, even for a dispatch of 20 us, and every poll would
wake the loop; the waiter thread wakes the loop once per batch of completed sequences,
tens of microseconds after the fence signals, and the completion work (the host copies
of `OpTensorSyncLocal`) runs on the waiter thread, not on the loop. Why not a thread per
wait (`asyncio.to_thread`): a thousand concurrent requests would park a thousand
threads. The cost: one thread asleep in `vkWaitForFences` while work is pending
(spinning its first 0.2 ms of each slice, as every wait does), and a sequence that
completes before an older one on another queue or device is seen at the end of the
current slice (at most `SLICE` late).

While a sequence is awaited, no other coroutine may use it (as with threads: one
sequence, one user at a time). Cancelling the awaiting coroutine does not stop the GPU
work: the sequence still runs, and its `with` block's exit waits for it as usual.
"""
from __future__ import annotations

import asyncio
import math
import numbers
import os
import threading
from typing import TYPE_CHECKING, Any

from scopedgpu._errors import DestroyedError

if TYPE_CHECKING:
    from scopedgpu.manager import Manager
    from scopedgpu.ops import Op
    from scopedgpu.sequence import Sequence

__all__ = ["eval", "wait", "run", "SLICE"]

SLICE = 0.005   # seconds the waiter thread blocks on one fence before polling the others


class _Entry:
    """One awaited sequence. The waiter empties it (seq, loop, fut: None) in the step that
    settles its future, so that nothing of the waiter's, a local of its loop included,
    keeps the sequence (and through it its manager, tensors and algorithms) alive once
    the wait is over."""
    __slots__ = ("seq", "loop", "fut", "key")

    def __init__(self, seq: Sequence, loop: asyncio.AbstractEventLoop, fut: asyncio.Future):
        self.seq: Any = seq
        self.loop: Any = loop
        self.fut: Any = fut
        # Its queue: fences of one queue signal in the order of submission (see _step).
        self.key = (id(seq.lock), seq.queue)


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
    resource, and a sequence it waits on is completed by its manager's close)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pending: list[_Entry] = []
        self.thread: threading.Thread | None = None

    def add(self, entry: _Entry) -> None:
        with self.cond:
            self.pending.append(entry)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="scopedgpu-aio-waiter",
                                               daemon=True)
                self.thread.start()
            self.cond.notify()

    def _resolve(self, entry: _Entry, exc: BaseException | None,
                 settled: dict[Any, list[tuple[asyncio.Future, BaseException | None]]]
                 ) -> None:
        """Takes the entry out of the pending list and adds its future to `settled` (by
        loop), which _settle_all() hands to each loop in one call."""
        with self.cond:
            try:
                self.pending.remove(entry)
            except ValueError:
                return
            # Emptied before the future is settled: the awaiting coroutine resumes with
            # nothing of its left here.
            loop, fut = entry.loop, entry.fut
            entry.seq = entry.loop = entry.fut = None
        settled.setdefault(loop, []).append((fut, exc))

    @staticmethod
    def _settle_all(settled: dict[Any, list[tuple[asyncio.Future, BaseException | None]]]
                    ) -> None:
        """One call_soon_threadsafe per loop for every future settled in a step: one
        wake-up of the loop for a batch of completions, not one each."""
        for loop, futs in settled.items():
            try:
                loop.call_soon_threadsafe(_settle_many, futs)
            except RuntimeError:
                pass             # the loop was closed: nobody is waiting any more
        settled.clear()

    def _done(self, entry: _Entry, settled: dict[Any, Any]) -> bool:
        """Polls one entry without blocking; True when it was resolved."""
        if entry.fut.done():          # cancelled: stop watching (the GPU work runs on)
            self._resolve(entry, None, settled)
            return True
        # Never blocks on the manager's lock: a thread holding it (wait_idle, close, an
        # upload) must not hold up the sequences of every other manager and loop.
        lock = entry.seq.lock
        if not lock.acquire(blocking=False):
            return False              # polled again next slice
        try:
            running = entry.seq.is_running
        except BaseException as exc:  # a failed fence poll (DeviceError)
            self._resolve(entry, exc, settled)
            return True
        finally:
            lock.release()
        if not running:
            self._resolve(entry, None, settled)
            return True
        return False

    def _loop(self) -> None:
        full = True
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
            full = self._step(full)   # its locals (the batch) are gone before the next wait

    def _step(self, full: bool) -> bool:
        """Polls the pending entries, then waits one slice on the oldest still running;
        returns whether the next step polls every entry. (No local here names a sequence
        once the step returns: the entries are emptied as they are resolved.)

        Entries are kept in the order they were added, which on one event loop is the
        order of submission, and a fence signals only after every earlier submission to
        its queue completed: so each (manager, queue) is polled from its oldest entry up
        to the first still running, not further (O(completed), not O(pending), per step:
        a thousand requests in flight cost one poll per step, not a thousand). Entries
        added out of that order (other threads, other loops) cost at most one slice: a
        step after a slice that ended without completion polls every entry."""
        settled: dict[Any, list[tuple[asyncio.Future, BaseException | None]]] = {}
        with self.cond:
            batch = list(self.pending)
        left = []
        blocked: set[tuple[int, int]] = set()
        for e in batch:
            key = e.key
            if not full and key in blocked and not e.fut.done():
                left.append(e)
                continue
            if not self._done(e, settled):
                blocked.add(key)
                left.append(e)
        del batch
        if settled:
            self._settle_all(settled)
        if not left:
            return False
        oldest = left[0]
        del left
        try:
            done = oldest.seq.eval_await(SLICE)   # GIL and manager lock released
        except DestroyedError as exc:
            # Destroyed (or its manager closed) meanwhile: both complete its work first.
            if oldest.seq.is_running:
                self._resolve(oldest, exc, settled)
                self._settle_all(settled)
                return False
            done = True
        except BaseException as exc:
            self._resolve(oldest, exc, settled)
            self._settle_all(settled)
            return False
        if done:
            self._resolve(oldest, None, settled)
            self._settle_all(settled)
            return False
        return True


_waiter = _Waiter()


def _reset_after_fork() -> None:
    global _waiter
    _waiter = _Waiter()   # the thread did not survive the fork; its entries are the parent's


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
    if fut is None:
        return True
    if timeout is None:
        await fut
        return True
    try:
        await asyncio.wait_for(fut, timeout)
    except asyncio.TimeoutError:
        return False      # wait_for cancelled the future: the waiter drops it
    return True


async def eval(seq: Sequence, op: Op | None = None) -> Sequence:
    """`seq.eval(op)` as a coroutine: submits the recorded operations (with an op: clears
    the sequence and records it first, as kp does), then awaits their completion without
    blocking the event loop. A submission still running is awaited before resubmitting."""
    _check_seq(seq, "aio.eval()")
    if seq.is_running:
        await wait(seq)
    seq.eval_async(op)
    # wait(seq)'s work, without its argument checks (done above) and its coroutine.
    fut = _watch(seq)
    if fut is not None:
        await fut
    return seq


def _watch(seq: Sequence) -> asyncio.Future[Any] | None:
    """A future of the running loop that the waiter thread settles when seq's last
    submission completed; None when it is not running. DestroyedError when destroyed."""
    seq.check_alive()
    if not seq.is_running:
        return None
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    _waiter.add(_Entry(seq, loop, fut))
    return fut


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
