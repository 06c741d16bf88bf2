"""The caches of one manager: SPIR-V reflections, compiled pipelines, and the command
pools, command buffers and fences of destroyed sequences kept for new ones.

Each is bounded (least recently used entries go first) and emptied by
Manager.empty_cache() and at close (Engine.shutdown calls drop() / destroy_all()).
Every method runs under the manager's lock.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from typing import Any

from scopedgpu import _ki, _vk
from scopedgpu._device import DeviceInfo
from scopedgpu._engine import Engine
from scopedgpu._errors import ShaderError
from scopedgpu._pool import Pool
from scopedgpu._spirv import ShaderInfo, reflect
from scopedgpu._spirv_val import check_module
from scopedgpu._submission import Submission

__all__ = ["Reflections", "Programs", "SequenceCache", "UNUSED_PROGRAMS_KEPT", "SEQUENCES_KEPT",
           "DSETS_KEPT", "CACHED_OBJECTS", "cached_counts"]

UNUSED_PROGRAMS_KEPT = 64
# Command pool + command buffer + fence sets kept per queue for reuse by new sequences:
# as many as a service keeps in flight (SPEC: 1,024 requests at once), because making and
# destroying one costs about 1.1 ms on NVIDIA's driver (H200, 2026-12-01: 420 us
# sg_seq_create, 690 us sg_seq_destroy), against microseconds to reuse one; a service of
# 256 requests in flight ran at 467 requests/s with 16 kept. A few KiB of host memory
# each, until Manager.empty_cache() or close().
SEQUENCES_KEPT = 1024
REFLECTIONS_KEPT = 256
# Descriptor sets of destroyed algorithms kept (by their program, all programs together)
# for the next algorithms of the same program: rebinding one is a vkUpdateDescriptorSets,
# where a new one is a descriptor pool created, a set allocated and the pool destroyed
# later; as many as a service keeps in flight, like SEQUENCES_KEPT. A descriptor pool of
# one set each, until Manager.empty_cache() or close().
DSETS_KEPT = 1024

log = logging.getLogger("scopedgpu")


def _describe(spirv: bytes, info: ShaderInfo, spec: tuple, nbindings: int) -> str:
    """A pipeline's key as the log shows it (only built when DEBUG is on)."""
    return (f"SPIR-V {hashlib.sha256(spirv).hexdigest()[:12]} ({len(spirv)} bytes, local "
            f"size {'x'.join(map(str, info.local_size))}), {nbindings} bindings, "
            f"specialization constants {list(spec[0])}")


class SequenceCache:
    """queue -> [Submission] of destroyed anonymous sequences, idle (their last submission
    complete), ready for reuse by new sequences; each remembers the signature of the
    commands it holds (Submission.sig). The cache is their owner (Submission.owner)."""
    __slots__ = ("engine", "by_queue")

    def __init__(self, engine: Engine):
        self.engine = engine
        self.by_queue: dict[int, list[Submission]] = {}

    def take(self, queue: int, owner: object) -> Submission | None:
        """An idle submission of the queue, now `owner`'s (None: its own, see
        Submission), or None when there is none."""
        cache = self.by_queue.get(queue)
        if not cache:
            return None
        return _take_last(cache, owner)

    def keep(self, sub: Submission) -> bool:
        """Keeps a freed submission for reuse (Submission.free: its last submission is
        complete); False when the cache is full or the manager closed (the caller
        destroys it)."""
        cache = self.by_queue.setdefault(sub.queue, [])
        if len(cache) >= SEQUENCES_KEPT or self.engine.closed:
            return False
        _keep(self, cache, sub)
        return True

    def count(self) -> int:
        return sum(len(c) for c in self.by_queue.values())

    def drop(self) -> int:
        n = 0
        for cache in self.by_queue.values():
            while cache:   # each one is destroyed before it leaves the cache (Ctrl-C)
                cache[-1].destroy_now(self.engine)
                cache.pop()
                n += 1
        return n


