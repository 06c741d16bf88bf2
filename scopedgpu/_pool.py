"""The tensor memory pool.

Policy, after CuPy's and PyTorch's caching allocators:
- Tensors are sub-allocated from blocks (one VkDeviceMemory and one VkBuffer over all of
  it) per memory kind: "device" (device-local) and "host" (host-visible, coherent,
  persistently mapped; staging and host tensors).
- Requests are rounded up to the alignment (minStorageBufferOffsetAlignment, at least 16)
  and fall in one of three size classes, each a sub-pool per kind: small (<= 1 MiB) from
  8 MiB blocks, large (<= 32 MiB) from 64 MiB blocks, huge (above) from blocks of the
  first request's own size. Under a memory limit (or a small heap), small and large blocks
  are at most 1/8 of it, so that several share it and an emptied one can go back.
- Best fit over all free ranges of a sub-pool (one sorted list), splitting the range
  taken; a freed range merges with its free neighbours. A freed huge block is reused like
  any other: the next huge request that fits takes it (or a part of it).
- The pool never frees a range that submitted work may use: the manager calls free()
  only after the fences of that work have signalled.
- Fast path for churn: a freed small range goes, unmerged, onto a bin of its exact size
  (LIFO) and the next request of that size takes it back in O(1). Bins are merged into
  the free list before the pool grows or releases blocks, so they never cost memory.
- Empty blocks stay cached for reuse, at most cache_bound bytes of them: 1/8 of the
  ceiling below (at least 128 MiB, at most the ceiling); beyond that the oldest emptied
  go back to the driver as soon as a free leaves them empty. empty_cache() gives back all.
- Ceilings: the size of every memory heap (whatever the driver would over-commit: lavapipe
  hands out 12 GiB on its "2 GiB" heap), maxMemoryAllocationSize per block, and
  memory_limit over all blocks. A tensor that can never fit one of them fails before any
  host copy of its data (check_request, called by Manager.tensor and Manager.empty).
- When a new block cannot be had, the pool lets the manager retire finished work,
  empties every cache (the bins of every sub-pool merged, then every empty block of every
  kind and size class given back) and retries; then it takes a free range of another size
  class of the same kind, then of the other kind where one memory serves both (device
  blocks are mapped where their memory is host-visible on a device that is not discrete:
  CPU and integrated devices); only then OutOfMemoryError, naming the size and the limit.
- Large "device" tensors whose host copy can be imported (VK_EXT_external_memory_host)
  get no staging range: their page-aligned numpy host copy itself becomes a block of its
  own (import_host), so the sync ops are one DMA, with no memcpy. Imports are host
  memory, outside reserved_bytes, the heap ceilings and memory_limit, and few (IMPORT_MIN
  and up); each goes with its tensor, and numpy frees the memory with the last view.
- Every call into the device (a block created and mapped, host memory imported, a block
  destroyed) goes through one allocator object (VkAllocator over _vk by default), so the
  pool also runs with a fake one and no device (tests/test_pool_model.py).
- Ctrl-C (scopedgpu/_ki.py) may land at any line outside a step and leaves the pool
  whole: every change to its records is one @_ki.step with no call (plan in locals, with
  bisect and the rest, then commit: _carve, _put_back, _add_block, _add_import,
  _drop_block). A block is made into an out-parameter the pool holds first (`making`), so
  one made and not yet recorded is destroyed by the next block made, empty_cache() or
  destroy(); a new block is recorded as an empty cached block before a range is carved
  from it. A freed range goes onto a list (its bin, or `freed`) in the step that takes it
  from its holder, and is merged from there one step at a time; empty_cache(), _trim() and
  destroy() give back one block per step. Whatever an interrupt cut short is finished by
  the next call that does the same work.
"""
from __future__ import annotations

import bisect
import itertools
import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from scopedgpu import _ki, _settings, _vk
from scopedgpu._errors import DeviceError, OutOfMemoryError

if TYPE_CHECKING:
    from scopedgpu._device import DeviceInfo

log = logging.getLogger("scopedgpu")

MiB = 1 << 20
IMPORT_MIN = 4 * MiB     # host copies this large are imported, where the device can
SMALL_LIMIT = 1 * MiB
SMALL_BLOCK = 8 * MiB
LARGE_BLOCK = 64 * MiB
HUGE_ABOVE = LARGE_BLOCK // 2   # requests above this get a block of their own size
SMALL, LARGE, HUGE = 0, 1, 2    # size classes
CACHE_FRACTION = 8              # empty blocks kept: at most 1/8 of the heap (or limit)...
CACHE_MIN = 2 * LARGE_BLOCK     # ...or this much, where that is more
NO_LIMIT = 1 << 62

# VkMemoryPropertyFlagBits
DEVICE_LOCAL = 0x1
HOST_VISIBLE = 0x2
HOST_COHERENT = 0x4
HOST_CACHED = 0x8
_UNWANTED = 0x10 | 0x20 | 0x40 | 0x80  # lazily allocated, protected, AMD device-coherent/uncached


def memory_type_candidates(info: DeviceInfo, kind: str) -> list[int]:
    """Memory type indices for a pool kind, best first."""
    flags = info.memory_type_flags
    ranked = []
    for i, f in enumerate(flags):
        if f & _UNWANTED:
            continue
        if kind == "device":
            if not f & DEVICE_LOCAL:
                continue
            # Plain device-local memory first; host-visible device-local (BAR) after.
            score = 0 if not f & HOST_VISIBLE else 1
        else:
            if (f & (HOST_VISIBLE | HOST_COHERENT)) != (HOST_VISIBLE | HOST_COHERENT):
                continue
            # Cached memory reads fast on the CPU (downloads); system memory before BAR.
            score = (0 if f & HOST_CACHED else 2) + (1 if f & DEVICE_LOCAL and
                                                     info.type == "discrete" else 0)
        ranked.append((score, i))
    return [i for _, i in sorted(ranked)]


