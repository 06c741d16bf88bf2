"""Ctrl-C and scopedgpu's bookkeeping: the rule, stated once.

CPython raises KeyboardInterrupt in the main thread wherever it checks for signals: when
any call into C returns (a Vulkan call of the shim, list.pop(), a lock's release) and when
any Python function starts, so between almost any two steps. A step that makes a Vulkan
object and the step that records it, or the step that takes one out of its record and the
one that destroys it, must never be cut apart: the object would be lost (leaked), or
recorded after it was freed (freed twice). scopedgpu keeps that rule in two ways:

- The hot paths (a tensor, an algorithm or a sequence made, evaluated and freed; the
  pool's ranges): each such pair of steps is one line whose only call into C is its last
  operation (a handle is taken out of its holder by pure Python and passed straight to
  the C function that frees it), and an out-parameter made before the C call that fills
  it (_vk.out) is registered before that call. No cost per call; the line sweeps of
  tests/lifetime/test_interrupts.py check it line by line.
- Whole operations of bounded CPU work that create and free many objects (a
  Manager.stream() call, Manager.pinned()): they run inside `protected()`, which defers a
  KeyboardInterrupt arriving in the section to its end, or to the section's next
  `checkpoint()` (the points where a stream waits for the GPU, where nothing is half
  made). Ctrl-C then reaches the caller within one wait slice, and what was under way is
  either complete or recorded where close() finds it.

protected() works in the main thread of the main interpreter (the only place Python runs
signal handlers) when the SIGINT handler is a Python callable (the default
signal.default_int_handler, asyncio's, or a program's own): for the section it replaces
that handler with one that records the signal, then calls the saved handler with it at the
checkpoint or at the end, so a program's own handler still runs, once per signal, late. In
other threads, or where SIGINT is ignored or left to the C default, there is nothing to
defer and it costs one comparison. Replacing the handler and back costs about 10
microseconds (timeit of an empty section, 2-core CI machine), which is why the hot paths
use the first way (tests/lifetime/test_signals.py sends real SIGINTs
to streams; tests/lifetime/test_interrupts.py sweeps both)."""
from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["protected", "checkpoint"]

_depth = 0                               # protected() sections open in the main thread
_saved: Any = None                       # the SIGINT handler they replaced
_deferred: list[int] = []                # signal numbers received meanwhile


def _record(signum: int, frame: FrameType | None) -> None:
    _deferred.append(signum)


class protected:
    """`with protected():` defers KeyboardInterrupt (any SIGINT handler) in the block to its
    end or to its next checkpoint(). Nests; reentrant in one thread."""
    __slots__ = ("active",)

    def __enter__(self) -> protected:
        global _depth, _saved
        self.active = False
        if threading.get_ident() != _main_ident():
            return self
        if _depth:
            _depth += 1; self.active = True  # noqa: E702 - nothing in between raises
            return self
        try:
            old = signal.getsignal(signal.SIGINT)
        except ValueError:   # not the main interpreter
            return self
        if not callable(old):
            return self       # SIG_IGN, SIG_DFL or a C handler: no KeyboardInterrupt
        _deferred.clear()
        _saved = old
        try:
            # From its return on, a signal (even one already pending) goes to _record.
            signal.signal(signal.SIGINT, _record)
        except ValueError:
            return self
        _depth = 1; self.active = True  # noqa: E702
        return self

    def __exit__(self, tp: Any, exc: Any, tb: Any) -> None:
        global _depth
        if not self.active:
            return
        self.active = False
        _depth -= 1
        if _depth:
            return
        signal.signal(signal.SIGINT, _saved)
        if _deferred:
            if tp is not None and issubclass(tp, KeyboardInterrupt):
                _deferred.clear()   # the one under way stands for those
                return
            _fire()


def _main_ident() -> int | None:
    return threading.main_thread().ident


def _fire() -> None:
    """Hands the deferred signals to the handler they were meant for (the default one
    raises KeyboardInterrupt)."""
    handler = _saved
    while _deferred:
        signum = _deferred.pop()
        _deferred.clear()   # one call for a burst, as a signal pending twice is one
        if callable(handler):
            handler(signum, None)


def checkpoint() -> None:
    """Inside protected(): delivers a deferred SIGINT now (KeyboardInterrupt, with the
    default handler). Call only where the section's state is whole."""
    if _deferred and _depth and threading.get_ident() == _main_ident():
        _fire()

