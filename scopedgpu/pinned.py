"""Pinned arrays: numpy arrays imported into the device once (VK_EXT_external_memory_host),
so that Manager.stream() moves their chunks by DMA alone, with no copy through staging and
no import per chunk.

    with mgr.pinned(x, y, out):
        mgr.stream(spirv, inputs=[x, y], outputs=[out])

An array is imported page-rounded, in pieces of at most PIECE_BYTES (each a block of its
own: within maxMemoryAllocationSize, and few). The arrays stay ordinary numpy arrays; the
Pinned object's handle holds them, so their memory outlives every import of it. destroy()
(the end of the `with` block) waits for any stream() still using them, then frees the
imports; a Pinned dropped is freed by the collector, and close() frees what is left. A
device that cannot import pins nothing (`pinned_bytes` 0, `unpinned` says why): stream()
then copies through staging as without pinned().
"""
from __future__ import annotations

import bisect
import logging
import time
from typing import Any

import numpy as np

from scopedgpu import _ki, _vk
from scopedgpu._base import Child, Handle
from scopedgpu._engine import sleep_unlocked
from scopedgpu._transfer import contiguous_arrays

log = logging.getLogger("scopedgpu")

GiB = 1 << 30
PIECE_BYTES = GiB   # the largest import; maxMemoryAllocationSize bounds it too


class PinHandle(Handle):
    """The imports of one Pinned and the arrays under them (held: their memory must
    outlive the imports). Released by destroy(), by the collector when the Pinned became
    unreachable (no stream() holds it then), or by close()."""
    __slots__ = ("regions", "starts", "arrays")
    requeue_safe = True     # a release cut short frees the rest when run again

    def __init__(self, arrays: list[np.ndarray]):
        # (first address, end address, [(address, size, sg_block *), ...]) per imported
        # array, sorted by first address; a piece is recorded in the line that imports it.
        self.regions: list[tuple[int, int, list[tuple[int, int, Any]]]] = []
        self.starts: list[int] = []
        self.arrays: list[np.ndarray] | None = arrays

    def release(self, state: Any, closing: bool) -> None:
        with _ki.protected():   # (a piece popped is destroyed before Ctrl-C lands)
            regions = self.regions
            while regions:
                pieces = regions[-1][2]
                while pieces:
                    _vk.block_destroy(pieces.pop()[2])
                regions.pop()
                self.starts.pop()
            self.arrays = None


class Pinned(Child):
    """The arrays of one Manager.pinned() call, imported into the device. `arrays`: the
    arrays; `pinned_bytes`: the bytes imported (page-rounded); `unpinned`: {index of an
    array: why it could not be imported}. destroy() (the end of the `with` block) waits
    until no stream() uses the arrays, then frees the imports; a Pinned that became
    unreachable is freed like any other object of scopedgpu, and close() frees the rest."""
    __slots__ = ("arrays", "pinned_bytes", "unpinned", "kept", "closing")
    _what = "pinned arrays"
    _handle: PinHandle

    def __init__(self, manager: object, engine: Any, arrays: list[np.ndarray]):
        super().__init__(manager, engine, PinHandle(arrays))
        self.arrays = arrays
        self.pinned_bytes = 0
        self.unpinned: dict[int, str] = {}
        # A stream() using the arrays found its GPU work stuck: the imports stay (until the
        # manager closes or is abandoned).
        self.kept = False
        self.closing = False    # destroy() began: streams started from now on copy

    def _pin(self) -> None:
        """Imports each array (once, under the engine's lock, protected from Ctrl-C (_ki):
        each piece is recorded as it is imported, and the release frees what was)."""
        pool = self._engine.pool
        h = self._handle
        align = pool.import_align
        cap = int(self._engine.info.max_memory_allocation_size or PIECE_BYTES)
        piece = max(align, min(PIECE_BYTES, cap) // align * align) if align else 0
        for i, a in enumerate(self.arrays):
            if not a.nbytes:
                continue
            if not align:
                self.unpinned[i] = "the device cannot import host memory " \
                                   "(no VK_EXT_external_memory_host)"
                continue
            start, end = pool.page_span(a.ctypes.data, a.nbytes)
            pieces: list[tuple[int, int, Any]] = []
            k = bisect.bisect(h.starts, start)
            h.starts.insert(k, start)
            h.regions.insert(k, (start, end, pieces))
            for s in range(start, end, piece):
                n = min(piece, end - s)
                types = pool.importable_types(s)
                got = pool.import_range(s, n, types) if types else None
                if got is not None:
                    pieces.append((s, n, got[0]))
                else:
                    self.unpinned[i] = (f"the device refused to import {n} bytes at "
                                        f"{s:#x}" if types else "no memory type of the "
                                        "device can import this memory")
                    break
            if i in self.unpinned:
                while pieces:
                    _vk.block_destroy(pieces.pop()[2])
                h.regions.pop(k)
                h.starts.pop(k)
            else:
                self.pinned_bytes += end - start
        if self.unpinned:
            log.info("scopedgpu: pinned(): arrays not pinned (stream() copies them through "
                     "staging): %s", self.unpinned)

    def copies(self, view: np.ndarray) -> list[tuple[Any, int, int]] | None:
        """Where the device finds `view` (C-contiguous, inside one pinned array): the
        (block, offset, bytes) pieces that hold it, in order; None when not pinned here
        (package-internal: stream())."""
        h = self._handle
        addr, n = view.ctypes.data, view.nbytes
        k = bisect.bisect(h.starts, addr) - 1
        if k < 0 or not n:
            return None
        start, end, pieces = h.regions[k]
        if addr + n > end:
            return None
        out = []
        j = (addr - start) // pieces[0][1]
        while n:
            s, size, blk = pieces[j]
            off = addr - s
            take = min(n, size - off)
            out.append((blk, off, take))
            addr += take
            n -= take
            j += 1
        return out

    def usable(self, view: np.ndarray) -> bool:
        """Whether a stream() starting now may use this for `view` (package-internal)."""
        return not (self._destroyed or self.closing) and self.copies(view) is not None

    def destroy(self) -> None:
        """Waits (at most the manager's wait_timeout) until no stream() uses the arrays,
        then frees their imports. Idempotent. Past the wait the imports and the arrays
        are kept until the manager closes, and logged."""
        eng = self._engine
        with eng.lock:
            if self._destroyed:
                return
            self.closing = True
            deadline = time.monotonic() + eng.wait_timeout
            while self._in_use() and time.monotonic() < deadline and not eng.closed:
                sleep_unlocked(eng, 0.001)
            if self._destroyed:
                return                  # close() ran meanwhile and freed them
            if self.kept or self._in_use():
                log.error("scopedgpu: pinned arrays still used by a stream() whose GPU work "
                          "did not finish; their imports stay until the manager closes")
                return
            super().destroy()

    def _in_use(self) -> bool:
        eng = self._engine
        if eng.streams:
            eng.reap_streams()   # what interrupted streams left, freed once done
        return any(self in s.pins for s in eng.streams)

    def _forget(self) -> None:
        self._engine.pins.discard(self)

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else f"{self.pinned_bytes} bytes pinned"
        return f"<scopedgpu.Pinned #{self._id} of {len(self.arrays)} array(s), {state}>"


def pin(mgr: Any, engine: Any, arrays: list[np.ndarray]) -> Pinned:
    arrays = contiguous_arrays(arrays, "pinned(): argument {i}", engine.info)
    with engine.lock, _ki.protected():
        engine.check_open()
        p = Pinned(mgr, engine, arrays)
        engine.pins.add(p)
        p._pin()
    return p
