"""Streaming: numpy arrays pushed through a kernel in chunks, with the upload of one chunk,
the kernel on another and the download of a third overlapped.

    outs = mgr.stream(spirv, inputs=[x, y], outputs=[out], push_consts=[2.0])

Each array is cut into chunks of rows (axis 0); chunk k of every array is bound to the
kernel, in device memory of its own, and the kernel runs once per chunk: binding i is the
i-th distinct array of inputs + outputs, so an array given in both (`inputs=[x, y],
outputs=[y]`, an in-place y = a * x + y) is one binding, uploaded and downloaded. The
arrays never need to fit on the device.

How the overlap is made (the policy in ten lines):
- A ring of `depth` slots, each with device memory for one chunk of every array, one
  algorithm over it and three command buffers: upload, kernel, download.
- Uploads and downloads run on the device's transfer-only queues when it has them (their
  DMA engines work beside the compute queues), else on the compute queue; the kernel runs
  on queue 0. The host orders the three steps of a chunk: a step is submitted once the
  fence of the step before it has signalled; steps of other chunks run meanwhile.
- Host side: worker threads copy each chunk into the slot's pinned staging range ahead of
  its upload, and out of it after its download (the shim's sg_copy_large, which releases
  the GIL, so they run in parallel, and writes with streaming stores on x86-64: the
  destination is not read first: three memory passes a byte, with the DMA, not four).
  SCOPEDGPU_STREAM_HOST=import imports the chunk's own pages instead
  (VK_EXT_external_memory_host, page rounded, released once its last copy completed):
  no copy, but drivers import one range at a time, slower on the H200 than parallel
  copies; "auto" imports when no other worker is importing and copies otherwise.
- SCOPEDGPU_STREAM_TRACE=1 records when each chunk entered each step (Streamer.trace), for
  finding which step holds a stream back.
- Nothing is freed while any queue may use it: every exit path first waits for every
  fence submitted (bounded by the manager's wait_timeout in all; past it the memory is
  kept, as everywhere in scopedgpu), then frees. Ctrl-C is held until a wait of the loop
  (_ki.protected: no step is half done), then waits INTERRUPT_GRACE at most and reaches
  the caller; what the GPU still uses stays recorded (the Streamer in engine.streams),
  freed by the manager's next call once done (reap) or by close().
"""
from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import numbers
import os
import time
import threading
from typing import Any, Callable, Sequence as Seq

import numpy as np

from scopedgpu import _ki, _vk
from scopedgpu._errors import DestroyedError, ShaderError
from scopedgpu._settings import get as setting
from scopedgpu._spirv import ShaderInfo
from scopedgpu._submission import Submission
from scopedgpu._transfer import contiguous_arrays
from scopedgpu.algorithm import (check_array_element_types, encode_push_consts,
                                 encode_spec_consts, parse_workgroup, spec_values)
from scopedgpu.ops import OpAlgoDispatch, OpMemoryBarrier
from scopedgpu.tensor import Tensor

log = logging.getLogger("scopedgpu")

MiB = 1 << 20
DEFAULT_CHUNK = 8 * MiB
_POLL_NS = 200_000       # one blocking wait slice while nothing else can progress
# Seconds an interrupted stream waits for its GPU work before Ctrl-C reaches the caller.
INTERRUPT_GRACE = 0.05


def _arrays(arrays: Any, what: str, writable: bool, info: Any) -> list[np.ndarray]:
    """The arrays of `inputs` or `outputs` (what), each checked as tensor() checks an
    array's dtype, and C-contiguous, cut along axis 0 into rows of at least one element."""
    if isinstance(arrays, np.ndarray):
        arrays = [arrays]
    elif isinstance(arrays, (str, bytes, bytearray, dict)) or not hasattr(arrays, "__iter__"):
        raise TypeError(f"stream(): {what} must be a numpy array or a list of them, not "
                        f"{type(arrays).__name__} {arrays!r}")
    arrays = contiguous_arrays(arrays, f"stream(): {what}[{{i}}]", info)
    for i, a in enumerate(arrays):
        if writable and not a.flags.writeable:
            raise ValueError(f"stream(): {what}[{i}] is read-only")
        if a.ndim == 0:
            raise ValueError(f"stream(): {what}[{i}] is 0-d; arrays are cut along axis 0")
        if not math.prod(a.shape[1:]):
            raise ValueError(f"stream(): {what}[{i}] has shape {a.shape}: its rows (along "
                             "axis 0) have no elements, and a kernel's binding needs at "
                             "least one")
    return arrays