@_ki.step
def _take_last(cache: list[Submission], owner: object) -> Submission:
    """The last idle submission of a cache, now `owner`'s, out of it, in one step (no call:
    returned straight into the caller's store)."""
    sub = cache[-1]
    sub.owner = sub if owner is None else owner
    del cache[-1]
    return sub


@_ki.step
def _keep(owner: SequenceCache, cache: list[Submission], sub: Submission) -> None:
    """Owned by the cache and in it, in one step."""
    sub.owner = owner
    cache.append(sub)


class Reflections:
    """What a SPIR-V module declares (scopedgpu._spirv.ShaderInfo), by its bytes; a
    module is validated once, before any byte of it reaches the driver.

    `derived`: what algorithm() derives from a module and this device alone, by the
    module's bytes, stored by algorithm.py (opaque here) and dropped with the module's
    reflection; an entry names the ShaderInfo it was derived from (its first item)."""
    __slots__ = ("info", "cache", "derived")

    def __init__(self, info: DeviceInfo):
        self.info = info
        self.cache: OrderedDict[bytes, ShaderInfo] = OrderedDict()
        self.derived: dict[bytes, tuple[Any, ...]] = {}

    def get(self, spirv: Any) -> ShaderInfo:
        if not isinstance(spirv, (bytes, bytearray, memoryview)):
            raise TypeError(f"spirv must be bytes (SPIR-V, e.g. from sg.compile_glsl), not "
                            f"{type(spirv).__name__}")
        key = bytes(spirv)
        info = self.cache.get(key)
        if info is None:
            check_module(key, self.info)   # validator, structure, capabilities: before the driver
            info = reflect(key)
            api = tuple(int(x) for x in self.info.api_version.split(".")[:2])
            maxv = (1, 6) if api >= (1, 3) else ((1, 5) if api >= (1, 2) else (1, 3))
            if info.version > maxv:
                raise ShaderError(f"SPIR-V {info.version[0]}.{info.version[1]} is newer than "
                                  f"this device's Vulkan {self.info.api_version} accepts")
            self.cache[key] = info
            if len(self.cache) > REFLECTIONS_KEPT:
                old, _ = self.cache.popitem(last=False)
                self.derived.pop(old, None)
        return info


# What the driver answers for a shader it cannot compile.
_REJECTED = (_vk.VK_ERROR_INITIALIZATION_FAILED, _vk.VK_ERROR_INVALID_SHADER_NV,
             _vk.VK_ERROR_UNKNOWN)


class _Program:
    """A cached pipeline (sg_program), shared by algorithms with the same SPIR-V and
    specialization constants; refcounted by the algorithms that use it. `spare`: the
    descriptor sets (sg_dset) of its destroyed algorithms, whose work completed, kept for
    its next ones (Programs.take_spare, keep_spare); `bound`, beside it: what each one's
    bindings were last written with (the _AlgoHandle's `bound`), or None."""
    __slots__ = ("handle", "key", "refs", "spare", "bound")

    def __init__(self, handle: Any, key: tuple):
        self.handle = handle
        self.key = key
        self.refs = 0
        self.spare: list[Any] = []
        self.bound: list[Any] = []


