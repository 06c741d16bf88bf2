"""The Manager: one Vulkan device, its memory pool, and every object made on it."""
from __future__ import annotations

import collections
import itertools
import logging
import math
import numbers
import os
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Sequence as Seq

import numpy as np

from scopedgpu import _device, _errors
from scopedgpu._base import ChildSet, Handle, refuse_copy
from scopedgpu._errors import DestroyedError, ForkedError, ShaderError, ValidationError, check
from scopedgpu._ffi import ffi, lib
from scopedgpu._pool import IMPORT_MIN, Pool
from scopedgpu._spirv import ShaderInfo, reflect
from scopedgpu._spirv_val import check_module
from scopedgpu.algorithm import Algorithm, _AlgoHandle
from scopedgpu.ops import Op
from scopedgpu.sequence import SPIN_NS, WAIT_SLICE_NS, Sequence, _fence_wait, _SeqHandle
from scopedgpu.tensor import KINDS, Tensor, aligned_empty, dtype_feature

__all__ = ["Manager"]

log = logging.getLogger("scopedgpu")

# Shim live-count indices -> names reported by live_objects()
_LIVE_NAMES = ("instances", "devices", "buffers", "memory_blocks", "shader_modules",
               "descriptor_set_layouts", "pipeline_layouts", "pipelines", "descriptor_pools",
               "command_pools", "fences", "query_pools", "debug_messengers")
UNUSED_PROGRAMS_KEPT = 64
# Command pool + command buffer + fence sets kept per queue for reuse by new sequences.
SEQUENCES_KEPT = 16
# Seconds close(), Sequence.destroy(), the collector and interpreter exit wait for GPU
# work before they give up on it (Manager(wait_timeout=...), SCOPEDGPU_WAIT_TIMEOUT).
DEFAULT_WAIT_TIMEOUT = 10.0
_SG_TIMEOUT = lib.SG_TIMEOUT

# Every manager state of this process (see _after_fork), and those of managers closed
# while GPU work still ran: kept, with their device and memory, until the process exits.
_STATES: weakref.WeakSet[_State] = weakref.WeakSet()
_ABANDONED: list[_State] = []


def shim_live_counts(dev: Any = None) -> dict[str, int]:
    buf = ffi.new("int64_t[]", lib.SG_LIVE_COUNT)
    lib.sg_live_counts(dev if dev is not None else ffi.NULL, buf)
    return {name: int(buf[i]) for i, name in enumerate(_LIVE_NAMES)}


def wait_timeout_from(value: float | None) -> float:
    """The wait timeout: the argument, else SCOPEDGPU_WAIT_TIMEOUT, else the default."""
    where = "wait_timeout"
    if value is None:
        env = os.environ.get("SCOPEDGPU_WAIT_TIMEOUT", "").strip()
        if not env:
            return DEFAULT_WAIT_TIMEOUT
        where = f"SCOPEDGPU_WAIT_TIMEOUT={env!r}"
        try:
            value = float(env)
        except ValueError:
            raise ValueError(f"{where}: expected a number of seconds (e.g. 10 or 0.5)") \
                from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"wait_timeout must be a number of seconds, not {value!r}")
    value = float(value)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{where}: the wait timeout must be a finite number of seconds "
                         f">= 0, not {value!r}")
    return value


def _take(out: Any) -> Any:
    """The handle in an out-parameter, which it clears (a pure-Python call: no signal
    handler runs between its return and the call it is passed to)."""
    h, out[0] = out[0], ffi.NULL; return h  # noqa: E702 - one line: never split by Ctrl-C


def _env_flag(name: str) -> bool | None:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    return v.strip().lower() not in ("0", "false", "no", "off")


