"""Ctrl-C and scopedgpu's bookkeeping: the rule, stated once.

CPython raises KeyboardInterrupt in the main thread wherever it checks for signals, and
only there: when a Python function starts (its RESUME), at a loop's backward jump, and
right after a call into C returns (a Vulkan call of the shim, list.pop(), a lock's
release). Loads and stores of locals, attributes and subscripts, `del x[k]`, `in`,
arithmetic, tuple packing and unpacking, forward jumps and returning check nothing. A
step that makes a Vulkan object (or a pool range) and the step that records it, or the
step that takes one out of its record and the one that frees it, must never be cut
apart: the object would be lost (leaked), or recorded after it was freed (freed twice).
scopedgpu keeps that rule in two ways, and only these two:

- `@step` (the hot paths: a tensor, an algorithm or a sequence made, evaluated and freed;
  the pool's ranges and blocks). A step is a function that is one indivisible step: on
  every path through its bytecode there is at most one call, and after it nothing but
  its return (and stores to its own locals); no loop, no `with`, no `try`. A real signal
  can then land only at its entry (before it changed anything) or at its one call: a
  call into C (the shim's destroy, taking what the step took out of its holder: no check
  between the take and the call) runs whole, and a call into Python code is that code's
  own entry, where it must be robust in turn (a release that runs again frees nothing
  twice; the pool's steps take a range out of its holder, or store it there, in their
  final store). Its one call must not be what produces the thing it hands over: a
  signal right after pop() returned loses what was popped, so a step takes by
  subscript and `del`. Whatever a step hands over goes straight into a holder (`holder.x = ...`
  in the step itself, or `return step(...)` up to the caller's store, which no check
  separates from the return). The decorator costs nothing at run time (it returns the
  function itself); it records the function's code in STEPS, where
  tests/test_architecture.py checks every step's bytecode with `dis` and where the line
  sweeps of tests/lifetime/test_interrupts.py skip it (a step is one line to them, as
  no real signal can cut it); only plain attributes (slots, instance dicts) and builtin
  containers may be read or stored in one (a property or a Python `__setitem__` would be
  a hidden call). One `;`-joined line is no longer a step: the architecture test refuses
  them.
- `protected()` (whole operations of bounded CPU work that create and free many objects:
  a Manager.stream() call, Manager.pinned()): they run inside `protected()`, which defers
  a KeyboardInterrupt arriving in the section to its end, or to the section's next
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
are steps (tests/lifetime/test_signals.py sends real SIGINTs to streams;
tests/lifetime/test_interrupts.py sweeps both)."""
from __future__ import annotations

import signal
import threading
from types import CodeType, FrameType
from typing import Any, Callable, TypeVar

__all__ = ["step", "STEPS", "protected", "checkpoint"]

F = TypeVar("F", bound=Callable[..., Any])

# The code of every function marked @step, with its qualified name.
STEPS: dict[CodeType, str] = {}


def step(fn: F) -> F:
    """Marks `fn` as one indivisible step (see above) and returns it unchanged."""
    STEPS[fn.__code__] = fn.__qualname__
    return fn


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
            _depth += 1
            self.active = True   # (no check between two stores: see step)
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
        _depth = 1
        self.active = True
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

