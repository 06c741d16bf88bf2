"""Recording: the recorder the ops write their commands through, and barrier inference.

Each op declares its accesses (Recorder.use: allocation, stage, write?) before its
commands; the recorder inserts one global memory barrier before an op whose accesses
conflict with those since the last barrier (read after write, write after write, write
after read). Its source scope is every stage and write since the last barrier; its
destination is every GPU stage the recorder uses (compute and transfer) with every
access, not only the stages of the op that needed it. That makes the invariant the
recorder relies on when it forgets the accesses before a barrier true: everything before
a barrier is ordered before, and its writes visible to, every later command. (With the
op's own stages alone, a download copy after two dispatches read a tensor the first one
wrote with only a compute-to-compute barrier between, and a download wrote a staging
range an upload had read with only a transfer-to-compute barrier between: data races by
the Vulkan spec that synchronization validation reports, SYNC-HAZARD-READ-AFTER-WRITE
and -WRITE-AFTER-READ, and that a driver with separate caches for transfers would turn
into stale downloads.) Host accesses (STAGE_HOST) are ordered by the fence and never need
a barrier in the command buffer.

Between submissions: every command buffer submitted to a queue ends with a barrier from
every GPU stage and write to every GPU stage and access and to the host's reads
(record_commands; the storage upload's and stream()'s copies end with one as wide). A
barrier's second synchronization scope is every command later in submission order on the
queue, later command buffers and batches included, so the next submission's commands run
after, and see the writes of, everything submitted before: one barrier per command buffer,
not one at each end (the NVIDIA H200 spends about 0.7 us of GPU time on each). A barrier
orders one queue only: once a manager has a sequence on another queue than 0
(Engine.lead_all), every recording also starts with one, which makes the writes of other
queues' work, made available by the fences the host waited for, visible to the queue's
commands (as stream()'s copies and the kernel's OpMemoryBarrier do for stream()'s
transfer queues); a recording made before is recorded again before its next submission.

Fresh device memory: the device range of a new "device" tensor holds whatever the pool's
memory held before (another tensor's data, or another manager's). Its handle is `fresh`
until a submitted command buffer wrote it. The ops report their first touch of each
device range (Recorder.touch): a fresh range first read (a dispatch, whose writes are not
known, a download, a copy's source) is zeroed at that point of the command buffer; a
fresh range first overwritten whole (an upload, a copy's destination) needs nothing. The
sequence marks them all written once it submitted (Recording.touched); a recording that
zeroed anything is recorded again, without the zeros, before its next submission (it
would otherwise zero the range again). Recording happens at submission, under the
manager's lock, so freshness is read and changed in submission order.
"""
from __future__ import annotations

from typing import Any

from scopedgpu import _vk
from scopedgpu._pool import Allocation
from scopedgpu._vk import (ACCESS_ALL_GPU, ACCESS_ALL_WRITES, ACCESS_HOST_READ,
                           ACCESS_SHADER_READ, ACCESS_SHADER_WRITE, ACCESS_TRANSFER_READ,
                           ACCESS_TRANSFER_WRITE, STAGE_COMPUTE, STAGE_HOST, STAGE_TRANSFER,
                           STAGES_GPU)

__all__ = ["Recorder", "Use", "record_commands", "STAGE_COMPUTE", "STAGE_TRANSFER",
           "STAGE_HOST"]

# One declared access: (allocation, stage, writes?)
Use = tuple[Allocation, int, bool]

_ACCESS = {STAGE_COMPUTE: (ACCESS_SHADER_READ, ACCESS_SHADER_WRITE),
           STAGE_TRANSFER: (ACCESS_TRANSFER_READ, ACCESS_TRANSFER_WRITE)}