def _bytes_limit(value: Any, source: str) -> int:
    """A positive whole number of bytes from an int, a float such as 1e9, or a string of
    either; ValueError (TypeError for a wrong type) naming `source` and the value."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise TypeError(f"{source} must be a positive number of bytes, not "
                        f"{type(value).__name__} {value!r}")
    try:
        f = float(value)
    except ValueError:
        f = math.nan
    if not math.isfinite(f) or f < 1 or f != math.floor(f):
        raise ValueError(f"{source} must be a positive whole number of bytes (e.g. "
                         f"1073741824 or 1e9), not {value!r}")
    return int(value) if isinstance(value, int) else int(f)


class _Program:
    """A cached pipeline (sg_program), shared by algorithms with the same SPIR-V and
    specialization constants; refcounted by the algorithms that use it."""
    __slots__ = ("handle", "key", "refs")

    def __init__(self, handle: Any, key: tuple):
        self.handle = handle
        self.key = key
        self.refs = 0


class _State:
    """Everything the manager owns. The manager's finalizer holds this, never the Manager,
    so close() can run when the Manager object itself is gone."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.closed = False
        self.pid = os.getpid()
        # Set in a child process after os.fork(): nothing inherited may reach Vulkan.
        self.forked = False
        # Closed while GPU work still ran: nothing was freed (see _shutdown).
        self.abandoned = False
        self.wait_timeout = DEFAULT_WAIT_TIMEOUT
        self.gave_up = False     # close() waited wait_timeout in vain
        self.inst: Any = None
        self.dev: Any = None
        self.info: _device.DeviceInfo = None  # type: ignore[assignment]
        self.debug = False
        self.pool: Pool = None  # type: ignore[assignment]
        self.tensors = ChildSet()       # of Tensor
        self.algorithms = ChildSet()    # of Algorithm
        self.sequences = ChildSet()     # of Sequence
        # Weak, like the other children: the Manager object holds the named sequences
        # strongly (Manager._named), so a dropped manager and its named sequences can be
        # collected together instead of living until exit.
        self.named: weakref.WeakValueDictionary[str, Sequence] = weakref.WeakValueDictionary()
        # Sequences whose last submission has not been seen complete, by their weak
        # references (Child._ref). The Manager object holds them strongly
        # (Manager._running): a manager dropped while a sequence runs forms a cycle with
        # it that the collector frees (closing the manager), instead of this state, which
        # its finalizer holds, keeping both alive until exit.
        self.running: dict[weakref.ref, None] = {}
        # Handles of objects that became unreachable; released at the next safe point.
        self.garbage: collections.deque[Handle] = collections.deque()
        # weakref to a live child -> the handle it owns (see Child.__init__)
        self.handles: dict[weakref.ref, Handle] = {}
        # queue -> (sg_seq, signature of the commands it holds) of destroyed sequences,
        # idle, ready for reuse (see Sequence._sig)
        self.seq_cache: dict[int, list[tuple[Any, tuple | None]]] = {}
        # [weak references of the sequences still running, handle] releases waiting for
        # fences
        self.deferred: list[tuple[set[weakref.ref], Handle]] = []
        # Sequence handles destroyed while another thread waits on their fence; the last
        # waiter frees them.
        self.doomed: set[Handle] = set()
        # sg_seqs released while their last submission was not known complete: never
        # freed under the GPU; collect() frees them once their fence signalled.
        self.limbo: list[Any] = []
        # (sg_seq ** holder, [staging Allocation]) of storage uploads (Manager._upload)
        self.oneoffs: list[tuple[Any, list[Any]]] = []
        self.programs: dict[tuple, _Program] = {}
        self.unused_programs: OrderedDict[tuple, _Program] = OrderedDict()
        self.reflections: OrderedDict[bytes, ShaderInfo] = OrderedDict()
        self.msg_buf = ffi.new("char[]", 65536)

    def unreachable(self, ref: weakref.ref) -> None:
        """Weakref callback of a child that became unreachable: queue its handle (no lock,
        no Python calls beyond a dict and a deque: it may run inside the garbage collector
        or at interpreter exit)."""
        try:
            handle = self.handles.pop(ref, None)
        except TypeError:   # "weak object has gone away": a reference never hashed, so
            return          # never registered (Child.__init__ was cut short before)
        if handle is None:
            return  # destroyed before: destroy() already left the sets
        self.tensors.refs.pop(ref, None)
        self.algorithms.refs.pop(ref, None)
        self.sequences.refs.pop(ref, None)
        self.garbage.append(handle)

    def recycle_seq(self, handle: Any) -> bool:
        """Keeps the sg_seq of a destroyed sequence's handle (_SeqHandle) for reuse,
        taking it from the handle; False when the cache is full (the caller destroys it).
        Its last submission is complete (destroy_now checked)."""
        cache = self.seq_cache.setdefault(handle.queue, [])
        if len(cache) >= SEQUENCES_KEPT or self.closed:
            return False
        sig = handle.sig
        cache.append((handle.take(), sig))   # one line: taken and kept (Ctrl-C)
        return True

    def finish_oneoffs(self, wait: bool = False) -> None:
        """Frees the one-off command buffers (storage uploads) whose work completed, and
        their staging ranges; with wait=True, waits for those still pending first (an
        upload cut short: the tensor it writes is freed next, and its copy must not write
        into memory the pool reuses or gives back)."""
        for job in list(self.oneoffs):
            out, allocs = job
            if out[0] == ffi.NULL and not allocs:
                continue   # nothing made yet (the pool calls back here while _upload allocates)
            if out[0] != ffi.NULL:
                if wait:   # a copy always ends: no slices
                    lib.sg_seq_wait(out[0], 2**64 - 1, SPIN_NS)
                if lib.sg_seq_status(out[0]) != 0:
                    continue
            while allocs:
                self.pool.free(allocs.pop())
            # The job leaves the list in the line that frees its last part (Ctrl-C): an
            # empty job left there would look like an upload under way, kept for good.
            # (An interrupt at _take's line comes before it runs: the job is intact.)
            if out[0] != ffi.NULL:
                lib.sg_seq_destroy(_take(out)); self.oneoffs.remove(job)  # noqa: E702
            else:
                self.oneoffs.remove(job)

    def drop_seq_cache(self) -> int:
        n = 0
        for cache in self.seq_cache.values():
            while cache:   # each one leaves the cache as it is freed (Ctrl-C)
                lib.sg_seq_destroy(cache.pop()[0])
                n += 1
        return n

    # -- safe points ------------------------------------------------------------------
    def check_open(self) -> None:
        if self.closed:
            if self.forked:
                raise ForkedError(
                    f"this manager was created in the parent process (pid {self.pid}) "
                    "before os.fork(); GPU objects do not survive a fork, so it cannot be "
                    "used in the child. Create a new Manager in this process.")
            raise DestroyedError("the manager is closed: create a new Manager")

    def running_seqs(self) -> list[Sequence]:
        """The running sequences. (A reference is dead only while the collector frees
        the sequence together with its manager, whose close() then waits for the device.)"""
        out = []
        for ref in list(self.running):
            seq = ref()
            if seq is not None:
                out.append(seq)
        return out

    def collect(self) -> None:
        """Releases what finalizers queued and retires sequences whose fences signalled.
        Called with the lock held at the start of public operations."""
        garbage = self.garbage
        while garbage:
            handle = garbage[0]
            if type(handle) is _SeqHandle:
                # Its release is safe to run again: it leaves the queue once it returned,
                # in the same line (an interrupt inside it leaves it for the next call).
                self.release(handle); garbage.popleft()  # noqa: E702
            else:
                self.release(garbage.popleft())
        if self.running:
            for seq in self.running_seqs():
                # An error (not known to be complete) leaves it running: the next wait
                # on it reports the error. (_handle.seq, not _h: a sequence destroyed
                # while it ran keeps its sg_seq until it completes; see Sequence.destroy.)
                h = seq._handle.seq  # type: ignore[attr-defined]
                if h is not None and lib.sg_seq_status(h) == 0:
                    seq._finish()
        if self.oneoffs:
            self.finish_oneoffs()
        limbo = self.limbo
        if limbo:
            for i in range(len(limbo) - 1, -1, -1):
                if lib.sg_seq_status(limbo[i]) == 0:
                    lib.sg_seq_destroy(limbo.pop(i))   # one line (Ctrl-C)

    def release(self, handle: Handle) -> None:
        """Releases now, or once every running sequence that uses the handle completed."""
        users = ({s._ref for s in self.running_seqs() if handle in s._inflight}
                 if self.running else None)
        if users:
            self.deferred.append((users, handle))
        else:
            handle.release(self, False)

    def completed(self, seq: Sequence) -> None:
        if not self.deferred:
            return
        keep: list[tuple[set[weakref.ref], Handle]] = []
        ready: list[tuple[set[weakref.ref], Handle]] = []
        ref = seq._ref
        for users, handle in self.deferred:
            users.discard(ref)
            (keep if users else ready).append((users, handle))
        self.deferred = keep
        for _, handle in ready:
            handle.release(self, False)

    def take_validation(self) -> tuple[list[str], int]:
        """Debug mode: takes the layer's messages (forgetting them: a message belongs to
        the call that caused it, never to a later one) and logs the warnings; returns the
        error texts and the error count (more than the texts when the shim's buffer
        overflowed)."""
        if not self.debug or self.inst is None or lib.sg_instance_pending(self.inst) == 0:
            return [], 0
        nerr = ffi.new("int *")
        lib.sg_instance_messages(self.inst, self.msg_buf, len(self.msg_buf), nerr)
        text = ffi.string(self.msg_buf).decode(errors="replace")
        errors = []
        for line in text.splitlines():
            if line.startswith("E "):
                errors.append(line[2:])
            elif line.startswith("W "):
                log.warning("Vulkan validation: %s", line[2:])
        return errors, max(nerr[0], len(errors))

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

    # -- shaders -------------------------------------------------------------------------
    def reflect(self, spirv: Any) -> ShaderInfo:
        if not isinstance(spirv, (bytes, bytearray, memoryview)):
            raise TypeError(f"spirv must be bytes (SPIR-V, e.g. from sg.compile_glsl), not "
                            f"{type(spirv).__name__}")
        key = bytes(spirv)
        info = self.reflections.get(key)
        if info is None:
            check_module(key, self.info)   # validator, structure, capabilities: before the driver
            info = reflect(key)
            api = tuple(int(x) for x in self.info.api_version.split(".")[:2])
            maxv = (1, 6) if api >= (1, 3) else ((1, 5) if api >= (1, 2) else (1, 3))
            if info.version > maxv:
                raise ShaderError(f"SPIR-V {info.version[0]}.{info.version[1]} is newer than "
                                  f"this device's Vulkan {self.info.api_version} accepts")
            self.reflections[key] = info
            if len(self.reflections) > 256:
                self.reflections.popitem(last=False)
        return info

    def get_program(self, spirv: bytes, info: ShaderInfo, spec: tuple,
                    nbindings: int | None = None) -> _Program:
        # nbindings: the descriptor set layout's bindings 0..nbindings-1 (one per tensor),
        # a superset of those the module uses (unused ones are valid Vulkan).
        if nbindings is None:
            nbindings = len(info.bindings)
        ids, offsets, sizes, blob = spec
        key = (bytes(spirv), tuple(ids), tuple(sizes), blob, nbindings)
        prog = self.programs.get(key)
        if prog is None:
            code = ffi.from_buffer("uint32_t[]", bytes(spirv))
            out = ffi.new("sg_program **")
            n = len(ids)
            # One try, no nested one: a KeyboardInterrupt delivered at a nested `try:` line
            # escaped this handler (seen with sys.settrace on CPython 3.11).
            try:
                rc = lib.sg_program_create(
                    self.dev, code, len(spirv), nbindings, info.push_constant_size, n,
                    ffi.new("uint32_t[]", ids or [0]), ffi.new("uint32_t[]", offsets or [0]),
                    ffi.new("uint32_t[]", sizes or [0]), blob or ffi.NULL, len(blob), out)
                if rc in (-3, -1000012000, -13):  # INITIALIZATION_FAILED, INVALID_SHADER, UNKNOWN
                    raise ShaderError(f"the driver rejected the shader ({len(spirv)} bytes "
                                      f"of SPIR-V): {ffi.string(lib.sg_last_call()).decode()} "
                                      "failed")
                check(rc, "creating a compute pipeline")
                # Unused until the reference below is taken (empty_cache() frees it).
                self.programs[key] = self.unused_programs[key] = _Program(out[0], key)
                self.check_validation("creating a compute pipeline")
            except BaseException as exc:
                # Made but rejected by the layer (not cached: the same shader must raise
                # again), or made and not yet registered (Ctrl-C right after the shim
                # returned): destroyed. Nothing else can hold it: the lock is ours.
                self.programs.pop(key, None)
                self.unused_programs.pop(key, None)
                if out[0] != ffi.NULL:
                    lib.sg_program_destroy(_take(out))
                self.validation_failed(exc, "creating a compute pipeline")
                raise
            prog = self.programs[key]
        # One line: an interrupt never falls between taking the reference and returning.
        self.unused_programs.pop(key, None); prog.refs += 1; return prog  # noqa: E702

    def unref_program(self, holder: Any) -> None:
        """Drops the reference `holder.program` (an algorithm's handle) holds, and clears
        it. One line: a Ctrl-C falls before it (the release runs again and does it) or
        after it, never between taking the reference and counting it."""
        prog, holder.program = holder.program, None; prog.refs -= 1; prog.refs or self.unused_programs.update({prog.key: prog})  # noqa: E501,E702
        while len(self.unused_programs) > UNUSED_PROGRAMS_KEPT:
            self._destroy_program(self.unused_programs.popitem(last=False)[1])

    def _destroy_program(self, prog: _Program) -> None:
        # One line (Ctrl-C): forgotten and destroyed together.
        del self.programs[prog.key]; lib.sg_program_destroy(prog.handle); prog.handle = None  # noqa: E702

    def drop_unused_programs(self) -> int:
        n = len(self.unused_programs)
        for prog in list(self.unused_programs.values()):
            self._destroy_program(prog)
        self.unused_programs.clear()
        return n