def _count(value: Any, name: str, low: int, allowed: str) -> int:
    """A whole-number argument of stream(): TypeError or ValueError naming it, the value
    and what is allowed."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"stream(): {name} must be {allowed}, not {type(value).__name__} "
                        f"{value!r}")
    if value < low:
        raise ValueError(f"stream(): {name} must be {allowed}, not {value!r}")
    return int(value)


class _Host:
    """The host memory of one chunk of one array, as the device sees it: an imported
    block (no copy) or the slot's staging range (copied by a worker)."""
    __slots__ = ("view", "block", "offset", "staged", "pinned")

    def __init__(self, view: np.ndarray, pinned: list[tuple[Any, int, int]] | None):
        self.view = view
        self.block: Any = None      # sg_block * of the import, or of the staging range
        self.offset = 0
        self.staged: Any = None     # the slot's staging Allocation, when staged
        # In a Manager.pinned() array: its (block, offset, bytes) pieces; nothing to do
        # on the host, and nothing to release.
        self.pinned = pinned


class _Slot:
    __slots__ = ("index", "tensors", "stage", "algo", "up", "down", "kernel", "chunk",
                 "hosts", "phase", "futures")

    def __init__(self, index: int):
        self.index = index
        self.tensors: list[Any] = []
        self.stage: list[Any] = []  # a pinned staging range per array (pool "host" memory)
        self.algo: Any = None
        self.kernel: Any = None     # public Sequence on the compute queue
        self.up: Submission | None = None     # the chunk's upload (copies), once made
        self.down: Submission | None = None   # and its download
        self.chunk = -1
        self.hosts: list[_Host] = []
        self.phase = "free"
        self.futures: list[cf.Future] = []