class Programs:
    """Compiled pipelines (sg_program) by (SPIR-V, specialization constants, bindings),
    refcounted by the algorithms that use them; unused ones are kept (at most
    UNUSED_PROGRAMS_KEPT) for the next algorithm of the same shader."""
    __slots__ = ("engine", "programs", "unused_programs", "spares")

    def __init__(self, engine: Engine):
        self.engine = engine
        self.programs: dict[tuple, _Program] = {}
        self.unused_programs: OrderedDict[tuple, _Program] = OrderedDict()
        self.spares = 0   # descriptor sets kept, every program's spare lists together

    @staticmethod
    def key_of(spirv: bytes, spec: tuple, nbindings: int) -> tuple:
        """The cache key of the pipeline of (module, encoded specialization constants,
        binding count)."""
        ids, _offsets, sizes, blob = spec
        return (bytes(spirv), tuple(ids), tuple(sizes), blob, nbindings)

    def get(self, spirv: bytes, info: ShaderInfo, spec: tuple,
            nbindings: int | None, holder: Any, key: tuple | None = None) -> _Program:
        # nbindings: the descriptor set layout's bindings 0..nbindings-1 (one per tensor),
        # a superset of those the module uses (unused ones are valid Vulkan). key: its
        # key_of(), where the caller has it already. The reference is stored in
        # holder.program (an algorithm's handle) in the line that takes it: a Ctrl-C after
        # the return, before the caller's store, would lose it (Python runs signal
        # handlers right after a call returns).
        if nbindings is None:
            nbindings = len(info.bindings)
        ids, offsets, sizes, blob = spec
        if key is None:
            key = self.key_of(spirv, spec, nbindings)
        prog = self.programs.get(key)
        if prog is None:
            t0 = time.perf_counter()   # for the log
            engine = self.engine
            out = _vk.out("program")
            # One try, no nested one: a KeyboardInterrupt delivered at a nested `try:` line
            # escaped this handler (seen with sys.settrace on CPython 3.11).
            try:
                rc = _vk.program_create(engine.dev, bytes(spirv), nbindings,
                                        info.push_constant_size, ids, offsets, sizes, blob, out)
                if rc in _REJECTED:
                    raise ShaderError(f"the driver rejected the shader ({len(spirv)} bytes "
                                      f"of SPIR-V): {_vk.last_call()} failed")
                _vk.check(rc, "creating a compute pipeline")
                # Unused until the reference below is taken (empty_cache() frees it).
                self.programs[key] = self.unused_programs[key] = _Program(out[0], key)
                engine.check_validation("creating a compute pipeline")
            except BaseException as exc:
                # Made but rejected by the layer (not cached: the same shader must raise
                # again), or made and not yet registered (Ctrl-C right after the shim
                # returned): destroyed. Nothing else can hold it: the lock is ours.
                self.programs.pop(key, None)
                self.unused_programs.pop(key, None)
                if out[0] != _vk.NULL:
                    _vk.program_destroy(_vk.take(out))
                engine.validation_failed(exc, "creating a compute pipeline")
                raise
            prog = self.programs[key]
            if log.isEnabledFor(logging.DEBUG):
                log.debug("pipeline built in %.1f ms: %s; %d pipelines cached",
                          (time.perf_counter() - t0) * 1e3,
                          _describe(key[0], info, spec, nbindings), len(self.programs))
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("pipeline cache hit (used by %d algorithms): %s", prog.refs,
                      _describe(key[0], info, spec, nbindings))
        return self._ref(prog, holder)

    @_ki.step
    def _ref(self, prog: _Program, holder: Any) -> _Program:
        """Counts the reference and stores it in holder.program, in one step."""
        if prog.key in self.unused_programs:
            del self.unused_programs[prog.key]
        prog.refs += 1
        holder.program = prog
        return prog

    def unref(self, holder: Any) -> None:
        """Drops the reference `holder.program` (an algorithm's handle) holds, and clears
        it in the same step: a Ctrl-C falls before it (the release runs again and does
        it) or after it, never between taking the reference and counting it."""
        self._unref(holder)
        while len(self.unused_programs) > UNUSED_PROGRAMS_KEPT:
            self._drop_program(next(iter(self.unused_programs.values())))

    @_ki.step
    def _unref(self, holder: Any) -> None:
        prog = holder.program
        holder.program = None
        prog.refs -= 1
        if not prog.refs:
            self.unused_programs[prog.key] = prog

    # -- descriptor sets of destroyed algorithms, kept for the next ones --------------
    @_ki.step
    def keep_spare(self, holder: Any) -> bool:
        """Moves holder.dset (an algorithm's handle, whose work completed) to the spare
        list of holder.program, in one step (its one call last); False (nothing moved)
        when DSETS_KEPT are kept already."""
        if self.spares >= DSETS_KEPT:
            return False
        dset = holder.dset
        prog = holder.program
        bound = prog.bound
        holder.dset = None
        self.spares += 1
        bound += (holder.bound,)   # (`+=`: no call before the last)
        prog.spare.append(dset)
        return True

    @_ki.step
    def take_spare(self, prog: _Program, holder: Any) -> bool:
        """Moves a spare descriptor set of prog into holder.dset, and what its bindings
        were last written with into holder.bound, in one step (subscripts and del, not
        pop(): a signal right after pop() returned would lose what it popped); False
        when it has none."""
        spare = prog.spare
        if not spare:
            return False
        bound = prog.bound
        holder.dset = spare[-1]
        holder.bound = bound[-1]
        del spare[-1]
        del bound[-1]
        self.spares -= 1
        return True

    def drop_spares(self, prog: _Program) -> None:
        """Destroys prog's spare descriptor sets (each taken out in the step that
        destroys it)."""
        while prog.spare:
            self._destroy_spare(prog)

    @_ki.step
    def _destroy_spare(self, prog: _Program) -> None:
        spare = prog.spare
        dset = spare[-1]
        del spare[-1]
        del prog.bound[-1]
        self.spares -= 1
        _vk.dset_destroy(dset)

    @_ki.step
    def _destroy_program(self, prog: _Program) -> None:
        """Forgets the pipeline and destroys it, in one step (after _drop_program destroyed
        its spare descriptor sets, allocated with its set layout)."""
        if prog.key in self.unused_programs:
            del self.unused_programs[prog.key]
        del self.programs[prog.key]
        h, prog.handle = prog.handle, None
        _vk.program_destroy(h)

    def _drop_program(self, prog: _Program) -> None:
        """Destroys the pipeline's spare descriptor sets, then the pipeline."""
        self.drop_spares(prog)
        self._destroy_program(prog)

    def drop_unused(self) -> int:
        """Destroys the unused pipelines and every spare descriptor set (empty_cache());
        returns how many pipelines."""
        for prog in list(self.programs.values()):
            self.drop_spares(prog)
        n = len(self.unused_programs)
        while self.unused_programs:
            self._drop_program(next(iter(self.unused_programs.values())))
        return n

    def destroy_all(self) -> None:
        """At close, after every algorithm was released: destroys every pipeline."""
        while self.programs:
            self._drop_program(next(iter(self.programs.values())))


