"""The small life every handle-owning object shares."""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Callable, Protocol, TypeVar

from scopedgpu import _ki
from scopedgpu._errors import DestroyedError, ForkedError

ids = itertools.count(1)   # object numbers, never reused (repr, signatures)
C = TypeVar("C", bound="Child")


class EngineLike(Protocol):
    """What a child needs of its manager's lifetime engine (scopedgpu._engine.Engine)."""
    lock: threading.RLock
    closed: bool
    forked: bool
    pid: int
    debug: bool
    handles: dict[weakref.ref, Handle]
    on_unreachable: Callable[[weakref.ref], None]   # the bound unreachable, made once

    def unreachable(self, ref: weakref.ref) -> None: ...
    def release(self, handle: Handle) -> None: ...
    def check_validation(self, what: str) -> None: ...

# What to do instead of copying or pickling an object that owns a GPU handle: a copy
# would share the handle, and destroying either would leave the other on freed memory.
COPY_HINTS = {
    "tensor": "create a new tensor from its data with mgr.tensor(t.numpy()), or on the "
              "device with OpTensorCopy([t, mgr.empty(t.shape, t.dtype)])",
    "algorithm": "create another one with mgr.algorithm(algo.tensors, spirv, ...)",
    "sequence": "create a new one with mgr.sequence() and record the operations into it",
    "pinned arrays": "pin the same arrays again with mgr.pinned(*p.arrays)",
    "manager": "open another one with sg.Manager(...) (in another process, open it there)",
    # scopedgpu.kp's classes wrap the native ones, handle and all
    "kp tensor": "create a new tensor from its data with mgr.tensor_t(t.data().copy())",
    "kp algorithm": "create another one with mgr.algorithm(algo.get_tensors(), spirv, ...)",
    "kp sequence": "create a new one with mgr.sequence() and record the operations into it",
    "kp manager": "open another one with kp.Manager(...) (in another process, open it there)",
}


def refuse_copy(obj: object, what: str, how: str) -> TypeError:
    """The TypeError that copying (`how` "copied") or pickling ("pickled") `obj` raises;
    `what` picks the hint (a key of COPY_HINTS)."""
    return TypeError(f"{obj!r} cannot be {how}: it owns GPU resources that a copy would "
                     f"share. Instead, {COPY_HINTS[what]}.")


def first_destroyed(objs: list[Child]) -> Child | None:
    """The first destroyed object of a list, or None (a sequence's check before eval:
    one call, not one property read per object, on the re-evaluation path)."""
    for obj in objs:
        if obj._destroyed:
            return obj
    return None


def all_bindable(objs: Any, manager: object) -> bool:
    """Whether every object (a child) is alive and belongs to `manager`: Op.bind's checks
    in one call, which then raises for the first that is not (False too for an object
    that is not a child: the caller's checks say what it is)."""
    try:
        for obj in objs:
            if obj._destroyed or obj._mgr is not manager:
                return False
    except AttributeError:
        return False
    return True


def handles_of(objs: Any) -> frozenset[Handle]:
    """The handles the objects own (what a submission that uses them keeps in flight)."""
    return frozenset([o._handle for o in objs])   # (a list: quicker than a generator)


class NoCopy:
    """Refuses copy.copy, copy.deepcopy and pickle with refuse_copy's TypeError: a copy
    would share the handle, and destroying one would free what the other uses. The base
    of every class that owns or wraps a handle (Child, Manager, scopedgpu.kp's wrappers);
    `_what` is its key of COPY_HINTS."""
    __slots__ = ()
    _what = "object"

    def __copy__(self) -> Any:
        raise refuse_copy(self, self._what, "copied")

    def __deepcopy__(self, memo: Any) -> Any:
        raise refuse_copy(self, self._what, "copied")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise refuse_copy(self, self._what, "pickled")


class Handle:
    """What a child object owns, kept apart from the object so that a finalizer can
    release it without holding the object. release() runs once, under the manager's lock,
    after the GPU work that used it has completed."""
    __slots__ = ("__weakref__",)
    # The order of release when the manager closes: sequences (0) before the algorithms
    # (1) their commands use, before tensors (2).
    close_order = 2
    # Whether a release cut short may simply run again (the collector then dequeues the
    # handle only once its release returned).
    requeue_safe = False

    def complete(self) -> None:
        """Host work due when the handle's submission completed (sequences)."""

    def release(self, state: Any, closing: bool) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class ChildSet:
    """The live children of one kind, held weakly: a WeakSet that reuses the weak reference
    each Child already holds (Child._ref) instead of making a second one per object. The
    manager's weakref callback drops the references of children that became
    unreachable."""
    __slots__ = ("refs",)

    def __init__(self) -> None:
        self.refs: dict[weakref.ref, None] = {}

    def add(self, obj: Child) -> None:
        self.refs[obj.ref] = None

    def discard(self, obj: Child) -> None:
        self.refs.pop(obj.ref, None)

    def __len__(self) -> int:
        return len(self.refs)

    def __contains__(self, obj: object) -> bool:
        return getattr(obj, "ref", None) in self.refs

    def __iter__(self):
        for ref in list(self.refs):
            obj = ref()
            if obj is not None:
                yield obj

    def clear(self) -> None:
        self.refs.clear()


