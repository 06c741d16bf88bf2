"""Operations recorded into sequences. Ops refer to tensors and algorithms; they never own
them. The barriers between dependent operations are inserted by the sequence's recorder
from the accesses each op declares."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence as Seq

import numpy as np

from scopedgpu._ffi import lib
from scopedgpu.algorithm import Algorithm, encode_push_consts
from scopedgpu.tensor import Tensor

if TYPE_CHECKING:
    from scopedgpu._pool import Allocation
    from scopedgpu.sequence import Sequence, _Recorder

__all__ = ["Op", "OpTensorSyncDevice", "OpTensorSyncLocal", "OpAlgoDispatch", "OpTensorCopy",
           "OpMult", "OpMemoryBarrier"]

# VkPipelineStageFlagBits / VkAccessFlagBits used by the recorder
STAGE_COMPUTE = 0x800
STAGE_TRANSFER = 0x1000
STAGE_HOST = 0x4000
ACCESS_SHADER_READ = 0x20
ACCESS_SHADER_WRITE = 0x40
ACCESS_TRANSFER_READ = 0x800
ACCESS_TRANSFER_WRITE = 0x1000
ACCESS_HOST_READ = 0x2000

# One declared access: (allocation, stage, writes?)
Use = tuple["Allocation", int, bool]


def _tensor_list(tensors: Any, what: str, min_count: int = 1) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    try:
        out = list(tensors)
    except TypeError:
        raise TypeError(f"{what} takes a list of tensors, not {tensors!r}") from None
    for i, t in enumerate(out):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: item {i} is a {type(t).__name__}, not a Tensor")
    if len(out) < min_count:
        raise ValueError(f"{what} needs at least {min_count} tensor(s), got {len(out)}")
    return out


class Op:
    """Base class. Subclasses declare what they touch; the sequence does the rest."""

    def _objects(self) -> Iterable[Any]:
        """Tensors and algorithms that must be alive when the sequence is evaluated."""
        return ()

    def _bind(self, seq: Sequence) -> Op:
        """Checks the op against the sequence's manager at record() time; returns the op
        whose commands the sequence records (itself, or one built for this sequence)."""
        mgr = seq._mgr
        for obj in self._objects():
            if obj._destroyed:
                obj._check()
            if obj._mgr is not mgr:
                raise ValueError(f"{type(self).__name__}: {obj!r} belongs to another manager")
        return self

    def _record(self, rec: _Recorder) -> None:
        """Emits the op's GPU commands."""

    def _pre(self) -> None:
        """Host work before submission."""

    def _host_read(self) -> Iterable[Tensor]:
        """Tensors whose host data is refreshed from their host-visible memory once the
        sequence's fence signalled."""
        return ()

    def _host_written(self) -> Iterable[Tensor]:
        """Tensors whose host-visible memory _pre() writes."""
        return ()


class OpTensorSyncDevice(Op):
    """Copies each tensor's host data (data()) to its device memory."""

    def __init__(self, tensors: Seq[Tensor]):
        self.tensors = _tensor_list(tensors, "OpTensorSyncDevice")
        for t in self.tensors:
            if t.kind == "storage":
                raise TypeError(f"OpTensorSyncDevice: {t!r} is a storage tensor, which has no "
                                "host data to sync; copy from a device tensor with OpTensorCopy")

    def _objects(self):
        return self.tensors

    def _record(self, rec):
        for t in self.tensors:
            if t.kind == "device":
                rec.use([(t._stage, STAGE_TRANSFER, False), (t._gpu, STAGE_TRANSFER, True)])
                lib.sg_seq_copy(rec.h, t._stage.block.handle, t._stage.offset,
                                t._gpu.block.handle, t._gpu.offset, t.nbytes)
            else:  # host tensor: the host write before submission is all it takes
                rec.use([(t._gpu, STAGE_HOST, True)])

    def _pre(self):
        for t in self.tensors:
            t._to_mapped()

    def _host_written(self):
        return self.tensors


class OpTensorSyncLocal(Op):
    """Copies each tensor's device memory to its host data (data())."""

    def __init__(self, tensors: Seq[Tensor]):
        self.tensors = _tensor_list(tensors, "OpTensorSyncLocal")
        for t in self.tensors:
            if t.kind == "storage":
                raise TypeError(f"OpTensorSyncLocal: {t!r} is a storage tensor, which has no "
                                "host data; copy it into a device tensor with OpTensorCopy")

    def _objects(self):
        return self.tensors

    def _record(self, rec):
        for t in self.tensors:
            if t.kind == "device":
                rec.use([(t._gpu, STAGE_TRANSFER, False), (t._stage, STAGE_TRANSFER, True)])
                lib.sg_seq_copy(rec.h, t._gpu.block.handle, t._gpu.offset,
                                t._stage.block.handle, t._stage.offset, t.nbytes)
            else:
                rec.use([(t._gpu, STAGE_HOST, False)])

    def _host_read(self):
        return self.tensors


