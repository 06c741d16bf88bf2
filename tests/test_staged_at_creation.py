"""A small device tensor made from an array (mgr.tensor, mgr.empty) of ADOPT_MIN bytes and
up copies it straight into its staging range, which is data() from then on (no host array
made first); smaller ones keep a host copy of their own until first used. Either way the
tensor holds a copy: the caller's array, the shared zeros of empty() and other tensors
are never its memory."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu.tensor import ADOPT_MIN


def _adoptable(t: sg.Tensor) -> bool:
    """Whether t's staging range is a range of imported numpy memory (what data() can be)."""
    stage = t.stage_range
    return stage is not None and stage.block.view is not None


@pytest.mark.parametrize("shape,dtype", [((ADOPT_MIN // 4 - 1,), np.float32),
                                         ((ADOPT_MIN // 4,), np.float32),
                                         ((4096,), np.float32),
                                         ((64, 33), np.int32),
                                         ((ADOPT_MIN // 8,), np.uint32)])
def test_tensor_copies_its_array_and_round_trips(mgr, shape, dtype):
    rng = np.random.default_rng(7)
    x = rng.integers(-1000, 1000, size=shape).astype(dtype)
    want = x.copy()
    mgr.tensor(x).destroy()   # the first tensor of a dtype checks it on the general path
    t = mgr.tensor(x)
    # The staging range is data() from creation exactly where the rule says.
    assert t._zero_copy == (t.nbytes >= ADOPT_MIN and _adoptable(t))
    x[...] = 1                      # the caller's array is not the tensor's
    assert not np.shares_memory(t.data(), x)
    np.testing.assert_array_equal(t.data(), want)
    out = mgr.empty(int(np.prod(shape)), dtype)
    assert out._zero_copy == (out.nbytes >= ADOPT_MIN and _adoptable(out))
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([t]))
        seq.record(sg.OpTensorCopy([t, out]))
        seq.record(sg.OpTensorSyncLocal([out]))
        seq.eval()
    np.testing.assert_array_equal(out.data().reshape(shape), want)
    np.testing.assert_array_equal(t.numpy(), want)
    t.destroy()
    out.destroy()


def test_staging_at_creation_where_the_pool_imports_host_memory(mgr):
    """Where the pool's host blocks are imported numpy memory (VK_EXT_external_memory_host:
    lavapipe, NVIDIA), a 16 KiB request's two tensors are data() from creation."""
    pool = mgr._state.pool
    imports = bool(pool.import_align and pool.host_blocks_imported)
    x = np.arange(4096, dtype=np.float32)
    mgr.tensor(x).destroy()   # the first tensor of a dtype checks it on the general path
    with mgr.tensor(x) as t, mgr.empty(4096) as y:
        assert t._zero_copy == imports and y._zero_copy == imports
        assert _adoptable(t) == imports
        np.testing.assert_array_equal(t.data(), x)
        assert not y.data().any() and y.data().flags.writeable


@pytest.mark.parametrize("n", [4096, 16384, 16385, 40000])
def test_empty_tensors_share_no_zeros(mgr, n):
    """empty()'s fast path copies shared read-only zeros (up to 16,384 elements; numpy's
    own zeros above): writing one tensor's data() leaves the zeros, and every later
    empty(), untouched."""
    a = mgr.empty(n)
    b = mgr.empty(n)
    assert a.data().flags.writeable
    a.data()[:] = 5
    assert not b.data().any()
    c = mgr.empty(n)
    assert not c.data().any()
    assert not np.shares_memory(a.data(), b.data())
    small = [mgr.empty(8) for _ in range(2)]
    small[0].data()[:] = 3
    assert not small[1].data().any() and not mgr.empty(8).data().any()
    with mgr.sequence() as seq:      # the device copy of an empty() is zeros too
        seq.eval(sg.OpTensorSyncLocal([c]))
    assert not c.data().any()
    for t in (a, b, c, *small):
        t.destroy()


def test_data_of_a_tensor_staged_at_creation_outlives_it(mgr):
    """data() held past destroy(): the staging range stays the view's until the view goes,
    and no later tensor is given it meanwhile."""
    x = np.arange(4096, dtype=np.float32)
    t = mgr.tensor(x)
    view = t.data()
    t.destroy()
    others = [mgr.tensor(np.full(4096, -1, np.float32)) for _ in range(8)]
    np.testing.assert_array_equal(view, x)
    for o in others:
        assert not np.shares_memory(o.data(), view)
        o.destroy()
    del view
    gc.collect()
    reused = mgr.tensor(np.full(4096, 2, np.float32))
    np.testing.assert_array_equal(reused.data(), 2)
    reused.destroy()
