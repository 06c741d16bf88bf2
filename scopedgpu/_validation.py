"""The Khronos validation layer's messages, routed to the call that caused them.

With debug on, every public call of a manager takes the layer's messages once it
returned: errors raise ValidationError naming the call, warnings go to the "scopedgpu"
logger. A call that failed carries the messages of its failure as a note of its
exception; messages still waiting before a call belong to an earlier one and are only
logged. Nothing here raises a message twice or for the wrong call.
"""
from __future__ import annotations

import logging
from typing import Any

from scopedgpu import _vk
from scopedgpu._errors import ValidationError

log = logging.getLogger("scopedgpu")


class Validation:
    """The validation plumbing of one manager (the base of its Engine)."""
    __slots__ = ("debug", "inst", "msg_buf")

    def __init__(self) -> None:
        self.debug = False
        self.inst: Any = None
        self.msg_buf = _vk.message_buffer(65536)

    def take_validation(self) -> tuple[list[str], int]:
        """Debug mode: takes the layer's messages (forgetting them: a message belongs to
        the call that caused it, never to a later one) and logs the warnings; returns the
        error texts and the error count (more than the texts when the shim's buffer
        overflowed)."""
        if not self.debug or self.inst is None or _vk.instance_pending(self.inst) == 0:
            return [], 0
        text, nerr = _vk.instance_messages(self.inst, self.msg_buf)
        errors = []
        for line in text.splitlines():
            if line.startswith("E "):
                errors.append(line[2:])
            elif line.startswith("W "):
                log.warning("Vulkan validation: %s", line[2:])
        return errors, max(nerr, len(errors))

    def check_validation(self, what: str) -> None:
        """Debug mode, after a call succeeded: validation warnings go to the log, errors
        raise ValidationError naming the call."""
        errors, n = self.take_validation()
        if n:
            more = (f"\n({n - len(errors)} more whose text did not fit the buffer)"
                    if n > len(errors) else "")
            raise ValidationError(f"{what}: the validation layer reported {n} error(s):\n"
                                  + "\n".join(errors) + more)

    def stale_validation(self, what: str) -> None:
        """Debug mode, before a call: messages still waiting belong to an earlier call that
        did not collect them; they are logged as such, never raised by this one."""
        errors, n = self.take_validation()
        if n:
            log.error("Vulkan validation: %d error(s) of an earlier call, reported before "
                      "%s:\n%s", n, what, "\n".join(errors))

    def validation_failed(self, exc: BaseException, what: str) -> None:
        """Debug mode, when a call failed: the layer's messages of that call go with its
        exception (a note), so that they are neither lost nor raised by the next call."""
        errors, n = self.take_validation()
        if not n:
            return
        note = (f"{what}: the validation layer also reported {n} error(s):\n"
                + "\n".join(errors))
        add_note = getattr(exc, "add_note", None)   # Python 3.11+
        if add_note is not None:
            add_note(note)
        else:
            log.error("%s", note)
