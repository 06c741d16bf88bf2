"""Sequences: recorded operations, submitted to a queue, awaited through a fence."""
from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

from scopedgpu._base import Child, Handle
from scopedgpu._errors import DestroyedError, check
from scopedgpu._ffi import ffi, lib
from scopedgpu.ops import (ACCESS_HOST_READ, ACCESS_SHADER_READ, ACCESS_SHADER_WRITE,
                           ACCESS_TRANSFER_READ, ACCESS_TRANSFER_WRITE, STAGE_COMPUTE,
                           STAGE_HOST, STAGE_TRANSFER, Op, Use)

if TYPE_CHECKING:
    from scopedgpu.algorithm import Algorithm
    from scopedgpu.manager import Manager, _State

__all__ = ["Sequence"]

_GPU_STAGES = STAGE_COMPUTE | STAGE_TRANSFER
_ALL_WRITES = ACCESS_SHADER_WRITE | ACCESS_TRANSFER_WRITE
_ALL_GPU = ACCESS_SHADER_READ | ACCESS_SHADER_WRITE | ACCESS_TRANSFER_READ | ACCESS_TRANSFER_WRITE
_ACCESS = {STAGE_COMPUTE: (ACCESS_SHADER_READ, ACCESS_SHADER_WRITE),
           STAGE_TRANSFER: (ACCESS_TRANSFER_READ, ACCESS_TRANSFER_WRITE)}
# Spin this long on the fence before blocking: a short dispatch completes within it.
SPIN_NS = 200_000
TIMESTAMP_QUERIES = 64


class _SeqHandle(Handle):
    __slots__ = ("seq", "owned", "waiters")

    def __init__(self, seq: Any):
        self.seq = seq
        # Weak: the finalizer holds this handle, and a strong reference from it to an
        # algorithm (which holds the manager) would keep the manager alive for good. The
        # recorded ops keep the algorithms alive as long as the sequence lives.
        self.owned: list[weakref.ref[Algorithm]] = []
        self.waiters = 0   # threads inside sg_seq_wait on `seq` (counted under the lock)

    def release(self, state: _State, closing: bool) -> None:
        # Another thread may be inside sg_seq_wait on this sequence (it waits without the
        # lock): freeing the fence under it is a use after free. The last waiter destroys
        # it instead (close() waits for that before destroying the device).
        if self.waiters:
            state.doomed.add(self)
        else:
            self.destroy_now(state)
        for ref in self.owned:
            algo = ref()
            if algo is None:
                continue   # collected with the sequence: its own finalizer releases it
            h = algo._mark_destroyed()
            algo._forget()
            if h is not None:
                state.release(h)
        self.owned.clear()

    def destroy_now(self, state: _State) -> None:
        state.doomed.discard(self)
        # sg_seq_destroy waits for the fence of a submission still pending.
        if self.seq is not None:   # released once only (close() may sweep it again)
            lib.sg_seq_destroy(self.seq)
        self.seq = None


class _Recorder:
    """Inserts a barrier before an op whose accesses conflict with earlier ones since the
    last barrier (read after write, write after write, write after read). One global
    memory barrier covers every earlier access, so the state resets after each."""

    def __init__(self, h: Any):
        self.h = h
        self.written: set[tuple[int, int]] = set()
        self.read: set[tuple[int, int]] = set()
        self.src_stages = 0
        self.src_access = 0

    def use(self, uses: list[Use]) -> None:
        dst_stages = 0
        dst_access = 0
        hazard = False
        for a, stage, write in uses:
            key = (a.block.id, a.offset)
            if key in self.written or (write and key in self.read):
                hazard = True
            if stage != STAGE_HOST:
                dst_stages |= stage
                r, w = _ACCESS[stage]
                dst_access |= r | w
        if hazard and dst_stages:
            self.barrier(dst_stages, dst_access)
        for a, stage, write in uses:
            if stage == STAGE_HOST:
                continue
            key = (a.block.id, a.offset)
            self.src_stages |= stage
            if write:
                self.written.add(key)
                self.src_access |= _ACCESS[stage][1]
            else:
                self.read.add(key)

    def barrier(self, dst_stages: int, dst_access: int) -> None:
        if self.src_stages:
            lib.sg_seq_barrier(self.h, self.src_stages, self.src_access, dst_stages, dst_access)
        self.written.clear()
        self.read.clear()
        self.src_stages = 0
        self.src_access = 0

    def full_barrier(self) -> None:
        lib.sg_seq_barrier(self.h, _GPU_STAGES, _ALL_WRITES, _GPU_STAGES, _ALL_GPU)
        self.written.clear()
        self.read.clear()
        self.src_stages = 0
        self.src_access = 0


