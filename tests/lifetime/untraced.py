"""Where an interrupt sweep (test_interrupts.py, first_use_child.py) counts no line: the
instructions at which an exception raised by a sys.settrace tracer lands where a real
Ctrl-C cannot, or escapes handlers that a real one would meet."""
from __future__ import annotations

import dis
import functools


@functools.lru_cache(maxsize=None)
def with_exits(code) -> frozenset[int]:
    """Offsets where a `with` block's normal exit begins (`__exit__(None, None, None)`).
    CPython reports a line event there (the `with` line again) outside the block's
    exception range, so an exception raised by the tracer at that event skips __exit__
    and leaves a lock held; a real Ctrl-C cannot land there (the interpreter checks for
    signals at calls and backward jumps, not before this call), so no line is counted
    there. (Counted, they left the manager's RLock held by the sweeping thread, and
    close() in another thread waited for it forever.)"""
    ins = list(dis.get_instructions(code))
    out = set()
    for i in range(len(ins) - 3):
        if all(x.opname == "LOAD_CONST" and x.argval is None for x in ins[i:i + 3]) \
                and ins[i + 3].opname in ("PRECALL", "CALL") and ins[i + 3].arg == 2:
            out.add(ins[i].offset)
    return frozenset(out)


@functools.lru_cache(maxsize=None)
def comprehension_heads(code) -> frozenset[int]:
    """Offsets of the loop heads (FOR_ITER) of comprehensions that CPython 3.12 and later
    inline into their function (PEP 709). CPython reports a line event there at each
    iteration, and an exception the tracer raises at that event escapes the function's
    own `except` (seen on 3.12.1 and 3.13.0: the handler is skipped, so an algorithm()
    cut there leaked its pipeline), where a real Ctrl-C, delivered at the loop's
    backward jump or at a call, is caught (checked with SIGALRM on the same versions).
    So no line is counted there."""
    ins = list(dis.get_instructions(code))
    out = set()
    for i, x in enumerate(ins):
        if x.opname == "FOR_ITER" and any(y.opname == "LOAD_FAST_AND_CLEAR"
                                          for y in ins[max(0, i - 6):i]):
            out.add(x.offset)
    return frozenset(out)


@functools.lru_cache(maxsize=None)
def skipped(code) -> frozenset[int]:
    """Both: the offsets of `code` where a sweep counts no line."""
    return with_exits(code) | comprehension_heads(code)
