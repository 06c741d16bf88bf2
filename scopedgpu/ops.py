"""Operations recorded into sequences. Ops refer to tensors and algorithms; they never own
them. The barriers between dependent operations are inserted by the sequence's recorder
from the accesses each op declares."""
from __future__ import annotations

from typing import Any, Iterable, Protocol, Sequence as Seq

import numpy as np

from scopedgpu._base import all_bindable
from scopedgpu._record import STAGE_HOST, Recorder
from scopedgpu._shaders import builtin_spirv
from scopedgpu.algorithm import Algorithm
from scopedgpu.tensor import Tensor

__all__ = ["Op", "OpTensorSyncDevice", "OpTensorSyncLocal", "OpAlgoDispatch", "OpTensorCopy",
           "OpMult", "OpMemoryBarrier"]



class Recording(Protocol):
    """What an op's bind() needs of the sequence it is recorded into."""
    @property
    def manager(self) -> Any: ...
    def own(self, algo: Algorithm) -> None: ...


def _tensor_list(tensors: Any, what: str, min_count: int = 1) -> list[Tensor]:
    if type(tensors) is list and len(tensors) >= min_count:
        # The common case (a list of tensors) in one pass; anything else is checked and
        # refused below as before.
        for t in tensors:
            if type(t) is not Tensor:
                break
        else:
            return list(tensors)
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

    def objects(self) -> Iterable[Any]:
        """Tensors and algorithms that must be alive when the sequence is evaluated
        (package-internal, like the other methods below)."""
        return ()

    def bind(self, seq: Recording) -> Op:
        """Checks the op against the sequence's manager at record() time; returns the op
        whose commands the sequence records (itself, or one built for this sequence;
        package-internal)."""
        mgr = seq.manager
        objs = self.objects()
        if type(self) in _CHILD_OPS and all_bindable(objs, mgr):
            return self   # (the ops of this module hold tensors and algorithms only)
        for obj in objs:
            obj.check_alive()
            if obj.manager is not mgr:
                raise ValueError(f"{type(self).__name__}: {obj!r} belongs to another manager")
        return self

    def record(self, rec: Recorder) -> None:
        """Emits the op's GPU commands (package-internal)."""

    def pre_submit(self) -> None:
        """Host work before submission (package-internal)."""

    def host_read(self) -> Iterable[Tensor]:
        """Tensors whose host data is refreshed from their host-visible memory once the
        sequence's fence signalled (package-internal)."""
        return ()

    def host_written(self) -> Iterable[Tensor]:
        """Tensors whose host-visible memory pre_submit() writes (package-internal)."""
        return ()


class OpTensorSyncDevice(Op):
    """Copies each tensor's host data (data()) to its device memory."""

    def __init__(self, tensors: Seq[Tensor]):
        self.tensors = _tensor_list(tensors, "OpTensorSyncDevice")
        for t in self.tensors:
            if t.kind == "storage":
                raise TypeError(f"OpTensorSyncDevice: {t!r} is a storage tensor, which has no "
                                "host data to sync; copy from a device tensor with OpTensorCopy")

    def objects(self):
        return self.tensors

    def record(self, rec):
        for t in self.tensors:
            gpu = t.gpu_range
            if t.kind == "device":
                stage = t.stage_range
                th = t.ranges
                if th.fresh:
                    rec.touch(th, True)
                rec.use_copy(stage, gpu)
                rec.copy(stage, gpu, t.nbytes)
            else:  # host tensor: the host write before submission is all it takes
                rec.use([(gpu, STAGE_HOST, True)])

    def pre_submit(self):
        for t in self.tensors:
            t.write_mapped()

    def host_written(self):
        return self.tensors