class OpTensorCopy(Op):
    """Copies the device memory of the first tensor into each of the others (same byte
    size). Host data is not touched: sync the destinations to read them."""

    def __init__(self, tensors: Seq[Tensor]):
        self.tensors = _tensor_list(tensors, "OpTensorCopy", 2)
        src = self.tensors[0]
        for t in self.tensors[1:]:
            if t.nbytes != src.nbytes:
                raise ValueError(f"OpTensorCopy: {t!r} has {t.nbytes} bytes, the source "
                                 f"{src!r} has {src.nbytes}")
            if t is src:
                raise ValueError("OpTensorCopy: a tensor cannot be copied onto itself")

    def _objects(self):
        return self.tensors

    def _record(self, rec):
        src = self.tensors[0]
        for dst in self.tensors[1:]:
            rec.use([(src._gpu, STAGE_TRANSFER, False), (dst._gpu, STAGE_TRANSFER, True)])
            lib.sg_seq_copy(rec.h, src._gpu.block.handle, src._gpu.offset,
                            dst._gpu.block.handle, dst._gpu.offset, src.nbytes)


class OpAlgoDispatch(Op):
    """Dispatches an algorithm; `push_consts` and `workgroup` override the algorithm's."""

    def __init__(self, algorithm: Algorithm, push_consts: Any = None,
                 workgroup: Seq[int] | None = None):
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"OpAlgoDispatch takes an Algorithm, not {type(algorithm).__name__}")
        if algorithm._destroyed:
            algorithm._check()
        self.algorithm = algorithm
        self._objs = (algorithm, *algorithm._tensors)
        if push_consts is None and workgroup is None:   # the common case, kept cheap
            self._push = algorithm._push
            self._workgroup = algorithm._workgroup
            return
        what = f"OpAlgoDispatch({algorithm!r})"
        push = encode_push_consts(push_consts, what)
        self._push = algorithm._check_push(push, what) if push else algorithm._push
        self._workgroup = (algorithm._workgroup if workgroup is None else
                           algorithm.check_workgroup(
                               workgroup, algorithm._tensors, what,
                               algorithm.manager._state.info.max_workgroup_count))

    def _objects(self):
        return self._objs

    def _record(self, rec):
        algo = self.algorithm
        rec.use([(t._gpu, STAGE_COMPUTE, True) for t in algo._tensors])
        handle = algo._handle  # a live algorithm: eval checked _objects() first
        x, y, z = self._workgroup
        lib.sg_seq_dispatch(rec.h, handle.program.handle, handle.dset, self._push,
                            len(self._push), x, y, z)


def elementwise_groups(n: int, limit: int = 65535) -> tuple[int, int, int]:
    """The grid of the built-in vectorised grid-stride shaders (256 invocations a group,
    4 elements an invocation): one pass over n elements where it fits, never more than
    65535 groups (every device's guaranteed maxComputeWorkGroupCount) or `limit`."""
    return (max(1, min(-(-n // 1024), 65535, limit)), 1, 1)


class OpMult(Op):
    """out = a * b elementwise, by a built-in shader (float32, int32 or uint32; all three
    tensors of one dtype and size)."""
    _SHADERS = {np.dtype(np.float32): "mult_f32", np.dtype(np.int32): "mult_i32",
                np.dtype(np.uint32): "mult_u32"}

    def __init__(self, tensors: Seq[Tensor]):
        self.tensors = _tensor_list(tensors, "OpMult", 3)
        if len(self.tensors) != 3:
            raise ValueError(f"OpMult takes [a, b, out], got {len(self.tensors)} tensors")
        a = self.tensors[0]
        for t in self.tensors:
            if t.dtype != a.dtype or t.size != a.size:
                raise ValueError(f"OpMult: all tensors need the same dtype and size; {t!r} "
                                 f"differs from {a!r}")
        if a.dtype not in self._SHADERS:
            raise TypeError(f"OpMult supports float32, int32 and uint32, not {a.dtype}")

    def _objects(self):
        return self.tensors

    def _bind(self, seq):
        """Builds this sequence's dispatch of the built-in shader; the sequence owns the
        algorithm and destroys it with itself (the pipeline stays cached)."""
        super()._bind(seq)
        from scopedgpu._shaders import builtin_spirv
        spirv = builtin_spirv(self._SHADERS[self.tensors[0].dtype])
        limit = seq.manager.device.max_workgroup_count[0]
        algo = seq.manager.algorithm(self.tensors, spirv,
                                     workgroup=elementwise_groups(self.tensors[0].size, limit))
        seq._own(algo)
        return OpAlgoDispatch(algo)


class OpMemoryBarrier(Op):
    """A full memory barrier for the given tensors (scopedgpu already orders dependent ops;
    this exists for kp compatibility and for ordering through memory it cannot see)."""

    def __init__(self, tensors: Seq[Tensor], *args: Any, **kwargs: Any):
        self.tensors = _tensor_list(tensors, "OpMemoryBarrier")

    def _objects(self):
        return self.tensors

    def _record(self, rec):
        rec.full_barrier()