# What one entry of each cache holds among the shim's live counts (Manager.live_objects()):
# an idle sequence is sg_seq_create's command pool (its command buffer is not counted)
# and fence, never a query pool (sequences with timestamps are not kept:
# Sequence.__init__: not recyclable); a program is sg_program_create's module, two layouts and
# pipeline; a pool block is sg_block_create's (or sg_block_import's) buffer and memory; a
# spare descriptor set is sg_dset_create's descriptor pool (its set is not counted).
CACHED_OBJECTS: dict[str, tuple[str, ...]] = {
    "cached_sequences": ("command_pools", "fences"),
    "cached_pipelines": ("shader_modules", "descriptor_set_layouts", "pipeline_layouts",
                         "pipelines"),
    "cached_blocks": ("buffers", "memory_blocks"),
    "cached_descriptor_sets": ("descriptor_pools",),
}


def cached_counts(seq_cache: SequenceCache, programs: Programs, pool: Pool) -> dict[str, int]:
    """Entries held by each cache of a manager (the keys of CACHED_OBJECTS), from the
    caches' own bookkeeping: what empty_cache() would free now. Under the manager's lock."""
    return {"cached_sequences": seq_cache.count(),
            "cached_pipelines": len(programs.unused_programs),
            "cached_blocks": pool.cached_blocks()[0],
            "cached_descriptor_sets": programs.spares}