class Sequence(Child):
    """Recorded operations and the command buffer, fence and query pool that run them.

    Anonymous sequences (name None) are destroyed at the end of their `with` block, after
    their GPU work completes, and when they become unreachable. Named ones persist until
    Manager.delete_sequence() or clear_sequences(named=True). Destroying a sequence never
    frees a tensor.
    """
    _what = "sequence"

    def __init__(self, manager: Manager, name: str | None, queue: int, timestamps: bool):
        state = manager._state
        self._name = name
        self._queue = queue
        self._want_timestamps = timestamps
        self._nqueries = TIMESTAMP_QUERIES if timestamps else 0
        out = ffi.new("sg_seq **")
        with state.lock:
            state.check_open()
            state.collect()
            check(lib.sg_seq_create(state.dev, queue, self._nqueries, out),
                  f"creating sequence {name!r} on queue {queue}")
            super().__init__(manager, _SeqHandle(out[0]))
            state.sequences.add(self)
        self._h = out[0]
        self._ops: list[tuple[Op, Op]] = []      # (op as recorded by the user, op recorded)
        self._dirty = True
        self._running = False
        self._submitted: tuple[Op, ...] = ()
        self._inflight: frozenset[Handle] = frozenset()
        self._timestamps: list[int] | None = None

    # -- properties -----------------------------------------------------------------
    @property
    def name(self) -> str | None:
        return self._name

    @property
    def is_recording(self) -> bool:
        """True while it holds recorded operations not yet evaluated since recording."""
        return bool(self._ops) and self._dirty

    @property
    def is_running(self) -> bool:
        """True while its last submission has not completed."""
        if not self._running:
            return False
        state = self._mgr._state
        with state.lock:
            if self._running and self._h is not None:
                rc = lib.sg_seq_status(self._h)
                if rc == 0:
                    self._finish()
                elif rc != lib.SG_TIMEOUT:
                    self._finish()
                    check(rc, f"polling {self!r}")
        return self._running

    def __repr__(self) -> str:
        label = f"{self._name!r}" if self._name is not None else "anonymous"
        state = " destroyed" if self._destroyed else (" running" if self._running else "")
        return f"<Sequence #{self._id} {label} ops={len(self._ops)}{state}>"

    # -- recording --------------------------------------------------------------------
    def record(self, op: Op) -> Sequence:
        """Appends an operation; returns the sequence for chaining."""
        self._check()
        if not isinstance(op, Op):
            raise TypeError(f"{self!r}.record() takes an operation (Op...), not "
                            f"{type(op).__name__}")
        with self._mgr._state.lock:
            self._mgr._state.check_open()
            recorded = op._bind(self)
            self._ops.append((op, recorded))
            self._dirty = True
        return self

    def clear(self) -> None:
        """Forgets the recorded operations (waiting for a running submission first) and
        destroys the algorithms built for them (OpMult's)."""
        self._check()
        self._wait(None)
        state = self._mgr._state
        with state.lock:
            self._ops.clear()
            self._dirty = True
            owned = self._handle.owned  # type: ignore[attr-defined]
            for algo in (ref() for ref in owned):
                if algo is None:
                    continue
                h = algo._mark_destroyed()
                algo._forget()
                if h is not None:
                    state.release(h)
            owned.clear()

    def _own(self, algo: Algorithm) -> None:
        self._handle.owned.append(weakref.ref(algo))  # type: ignore[attr-defined]

    # -- evaluation ---------------------------------------------------------------------
    def eval(self, op: Op | None = None) -> Sequence:
        """Submits the recorded operations and waits for them. With an op: clears the
        sequence, records the op, then evaluates (as kp does)."""
        self.eval_async(op)
        self._wait(None)
        return self

    def eval_async(self, op: Op | None = None) -> Sequence:
        """Submits and returns at once; eval_await() waits. A sequence still running from
        an earlier submission is waited for first."""
        self._check()
        if op is not None:
            self.clear()
            self.record(op)
        self._wait(None)
        state = self._mgr._state
        with state.lock:
            state.check_open()
            self._check()
            state.collect()
            objects = []
            for user_op, op_ in self._ops:
                for obj in op_._objects():
                    if obj._destroyed:
                        raise DestroyedError(
                            f"{self!r} refers to {obj!r}, which was destroyed; nothing was "
                            f"submitted. Record the sequence again with live objects "
                            f"(clear() and record()).")
                    objects.append(obj)
            if not self._ops:
                return self
            # Host writes below must not race GPU work of other running sequences that
            # use the same memory: wait for those first.
            written = {t._handle for _, op_ in self._ops for t in op_._host_written()}
            if written:
                for other in list(state.running):
                    if other is not self and other._inflight & written:
                        other._wait_locked()
            if self._dirty:
                self._record_commands()
            submitted = tuple(op_ for _, op_ in self._ops)
            for op_ in submitted:
                op_._pre()
            check(lib.sg_seq_submit(self._h), f"submitting {self!r}")
            self._submitted = submitted
            self._inflight = frozenset(obj._handle for obj in objects)
            self._running = True
            self._timestamps = None
            state.running.add(self)
            state.check_validation(f"evaluating {self!r}")
        return self

    def eval_await(self, timeout: float | None = None) -> bool:
        """Waits for the last submission, at most `timeout` seconds (None: no limit).
        True when it completed (the host copies of OpTensorSyncLocal are then done);
        False on timeout, and the sequence still counts as running."""
        self._check()
        if timeout is not None and (math.isnan(timeout) or timeout < 0):
            raise ValueError(f"timeout must be None or >= 0 seconds, not {timeout!r}")
        return self._wait(timeout)

    def _wait(self, timeout: float | None) -> bool:
        if not self._running:
            return True
        ns = 2**64 - 1 if timeout is None else min(int(timeout * 1e9), 2**64 - 2)
        state = self._mgr._state
        handle: _SeqHandle = self._handle  # type: ignore[assignment]
        with state.lock:
            h = handle.seq
            if not self._running or h is None:
                return True  # completed, or destroyed/closed meanwhile (after its work)
            handle.waiters += 1
        try:
            rc = lib.sg_seq_wait(h, ns, min(SPIN_NS, ns))  # GIL and lock released
        finally:
            with state.lock:
                handle.waiters -= 1
                if handle.waiters == 0 and handle in state.doomed:
                    handle.destroy_now(state)
        if rc == lib.SG_TIMEOUT:
            return False
        with state.lock:
            self._finish()
            check(rc, f"waiting for {self!r}")
            state.check_validation(f"waiting for {self!r}")
        return True

    def _wait_locked(self) -> None:
        """Waits and completes while the caller holds the manager's lock."""
        rc = lib.sg_seq_wait(self._h, 2**64 - 1, SPIN_NS)
        self._finish()
        check(rc, f"waiting for {self!r}")

    def _finish(self) -> None:
        """Completion work, once per submission, under the manager's lock: host copies of
        OpTensorSyncLocal, timestamps, then the releases that waited for this fence."""
        if not self._running:
            return
        self._running = False
        state = self._mgr._state
        try:
            for op_ in self._submitted:
                op_._post()
            if self._want_timestamps:
                n = len(self._submitted) + 1
                buf = ffi.new("uint64_t[]", n)
                check(lib.sg_seq_timestamps(self._h, n, buf), f"reading timestamps of {self!r}")
                period = state.info.timestamp_period
                self._timestamps = [int(buf[i] * period) for i in range(n)]
        finally:
            self._submitted = ()
            state.running.discard(self)
            self._inflight = frozenset()
            state.completed(self)

    def _record_commands(self) -> None:
        n = len(self._ops)
        if self._want_timestamps and n + 1 > self._nqueries:
            self._grow_queries(n + 1)
        h = self._h
        check(lib.sg_seq_begin(h), f"recording {self!r}")
        rec = _Recorder(h)
        # Work from earlier submissions on this queue touches the same memory: order it.
        lib.sg_seq_barrier(h, _GPU_STAGES, _ALL_WRITES, _GPU_STAGES, _ALL_GPU)
        ts = self._want_timestamps
        if ts:
            lib.sg_seq_timestamp(h, 0)
        for i, (_, op_) in enumerate(self._ops):
            op_._record(rec)
            if ts:
                lib.sg_seq_timestamp(h, i + 1)
        # Make device writes visible to the host reads that follow the fence.
        lib.sg_seq_barrier(h, _GPU_STAGES, _ALL_WRITES, STAGE_HOST, ACCESS_HOST_READ)
        check(lib.sg_seq_end(h), f"recording {self!r}")
        self._dirty = False

    def _grow_queries(self, need: int) -> None:
        state = self._mgr._state
        n = max(need, 2 * self._nqueries)
        out = ffi.new("sg_seq **")
        check(lib.sg_seq_create(state.dev, self._queue, n, out),
              f"growing the timestamp queries of {self!r}")
        lib.sg_seq_destroy(self._h)
        self._h = out[0]
        self._handle.seq = out[0]  # type: ignore[attr-defined]
        self._nqueries = n

    def timestamps(self) -> list[int]:
        """Nanosecond GPU timestamps of the last completed evaluation: one at the start and
        one after each op. Needs `timestamps=True` at creation."""
        self._check()
        if not self._want_timestamps:
            raise ValueError(f"{self!r} was created without timestamps=True")
        self._wait(None)
        if self._timestamps is None:
            raise ValueError(f"{self!r} has no completed evaluation to read timestamps from")
        return list(self._timestamps)

    # -- life ----------------------------------------------------------------------------
    def destroy(self) -> None:
        """Waits for the GPU work of the sequence, then frees its command pool, fence and
        query pool, and the algorithms built for its ops. Tensors are not freed."""
        if self._destroyed:
            return
        try:
            self._wait(None)
        finally:
            super().destroy()

    def _forget(self) -> None:
        state = self._mgr._state
        state.sequences.discard(self)
        if self._name is not None and state.named.get(self._name) is self:
            del state.named[self._name]
        if self._name is not None and self._mgr._named.get(self._name) is self:
            del self._mgr._named[self._name]
        self._h = None

    def __exit__(self, *exc: object) -> None:
        if self._name is None:
            self.destroy()
        elif not self._destroyed:
            self._wait(None)