def _pending(state: _State) -> list[tuple[Any, str]]:
    """Every sg_seq whose last submission may still run, with a label for the log."""
    out: dict[int, tuple[Any, str]] = {}

    def add(h: Any, label: str) -> None:
        if h is not None:
            out.setdefault(int(ffi.cast("uintptr_t", h)), (h, label))

    for seq in state.running_seqs():
        add(seq._handle.seq, repr(seq))  # type: ignore[attr-defined]
    for h in itertools.chain(state.garbage, state.handles.values(), state.doomed,
                             (h for _, h in state.deferred)):
        if isinstance(h, _SeqHandle):
            add(h.seq, "a sequence collected while it ran")
    for h in state.limbo:
        add(h, "a destroyed sequence")
    for holder, _ in state.oneoffs:
        if holder[0] != ffi.NULL:
            add(holder[0], "a storage upload")
    return list(out.values())


def _drain(state: _State, timeout: float | None) -> list[str]:
    """Waits, at most `timeout` seconds in all (None: no limit), for every submission
    that may still run; returns the labels of those still running. Waits in slices, so
    that Ctrl-C raises KeyboardInterrupt within one slice (nothing is changed then)."""
    pending = _pending(state)
    if not pending:
        return []
    deadline = None if timeout is None else time.monotonic() + timeout
    still = []
    for h, label in pending:
        while True:
            ns = WAIT_SLICE_NS
            if deadline is not None:
                left = deadline - time.monotonic()
                ns = max(0, min(ns, int(left * 1e9)))
            # A failed wait (device lost) ends the wait too: nothing will complete it.
            if lib.sg_seq_wait(h, ns, 0) != _SG_TIMEOUT:
                break
            if deadline is not None and time.monotonic() >= deadline:
                still.append(label)
                break
    return still


