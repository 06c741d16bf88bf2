"""The small life every handle-owning object shares."""
from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any

from scopedgpu._errors import DestroyedError

if TYPE_CHECKING:
    from scopedgpu.manager import Manager

_ids = itertools.count(1)


class Handle:
    """What a child object owns, kept apart from the object so that a finalizer can
    release it without holding the object. release() runs once, under the manager's lock,
    after the GPU work that used it has completed."""
    __slots__ = ("__weakref__",)

    def release(self, state: Any, closing: bool) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Child:
    """Base of Tensor, Algorithm and Sequence: destroy() at most once, `destroyed`,
    DestroyedError on use after destroy or after the manager closed, `with` scoping."""
    _what = "object"

    def __init__(self, manager: Manager, handle: Handle):
        self._mgr = manager
        self._id = next(_ids)
        self._destroyed = False
        self._handle = handle
        # The finalizer holds the handle and the manager's state, never self.
        self._finalizer = weakref.finalize(self, manager._state.garbage.append, handle)
        self._finalizer.atexit = False
        manager._state.handles.add(handle)

    @property
    def manager(self) -> Manager:
        return self._mgr

    @property
    def destroyed(self) -> bool:
        """True after destroy(), and after the manager closed."""
        return self._destroyed

    def _check(self) -> None:
        if self._destroyed:
            why = "its manager was closed" if self._mgr._state.closed else "destroy() was called"
            raise DestroyedError(
                f"{self!r} cannot be used: {why}. Create a new {self._what} instead.")

    def _mark_destroyed(self) -> Handle | None:
        """Marks the object destroyed; returns its handle if the caller must release it."""
        if self._destroyed:
            return None
        self._destroyed = True
        return self._handle if self._finalizer.detach() is not None else None

    def destroy(self) -> None:
        """Releases the object's resources (after the GPU work that uses them). Idempotent."""
        state = self._mgr._state
        with state.lock:
            handle = self._mark_destroyed()
            self._forget()
            if handle is not None:
                state.release(handle)
            state.check_validation(f"destroying {self!r}")

    def _forget(self) -> None:
        """Hook: drop the manager's bookkeeping for this object."""

    def __enter__(self):
        self._check()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