class Child(NoCopy):
    """Base of Tensor, Algorithm and Sequence: destroy() at most once, `destroyed`,
    DestroyedError on use after destroy or after the manager closed, `with` scoping."""
    # What every child sets, as slots (see Tensor); subclasses without __slots__ of their
    # own get a __dict__ as usual.
    __slots__ = ("_mgr", "_engine", "_id", "_destroyed", "_handle", "_ref", "__weakref__")
    _mgr: Any
    _engine: Any

    def __init__(self, manager: object, engine: EngineLike, handle: Handle):
        self._mgr = manager      # opaque here: only handed out by the `manager` property
        self._engine = engine
        self._id = next(ids)
        self._destroyed = False
        self._handle = handle
        # The engine holds the weak reference and the handle, never self: when self
        # becomes unreachable the reference's callback queues the handle for release
        # at the next safe point. (A plain weakref in a dict costs a fifth of a
        # weakref.finalize, which matters when tensors are made and freed by the 100,000.)
        self._ref = ref = weakref.ref(self, engine.on_unreachable)
        engine.handles[ref] = handle

    @property
    def manager(self) -> Any:
        """The Manager that made this object (held strongly)."""
        return self._mgr

    # -- the package's interface (the engine, the ops and the other children) --------
    @property
    def ref(self) -> weakref.ref:
        """The weak reference the engine knows this object by (package-internal)."""
        return self._ref

    @property
    def lock(self) -> Any:
        """The manager's lock, which guards this object's state (package-internal)."""
        return self._engine.lock

    @property
    def number(self) -> int:
        """This object's number, never reused in the process (package-internal)."""
        return self._id

    def check_alive(self) -> None:
        """DestroyedError (ForkedError) when destroyed (package-internal)."""
        if self._destroyed:
            self._check()

    def mark_destroyed(self) -> Handle | None:
        """Marks the object destroyed; returns its handle if the caller must release it
        (package-internal: the engine's close, abandon and fork)."""
        return self._mark_destroyed()

    def release_now(self) -> None:
        """destroy() without its validation check (package-internal; see _release_now)."""
        self._release_now()

    @property
    def destroyed(self) -> bool:
        """True after destroy(), and after the manager closed."""
        return self._destroyed

    def _check(self) -> None:
        if self._destroyed:
            state = self._engine
            if state.forked:
                raise ForkedError(
                    f"{self!r} cannot be used in this process: its manager was created "
                    f"in the parent process (pid {state.pid}) before os.fork(), and GPU "
                    f"objects do not survive a fork. Create a new Manager in this process.")
            why = "its manager was closed" if state.closed else "destroy() was called"
            raise DestroyedError(
                f"{self!r} cannot be used: {why}. Create a new {self._what} instead.")

    @_ki.step
    def _mark_destroyed(self) -> Handle | None:
        """Marks the object destroyed; returns its handle if the caller must release it.
        One step (subscripts and `del`, not pop(): a signal right after pop() returned
        would lose the handle it popped)."""
        if self._destroyed:
            return None
        self._destroyed = True
        self._engine.destroys += 1
        handles = self._engine.handles
        ref = self._ref
        if ref not in handles:
            return None
        handle = handles[ref]
        del handles[ref]
        return handle  # type: ignore[no-any-return]

    def destroy(self) -> None:
        """Releases the object's resources (after the GPU work that uses them). Idempotent."""
        state = self._engine
        with state.lock:
            self._release_now()
            if state.debug:
                state.check_validation(f"destroying {self!r}")

    def _release_now(self) -> None:
        """destroy() without its validation check, for the manager's own cleanup
        (collect(), close(), a sequence destroying the algorithms it built), where a
        message of the layer must not abort the cleanup halfway. The caller holds the lock."""
        state = self._engine
        handle = None
        # Ctrl-C anywhere below: a handle unregistered and not yet released is released
        # by the handler (a release cut short runs again: it frees nothing twice).
        try:
            handle = self._mark_destroyed()
            self._forget()
            if handle is not None:
                state.release(handle)
        except BaseException:
            if handle is not None:
                self._forget()   # idempotent
                state.release(handle)
            raise

    def _forget(self) -> None:
        """Hook: drop the manager's bookkeeping for this object."""

    def __enter__(self: C) -> C:
        if self._destroyed:   # (the check's call only when it raises)
            self._check()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