class Streamer:
    """One stream() call: see the module docstring. Internal; Manager.stream() is the API."""

    def __init__(self, mgr: Any, engine: Any, spirv: bytes, inputs: list[np.ndarray],
                 outputs: list[np.ndarray], *, shader: ShaderInfo,
                 local_size: tuple[int, int, int], push_consts: Any, spec_consts: Any,
                 workgroup: Any, chunk_bytes: int, depth: int, workers: int,
                 progress: Callable[[int, int], object] | None = None):
        self.mgr = mgr
        self.state = engine
        self.progress = progress
        arrays: list[np.ndarray] = []
        names: list[str] = []    # binding i: arrays[i], called names[i] in errors
        for what, given in (("inputs", inputs), ("outputs", outputs)):
            for k, a in enumerate(given):
                if not any(a is b for b in arrays):
                    arrays.append(a)
                    names.append(f"{what}[{k}]")
        self.arrays = arrays
        unbound = [b for b in shader.bindings if b >= len(arrays)]
        if unbound:
            raise ShaderError(
                f"stream(): the shader declares storage-buffer bindings {shader.bindings}, "
                f"but {len(arrays)} distinct array(s) were given (binding i is the i-th "
                f"distinct array of inputs + outputs: {', '.join(names)})")
        check_array_element_types(arrays, names, shader, "stream()")
        self.up_idx = [i for i, a in enumerate(arrays) if any(a is b for b in inputs)]
        self.down_idx = [i for i, a in enumerate(arrays) if any(a is b for b in outputs)]
        for i in self.down_idx:
            for j, a in enumerate(arrays):
                if j != i and np.may_share_memory(a, arrays[i]):
                    raise ValueError(f"stream(): output array {i} overlaps array {j}; pass "
                                     "the same array object to be read and written in place")
        self.rows = arrays[0].shape[0]
        for i, a in enumerate(arrays):
            if a.shape[0] != self.rows:
                raise ValueError(f"stream(): every array needs the same length along axis 0; "
                                 f"{self.rows} and {a.shape[0]} (array {i})")
        row_bytes = max(a.nbytes // max(a.shape[0], 1) for a in arrays) or 1
        # A chunk is one storage buffer binding: within maxStorageBufferRange.
        limit = int(engine.info.max_storage_buffer_range) or int(chunk_bytes)
        chunk_bytes = min(int(chunk_bytes), limit)
        self.chunk_rows = max(1, min(self.rows, chunk_bytes // row_bytes))
        if workgroup is None:
            # The default grid is algorithm()'s: one invocation per element of binding 0
            # (elements of the type its shader declares: the dtype matches it), in one
            # dispatch. A chunk is cut to what that dispatch can cover.
            per_row = math.prod(arrays[0].shape[1:])
            maxc = engine.info.max_workgroup_count[0]
            cover = maxc * local_size[0]
            if per_row > cover:
                raise ValueError(
                    f"stream(): no workgroup was given, and one row of {names[0]} (shape "
                    f"{arrays[0].shape}: {per_row} elements) needs more than this "
                    f"device's maxComputeWorkGroupCount[0] ({maxc}) groups of the "
                    f"shader's local size {local_size[0]}: pass a workgroup (with the "
                    "shader indexing gl_GlobalInvocationID.y too), or use a larger "
                    "local_size_x")
            self.chunk_rows = min(self.chunk_rows, cover // per_row)
        self.nchunks = -(-self.rows // self.chunk_rows) if self.rows else 0
        self.depth = max(1, min(depth, self.nchunks or 1))
        self.spirv, self.push_consts, self.spec_consts = spirv, push_consts, spec_consts
        self.workgroup = workgroup
        pool = self.state.pool
        self.align = pool.import_align
        ncompute = mgr.queue_count
        ntransfer = _vk.device_transfer_queue_count(self.state.dev)
        self.up_queue = ncompute if ntransfer else 0
        self.down_queue = ncompute + (1 if ntransfer > 1 else 0) if ntransfer else 0
        self.slots = [_Slot(i) for i in range(self.depth)]
        self.workers = cf.ThreadPoolExecutor(max(1, workers),
                                             thread_name_prefix="scopedgpu-stream")
        self.pin_lock = threading.Lock()
        self.torn_down = False
        self.tearing = False   # in _teardown (see there)
        self.logged = False    # the stuck-work error was logged
        # A thread is inside run(): only that thread frees this stream then; once it left
        # (interrupted), collect() and close() free what it left (reap).
        self.active = False
        self.imported = self.staged = self.pinned = 0   # chunks of arrays reached each way
        # Per array, the Manager.pinned() object holding all of it (or None): a Pinned
        # is not released while a stream in engine.streams lists it here.
        self.pins: list[Any] = [None] * len(arrays)
        self.trace: list[tuple[int, str, float]] | None = (
            [] if setting("SCOPEDGPU_STREAM_TRACE") else None)
        # How chunks reach the device: "stage" (copied into pinned staging by the workers,
        # the default: on the H200 host 38 GB/s against 29 with "auto" and 13 with
        # "import", whose driver imports one range at a time), "import" (imported, no
        # copy) or "auto" (imported when no other worker is importing, else staged).
        self.host_mode: str = setting("SCOPEDGPU_STREAM_HOST")

    # -- host memory: import (pin) or stage ---------------------------------------------------
    def _prepare(self, slot: _Slot, i: int) -> None:
        """Worker thread: makes chunk i of the slot reachable by the device: copies it
        into the slot's staging range, or (host_mode "import", or "auto" when no other
        worker is importing) imports its pages."""
        h = slot.hosts[i]
        if not h.view.nbytes:
            return
        if self.host_mode != "stage" and self.align:
            blocking = self.host_mode == "import"
            if self.pin_lock.acquire(blocking=blocking):
                try:
                    self._pin(h)
                finally:
                    self.pin_lock.release()
                if h.block is not None:
                    self.imported += 1
                    return
        self.staged += 1
        a = slot.stage[i]   # made by _setup: workers take no lock of the manager's
        h.staged, h.block, h.offset = a, a.block.handle, a.offset
        if i in self.up_idx:
            # Streaming stores: the staging range is written without being read first,
            # and the chunk, read once, leaves the caches to the other copies.
            _vk.copy_large(a.address, h.view.ctypes.data, h.view.nbytes)

    def _finish(self, h: _Host) -> None:
        """Worker thread: a downloaded chunk reaches its array (copied out of staging, or
        already there through the import, which is released)."""
        if h.staged is not None:
            if h.view.nbytes:
                _vk.copy_large(h.view.ctypes.data, h.staged.address, h.view.nbytes)
            h.staged = h.block = None
        elif h.block is not None:
            blk, h.block = h.block, None
            _vk.block_destroy(blk)

    def _pin(self, h: _Host) -> None:
        """Imports the pages under h.view (the device then reads and writes the array
        itself); leaves h.block None when the device cannot import them."""
        addr = h.view.ctypes.data
        pool = self.state.pool
        start, end = pool.page_span(addr, h.view.nbytes)
        got = pool.import_range(start, end - start, pool.importable_types(start))
        if got is not None:
            h.block, h.offset = got[0], addr - start

    def _start_chunk(self, slot: _Slot, k: int) -> None:
        lo, hi = k * self.chunk_rows, min(self.rows, (k + 1) * self.chunk_rows)
        slot.chunk = k
        slot.hosts = [_Host(a[lo:hi], p and p.copies(a[lo:hi]))
                      for a, p in zip(self.arrays, self.pins)]
        slot.futures = [self.workers.submit(self._prepare, slot, i)
                        for i, h in enumerate(slot.hosts) if h.pinned is None]
        self.pinned += sum(h.pinned is not None for h in slot.hosts)
        self._enter(slot, "pin")

    # -- command buffers ----------------------------------------------------------------------
    def _record_copies(self, h: Any, pairs: list[tuple[Any, int, Any, int, int]],
                       what: str) -> None:
        _vk.check(_vk.seq_begin(h), what)
        # Writes of other queues, made available by the fences the host waited on, made
        # visible to this queue's copies.
        _vk.seq_barrier(h, _vk.STAGE_ALL, _vk.ACCESS_MEMORY_WRITE, _vk.STAGE_ALL,
                           _vk.ACCESS_MEMORY_READ | _vk.ACCESS_MEMORY_WRITE)
        for src, so, dst, do, n in pairs:
            _vk.seq_copy(h, src, so, dst, do, n)
        # ...and the copies' writes visible to later commands and to the host's reads after
        # the fence (ALL_COMMANDS does not include the host: a fence alone makes device
        # writes available, not visible to the host).
        _vk.seq_barrier(h, _vk.STAGE_ALL, _vk.ACCESS_MEMORY_WRITE, _vk.STAGE_ALL | _vk.STAGE_HOST,
                           _vk.ACCESS_MEMORY_READ | _vk.ACCESS_MEMORY_WRITE | _vk.ACCESS_HOST_READ)
        _vk.check(_vk.seq_end(h), what)

    def _submit(self, slot: _Slot, step: str) -> None:
        """Records and submits a chunk's upload (step "up": host -> its device chunks) or
        download ("down": device chunks -> host), then enters that step."""
        up = step == "up"
        sub = slot.up if up else slot.down
        assert sub is not None
        cb = sub.seq
        pairs = []
        for i in self.up_idx if up else self.down_idx:
            h, g = slot.hosts[i], slot.tensors[i].gpu_range
            if h.pinned is not None:
                dev_off = g.offset
                for blk, off, n in h.pinned:
                    host, dev = (blk, off), (g.block.handle, dev_off)
                    src, dst = (host, dev) if up else (dev, host)
                    pairs.append((*src, *dst, n))
                    dev_off += n
            elif h.view.nbytes:
                host, dev = (h.block, h.offset), (g.block.handle, g.offset)
                src, dst = (host, dev) if up else (dev, host)
                pairs.append((*src, *dst, h.view.nbytes))
        what = f"stream {'upload' if up else 'download'} of chunk {slot.chunk}"
        self._record_copies(cb, pairs, what)
        with self.state.lock:
            self.state.check_open()
            _vk.check(_vk.seq_submit(cb), what)
        self._enter(slot, step)

    def _done(self, sub: Any, what: str) -> bool:
        rc = _vk.seq_status(sub.seq)
        if rc == _vk.TIMEOUT:
            return False
        _vk.check(rc, what)
        return True

    def _release_inputs(self, slot: _Slot) -> None:
        for i in self.up_idx:
            if i not in self.down_idx:
                self._release_host(slot.hosts[i])

    def _release_host(self, h: _Host) -> None:
        """An input chunk whose upload completed: its import goes (on a worker)."""
        if h.staged is not None:
            h.staged = h.block = None
        elif h.block is not None:
            self._destroy_import(h, True)

    @_ki.step
    def _destroy_import(self, h: _Host, on_worker: bool) -> Any:
        """Takes a chunk's import out of h.block and destroys it (on a worker, or here),
        in one step."""
        blk = h.block
        h.block = None
        if on_worker:
            return self.workers.submit(_vk.block_destroy, blk)
        return _vk.block_destroy(blk)

    def _finish_outputs(self, slot: _Slot) -> None:
        slot.futures = [self.workers.submit(self._finish, slot.hosts[i]) for i in self.down_idx]
        self._enter(slot, "drain")

    # -- the loop -----------------------------------------------------------------------------
    def _setup(self) -> None:
        mgr = self.mgr
        for slot in self.slots:
            for a in self.arrays:
                shape = (self.chunk_rows,) + a.shape[1:]
                # Device memory only, not zero-filled: every chunk is uploaded or written by
                # the kernel before it is read back.
                shell = np.broadcast_to(np.zeros((), a.dtype), shape)
                slot.tensors.append(Tensor(mgr, self.state, shell, "storage", fill=False))
                with self.state.lock:
                    slot.stage.append(self.state.pool.alloc(slot.tensors[-1].nbytes, "host"))
            slot.algo = mgr.algorithm(slot.tensors, self.spirv, self.workgroup,
                                      self.spec_consts, self.push_consts)
            slot.kernel = mgr.sequence()
            slot.kernel.record(OpMemoryBarrier(slot.tensors)).record(OpAlgoDispatch(slot.algo))
            with self.state.lock:
                # Each made and held by the slot in one step (Ctrl-C: the slot's teardown
                # releases what it holds, made or not).
                slot.up = Submission(self.up_queue, label="a stream's upload")
                slot.up.create(self.state, "stream setup")
                slot.down = Submission(self.down_queue, label="a stream's download")
                slot.down.create(self.state, "stream setup")

    def run(self) -> None:
        """Streams every chunk, then frees. A KeyboardInterrupt reaches this only at the
        stream's waits (_ki.protected: nothing is half made there), and is raised to the
        caller at once: what the GPU or a worker still uses stays recorded in
        engine.streams and is freed by a later call of the manager once done, or by
        close() (which waits for it, at most wait_timeout, or abandons it). Any other
        exception first waits, at most wait_timeout in all, for what was submitted."""
        st = self.state
        with _ki.protected():
            with st.lock:
                st.check_open()
                self._check_closing()
                # Recorded before anything is made, and active in the same step: another
                # thread's collect() reaps only streams whose thread has left run().
                st.streams.add(self)
                self.active = True
            try:
                self._hold_pins()
                self._setup()
                self._loop()
            except KeyboardInterrupt:
                # A short grace for the copies in flight: with imported or pinned arrays
                # they write the caller's own memory, which should not change once this
                # returned; past it (behind a kernel that does not end, say) that is
                # logged and the rest is left as said above.
                grace = time.monotonic() + min(INTERRUPT_GRACE, st.wait_timeout)
                if not self._teardown(grace, report=False):
                    self._warn_left()
                raise
            except BaseException:
                self._teardown(time.monotonic() + st.wait_timeout)
                raise
            else:
                self._teardown(time.monotonic() + st.wait_timeout)
            finally:
                self.active = False

    def _hold_pins(self) -> None:
        """Finds the Manager.pinned() object holding each whole array (this stream is in
        engine.streams: none of them is released until it leaves)."""
        with self.state.lock:
            for i, a in enumerate(self.arrays):
                for p in self.state.pins:
                    if p.usable(a):
                        self.pins[i] = p
                        break

    def _enter(self, slot: _Slot, phase: str) -> None:
        """A slot's chunk enters a step (the one place phases change; traced here)."""
        slot.phase = phase
        if self.trace is not None:
            self.trace.append((slot.chunk, phase, time.perf_counter()))

    def _check_closing(self) -> None:
        if self.state.closing:
            raise DestroyedError(f"{self.mgr!r} is closing (close() in another thread): "
                                 "stream() stopped; what it made is freed")

    def _loop(self) -> None:
        next_chunk, finished = 0, 0
        while finished < self.nchunks:
            _ki.checkpoint()
            if self.state.closing:
                self._check_closing()
            progressed = False
            for slot in self.slots:
                if slot.phase == "free" and next_chunk < self.nchunks:
                    self._start_chunk(slot, next_chunk)
                    next_chunk += 1
                    progressed = True
            # Oldest chunk first: its steps free the queues and memory the others wait for.
            for slot in sorted(self.slots, key=lambda s: s.chunk):
                ph = slot.phase
                if ph == "pin":
                    if all(f.done() for f in slot.futures):
                        for f in slot.futures:
                            f.result()
                        self._submit(slot, "up")
                        progressed = True
                elif ph == "up":
                    if self._done(slot.up, f"stream upload of chunk {slot.chunk}"):
                        self._release_inputs(slot)
                        slot.kernel.eval_async()
                        self._enter(slot, "kernel")
                        progressed = True
                elif ph == "kernel":
                    if not slot.kernel.is_running:
                        self._submit(slot, "down")
                        progressed = True
                elif ph == "down":
                    if self._done(slot.down, f"stream download of chunk {slot.chunk}"):
                        self._finish_outputs(slot)
                        progressed = True
                elif ph == "drain":
                    if all(f.done() for f in slot.futures):
                        for f in slot.futures:
                            f.result()
                        slot.hosts = []
                        self._enter(slot, "free")
                        finished += 1
                        progressed = True
                        if self.progress is not None:   # (its exception ends the stream)
                            self.progress(finished, self.nchunks)
            if not progressed:
                self._wait_any()

    def _wait_any(self) -> None:
        """Blocks briefly on the oldest step in flight (a fence wait, or a worker)."""
        for slot in sorted(self.slots, key=lambda s: s.chunk):
            if slot.phase in ("pin", "drain"):
                cf.wait(slot.futures, timeout=_POLL_NS / 1e9)
                return
            if slot.phase in ("up", "down"):
                sub = slot.up if slot.phase == "up" else slot.down
                assert sub is not None
                h = sub.seq
                rc = _vk.seq_wait(h, _POLL_NS, 20_000)
                if rc not in (0, _vk.TIMEOUT):
                    _vk.check(rc, f"stream: waiting for chunk {slot.chunk}")
                return
            if slot.phase == "kernel":
                slot.kernel.eval_await(_POLL_NS / 1e9)
                return

    def _warn_left(self) -> None:
        direct = self.host_mode != "stage" or any(p is not None for p in self.pins)
        log.warning("scopedgpu: stream() interrupted while its GPU work still ran; what it "
                    "uses stays allocated until that work completes (freed by a later call "
                    "of the manager, or by close())%s", "; the output arrays, which the "
                    "device writes directly (imported or pinned), may still change until "
                    "then" if direct else "")

    def reap(self, deadline: float | None = None) -> bool:
        """What a stream interrupted by Ctrl-C left (its thread has left run()): freed once
        the GPU is done with it; with a deadline, waited for until then. The engine's
        lock is held (collect(), close(), Pinned.destroy())."""
        with _ki.protected():
            return self._teardown(deadline)

    def _teardown(self, deadline: float | None, report: bool = True) -> bool:
        """Frees each slot whose GPU work is complete (fences of its upload and download,
        its kernel): nothing goes while a queue may use it. With a deadline
        (time.monotonic() seconds) waits for the others until then, in slices where
        Ctrl-C ends the wait; without one, only looks. What is left stays in the slots,
        and this stream in engine.streams, until a later call frees it. Returns True once
        everything is freed (the stream then leaves engine.streams). Reentrant calls (a
        destroy() below runs the manager's collect(), which reaps streams) return False.
        report: log (once) work still running at the deadline as stuck."""
        if self.torn_down:
            return True
        if self.tearing:
            return False
        self.tearing = True
        try:
            # Worker copies and releases in flight end within one chunk's copy.
            self.workers.shutdown(wait=True)
            left = 0
            for slot in self.slots:
                if self._slot_done(slot, deadline):
                    self._free_slot(slot)
                else:
                    left += 1
            if left:
                if deadline is not None and report and not self.logged:
                    self.logged = True
                    for p in self.pins:
                        if p is not None:
                            p.kept = True   # the GPU may still use the pinned arrays
                    log.error("scopedgpu: a stream's GPU work did not finish within %g s; "
                              "its memory stays allocated until it does (freed by a later "
                              "call of the manager) or the manager closes",
                              self.state.wait_timeout)
                return False
            with self.state.lock:
                self.torn_down = True
                self.state.streams.discard(self)
            return True
        finally:
            self.tearing = False

    def _slot_done(self, slot: _Slot, deadline: float | None) -> bool:
        """Whether the GPU work of a slot is complete, waiting until the deadline."""
        for sub in (slot.up, slot.down):
            # (complete at once for a command buffer never submitted)
            while sub is not None and sub.seq is not None:
                rc = _vk.seq_status(sub.seq)
                if rc != _vk.TIMEOUT:
                    break   # done, or failed (device lost: nothing will complete it)
                left = 0.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                _vk.seq_wait(sub.seq, int(min(left, 0.05) * 1e9), 0)
                _ki.checkpoint()
        k = slot.kernel
        while k is not None and not k.destroyed and k.is_running:
            left = 0.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            k.eval_await(min(left, 0.05))
            _ki.checkpoint()
        return True

    def _free_slot(self, slot: _Slot) -> None:
        """Frees a slot whose GPU work is complete (the workers stopped): imports, command
        buffers, kernel, algorithm, device chunks and staging. Runs protected (_ki), so
        each step is whole; a second call finds nothing left to free."""
        for h in slot.hosts:
            if h.staged is None and h.block is not None:
                self._destroy_import(h, False)
        slot.hosts = []
        with self.state.lock:
            for sub in (slot.up, slot.down):
                if sub is not None:
                    sub.release(self.state)   # (complete: freed now)
        if slot.kernel is not None:
            slot.kernel.destroy()
            slot.kernel = None
        if slot.algo is not None:
            slot.algo.destroy()
            slot.algo = None
        while slot.tensors:
            slot.tensors.pop().destroy()
        with self.state.lock:
            while slot.stage:
                self.state.pool.free(slot.stage.pop())


def stream(mgr: Any, engine: Any, spirv: bytes, inputs: Seq[np.ndarray],
           outputs: Seq[np.ndarray], *, push_consts: Any = None, spec_consts: Any = None,
           workgroup: Any = None, chunk_bytes: int | None = None, depth: int | None = None,
           workers: int | None = None,
           progress: Callable[[int, int], object] | None = None) -> list[np.ndarray]:
    """Manager.stream(): every argument checked (a TypeError or ValueError naming it, its
    value and what is allowed) before anything is allocated."""
    if progress is not None and not callable(progress):
        raise TypeError(f"stream(): progress must be a callable taking (chunks done, chunks "
                        f"in all), or None; not {type(progress).__name__} {progress!r}")
    ins = _arrays(inputs, "inputs", False, engine.info)
    outs = _arrays(outputs, "outputs", True, engine.info)
    if not outs:
        raise ValueError("stream(): needs at least one output array")
    chunk_bytes = DEFAULT_CHUNK if chunk_bytes is None else _count(
        chunk_bytes, "chunk_bytes", 1, "a whole number of bytes, at least 1 (None: 8 MiB)")
    if workers is None:
        # Host copies in parallel: one core copies about 10 GB/s (H200 host), 8 to 14
        # threads reach the memory's copy rate; leave a core or two to the main loop.
        workers = max(2, min(14, (os.cpu_count() or 2) - 2))
    else:
        workers = _count(workers, "workers", 1, "a whole number of threads, at least 1 "
                         "(None: the CPU count less two, 2 to 14)")
    if depth is None:
        depth = max(3, min(32, 2 * workers))
    else:
        depth = _count(depth, "depth", 1, "a whole number of chunks in flight, at least 1 "
                       "(None: twice workers, 3 to 32)")
    with engine.lock:
        engine.check_open()
        shader = engine.reflections.get(spirv)
    # Checked here too, so that their errors name stream() rather than a slot's algorithm.
    encode_push_consts(push_consts, "stream()", shader)
    if workgroup is not None:
        workgroup = parse_workgroup(workgroup, "stream()", engine.info.max_workgroup_count)
    local = shader.local_size_with(spec_values(
        encode_spec_consts(spec_consts, shader, "stream()"), shader))
    s = Streamer(mgr, engine, spirv, ins, outs, shader=shader, local_size=local,
                 push_consts=push_consts, spec_consts=spec_consts, workgroup=workgroup,
                 chunk_bytes=chunk_bytes, depth=depth, workers=workers, progress=progress)
    s.run()
    return outs