class OpTensorSyncLocal(Op):
    """Copies each tensor's device memory to its host data (data())."""

    def __init__(self, tensors: Seq[Tensor]):
        self.tensors = _tensor_list(tensors, "OpTensorSyncLocal")
        for t in self.tensors:
            if t.kind == "storage":
                raise TypeError(f"OpTensorSyncLocal: {t!r} is a storage tensor, which has no "
                                "host data; copy it into a device tensor with OpTensorCopy")

    def objects(self):
        return self.tensors

    def record(self, rec):
        for t in self.tensors:
            gpu = t.gpu_range
            if t.kind == "device":
                stage = t.stage_range
                th = t.ranges
                if th.fresh:
                    rec.touch(th, False)
                rec.use_copy(gpu, stage)
                rec.copy(gpu, stage, t.nbytes)
            else:
                rec.use([(gpu, STAGE_HOST, False)])

    def host_read(self):
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

    def objects(self):
        return self.tensors

    def record(self, rec):
        src = self.tensors[0]
        a = src.gpu_range
        if src.ranges.fresh:
            rec.touch(src.ranges, False)
        for dst in self.tensors[1:]:
            b = dst.gpu_range
            if dst.ranges.fresh:
                rec.touch(dst.ranges, True)
            rec.use_copy(a, b)
            rec.copy(a, b, src.nbytes)


class OpAlgoDispatch(Op):
    """Dispatches an algorithm; `push_consts` and `workgroup` override the algorithm's."""

    def __init__(self, algorithm: Algorithm, push_consts: Any = None,
                 workgroup: Seq[int] | None = None):
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"OpAlgoDispatch takes an Algorithm, not {type(algorithm).__name__}")
        algorithm.check_alive()
        self.algorithm = algorithm
        bound = algorithm.bound
        self._objs = (algorithm, *bound)
        if push_consts is None and workgroup is None:   # the common case, kept cheap
            self.push, self.workgroup, self.parts = algorithm.dispatch_defaults
            return
        what = f"OpAlgoDispatch({algorithm!r})"
        self.push = algorithm.encode_push(push_consts, what)
        self.workgroup = (algorithm.workgroup if workgroup is None else
                          algorithm.check_workgroup(workgroup, bound, what,
                                                    algorithm.max_workgroup_count))
        # Beyond the device's maxComputeWorkGroupCount: several dispatches, each pushing
        # its base (scopedgpu/_spirv_split.py), recorded as this one op.
        self.parts = algorithm.split_parts(self.push, self.workgroup, what)

    def objects(self):
        return self._objs

    def record(self, rec):
        algo = self.algorithm
        for t in algo.bound:
            th = t.ranges
            if th.fresh:   # (its writes are not known: zeroed first)
                rec.touch(th, False)
        rec.use_compute(algo.bound_ranges)
        # a live algorithm: eval checked objects() first
        program, dset = algo.dispatch_handles()
        if self.parts is None:
            rec.dispatch(program, dset, self.push, self.workgroup)
            return
        # The parts are one dispatch's invocations: no barrier between them, and the
        # barriers before and after as for one dispatch (the use() above).
        program = algo.split_handle()
        for push, counts in self.parts:
            rec.dispatch(program, dset, push, counts)


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

    def objects(self):
        return self.tensors

    def bind(self, seq):
        """Builds this sequence's dispatch of the built-in shader; the sequence owns the
        algorithm and destroys it with itself (the pipeline stays cached;
        package-internal)."""
        super().bind(seq)
        spirv = builtin_spirv(self._SHADERS[self.tensors[0].dtype])
        limit = seq.manager.device.max_workgroup_count[0]
        algo = seq.manager.algorithm(self.tensors, spirv,
                                     workgroup=elementwise_groups(self.tensors[0].size, limit))
        seq.own(algo)
        return OpAlgoDispatch(algo)


class OpMemoryBarrier(Op):
    """A full memory barrier for the given tensors (scopedgpu already orders dependent ops;
    this exists for kp compatibility and for ordering through memory it cannot see)."""

    def __init__(self, tensors: Seq[Tensor], *args: Any, **kwargs: Any):
        self.tensors = _tensor_list(tensors, "OpMemoryBarrier")

    def objects(self):
        return self.tensors

    def record(self, rec):
        rec.full_barrier()


# The ops whose objects() are tensors and algorithms only (checked at construction), for
# Op.bind's one-call check; a subclass elsewhere takes the general loop.
_CHILD_OPS = frozenset({OpTensorSyncDevice, OpTensorSyncLocal, OpTensorCopy, OpAlgoDispatch,
                        OpMult, OpMemoryBarrier})