def _abandon(state: _State, still: list[str], why: str) -> None:
    """Closes a manager whose GPU work did not complete: every object is marked destroyed,
    but nothing is freed (the GPU may still use any of it; Vulkan forbids destroying a
    device with work pending). The device, its memory and Vulkan objects stay allocated
    until the process exits; live_vulkan_objects() still counts them."""
    state.abandoned = True
    for group in (state.sequences, state.algorithms, state.tensors):
        for obj in list(group):
            obj._mark_destroyed()
        group.clear()
    state.named.clear()
    _ABANDONED.append(state)
    log.warning(
        "closing the manager on %s: %d submission(s) still running %s: %s. Its device, "
        "memory and Vulkan objects stay allocated until the process exits, because the "
        "GPU may still use them (Manager(wait_timeout=...) or SCOPEDGPU_WAIT_TIMEOUT "
        "sets how long close and exit wait).",
        state.info.name if state.info else "?", len(still), why, "; ".join(still))


def abandoned_managers() -> int:
    """How many managers of this process were closed while GPU work still ran, and so
    keep their device and memory until the process exits (see Manager.close)."""
    return len(_ABANDONED)


def _shutdown(state: _State) -> None:
    """Closes a manager: waits for all GPU work (at most state.wait_timeout seconds), then
    destroys sequences, algorithms, tensors, pipelines, memory blocks, the device and the
    instance, children first. Work still running after the wait is abandoned, not freed
    (see _abandon). Runs at most once (it is the manager's weakref.finalize callback)."""
    with state.lock:
        if state.closed:
            return
        if state.forked:
            # Inherited across os.fork(): these Vulkan objects are the parent's. No
            # Vulkan call, no wait on the parent's device.
            state.closed = True
            return
        interrupted: BaseException | None = None
        still: list[str] = []
        if state.dev is not None:
            try:
                still = _drain(state, 0.0 if state.gave_up else state.wait_timeout)
                why = f"after {state.wait_timeout:g} s"
            except KeyboardInterrupt as exc:   # at exit or in the collector: give up now
                interrupted = exc
                still = _drain(state, 0.0)
                why = "when KeyboardInterrupt stopped the wait"
        state.closed = True
        if still:
            _abandon(state, still, why)
            if interrupted is not None:
                raise interrupted
            return
        if state.dev is not None:
            # Every known submission completed above: this returns at once.
            lib.sg_device_wait_idle(state.dev)
            for seq in state.running_seqs():
                try:
                    seq._finish()
                except Exception:  # a failed host copy must not stop the teardown
                    log.exception("completing %r while closing", seq)
            # Sequences collected with this manager while they ran: their host copies
            # (the device is idle, and the staging memory is still there).
            for h in itertools.chain(state.garbage, state.handles.values()):
                if isinstance(h, _SeqHandle) and h.copies:
                    try:
                        h.complete()
                    except Exception:
                        log.exception("completing a collected sequence while closing")
            state.running.clear()
            for users, handle in state.deferred:
                handle.release(state, True)
            state.deferred.clear()
            while state.garbage:
                state.garbage.popleft().release(state, True)
            for group in (state.sequences, state.algorithms, state.tensors):
                for obj in list(group):
                    h = obj._mark_destroyed()
                    if h is not None:
                        h.release(state, True)
                group.clear()
            # Children collected in one reference cycle with the manager: the collector
            # cleared the weak sets before any finalizer ran, and theirs may run after this
            # one. Release their handles now (releases are idempotent), children first.
            handles = list(state.handles.values())
            for kind in (_SeqHandle, _AlgoHandle, Handle):
                for h in handles:
                    if isinstance(h, kind):
                        h.release(state, True)
                handles = [h for h in handles if not isinstance(h, kind)]
            state.handles.clear()
            state.named.clear()
            state.drop_seq_cache()
            for h in state.limbo:
                lib.sg_seq_destroy(h)
            state.limbo.clear()
            for holder, _ in state.oneoffs:
                if holder[0] != ffi.NULL:
                    lib.sg_seq_destroy(_take(holder))
            state.oneoffs.clear()   # the staging ranges go with the pool
            # Threads still inside a fence wait on a destroyed sequence return at once (the
            # device is idle) and free it; the device must outlive that.
            while state.doomed:
                state.lock.release()
                try:
                    time.sleep(0.001)
                finally:
                    state.lock.acquire()
            for prog in list(state.programs.values()):
                lib.sg_program_destroy(prog.handle)
            state.programs.clear()
            state.unused_programs.clear()
            if state.pool is not None:
                state.pool.destroy()
            lib.sg_device_destroy(state.dev)
            state.dev = None
            # After vkDestroyDevice: the layer reports objects the device still had then.
            try:
                state.check_validation("closing the manager")
            except ValidationError as exc:
                log.error("%s", exc)
        if state.inst is not None:
            lib.sg_instance_destroy(state.inst)
            state.inst = None
        if interrupted is not None:
            raise interrupted


