"""Fresh device memory reads as zeros (issue 21): the device range of a new tensor never
shows what the pool's memory held before, another tensor's data or another manager's,
whatever reads it first (a kernel, a download, a copy), and is zeroed once only: a kernel
that accumulates across evaluations keeps its sums, and an upload is never undone."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg

ADD_ONE = """#version 450
layout(local_size_x = 64) in;
layout(binding = 0) buffer A { float a[]; };
layout(binding = 1) buffer B { float b[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < a.length()) b[i] = a[i] + 1.0; }"""

ACCUMULATE = """#version 450
layout(local_size_x = 64) in;
layout(binding = 0) buffer A { float a[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < a.length()) a[i] += 1.0; }"""

N = 1024


def _range(t: sg.Tensor) -> tuple[int, int]:
    r = t.gpu_range
    return (id(r.block), r.offset)


class Stale:
    """Leaves n float32 of recognisable data in a device range the pool hands out again
    (`old`); `reused(t)` asserts that t got that range, so that the tests can fail."""

    def __init__(self, mgr: sg.Manager, n: int = N):
        self.old = np.arange(1, n + 1, dtype=np.float32)
        t = mgr.tensor(self.old)
        mgr.run(sg.OpTensorSyncDevice([t]))
        self.where = _range(t)
        t.destroy()

    def reused(self, t: sg.Tensor) -> None:
        assert _range(t) == self.where


def test_a_download_of_a_new_tensor_is_zeros(mgr):
    stale = Stale(mgr)
    t = mgr.tensor(np.full(N, 7, np.float32))   # host data, never synced to the device
    stale.reused(t)
    mgr.run(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), np.zeros(N, np.float32))


def test_empty_is_zero_on_the_device(mgr):
    stale = Stale(mgr)
    t = mgr.empty(N)
    stale.reused(t)
    mgr.run(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), np.zeros(N, np.float32))


def test_a_kernel_reads_zeros_from_a_tensor_never_uploaded(mgr, glsl):
    stale = Stale(mgr)
    a = mgr.tensor(np.full(N, 5, np.float32))   # its upload forgotten
    stale.reused(a)
    b = mgr.tensor(np.full(N, 9, np.float32))
    algo = mgr.algorithm([a, b], glsl(ADD_ONE), workgroup=(N // 64, 1, 1))
    mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([a, b]))
    np.testing.assert_array_equal(a.data(), np.zeros(N, np.float32))
    np.testing.assert_array_equal(b.data(), np.ones(N, np.float32))


def test_a_copy_from_a_new_tensor_is_zeros(mgr):
    stale = Stale(mgr)
    src = mgr.tensor(np.full(N, 3, np.float32))
    stale.reused(src)
    dst = mgr.tensor(np.full(N, 4, np.float32))
    mgr.run(sg.OpTensorSyncDevice([dst]), sg.OpTensorCopy([src, dst]),
            sg.OpTensorSyncLocal([src, dst]))
    np.testing.assert_array_equal(src.data(), np.zeros(N, np.float32))
    np.testing.assert_array_equal(dst.data(), np.zeros(N, np.float32))


def test_an_upload_is_kept_and_zeroing_happens_once(mgr, glsl):
    """The first evaluation zeroes the fresh tensor; later ones (a recording without the
    zeros) accumulate, and an upload from another sequence is not undone."""
    stale = Stale(mgr)
    a = mgr.tensor(np.full(N, 100, np.float32))
    stale.reused(a)
    algo = mgr.algorithm([a], glsl(ACCUMULATE), workgroup=(N // 64, 1, 1))
    with mgr.sequence() as seq:
        seq.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([a]))
        for k in range(1, 4):
            seq.eval()
            np.testing.assert_array_equal(a.data(), np.full(N, k, np.float32))
        a.data()[:] = 50
        mgr.run(sg.OpTensorSyncDevice([a]))
        seq.eval()
        np.testing.assert_array_equal(a.data(), np.full(N, 51, np.float32))


def test_upload_then_download_in_one_sequence(mgr):
    stale = Stale(mgr)
    want = stale.old[::-1].copy()
    t = mgr.tensor(want)
    stale.reused(t)
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), want)


def test_named_sequence_recorded_before_the_upload(mgr, glsl):
    """A sequence recorded while its tensor was fresh, first evaluated after another
    sequence uploaded it: it reads the upload (it is recorded when submitted)."""
    stale = Stale(mgr)
    a = mgr.tensor(np.full(N, 2, np.float32))
    stale.reused(a)
    b = mgr.empty(N)
    algo = mgr.algorithm([a, b], glsl(ADD_ONE), workgroup=(N // 64, 1, 1))
    seq = mgr.sequence("late")
    seq.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([b]))
    mgr.run(sg.OpTensorSyncDevice([a]))
    seq.eval()
    np.testing.assert_array_equal(b.data(), np.full(N, 3, np.float32))
    mgr.delete_sequence("late")


@pytest.mark.parametrize("nbytes_mib", [1, 40])
def test_a_new_manager_never_sees_an_earlier_ones_data(nbytes_mib):
    """Memory another manager freed (the driver need not clear it): small and big tensors."""
    with sg.Manager() as m1:
        n = min(nbytes_mib << 20, m1.device.max_storage_buffer_range) // 4
        old = np.arange(1, n + 1, dtype=np.float32)
        t = m1.tensor(old)
        m1.run(sg.OpTensorSyncDevice([t]))
    with sg.Manager() as m2:
        t = m2.tensor(np.full(n, 6, np.float32))
        m2.run(sg.OpTensorSyncLocal([t]))
        assert int(np.count_nonzero(t.data())) == 0


def test_a_zero_fill_outside_its_block_or_unaligned_is_refused(mgr):
    """sg_seq_zero checks its range against the block and vkCmdFillBuffer's multiples of
    4; the refusal is reported by sg_seq_end, naming it. A valid fill zeroes the range."""
    from scopedgpu._ffi import lib
    from scopedgpu._vk import check

    x = np.arange(1, 65, dtype=np.float32)
    t = mgr.tensor(x)
    mgr.run(sg.OpTensorSyncDevice([t]))
    r = t.gpu_range
    blk = r.block
    with mgr.sequence() as seq:
        h = seq._h
        for off, size in [(r.offset, 0), (blk.size - 128, 256), (blk.size, 4),
                          (2**64 - 16, 32), (r.offset + 2, 8), (r.offset, 6)]:
            assert lib.sg_seq_begin(h) == 0
            lib.sg_seq_zero(h, blk.handle, off, size)
            with pytest.raises(sg.DeviceError, match=r"sg_seq_zero failed with SG_ERR_RANGE"):
                check(lib.sg_seq_end(h), "recording by hand")
    t.data()[:] = 5
    mgr.run(sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), x)   # nothing was submitted