def round_up(n: int, align: int) -> int:
    """n rounded up to a multiple of align (n >= 0, align > 0). The pool's one rounding:
    Pool.alloc and Pool.alloc_pair inline it (the churn fast path gains no call), and
    tests/test_pool_model.py checks both copies against this function."""
    return (n + align - 1) // align * align


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, align: int) -> np.ndarray:
    """An uninitialised C-order array whose data starts on an `align` boundary and whose
    buffer extends to the next boundary after its end (what a host-memory import needs)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = round_up(nbytes, align)
    raw = np.empty(size + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes].view(dtype).reshape(shape)


class Allocator(Protocol):
    """What the pool asks of the device: memory blocks made, imported and destroyed.
    A block's handle comes back in a slot (slot[0]: falsy until a call fills it) that
    the pool holds before the call, so that a Ctrl-C right after the call returned still
    finds what it made."""

    def slot(self) -> Any:
        """A new empty out-parameter for one handle (slot[0] is falsy)."""

    def create(self, slot: Any, size: int, mem_type: int, mapped: bool, what: str) -> int | None:
        """Makes a block of `size` bytes of `mem_type`, mapped when `mapped`, into slot[0];
        returns the address it is mapped at, or 0. None (slot untouched) when that memory
        type cannot hold it (the driver refuses the type, or has no memory for it). Other
        failures raise, their message starting with `what`, and leave slot untouched."""

    def import_host(self, slot: Any, address: int, size: int, mem_type: int) -> bool:
        """Imports the host memory [address, address + size) as a block of `mem_type`
        into slot[0]; False (slot untouched) when the driver refuses."""

    def import_types(self, address: int) -> int:
        """The memory types that can import host memory at `address`, as a bit mask."""

    def destroy(self, handle: Any) -> None:
        """Gives a block back (the GPU no longer uses it)."""


class VkAllocator:
    """The pool's one door to the device (Pool's default allocator): every block the pool
    creates, maps, imports or destroys goes through these four methods, over _vk. Pool
    takes any other object with the same methods (allocator=): tests/test_pool_model.py
    drives the pool with a fake one and no device, as CuPy tests its memory pool with a
    mock allocator. None of them is on the churn fast path (ranges from bins)."""
    __slots__ = ("destroy", "device")

    def __init__(self, device_handle: Any):
        self.device = device_handle
        # The shim's function itself, no Python frame: the pool's steps end with it.
        self.destroy: Callable[[Any], None] = _vk.block_destroy

    def slot(self) -> Any:
        return _vk.out("block")

    def create(self, slot: Any, size: int, mem_type: int, mapped: bool, what: str) -> int | None:
        rc = _vk.block_create(self.device, size, mem_type, 1 if mapped else 0, slot)
        if rc == _vk.ERR_MEMORY_TYPE:
            return None
        try:
            _vk.check(rc, what)
        except OutOfMemoryError:
            return None
        return _vk.block_address(slot[0]) if mapped else 0

    def import_host(self, slot: Any, address: int, size: int, mem_type: int) -> bool:
        return _vk.block_import(self.device, address, size, mem_type, slot) == 0

    def import_types(self, address: int) -> int:
        return _vk.host_pointer_types(self.device, address)


class Block:
    __slots__ = ("id", "handle", "ptr", "size", "mem_type", "heap", "sub", "nallocs",
                 "free_start", "free_end", "owner", "view")

    def __init__(self, bid: int, handle, ptr: int, size: int, mem_type: int, sub: SubPool,
                 heap: int = -1):
        self.id = bid
        self.handle = handle
        self.ptr = ptr          # address of the mapping, 0 when not mapped
        self.size = size
        self.mem_type = mem_type
        self.heap = heap        # the memory heap it is charged to (-1: imported host memory)
        self.sub = sub
        # Ranges handed out, and freed ones still on a bin (SubPool.bins) until
        # flush_bins(): the churn fast path touches no block.
        self.nallocs = 0
        self.free_start: dict[int, int] = {0: size}   # offset -> size
        self.free_end: dict[int, int] = {size: 0}     # end -> offset
        # Host blocks made of imported numpy memory: that array (views of it outlive the
        # block: numpy frees the memory with the last one). None for driver memory.
        self.owner: np.ndarray | None = None
        # memoryview(owner), made once: tensors slice their staging ranges out of it
        # (Tensor._view_stage), one buffer export per block instead of one per tensor.
        self.view: memoryview | None = None


class Allocation:
    """A range of a block. Plain data: owning it means calling Pool.free once."""
    __slots__ = ("block", "offset", "size", "nbytes")

    def __init__(self, block: Block, offset: int, size: int, nbytes: int):
        self.block = block
        self.offset = offset
        self.size = size        # rounded size reserved in the block
        self.nbytes = nbytes    # bytes asked for

    @property
    def address(self) -> int:
        return self.block.ptr + self.offset


class SubPool:
    """Blocks of one memory kind and one size class, with one sorted free list."""

    def __init__(self, pool: Pool, kind: str, cls: int, block_size: int):
        self.pool = pool
        self.kind = kind
        self.cls = cls
        self.block_size = block_size    # 0 for HUGE: a block as big as its first request
        self.blocks: dict[int, Block] = {}
        self.free: list[tuple[int, int, int]] = []   # (size, block id, offset)
        # size -> freed Allocations whose ranges are not merged yet (small sub-pools only);
        # the objects are handed out again as they are
        self.bins: dict[int, list[Allocation]] | None = {} if cls == SMALL else None
        self.binned = 0

    def fit(self, size: int) -> int:
        """The index in `free` of the best fit for `size` bytes (the smallest free range
        that holds them), -1 when none does. Changes nothing."""
        i = bisect.bisect_left(self.free, (size, -1, -1))
        return i if i < len(self.free) else -1

    def fit_where(self, size: int, ok: Callable[[Block], bool]) -> int:
        """The best fit among the free ranges of blocks that `ok` accepts (slow: a scan),
        -1 when none. Changes nothing (bins not merged)."""
        free = self.free
        for i in range(bisect.bisect_left(free, (size, -1, -1)), len(free)):
            if ok(self.blocks[free[i][1]]):
                return i
        return -1

    def merge_plan(self, a: Allocation) -> tuple[Allocation, int, int, int, int, int]:
        """How range `a` (freed) merges with its free neighbours, for Pool._put_back:
        (a, the merged range's offset, the size of the free range after a (0: none), the
        indices in `free` of the neighbours' entries, lower then higher, -1 for none, and
        where the merged entry goes once they are gone). Changes nothing."""
        blk = a.block
        off = a.offset
        end = off + a.size
        free = self.free
        poff = off
        lo = hi = -1
        if off in blk.free_end:
            poff = blk.free_end[off]
            lo = bisect.bisect_left(free, (blk.free_start[poff], blk.id, poff))
        nsize = 0
        if end in blk.free_start:
            nsize = blk.free_start[end]
            hi = bisect.bisect_left(free, (nsize, blk.id, end))
        if lo > hi:
            lo, hi = hi, lo
        # Both neighbours are smaller than the merged range, so they sort before it.
        k = bisect.bisect_left(free, (end + nsize - poff, blk.id, poff)) - (lo >= 0) - (hi >= 0)
        return a, poff, nsize, lo, hi, k

    def flush_bins(self) -> None:
        """Merges the binned ranges into the free list (Pool.flush)."""
        self.pool.flush(self)


class Pool:
    """All tensor memory of one manager. Not thread-safe: the manager locks around it."""
    # Slots: the churn fast path reads a few attributes per call, and an instance __dict__
    # of more than 30 keys would make every one of those reads slower.
    __slots__ = ("_by_kind", "_ids", "_map_device", "_max_block", "_on_oom",
                 "_serves", "_small", "_small_device", "_small_host", "_subs", "_type_heap",
                 "_types", "align", "allocated", "block_cap", "cache_bound", "empty",
                 "empty_bytes", "heap_reserved", "heap_size", "import_align", "imported",
                 "imports", "info", "max_imports", "max_request", "memory_limit", "nallocs",
                 "peak_allocated", "reserved", "size_ok", "host_blocks_imported", "allocator",
                 "making", "freed")

    def __init__(self, device_handle, info: DeviceInfo, memory_limit: int | None,
                 on_oom: Callable[[], None] | None = None, *,
                 allocator: Allocator | None = None):
        # Every call into the device goes through the allocator (device_handle is only
        # the default one's: None will do with another allocator).
        self.allocator: Allocator = (VkAllocator(device_handle) if allocator is None
                                     else allocator)
        self.info = info
        self.align = max(16, int(info.min_storage_buffer_offset_alignment))
        self.memory_limit = memory_limit
        self._on_oom = on_oom
        self._ids = itertools.count(1)
        self._types = {k: memory_type_candidates(info, k) for k in ("device", "host")}
        max_alloc = info.max_memory_allocation_size or NO_LIMIT
        self._max_block = max_alloc
        # Memory heaps: what each one reports is a ceiling, whatever the driver allows.
        heaps = [int(h) or NO_LIMIT for h in info.memory_heap_sizes]
        type_heaps = list(getattr(info, "memory_type_heaps", ()) or ())
        if not heaps or len(type_heaps) < len(info.memory_type_flags) or \
                any(h >= len(heaps) for h in type_heaps):
            heaps, type_heaps = [sum(heaps) if heaps else NO_LIMIT], []
        self.heap_size = heaps
        self.heap_reserved = [0] * len(heaps)
        self._type_heap = type_heaps
        # The largest request each kind can hold: one block, in one heap, within the limit.
        self.max_request = {}
        heap_of_kind = {}
        for kind, types in self._types.items():
            heap_of_kind[kind] = max((self._heap_of(t)[1] for t in types), default=NO_LIMIT)
            self.max_request[kind] = min(max_alloc, heap_of_kind[kind],
                                         memory_limit or NO_LIMIT)
        # Below this, no request needs a size check (Manager.tensor's fast path).
        self.size_ok = min(self.max_request.values()) // 2
        # The ceiling the cache and block sizes scale with: the device heap or the limit.
        ceiling = min(heap_of_kind["device"], memory_limit or NO_LIMIT)
        if ceiling >= NO_LIMIT:
            ceiling = 8 * LARGE_BLOCK
        # Pooled blocks take at most 1/8 of the ceiling, so that a memory_limit holds several
        # and an emptied one can go back to serve another kind or size class.
        self.block_cap = max(self.align, ceiling // 8)
        # Empty blocks kept for reuse, at most this many bytes (oldest given back first).
        self.cache_bound = min(ceiling, max(CACHE_MIN, ceiling // CACHE_FRACTION))
        self.empty: dict[int, Block] = {}   # empty blocks, oldest emptied first
        self.empty_bytes = 0
        # Device blocks are mapped where their memory is host-visible on a device that is
        # not discrete, so that, when memory runs short, either kind may use the other's.
        flags = info.memory_type_flags
        self._map_device = info.type != "discrete"
        self._serves: dict[str, Callable[[Block], bool]] = {
            "host": lambda b: b.ptr != 0,
            "device": lambda b: bool(flags[b.mem_type] & DEVICE_LOCAL)}
        self._subs: dict[tuple[str, int], SubPool] = {}
        self._by_kind: dict[str, list[SubPool]] = {}
        for kind in ("device", "host"):
            subs = [SubPool(self, kind, SMALL, min(SMALL_BLOCK, max_alloc)),
                    SubPool(self, kind, LARGE, min(LARGE_BLOCK, max_alloc)),
                    SubPool(self, kind, HUGE, 0)]
            for sub in subs:
                self._subs[(kind, sub.cls)] = sub
            self._by_kind[kind] = subs
        self._small_device = self._subs[("device", SMALL)]
        self._small_host = self._subs[("host", SMALL)]
        self._small = {"device": self._small_device, "host": self._small_host}
        self.allocated = 0
        self.peak_allocated = 0
        self.reserved = 0
        self.nallocs = 0
        # Host memory import: alignment (0: not supported), live imported blocks.
        self.import_align = int(getattr(info, "host_import_alignment", 0) or 0)
        self.max_imports = min(1024, int(info.max_memory_allocation_count or 4096) // 4)
        self.imports: dict[int, Block] = {}
        self.imported = 0
        # Host blocks from imported numpy memory where the device can import (see
        # _import_block); SCOPEDGPU_HOST_BLOCKS=driver keeps driver-allocated ones.
        self.host_blocks_imported = _settings.get("SCOPEDGPU_HOST_BLOCKS") == "import"
        # A block being made: (the out-parameter its handle comes back in, the memory it
        # imports), held from before the call that makes it until it is recorded
        # (_making(), _add_block(), _drop_making()).
        self.making: tuple[Any, Any] | None = None
        # Freed ranges of the sub-pools without bins, not merged yet (_merge_freed()).
        self.freed: list[Allocation] = []

    def _heap_of(self, mem_type: int) -> tuple[int, int]:
        """(heap index, heap size) of a memory type."""
        h = self._type_heap[mem_type] if self._type_heap else 0
        return h, self.heap_size[h]

    def can_import(self, nbytes: int) -> bool:
        return (self.import_align > 0 and nbytes >= IMPORT_MIN
                and len(self.imports) < self.max_imports)

    def check_request(self, nbytes: int, kind: str, what: str = "tensor") -> None:
        """Raises OutOfMemoryError, naming the size and the limit, when a tensor of `kind`
        and `nbytes` can never be had (above maxMemoryAllocationSize, a memory heap or the
        memory limit): called before any host copy of the data is made."""
        size = self.round(nbytes)
        need = ["device", "host"] if kind in ("device", "storage") else ["host"]
        if kind == "device" and self.can_import(nbytes):
            need = ["device"]        # its host copy becomes its staging memory
        for k in need:
            self._check_size(size, k, f"{what} of {nbytes} bytes")
        if self.memory_limit is not None and size * len(need) > self.memory_limit:
            raise OutOfMemoryError(
                f"{what} of {nbytes} bytes ({kind!r}: {len(need)} ranges of that size) does "
                f"not fit the memory limit of {self.memory_limit} bytes",
                result="VK_ERROR_OUT_OF_DEVICE_MEMORY", call="memory_limit")

    def _check_size(self, size: int, kind: str, what: str) -> None:
        """OutOfMemoryError when one range of `size` bytes of `kind` can never be had."""
        if size > self._max_block:
            limit = f"the device's maxMemoryAllocationSize ({self._max_block} bytes)"
        elif size > self.max_request[kind]:
            limit = (f"the memory limit of {self.memory_limit} bytes"
                     if self.memory_limit is not None and size > self.memory_limit else
                     f"the device's largest {kind} memory heap ({self.max_request[kind]} bytes)")
        else:
            return
        raise OutOfMemoryError(f"{what} is larger than {limit}",
                               result="VK_ERROR_OUT_OF_DEVICE_MEMORY", call="vkAllocateMemory")

    def host_memory(self) -> list[np.ndarray]:
        """The numpy arrays that host blocks are made of (see _import_block)."""
        return [b.owner for sub in self._subs.values() for b in sub.blocks.values()
                if b.owner is not None]

    def importable_types(self, address: int, *, others: bool = True) -> list[int]:
        """The memory types that can import host memory at `address`, best first: the
        pool's host types, then (with `others`) any other the driver offers; [] when
        none (or when the device cannot import). Thread-safe: reads no pool state that
        changes."""
        bits = self.allocator.import_types(address) if self.import_align else 0
        ranked = [t for t in self._types["host"] if bits >> t & 1]
        if others:
            ranked += [t for t in range(32) if bits >> t & 1 and t not in ranked]
        return ranked

    def page_span(self, address: int, nbytes: int) -> tuple[int, int]:
        """[start, end) of the host memory [address, address + nbytes) rounded out to the
        import alignment (what import_range() takes for it). Needs import_align."""
        align = self.import_align
        return address - address % align, round_up(address + nbytes, align)

    def import_range(self, address: int, size: int, types: list[int]) -> tuple[Any, int] | None:
        """Imports the host memory [address, address + size) (both aligned to
        import_align) as a block of the first of `types` the driver accepts: (the block
        handle, its memory type), or None. Registers nothing: the caller owns the handle
        (sg_block_destroy) and keeps the memory alive until then. Thread-safe (its callers
        in the main thread run inside _ki.protected())."""
        slot = self.allocator.slot()
        mem_type = self._import_into(slot, address, size, types)
        return None if mem_type is None else (slot[0], mem_type)

    def _import_into(self, slot: Any, address: int, size: int, types: list[int]) -> int | None:
        """Imports [address, address + size) into slot[0] as the first of `types` the driver
        accepts: that memory type, or None (slot untouched)."""
        for mem_type in types:
            if self.allocator.import_host(slot, address, size, mem_type):
                return mem_type
        return None

    def import_host(self, address: int, nbytes: int) -> Allocation | None:
        """A block over the host memory [address, address + nbytes rounded up to the import
        alignment); None when the device refuses (the caller falls back to staging).
        The caller keeps that memory alive until unimport() of the allocation's block."""
        align = self.import_align
        if not align or address % align:
            return None
        size = round_up(nbytes, align)
        types = self.importable_types(address)
        blk = Block(next(self._ids), _vk.NULL, address, size, -1, None)  # type: ignore[arg-type]
        blk.nallocs = 1
        a = Allocation(blk, 0, size, nbytes)
        slot = self._making(None)
        try:
            mem_type = self._import_into(slot, address, size, types)
            if mem_type is None:
                return None
            blk.mem_type = mem_type
            return self._add_import(a)
        except BaseException:
            # Not left for the next block made: the memory imported is the caller's, alive
            # only until the exception has gone past it.
            self._drop_making()
            raise

    @_ki.step
    def _add_import(self, a: Allocation) -> Allocation:
        """Records the import made into the pool's slot (self.making) as a's block, in one
        step with no call; returns `a` to the caller's holder."""
        blk = a.block
        blk.handle = self.making[0][0]  # type: ignore[index]
        self.imports[blk.id] = blk
        self.imported += blk.size
        self.making = None
        return a

    @_ki.step
    def unimport(self, a: Allocation) -> None:
        """Gives back an import the caller took out of its holder (in one step, whose last
        call destroys it)."""
        blk = a.block
        if blk.id not in self.imports:
            return None
        del self.imports[blk.id]
        self.imported -= blk.size
        h, blk.handle = blk.handle, _vk.NULL
        return self.allocator.destroy(h)

    @_ki.step
    def unimport_held(self, holder: Any) -> None:
        """Gives back the import in holder.stage (a tensor's handle), which it clears, in
        one step whose last call is the allocator's destroy (VkAllocator's is the shim's
        C function: nothing runs between the take and the destroy)."""
        blk = holder.stage.block
        holder.stage = None
        if blk.id not in self.imports:
            return None
        del self.imports[blk.id]
        self.imported -= blk.size
        h, blk.handle = blk.handle, _vk.NULL
        return self.allocator.destroy(h)

    def round(self, nbytes: int) -> int:
        """The bytes a request of nbytes takes: at least one alignment unit."""
        return max(self.align, round_up(nbytes, self.align))

    @_ki.step
    def alloc(self, nbytes: int, kind: str) -> Allocation:
        al = self.align
        size = (nbytes + al - 1) // al * al if nbytes > al else al   # round(): inline, hot
        if size <= SMALL_LIMIT:
            sub = self._small[kind]
            bins = sub.bins
            # Fast path: a freed range of exactly this size, handed out as it was (read and
            # deleted by subscript, not pop(): one step, no call).
            if size in bins and bins[size]:  # type: ignore[operator,index]  # noqa: RUF019 (no call)
                b = bins[size]  # type: ignore[index]
                a = b[-1]
                del b[-1]
                sub.binned -= 1
                a.nbytes = nbytes
                self.allocated += size
                self.nallocs += 1
                if self.allocated > self.peak_allocated:
                    self.peak_allocated = self.allocated
                return a
        else:
            sub = self._subs[(kind, LARGE if size <= HUGE_ABOVE else HUGE)]
        return self._alloc_new(sub, size, nbytes)

    def _alloc_new(self, sub: SubPool, size: int, nbytes: int) -> Allocation:
        """A range not on a bin: found (a new block made if need be), then carved and
        counted in one step, whose result goes up to the caller's holder."""
        free = sub.free
        i = bisect.bisect_left(free, (size, -1, -1))   # sub.fit(), inline (semi-hot)
        if i == len(free):
            sub, i = self._find(sub, size)
            free = sub.free
        fsize, bid, off = free[i]
        a = Allocation(sub.blocks[bid], off, size, nbytes)
        j = i
        if i and free[i - 1] > (fsize - size, bid, off + size):   # (most often it stays)
            j = bisect.bisect_left(free, (fsize - size, bid, off + size), 0, i)
        return self._carve(sub, i, j, a)

    @_ki.step
    def _carve(self, sub: SubPool, i: int, j: int, a: Allocation) -> Allocation:
        """Takes free range i of `sub` for `a` (made for its start); the rest of it stays
        free, its entry at index j (where it sorts once entry i is gone: j <= i, as it is
        smaller). Counts `a` allocated; the block, if it was empty, leaves the cache. One
        step with no call: the commit of an allocation."""
        free = sub.free
        fsize = free[i][0]
        blk = a.block
        off = a.offset
        size = a.size
        del free[i]
        del blk.free_start[off]
        del blk.free_end[off + fsize]
        if fsize > size:
            blk.free_start[off + size] = fsize - size
            blk.free_end[off + fsize] = off + size
            free[j:j] = [(fsize - size, blk.id, off + size)]
        if not blk.nallocs:
            del self.empty[blk.id]
            self.empty_bytes -= blk.size
        blk.nallocs += 1
        self.allocated += size
        self.nallocs += 1
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return a

    def _find(self, sub: SubPool, size: int) -> tuple[SubPool, int]:
        """Where `size` bytes for `sub` come from: (a sub-pool, the index of a free range of
        it that fits). A free range that fits, else a new block (recorded empty: the range
        is carved by the caller); under pressure, frees every cache and retries, then takes
        a range of another size class; else OutOfMemoryError. What it changes on the way
        (bins merged, blocks made or given back) is whole at every line."""
        i = sub.fit(size)
        if i < 0 and sub.binned:
            self.flush(sub)
            i = sub.fit(size)
        if i >= 0:
            return sub, i
        self._check_size(size, sub.kind, f"a {sub.kind} range of {size} bytes")
        i = self._new_block(sub, size)
        if i < 0:
            # Let the manager retire finished work (what it frees may fit), then give back
            # every empty block of every kind and size class, bins merged first, and retry.
            if self._on_oom:
                self._on_oom()
            self.empty_cache()
            i = sub.fit(size)
            if i < 0:
                i = self._new_block(sub, size)
        if i >= 0:
            return sub, i
        # Free space of another size class of this kind (in blocks still in use), then of
        # the other kind, in blocks whose memory serves this kind too (one memory type for
        # both, as on CPU and integrated devices).
        for other in self._by_kind[sub.kind]:
            if other is not sub:
                i = other.fit(size)
                if i < 0 and other.binned:
                    self.flush(other)
                    i = other.fit(size)
                if i >= 0:
                    return other, i
        serves = self._serves[sub.kind]
        for other in self._by_kind["host" if sub.kind == "device" else "device"]:
            if other.binned:
                self.flush(other)
            i = other.fit_where(size, serves)
            if i >= 0:
                return other, i
        raise self._out_of_memory(sub, size)

    def _out_of_memory(self, sub: SubPool, size: int) -> OutOfMemoryError:
        held = (f"{self.reserved} bytes reserved by {self.nallocs} allocations, "
                f"{self.allocated} bytes of them allocated")
        if self.memory_limit is not None and self.reserved + size > self.memory_limit:
            return OutOfMemoryError(
                f"tensor of {size} bytes does not fit the memory limit of "
                f"{self.memory_limit} bytes ({held})",
                result="VK_ERROR_OUT_OF_DEVICE_MEMORY", call="memory_limit")
        heaps = sorted({self._heap_of(t) for t in self._types[sub.kind]})
        what = ", ".join(f"heap {h}: {self.heap_reserved[h]} of {n} bytes reserved"
                         for h, n in heaps)
        return OutOfMemoryError(
            f"no {sub.kind} memory for a tensor of {size} bytes after the pool gave back its "
            f"cache ({what}; {held})", result="VK_ERROR_OUT_OF_DEVICE_MEMORY",
            call="vkAllocateMemory")

    @_ki.step
    def alloc_pair(self, nbytes: int) -> tuple[Allocation, Allocation]:
        """A "device" range and a "host" (staging) range of nbytes <= SMALL_LIMIT each."""
        al = self.align
        size = (nbytes + al - 1) // al * al if nbytes > al else al   # round(): inline, hot
        sd = self._small_device
        sh = self._small_host
        bd = sd.bins
        bh = sh.bins
        if not (size in bd and size in bh and bd[size] and bh[size]):  # type: ignore[operator,index]
            return self._alloc_pair_slow(nbytes)
        ld = bd[size]  # type: ignore[index]
        lh = bh[size]  # type: ignore[index]
        a = ld[-1]
        b = lh[-1]
        del ld[-1]
        del lh[-1]
        sd.binned -= 1
        sh.binned -= 1
        a.nbytes = b.nbytes = nbytes
        self.allocated += 2 * size
        self.nallocs += 2
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return a, b

    def _alloc_pair_slow(self, nbytes: int) -> tuple[Allocation, Allocation]:
        a = None
        try:
            a = self.alloc(nbytes, "device")
            return a, self.alloc(nbytes, "host")
        except BaseException:
            if a is not None:
                self.free(a)
            raise

    def free_pair(self, a: Allocation, b: Allocation) -> None:
        """Frees what alloc_pair gave (taken out of their holder by the caller: a tensor
        frees its ranges with free_held(), in the step that takes each)."""
        self.free(a)
        self.free(b)

    @_ki.step
    def free_held(self, holder: Any, stage: bool) -> None:
        """Frees the range in holder.stage (stage) or holder.gpu, and clears it, in one
        step (a Ctrl-C falls before it, and the release that runs again frees it, or
        after it): the small sizes onto their bin, the others onto `freed`, with no call
        (`+=`, not append()); those are merged by its last call, _merge_freed()."""
        a = holder.stage if stage else holder.gpu
        size = a.size
        sub = a.block.sub
        bins = sub.bins
        if bins is None:
            freed = self.freed
            freed += (a,)
            self.allocated -= size
            self.nallocs -= 1
            if stage:
                holder.stage = None
            else:
                holder.gpu = None
            return self._merge_freed()
        if size in bins:
            b = bins[size]
            b += (a,)
        else:
            bins[size] = [a]
        sub.binned += 1    # binned: its block still counts it (Block.nallocs)
        self.allocated -= size
        self.nallocs -= 1
        if stage:
            holder.stage = None
        else:
            holder.gpu = None
        return None

    @_ki.step
    def free(self, a: Allocation) -> None:
        """Frees a range its caller took out of its holder (free_held() takes and frees in
        one step): as free_held(), onto its bin or onto `freed`, merged by the last call."""
        size = a.size
        sub = a.block.sub
        bins = sub.bins
        self.allocated -= size
        self.nallocs -= 1
        if bins is None:
            freed = self.freed
            freed += (a,)
            return self._merge_freed()
        if size in bins:
            b = bins[size]
            b += (a,)
        else:
            bins[size] = [a]
        sub.binned += 1
        return None

    # -- merging freed ranges -------------------------------------------------------------
    def _merge_freed(self) -> None:
        """Merges the ranges on `freed` into their sub-pools' free lists, one step each
        (what an interrupt left there is merged by the next call), then trims the cache."""
        freed = self.freed
        while freed:
            a = freed[-1]
            self._put_back(freed, 0, a.block.sub.merge_plan(a))
        if self.empty_bytes > self.cache_bound:
            self._trim()

    def flush(self, sub: SubPool) -> None:
        """Merges the binned ranges of `sub` into its free list, one step each (cut short,
        the next flush merges the rest), then trims the cache."""
        bins = sub.bins
        if not sub.binned or bins is None:
            return
        for size in list(bins):
            b = bins[size]
            while b:
                self._put_back(b, 1, sub.merge_plan(b[-1]))
        bins.clear()
        if self.empty_bytes > self.cache_bound:
            self._trim()

    @_ki.step
    def _put_back(self, held: list[Allocation], binned: int,
                  plan: tuple[Allocation, int, int, int, int, int]) -> None:
        """Takes range a = held[-1] out of `held` (`freed`, or its bin: binned=1) and merges
        it with its free neighbours as SubPool.merge_plan() planned; its block counts one
        range fewer, and is cached when it empties. One step with no call."""
        a, poff, nsize, lo, hi, k = plan
        blk = a.block
        sub = blk.sub
        free = sub.free
        off = a.offset
        end = off + a.size
        del held[-1]
        sub.binned -= binned
        if poff != off:     # merged with the free range before it
            del blk.free_start[poff]
            del blk.free_end[off]
        if nsize:           # and with the one after it
            del blk.free_start[end]
            del blk.free_end[end + nsize]
        if hi >= 0:
            del free[hi]
        if lo >= 0:
            del free[lo]
        blk.free_start[poff] = end + nsize - poff
        blk.free_end[end + nsize] = poff
        free[k:k] = [(end + nsize - poff, blk.id, poff)]
        blk.nallocs -= 1
        if not blk.nallocs:
            self.empty[blk.id] = blk
            self.empty_bytes += blk.size

    # -- blocks ---------------------------------------------------------------------------
    def _trim(self) -> None:
        """Gives back the oldest empty blocks until the cache is within its bound."""
        while self.empty_bytes > self.cache_bound:
            self._destroy_block(next(iter(self.empty.values())))

    def _destroy_block(self, blk: Block) -> None:
        """Gives an empty block back to the driver."""
        return self._drop_block(blk, bisect.bisect_left(blk.sub.free, (blk.size, blk.id, 0)))

    @_ki.step
    def _drop_block(self, blk: Block, i: int) -> None:
        """Takes empty block `blk` (its one free range at index i) out of every record and
        destroys it, in one step whose one call is the allocator's destroy, last
        (VkAllocator's is the shim's C function: nothing runs between)."""
        sub = blk.sub
        del sub.free[i]
        del sub.blocks[blk.id]
        del self.empty[blk.id]
        self.empty_bytes -= blk.size
        self.reserved -= blk.size
        self.heap_reserved[blk.heap] -= blk.size
        h = blk.handle
        blk.handle = _vk.NULL
        return self.allocator.destroy(h)

    def _making(self, keep: Any) -> Any:
        """A new out-parameter for a block about to be made, held by the pool first
        (self.making, with `keep`: the host memory it imports, alive until it is
        destroyed): a block made and not yet recorded (a Ctrl-C between) is destroyed by
        the next _drop_making(), at the next block made, empty_cache() or destroy()."""
        if self.making is not None:
            self._drop_making()
        slot = self.allocator.slot()
        self.making = (slot, keep)
        return slot

    @_ki.step
    def _drop_making(self) -> None:
        """Destroys the block in the making slot, if a call filled it, and lets go of the
        slot, in one step whose one call is the destroy (`making`, with the memory it keeps
        alive, is a local until that returned)."""
        making = self.making
        self.making = None
        if making is None:
            return None
        h = making[0][0]
        if not h:
            return None
        return self.allocator.destroy(h)

    @_ki.step
    def _add_block(self, blk: Block, i: int) -> int:
        """Records a new block, made into the making slot, as an empty cached block of its
        sub-pool, its one free range at index i of the free list, and lets go of the slot:
        one step with no call. Returns i (the caller carves its range from there)."""
        sub = blk.sub
        blk.handle = self.making[0][0]  # type: ignore[index]
        sub.blocks[blk.id] = blk
        sub.free[i:i] = [(blk.size, blk.id, 0)]
        self.empty[blk.id] = blk
        self.empty_bytes += blk.size
        self.reserved += blk.size
        self.heap_reserved[blk.heap] += blk.size
        self.making = None
        return i

    def _new_block(self, sub: SubPool, need: int) -> int:
        """A new block for a request of `need` bytes, within the heaps and the memory limit,
        recorded empty: the index of its free range in sub.free, -1 when none can be had
        (tried: the class's block size, then `need` alone)."""
        if sub.cls == HUGE:
            size = need
        else:
            size = max(min(sub.block_size, self.block_cap), need)
            if size > MiB:
                size = max(need, min(round_up(size, MiB), self._max_block))
        for bs in (size, need) if size > need else (size,):
            if self.memory_limit is not None and self.reserved + bs > self.memory_limit:
                continue
            i = self._create_block(sub, bs)
            if i >= 0:
                blk = sub.blocks[sub.free[i][1]]
                log.debug("pool: new %s block of %d bytes (%s class, for %d bytes; %s, memory "
                          "type %d); reserved now %d bytes%s", sub.kind, blk.size,
                          ("small", "large", "huge")[sub.cls], need,
                          "imported host memory" if blk.owner is not None else "driver memory",
                          blk.mem_type, self.reserved,
                          "" if self.memory_limit is None else f" of {self.memory_limit}")
                return i
        return -1

    def _import_block(self, sub: SubPool, size: int) -> int:
        """A host block over numpy memory imported into the device, recorded as
        _create_block's are (-1 when the device refuses): tensors' host data can then be
        the staging range itself, as a numpy view that stays valid after the block, the
        tensor and the manager are gone."""
        align = self.import_align
        size = round_up(size, align)
        if self.memory_limit is not None and self.reserved + size > self.memory_limit:
            return -1   # rounded up past the limit: driver memory of the size asked instead
        owner = aligned_empty((size,), np.dtype(np.uint8), align)
        address = owner.ctypes.data
        fits = [t for t in self.importable_types(address, others=False)
                if self.heap_reserved[self._heap_of(t)[0]] + size <= self._heap_of(t)[1]]
        blk = Block(next(self._ids), _vk.NULL, address, size, -1, sub)
        blk.owner = owner
        blk.view = memoryview(owner)  # type: ignore[arg-type]
        slot = self._making(owner)
        mem_type = self._import_into(slot, address, size, fits)
        if mem_type is None:
            return -1
        blk.mem_type = mem_type
        blk.heap = self._heap_of(mem_type)[0]
        return self._add_block(blk, bisect.bisect_left(sub.free, (size, blk.id, 0)))

    def _create_block(self, sub: SubPool, size: int) -> int:
        """A new block of `size` bytes recorded empty in `sub`: the index of its free range,
        -1 when no memory type can have it."""
        if sub.kind == "host" and self.import_align and self.host_blocks_imported:
            i = self._import_block(sub, size)
            if i >= 0:
                return i
        for mem_type in self._types[sub.kind]:
            heap, heap_size = self._heap_of(mem_type)
            if self.heap_reserved[heap] + size > heap_size:
                continue   # the heap is full, whatever the driver would allow
            mapped = sub.kind == "host" or (
                self._map_device and self.info.memory_type_flags[mem_type] &
                (HOST_VISIBLE | HOST_COHERENT) == HOST_VISIBLE | HOST_COHERENT)
            blk = Block(next(self._ids), _vk.NULL, 0, size, mem_type, sub, heap)
            slot = self._making(None)
            ptr = self.allocator.create(slot, size, mem_type, bool(mapped),
                                        f"allocating a {sub.kind} memory block of {size} "
                                        f"bytes (memory type {mem_type})")
            if ptr is None:
                continue   # not this type, or no memory left for it: the next one
            blk.ptr = ptr
            return self._add_block(blk, bisect.bisect_left(sub.free, (size, blk.id, 0)))
        if not self._types[sub.kind]:
            raise DeviceError(f"no memory type of this device can hold a {sub.kind} buffer")
        return -1

    def empty_cache(self) -> int:
        """Destroys blocks that hold no allocation (bins merged first), and a block an
        interrupt left in the making; returns the bytes given back."""
        reserved = self.reserved
        self._drop_making()
        self._merge_freed()
        for sub in self._subs.values():
            self.flush(sub)
        while self.empty:
            self._destroy_block(next(iter(self.empty.values())))
        return reserved - self.reserved

    def cached_blocks(self) -> tuple[int, int]:
        """(blocks, bytes) kept for reuse: the blocks that no live allocation uses, those
        empty_cache() would give back now. That is the empty ones, and those whose every
        range handed out was freed onto a bin since (Block.nallocs still counts a binned
        range until flush_bins()). Counted from the bins as they are: nothing is merged or
        freed. O(ranges on the bins); not for hot paths."""
        n, nbytes = len(self.empty), self.empty_bytes
        binned: dict[int, int] = {}
        for sub in self._subs.values():
            if sub.binned:
                for b in sub.bins.values():  # type: ignore[union-attr]
                    for a in b:
                        binned[a.block.id] = binned.get(a.block.id, 0) + 1
                for bid, k in binned.items():
                    blk = sub.blocks[bid]
                    if blk.nallocs == k:
                        n += 1
                        nbytes += blk.size
                binned.clear()
        return n, nbytes

    def destroy(self) -> None:
        """Destroys every block, allocated or not. The device must be idle. Each block
        leaves its record in the step that destroys it: run again after an interrupt, it
        destroys the rest."""
        self._drop_making()
        for sub in self._subs.values():
            blocks = sub.blocks
            while blocks:
                self._forget(blocks, next(iter(blocks)))
            sub.free.clear()
            if sub.bins is not None:
                sub.bins.clear()
            sub.binned = 0
        imports = self.imports
        while imports:
            self._forget(imports, next(iter(imports)))
        self.freed.clear()
        self.empty.clear()
        self.empty_bytes = 0
        self.imported = 0
        self.reserved = 0
        self.heap_reserved = [0] * len(self.heap_size)
        self.allocated = 0
        self.nallocs = 0

    @_ki.step
    def _forget(self, blocks: dict[int, Block], bid: int) -> None:
        """Takes block `bid` out of `blocks` and destroys it, in one step whose one call is
        the destroy (the block, and the memory it imports, alive until that returned)."""
        blk = blocks[bid]
        del blocks[bid]
        h = blk.handle
        blk.handle = _vk.NULL
        return self.allocator.destroy(h)

    def stats(self) -> dict[str, int]:
        return {
            "allocated_bytes": self.allocated,
            "reserved_bytes": self.reserved,
            "peak_allocated_bytes": self.peak_allocated,
            "blocks": sum(len(s.blocks) for s in self._subs.values()),
            "allocations": self.nallocs,
            "imported_host_bytes": self.imported,
            "imported_blocks": len(self.imports),
            "cached_bytes": self.empty_bytes,
            "cache_limit_bytes": self.cache_bound,
        }