class Manager:
    """One Vulkan device and everything made on it.

    Manager(device=None, *, debug=None, memory_limit=None, wait_timeout=None): `device` is
    an index, a case-insensitive name substring, or None for the best device (discrete >
    integrated > virtual > cpu; SCOPEDGPU_DEVICE overrides). debug=True (or
    SCOPEDGPU_DEBUG=1) turns on the Khronos validation layer; its errors raise
    ValidationError from the call that caused them. memory_limit (or
    SCOPEDGPU_MEMORY_LIMIT) caps the bytes of the tensor pool. wait_timeout (or
    SCOPEDGPU_WAIT_TIMEOUT; default 10 seconds) bounds how long close(),
    Sequence.destroy(), the collector and interpreter exit wait for GPU work that may
    never end (see close()).

    A Manager cannot be copied or pickled (TypeError). After os.fork() it is unusable in
    the child (ForkedError); the child may open a Manager of its own.

    close() (or the end of a `with` block, or interpreter exit) waits for all GPU work and
    then frees everything the manager made. Calls are thread-safe: one lock guards the
    manager's state; sequence fence waits happen outside it (wait_idle() and storage
    uploads wait under it). One Sequence evaluated from several threads is serialized.
    See docs/threads.md.
    """

    def __init__(self, device: int | str | None = None, *, debug: bool | None = None,
                 memory_limit: int | None = None, wait_timeout: float | None = None):
        timeout = wait_timeout_from(wait_timeout)
        _device.load_vulkan()
        if debug is None:
            debug = bool(_env_flag("SCOPEDGPU_DEBUG"))
        if memory_limit is None and os.environ.get("SCOPEDGPU_MEMORY_LIMIT", "").strip():
            memory_limit = _bytes_limit(os.environ["SCOPEDGPU_MEMORY_LIMIT"],
                                        "the environment variable SCOPEDGPU_MEMORY_LIMIT")
        elif memory_limit is not None:
            memory_limit = _bytes_limit(memory_limit, "memory_limit")
        state = _State()
        state.wait_timeout = timeout
        _STATES.add(state)
        self._state = state
        self._named: dict[str, Sequence] = {}   # keeps named sequences until deleted
        self._running: set[Sequence] = set()    # keeps running sequences (see _State.running)
        # Registered first, so that whatever is created below is freed on failure too.
        self._finalizer = weakref.finalize(self, _shutdown, state)
        # The out-parameters are made before the calls that fill them, so that an
        # exception arriving between a call's return and the store below (Ctrl-C)
        # still finds, and frees, what the call made.
        out = ffi.new("sg_instance **")
        dout = ffi.new("sg_device **")
        try:
            rc = lib.sg_instance_create(1 if debug else 0, out)
            if rc == lib.SG_ERR_NO_LAYER:
                log.warning("debug=True, but the Khronos validation layer is not installed "
                            "(Debian/Ubuntu: apt-get install vulkan-validationlayers); "
                            "continuing without validation")
                debug = False
                rc = lib.sg_instance_create(0, out)
            if rc != 0:
                try:
                    check(rc, "creating a Vulkan instance")
                except Exception as exc:
                    raise _device.NoDeviceError(f"{exc}. {_device.INSTALL_HINT}") from exc
            state.inst = out[0]
            state.debug = bool(debug)
            if state.debug:
                _errors.debug_states.add(state)
            info = _device.choose_device(_device.enumerate_devices(state.inst), device)
            check(lib.sg_device_create(state.inst, info.index, min(info.queue_count, 8), dout),
                  f"creating a logical device on {info.name}")
            state.dev = dout[0]
            state.info = info
            state.pool = Pool(state.dev, info, memory_limit, on_oom=state.collect)
            state.check_validation(f"opening {info.name}")
        except BaseException:
            if state.inst is None and out[0] != ffi.NULL:
                state.inst = out[0]
            if state.dev is None and dout[0] != ffi.NULL:
                state.dev = dout[0]
            self._finalizer()
            raise
        self._nqueues = lib.sg_device_queue_count(state.dev)
        self._dtypes_ok: set[np.dtype] = set()   # native-order dtypes this device supports

    # -- life ------------------------------------------------------------------------------
    def close(self) -> None:
        """Waits for all GPU work, then destroys every sequence, algorithm and tensor of
        this manager, its pipelines and memory, and the device. Idempotent. data() arrays
        stay valid.

        The wait lasts at most `wait_timeout` seconds. Work still running then is given
        up on: the manager closes (every object is destroyed for the caller), a warning
        on the "scopedgpu" logger names what still runs, and the device, its memory and
        Vulkan objects stay allocated until the process exits, since the GPU may still
        use them. Ctrl-C during the wait raises KeyboardInterrupt and leaves the
        manager open."""
        st = self._state
        if not st.closed and not st.forked and st.dev is not None:
            with st.lock:
                if not st.closed and _drain(st, st.wait_timeout):
                    st.gave_up = True   # _shutdown gives up without waiting again
        self._finalizer()
        self._named.clear()
        self._running.clear()

    @property
    def closed(self) -> bool:
        """True once close() ran (or the manager was collected)."""
        return self._state.closed

    def __enter__(self) -> Manager:
        self._state.check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def device(self) -> _device.DeviceInfo:
        """The DeviceInfo of the device this manager runs on."""
        return self._state.info

    @property
    def debug(self) -> bool:
        """True when the validation layer is on for this manager."""
        return self._state.debug

    @property
    def wait_timeout(self) -> float:
        """Seconds close(), Sequence.destroy(), the collector and interpreter exit wait
        for GPU work before giving up on it (Manager(wait_timeout=...), or
        SCOPEDGPU_WAIT_TIMEOUT; default 10)."""
        return self._state.wait_timeout

    # A copy would share the device: closing one would destroy what the other uses.
    def __copy__(self) -> Any:
        raise refuse_copy(self, "manager", "copied")

    def __deepcopy__(self, memo: Any) -> Any:
        raise refuse_copy(self, "manager", "copied")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise refuse_copy(self, "manager", "pickled")

    def __repr__(self) -> str:
        st = self._state
        name = st.info.name if st.info else "?"
        return f"<Manager {name!r}{' closed' if st.closed else ''}>"

    def _open(self) -> _State:
        st = self._state
        st.check_open()
        return st

    # -- tensors ------------------------------------------------------------------------------
    def tensor(self, data: Any, *, dtype: Any = None, kind: str = "device") -> Tensor:
        """Copies `data` (array-like) into a new tensor. Python lists give float32 (as in
        kp) unless dtype says otherwise; numpy arrays keep their dtype. kind: "device",
        "host" or "storage" (see Tensor). The tensor's memory returns to the pool on
        destroy(), at close(), or when it becomes unreachable."""
        st = self._state
        if st.closed:
            st.check_open()
        if type(data) is np.ndarray and dtype is None and kind in KINDS:
            # Fast path (tensor churn): a numpy array keeps its dtype.
            if data.dtype in self._dtypes_ok and data.size:
                pool = st.pool
                if data.nbytes >= IMPORT_MIN:
                    if data.nbytes > pool.size_ok:   # before any copy: too big fails now
                        pool.check_request(data.nbytes, kind)
                    if kind == "device" and pool.can_import(data.nbytes):
                        # Copy straight into memory the device can import (one copy).
                        arr = aligned_empty(data.shape, data.dtype, pool.import_align)
                        np.copyto(arr, data)
                        return Tensor(self, arr, kind)
                return Tensor(self, data.copy(), kind)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if isinstance(data, Tensor):
            raise TypeError("mgr.tensor() copies array data; to copy a tensor on the device "
                            "use OpTensorCopy")
        if dtype is None and not isinstance(data, np.ndarray) and not hasattr(data, "__array__"):
            dtype = np.float32   # kp: Python lists are float32
        if isinstance(data, np.ndarray) and data.size * 8 > st.pool.size_ok:
            st.pool.check_request(data.size * np.dtype(dtype or data.dtype).itemsize, kind)
        try:
            arr = np.array(data, dtype=dtype, order="C", copy=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"cannot make a tensor from {type(data).__name__}: {exc}") from exc
        self._check_dtype(arr.dtype)
        if arr.dtype.byteorder not in ("=", "|"):
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if arr.size == 0:
            raise ValueError(f"a tensor needs at least one element; got shape {arr.shape}")
        if arr.nbytes > st.pool.size_ok:
            st.pool.check_request(arr.nbytes, kind)
        return Tensor(self, arr, kind)

    def tensor_t(self, array: Any, kind: str = "device") -> Tensor:
        """kp-compatible: like tensor(), keeping the array's dtype."""
        arr = np.asarray(array)
        return self.tensor(arr, dtype=arr.dtype, kind=kind)

    def empty(self, shape: int | Seq[int], dtype: Any = np.float32, *,
              kind: str = "device") -> Tensor:
        """A zero-filled tensor."""
        st = self._open()
        try:    # a tensor too big for the device fails before numpy allocates it
            dims: list[Any] = [shape] if np.ndim(shape) == 0 else list(shape)  # type: ignore[arg-type]
            nbytes = math.prod(int(d) for d in dims) * np.dtype(dtype).itemsize
        except (TypeError, ValueError):
            nbytes = 0   # numpy says what is wrong below
        if nbytes > st.pool.size_ok and kind in KINDS:
            st.pool.check_request(nbytes, kind)
        return self.tensor(np.zeros(shape, dtype=dtype), kind=kind)

    def _check_dtype(self, dtype: np.dtype) -> None:
        feature = dtype_feature(dtype)
        if feature is not None and not getattr(self._state.info, feature):
            raise TypeError(f"dtype {dtype} needs the device feature '{feature}', which "
                            f"{self._state.info.name} does not support")
        if dtype.byteorder in ("=", "|"):
            self._dtypes_ok.add(dtype)

    def _upload(self, tensor: Tensor, array: np.ndarray) -> None:
        """Writes `array` into a storage tensor through a temporary staging range and a
        one-off command buffer. Both are registered in state.oneoffs before anything else
        happens, so that whatever interrupts this (Ctrl-C included) leaves nothing the
        next collect() (or close()) does not free, and nothing freed under the GPU."""
        st = self._state
        what = f"uploading {tensor!r}"
        # All under the lock, the wait included: close() must not destroy the device under
        # the copy.
        with st.lock:
            st.check_open()
            job: tuple[Any, list[Any]] = (ffi.new("sg_seq **"), [])
            out, allocs = job
            # Jobs that made nothing were interrupted before their first step: forgotten.
            st.oneoffs[:] = [j for j in st.oneoffs if j[0][0] != ffi.NULL or j[1]]
            st.oneoffs.append(job)
            try:
                allocs.append(st.pool.alloc(array.nbytes, "host"))
                stage = allocs[0]
                ffi.memmove(ffi.cast("void *", stage.address), ffi.from_buffer(array),
                            array.nbytes)
                check(lib.sg_seq_create(st.dev, 0, 0, out), what)
                h = out[0]
                check(lib.sg_seq_begin(h), what)
                lib.sg_seq_copy(h, stage.block.handle, stage.offset, tensor._gpu.block.handle,
                                tensor._gpu.offset, array.nbytes)
                lib.sg_seq_barrier(h, 0x1800, 0x1040, 0x1800, 0x1860)
                check(lib.sg_seq_end(h), what)
                check(lib.sg_seq_submit(h), what)
                # In slices (Ctrl-C gets through): the copy queues behind any dispatch
                # running on queue 0, which may be long. Interrupted, the copy is still
                # awaited below before the tensor's memory can be freed.
                check(_fence_wait(st, h, None), what)
            except BaseException as exc:
                st.finish_oneoffs(wait=True)   # before the tensor's memory is freed
                st.validation_failed(exc, what)
                raise
            st.finish_oneoffs()
            st.check_validation(what)

    # -- algorithms and sequences -----------------------------------------------------------
    def algorithm(self, tensors: Seq[Tensor], spirv: bytes, workgroup: Seq[int] | None = None,
                  spec_consts: Any = None, push_consts: Any = None, *,
                  reinterpret: bool = False) -> Algorithm:
        """A compute shader bound to tensors (binding i is tensors[i]). workgroup: number of
        workgroups (x, y, z); None covers tensors[0] with the shader's own local size.
        spec_consts/push_consts: a list gives float32 values (kp), a numpy array keeps its
        dtype. Sizes are checked against the SPIR-V. A tensor whose dtype differs from its
        binding's declared element type raises ShaderError, unless reinterpret=True (the
        bytes are then read as the shader's type, as kp does). A tensor whose binding the
        shader does not use is accepted and ignored by the shader."""
        self._open()
        return Algorithm(self, tensors, spirv, workgroup, spec_consts, push_consts,
                         reinterpret=reinterpret)

    def sequence(self, name: str | None = None, *, queue: int = 0,
                 timestamps: bool = False) -> Sequence:
        """name None: a new anonymous sequence (destroyed at the end of its `with` block).
        A name: the named sequence of that name, created on first use."""
        st = self._open()
        if name is not None and not isinstance(name, str):
            raise TypeError(f"a sequence name must be a str or None, not {type(name).__name__}")
        if not isinstance(queue, int) or not 0 <= queue < self._nqueues:
            raise ValueError(f"queue must be an index below {self._nqueues} (this manager "
                             f"opened {self._nqueues} queue(s)), not {queue!r}")
        if timestamps and not st.info.timestamps:
            raise ValueError(f"{st.info.name} does not support timestamps on its compute queue")
        with st.lock:
            if name is not None and name in st.named:
                seq = st.named[name]
                return seq
            seq = Sequence(self, name, queue, timestamps)
            if name is not None:
                st.named[name] = seq
                self._named[name] = seq
            return seq

    def delete_sequence(self, name: str) -> None:
        """Waits for the named sequence and destroys it. KeyError if there is none."""
        st = self._open()
        with st.lock:
            seq = st.named.get(name)
        if seq is None:
            raise KeyError(f"no named sequence {name!r}; named sequences: "
                           f"{sorted(st.named) or 'none'}")
        seq.destroy()

    def clear_sequences(self, *, named: bool = False) -> int:
        """Destroys every anonymous sequence (and the named ones too when named=True),
        after their GPU work; returns how many it destroyed."""
        st = self._open()
        with st.lock:
            victims = [s for s in list(st.sequences)
                       if not s.destroyed and (s.name is None or named)]
        for s in victims:
            s.destroy()
        return len(victims)

    def sequence_names(self) -> list[str]:

        """The names of the live named sequences, sorted."""
        return sorted(self._open().named)

    def sequences(self) -> list[Sequence]:
        """The live sequences, named and anonymous."""
        st = self._open()
        with st.lock:
            return sorted((s for s in st.sequences if not s.destroyed), key=lambda s: s._id)

    def stream(self, spirv: bytes, inputs: Seq[np.ndarray], outputs: Seq[np.ndarray], *,
               push_consts: Any = None, spec_consts: Any = None,
               workgroup: Seq[int] | None = None, chunk_bytes: int | None = None,
               depth: int = 3, workers: int | None = None) -> list[np.ndarray]:
        """Runs a kernel over numpy arrays too big for one go, chunk by chunk along axis 0,
        with the upload of one chunk, the kernel on another and the download of a third
        overlapped (on the device's transfer queues when it has them). Binding i is the
        i-th distinct array of inputs + outputs; an array in both is read and written
        (in place). `chunk_bytes` (default 64 MiB) bounds one chunk of the widest array;
        `depth` chunks are in flight. Writes the outputs and returns them. Everything it
        allocates is freed before it returns, after the GPU is done with it, also when it
        raises. The kernel must treat its bindings elementwise (each chunk is a separate
        dispatch over chunk-sized buffers; the last chunk's buffers are not shrunk, so a
        kernel reads `length()` of them and its tail results are discarded)."""
        self._open()
        from scopedgpu.stream import stream
        return stream(self, spirv, inputs, outputs, push_consts=push_consts,
                      spec_consts=spec_consts, workgroup=workgroup, chunk_bytes=chunk_bytes,
                      depth=depth, workers=workers)

    def run(self, *ops: Op) -> None:
        """Records the ops in an anonymous sequence, evaluates it and destroys it."""
        with self.sequence() as seq:
            for op in ops:
                seq.record(op)
            seq.eval()

    # -- memory and accounting -------------------------------------------------------------
    def memory_stats(self) -> dict[str, int]:
        """The tensor pool: allocated_bytes, reserved_bytes (blocks held from the device),
        peak_allocated_bytes, blocks, tensors (live), memory_limit (0: none), cached_bytes
        (empty blocks kept for reuse) and cache_limit_bytes (the most of them kept)."""
        st = self._open()
        with st.lock:
            st.collect()
            stats = st.pool.stats()
            stats["tensors"] = len(st.tensors)
            stats["memory_limit"] = st.pool.memory_limit or 0
            return stats

    def empty_cache(self) -> int:
        """Returns unused pool blocks (and unused cached pipelines, and the command pools and
        fences kept for new sequences) to the device; returns the bytes freed."""
        st = self._open()
        with st.lock:
            st.collect()
            st.drop_unused_programs()
            st.drop_seq_cache()
            return st.pool.empty_cache()

    def live_objects(self) -> dict[str, int]:
        """Live tensors, algorithms and sequences of this manager, and the Vulkan objects
        its device holds in the C shim. All zero once the manager is closed."""
        st = self._state
        with st.lock:
            if st.closed:
                counts = {name: 0 for name in _LIVE_NAMES if name != "instances"}
                counts.update(tensors=0, algorithms=0, sequences=0, cached_sequences=0)
                return counts
            st.collect()
            counts = shim_live_counts(st.dev)
            del counts["instances"]
            # command_pools and fences are what the shim holds, including the idle ones
            # kept for reuse by new anonymous sequences: cached_sequences says how many
            # of them are idle (empty_cache() frees them, like cached memory blocks).
            counts["cached_sequences"] = sum(len(c) for c in st.seq_cache.values())
            counts["tensors"] = len(st.tensors)
            counts["algorithms"] = len(st.algorithms)
            counts["sequences"] = len(st.sequences)
            counts["pending_releases"] = len(st.deferred)
            return counts

    def wait_idle(self) -> None:
        """Waits until the device has finished all submitted work, and completes every
        running sequence. Ctrl-C raises KeyboardInterrupt within 100 ms; what still
        runs then stays running."""
        st = self._open()
        with st.lock:
            st.check_open()
            # Under the lock: vkDeviceWaitIdle needs "host access to all VkQueue objects
            # created from device" externally synchronized, and a sequence submitted by
            # another thread after the wait must not be marked complete below. The fences
            # first, in slices (vkDeviceWaitIdle cannot be interrupted).
            _drain(st, None)
            rc = lib.sg_device_wait_idle(st.dev)
            check(rc, "waiting for the device to be idle")
            st.collect()
            for seq in st.running_seqs():
                seq._finish()
            st.check_validation("waiting for the device")


def live_vulkan_objects() -> dict[str, int]:
    """Process-wide live Vulkan objects held by the shim, over all managers."""
    return shim_live_counts(None)



def _after_fork() -> None:
    """In the child of os.fork(): every inherited manager becomes unusable (ForkedError),
    and nothing inherited reaches Vulkan, not even at exit: the Vulkan objects belong to
    the parent, and the child's copy of the driver's state is not to be trusted."""
    for state in list(_STATES):
        state.forked = True
        state.closed = True
        # Another thread of the parent may have held it at the fork.
        state.lock = threading.RLock()
        for group in (state.sequences, state.algorithms, state.tensors):
            for obj in list(group):
                obj._destroyed = True
    _ABANDONED.clear()
    # The host-copy threads of the parent do not exist in the child.
    from scopedgpu import tensor
    tensor._copier = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
