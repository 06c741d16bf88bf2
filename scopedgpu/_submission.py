"""Submissions: one command buffer and its fence, from creation to their one release.

A Submission owns one sg_seq of the shim (a command pool, its command buffer, a fence and,
for timestamps, a query pool) and what rides on that fence: the threads inside a wait on it
(`waiters`), the host copies due once its work completes (`copies`), and the staging range
its commands read (`stage`, an upload's). Sequences (one each, recycled through the sequence cache),
storage uploads (_transfer.upload) and Manager.stream() (two per slot) make them; the
engine knows every one from just before its sg_seq exists until it is freed
(Engine.submissions), so close(), interpreter exit and abandon() drain, free or keep all
of them by one code path, whoever made them.

Who owns a submission is stored in one attribute, `owner`:
- its maker (a sequence's handle, an upload under way, a stream's slot, the sequence
  cache), until the maker calls release(), the one way out for every maker (the shape of
  wgpu-py's GPUObjectBase._release: one release function; subclasses of the makers add
  their own steps and call it);
- None, the engine's, from release() on: it is in Engine.released, and free() lets it
  go as soon as it can, at once or from collect() (or, for a submission a thread still
  waits on, from that thread's leave()):
  - a thread still waits on its fence: the last waiter frees it as it leaves (freeing a
    fence under a wait is a use after free);
  - its last submission is not known complete: it stays in Engine.released until
    collect() sees its fence signalled (nothing is ever freed under the GPU);
  - otherwise its staging range goes back to the pool, and the sg_seq is kept in the
    sequence cache for a new sequence (recyclable ones: the cache becomes its owner) or
    destroyed.

Ctrl-C: a hand-over puts the submission in the new holder's container first, then stores
the new owner (one store); a step cut short between leaves a stale entry, which free()
drops (it acts only on submissions whose owner is None), while the old owner still holds
it (a maker's release() cut short runs again: the handle's release is requeue-safe, an
upload's and a stream's cleanup repeat it). Every step of free() is safe to run again.

Every method runs under the engine's lock, except where said.
"""
from __future__ import annotations

from typing import Any, Callable

from scopedgpu import _vk

__all__ = ["Submission"]

_NULL = _vk.NULL


class Submission:
    """One sg_seq and what rides on its fence (see the module docstring)."""
    __slots__ = ("cell", "queue", "nqueries", "sig", "led", "waiters", "copies", "stage",
                 "recyclable", "owner", "label", "done")

    def __init__(self, queue: int, nqueries: int = 0, *, owner: object = None,
                 recyclable: bool = False, label: str = "a submission"):
        # The sg_seq lives in this out-parameter from the shim's call that makes it to the
        # one that destroys it (_vk.take): no step between the shim and a Python store.
        self.cell = _vk.out("seq")
        self.queue = queue
        self.nqueries = nqueries
        # Signature of the commands recorded in it (None: unknown); see Sequence._sig.
        self.sig: tuple | None = None
        # Whether its recorded commands start with a barrier (record_commands' `lead`).
        self.led = False
        # Tokens of the threads inside sg_seq_wait on it (a set, not a count: leaving is
        # idempotent, so an interrupted cleanup can run again).
        self.waiters: set[object] = set()
        # (destination, source, bytes) host copies due when the running submission
        # completes (n < 0: a callable to run); see complete().
        self.copies: tuple[tuple[Any, Any, int], ...] = ()
        # The pool range its commands read (an upload's staging), freed with it: taken
        # and freed in one step (Pool.free_held).
        self.stage: Any = None
        # Kept in the sequence cache when freed (a sequence's, without queries).
        self.recyclable = recyclable
        # See the module docstring; None there: the engine's. Made with none, its maker
        # never changes and is left unnamed (release() with no `by`).
        self.owner: object = self if owner is None else owner
        self.label = label   # for the log of close() (work given up on)
        # Its last submission was seen complete (its fence signalled) and none was made
        # since: free() need not poll the fence. Set by sequences only (Sequence._finish,
        # cleared as they submit); False: poll.
        self.done = False

    @property
    def seq(self) -> Any:
        """The sg_seq, or None (not made yet, or freed)."""
        h = self.cell[0]
        return None if h == _NULL else h

    def __repr__(self) -> str:
        return f"<Submission of {self.label} on queue {self.queue}{'' if self.seq else ' (empty)'}>"

    def create(self, state: Any, what: str) -> None:
        """Makes the sg_seq: registered with the engine first, filled by the shim in one
        call (see the module docstring)."""
        state.submissions.add(self)
        rc = _vk.seq_create(state.dev, self.queue, self.nqueries, self.cell)
        if rc:
            _vk.check(rc, what)

    def complete(self, copy: Callable[[Any, Any, int], None]) -> None:
        """Does the host copies of the submission that completed, through `copy`
        (_transfer.copy, above this layer), and, in debug mode, the sync checker's step
        after them (an entry (callable, None, -1))."""
        copies = self.copies
        if copies:
            self.copies = ()
            for dst, src, n in copies:
                if n < 0:
                    dst()
                else:
                    copy(dst, src, n)

    def pending(self) -> bool:
        """Whether its last submission may still run (a failed poll: not known complete)."""
        h = self.cell[0]
        return h != _NULL and _vk.seq_status(h) != 0

    # -- the way out --------------------------------------------------------------------
    def release(self, state: Any, closing: bool = False, by: object = None) -> None:
        """The maker `by` (the owner; None: the submission's maker never changes, and
        passes nothing) hands it to the engine, which frees it as soon as no thread waits
        on it and its work completed (closing: the device is idle, so at once). A
        submission `by` no longer owns (released before, then freed or taken by another
        sequence from the cache) is left alone: safe to run again."""
        if self.owner is not (self if by is None else by):
            return
        state.released.add(self)   # the hand-over (see the module docstring)
        self.owner = None
        if not self.waiters:
            self.free(state, closing)

    def leave(self, state: Any, token: object) -> None:
        """A thread's fence wait ended: the last waiter frees it if it was released
        meanwhile. Idempotent."""
        waiters = self.waiters
        if token in waiters:
            waiters.discard(token)
            if not waiters and self.owner is None:
                self.free(state, False)

    def free(self, state: Any, closing: bool) -> None:
        """Frees (or caches) a released submission no thread waits on, once its work
        completed; otherwise leaves it in Engine.released. Safe to run again; does
        nothing but drop the stale entry for one the engine does not own."""
        if self.owner is not None:
            state.released.discard(self)
            return
        h = self.cell[0]
        if h != _NULL and not closing and not self.done and _vk.seq_status(h) != 0:
            return   # not known complete: collect() tries again
        self.copies = ()
        if self.stage is not None:
            state.pool.free_held(self, True)
        if h != _NULL and self.recyclable and not closing and state.seq_cache.keep(self):
            state.released.discard(self)   # (the cache owns it now)
            return
        _vk.seq_destroy(_vk.take(self.cell))   # NULL: nothing (sg_seq_destroy checks)
        # Out of the engine's records, Engine.released last: cut short before, the next
        # collect() runs this again.
        state.submissions.discard(self)
        state.released.discard(self)

    def destroy_now(self, state: Any) -> None:
        """Destroys the sg_seq, whose work is complete (an idle one of the sequence cache:
        empty_cache(); any, once close() found the device idle). Safe to run again."""
        _vk.seq_destroy(_vk.take(self.cell))
        state.submissions.discard(self)