class Recorder:
    """Inserts a barrier before an op whose accesses conflict with earlier ones since the
    last barrier (read after write, write after write, write after read). One global
    memory barrier, to every GPU stage, covers every earlier access for every later
    command, so the state resets after each."""

    def __init__(self, h: Any):
        self.h = h
        # Allocations accessed since the last barrier. An Allocation object stands for
        # its range: two live tensors never share one.
        self.written: set[Any] = set()
        self.read: set[Any] = set()
        self.src_stages = 0
        self.src_access = 0
        # Fresh tensor handles touched by this recording, and whether any was zeroed.
        self.touched: list[Any] = []
        self.zeroed = False
        # Whether it records a dispatch (on a CPU device, the device's compute threads
        # then want every core: see _engine.spin_after).
        self.computes = False

    def touch(self, th: Any, whole_write: bool) -> None:
        """First touch of a fresh device range (th: its tensor's handle, th.fresh true),
        before the op's own use(): zeroes it unless the op overwrites it whole."""
        if th in self.touched:
            return
        self.touched.append(th)
        if not whole_write:
            a = th.gpu
            self.use_fill(a)
            _vk.seq_zero(self.h, a.block.handle, a.offset, a.size)
            self.zeroed = True

    def use(self, uses: list[Use]) -> None:
        gpu = False
        hazard = False
        written = self.written
        read = self.read
        for a, stage, write in uses:
            if a in written or (write and a in read):
                hazard = True
            if stage != STAGE_HOST:
                gpu = True
        if hazard and gpu:
            self.barrier(STAGES_GPU, ACCESS_ALL_GPU)
        for a, stage, write in uses:
            if stage == STAGE_HOST:
                continue
            self.src_stages |= stage
            if write:
                written.add(a)
                self.src_access |= _ACCESS[stage][1]
            else:
                read.add(a)

    def use_copy(self, src: Allocation, dst: Allocation) -> None:
        """use([(src, STAGE_TRANSFER, False), (dst, STAGE_TRANSFER, True)]), the accesses
        of a copy, without the list (the sync ops record one per tensor)."""
        written = self.written
        if src in written or dst in written or dst in self.read:
            self.barrier(STAGES_GPU, ACCESS_ALL_GPU)
        self.src_stages |= STAGE_TRANSFER
        self.read.add(src)
        written.add(dst)
        self.src_access |= ACCESS_TRANSFER_WRITE

    def use_fill(self, a: Allocation) -> None:
        """use([(a, STAGE_TRANSFER, True)]), the access of a fill (a fresh range's zeros),
        without the list."""
        written = self.written
        if a in written or a in self.read:
            self.barrier(STAGES_GPU, ACCESS_ALL_GPU)
        self.src_stages |= STAGE_TRANSFER
        written.add(a)
        self.src_access |= ACCESS_TRANSFER_WRITE

    def use_compute(self, ranges: list[Allocation]) -> None:
        """use([(a, STAGE_COMPUTE, True) for a in ranges]), a dispatch's accesses (every
        bound tensor may be read and written), without the list of tuples."""
        if not ranges:
            return
        written = self.written
        read = self.read
        for a in ranges:
            if a in written or a in read:
                self.barrier(STAGES_GPU, ACCESS_ALL_GPU)
                break
        self.src_stages |= STAGE_COMPUTE
        written.update(ranges)
        self.src_access |= ACCESS_SHADER_WRITE

    def barrier(self, dst_stages: int, dst_access: int) -> None:
        if self.src_stages:
            _vk.seq_barrier(self.h, self.src_stages, self.src_access, dst_stages, dst_access)
        self.written.clear()
        self.read.clear()
        self.src_stages = 0
        self.src_access = 0

    def full_barrier(self) -> None:
        _vk.seq_barrier(self.h, STAGES_GPU, ACCESS_ALL_WRITES, STAGES_GPU, ACCESS_ALL_GPU)
        self.written.clear()
        self.read.clear()
        self.src_stages = 0
        self.src_access = 0

    # -- the commands the ops emit -----------------------------------------------------
    def copy(self, src: Allocation, dst: Allocation, nbytes: int) -> None:
        _vk.seq_copy(self.h, src.block.handle, src.offset, dst.block.handle, dst.offset, nbytes)

    def dispatch(self, program: Any, dset: Any, push: bytes, workgroup: tuple[int, int, int]
                 ) -> None:
        x, y, z = workgroup
        self.computes = True
        _vk.seq_dispatch(self.h, program, dset, push, len(push), x, y, z)


def record_commands(h: Any, ops: list[Any], timestamps: bool, owner: object,
                    lead: bool = True) -> Recorder:
    """Records `ops` (each with record(rec)) into the command buffer h, ending with a
    barrier that orders every command before it before every later command of the queue,
    its writes visible to them and to the host reads that follow the fence; with
    timestamps, one query before and one after each op. `lead`: a barrier before the
    ops as well, making writes that other queues' fences made available visible to the ops
    (once the manager has a sequence on another queue; on one queue, the closing barrier
    of every command buffer submitted before already orders the ops after it: see the
    module's docstring). `owner` (the sequence) names it in an error. Returns the
    recorder (its `touched`, `zeroed` and `computes`)."""
    rc = _vk.seq_begin(h)
    if rc:
        _vk.check(rc, f"recording {owner!r}")
    rec = Recorder(h)
    if lead:
        _vk.seq_barrier(h, STAGES_GPU, ACCESS_ALL_WRITES, STAGES_GPU, ACCESS_ALL_GPU)
    if timestamps:
        _vk.seq_timestamp(h, 0)
    for i, op in enumerate(ops):
        op.record(rec)
        if timestamps:
            _vk.seq_timestamp(h, i + 1)
    # Device writes visible to later commands on the queue and to the host reads that
    # follow the fence.
    _vk.seq_barrier(h, STAGES_GPU, ACCESS_ALL_WRITES, STAGES_GPU | STAGE_HOST,
                    ACCESS_ALL_GPU | ACCESS_HOST_READ)
    rc = _vk.seq_end(h)
    if rc:
        _vk.check(rc, f"recording {owner!r}")
    return rec
