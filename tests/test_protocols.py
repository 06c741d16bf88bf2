"""The array protocols on Tensor (issue 23): __dlpack__ / __dlpack_device__ and
__array_interface__ export the host copy (data()) without copying and keep its memory
alive as data() views do; mgr.tensor() takes any DLPack or buffer-protocol object and
keeps its dtype and shape. numpy always; PyTorch where it is installed (it is not a test
dependency: those tests skip)."""
from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import scopedgpu as sg

TORCH_SKIP = ("PyTorch is not installed (not a test dependency: PyPI's Linux x86_64 wheel "
              "brings the CUDA libraries, gigabytes, and the CPU-only wheels live on "
              "PyTorch's own index); the numpy tests cover the same protocols")
# numpy 2.1 made DLPack 1.0's versioned capsules (writable imports); before, max_version
# gives the first kind, and np.from_dlpack makes read-only arrays.
VERSIONED = tuple(int(v) for v in np.__version__.split(".")[:2]) >= (2, 1)


class _DLPackOnly:
    """A DLPack producer with no __array__, no buffer protocol and no array interface:
    mgr.tensor() can read it only through DLPack."""

    def __init__(self, arr: np.ndarray, device: tuple[int, int] = (1, 0)):
        self._arr = arr
        self._device = device
        self.exports = 0

    def __dlpack__(self, **kwargs):
        self.exports += 1
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device


def _mult(mgr, a, b, out):
    """out = a * b on the device (the built-in OpMult), synced both ways."""
    mgr.run(sg.OpTensorSyncDevice([a, b]), sg.OpMult([a, b, out]),
            sg.OpTensorSyncLocal([out]))


@pytest.mark.parametrize("kind,n", [("device", 6), ("device", 1 << 18), ("host", 100)])
def test_exports_are_views_of_the_host_copy_across_a_kernel(mgr, kind, n):
    """Inputs written through np.from_dlpack and np.asarray views reach the kernel;
    the result appears in an export of `out` taken before the kernel ran."""
    a = mgr.tensor(np.zeros(n, np.float32), kind=kind)
    b = mgr.tensor(np.zeros(n, np.float32), kind=kind)
    out = mgr.tensor(np.zeros(n, np.float32), kind=kind)
    assert a.__dlpack_device__() == (1, 0)
    va = np.from_dlpack(a)
    vb = np.asarray(b)
    vout = np.from_dlpack(out)
    assert vout.dtype == np.float32 and vout.shape == (n,)
    # numpy before 2.1 makes every DLPack import read-only (the first protocol has no flag)
    assert va.flags.writeable is VERSIONED and vb.flags.writeable
    x = np.arange(n, dtype=np.float32)
    (va if VERSIONED else a.data())[:] = x   # written through the exports...
    vb[:] = 3
    assert np.shares_memory(va, a.data()) and np.shares_memory(vb, b.data())
    np.testing.assert_array_equal(a.data(), x)   # ...seen by data()
    _mult(mgr, a, b, out)
    np.testing.assert_array_equal(vout, x * 3)   # the download landed in the export
    np.testing.assert_array_equal(np.asarray(out), x * 3)
    for t in (a, b, out):
        t.destroy()


def test_array_interface_and_memoryview(mgr):
    """__array_interface__ is data()'s (shape, typestr, the data() array as its buffer);
    a memoryview of an export writes into data()."""
    src = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = mgr.tensor(src)
    face = t.__array_interface__
    assert face["shape"] == (3, 4) and face["typestr"] == np.dtype(np.int32).str
    assert face["data"] is t.data()
    v = np.asarray(t)
    assert v.base is not t and np.shares_memory(v, t.data())
    assert memoryview(np.from_dlpack(t)).readonly is not VERSIONED   # as numpy's own
    m = memoryview(v)
    assert m.format == "i" and m.shape == (3, 4) and not m.readonly
    m[2, 3] = -5
    assert t.data()[2, 3] == -5 and v[2, 3] == -5
    m.release()
    c = np.array(t)          # np.array copies, as numpy() and __array__ do
    c[0, 0] = 99
    assert t.data()[0, 0] == 0
    t.destroy()


class _Capsule:
    """Hands numpy a capsule t.__dlpack__ made with the keywords under test: np.from_dlpack
    takes copy= and device= from numpy 2.1 on, the tensor takes them with every numpy."""

    def __init__(self, t: sg.Tensor, **kwargs):
        self.capsule = t.__dlpack__(**kwargs)
        self.device = t.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_dlpack_keywords_follow_numpy(mgr):
    t = mgr.tensor(np.arange(5, dtype=np.float32))
    c = np.from_dlpack(_Capsule(t, copy=True))
    assert not np.shares_memory(c, t.data())
    np.testing.assert_array_equal(c, np.arange(5, dtype=np.float32))
    shared = np.from_dlpack(_Capsule(t, dl_device=(1, 0), copy=False))
    assert np.shares_memory(shared, t.data())
    cap = t.__dlpack__(max_version=(1, 0))
    assert ("dltensor_versioned" if VERSIONED else '"dltensor"') in repr(cap)
    assert '"dltensor"' in repr(t.__dlpack__())    # a consumer of the first protocol
    del cap, shared
    with pytest.raises(ValueError, match="stream=None"):   # numpy's own: RuntimeError in
        t.__dlpack__(stream=1)                             # 2.4, ValueError before
    with pytest.raises(BufferError, match="device"):
        t.__dlpack__(dl_device=(2, 0))       # CUDA: the host copy is on the CPU
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(5))
    t.destroy()


def test_exports_outlive_destroy_pool_reuse_and_close(mgr):
    """A small device tensor's data() can be a range of a pool block: its exports hold
    that range as data() views do, so tensors made after destroy() do not take it."""
    n = 64
    exports = {"np.from_dlpack": np.from_dlpack, "np.asarray": np.asarray,
               "np.array(copy=False)": lambda t: np.array(t, copy=False)}
    views = {}
    for name, export in exports.items():    # each export alone holds its tensor's memory
        t = mgr.tensor(np.full(n, 7, np.int32))
        views[name] = export(t)
        t.destroy()
        del t
        gc.collect()
        later = [mgr.tensor(np.full(n, 100 + i, np.int32)) for i in range(8)]
        for u in later:
            u.data()          # every new host copy written into its own range
        for u in later:
            u.destroy()
    for name, v in views.items():
        assert (v == 7).all(), f"{name}: the memory went back to the pool: {v[:4]}"
        assert v.flags.writeable is (VERSIONED or name != "np.from_dlpack"), name
    w = views["np.asarray"]
    w[0] = 1                  # still writable
    assert w[0] == 1
    del views, v, w
    # ...and after the manager closed (the fixture's check is skipped by closing it)
    t = mgr.tensor(np.arange(4, dtype=np.float32))
    v, w = np.from_dlpack(t), np.asarray(t)
    mgr.close()
    w[0] = 9
    assert v[0] == 9
    np.testing.assert_array_equal(w, [9, 1, 2, 3])


def test_storage_and_destroyed_tensors_refuse_every_export(mgr):
    s = mgr.tensor(np.ones(4, np.float32), kind="storage")
    exports = (np.from_dlpack, np.asarray, lambda t: t.__dlpack_device__(),
               lambda t: t.__array_interface__, lambda t: t.__dlpack__())
    for export in exports:
        with pytest.raises(sg.ScopedGPUError, match="has no host memory \\(kind 'storage'\\)"):
            export(s)
    s.destroy()
    t = mgr.tensor(np.ones(4, np.float32))
    t.destroy()
    for tensor in (s, t):
        for export in exports:
            with pytest.raises(sg.DestroyedError, match="destroy\\(\\) was called"):
                export(tensor)


def test_tensor_from_a_dlpack_object_keeps_dtype_and_shape(mgr):
    made = []
    for src in (np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 7,
                np.linspace(0, 1, 10, dtype=np.float32).reshape(5, 2),
                np.arange(6, dtype=np.uint32)[::2]):      # strided: copied C-ordered
        obj = _DLPackOnly(src)
        t = mgr.tensor(obj)
        made.append(t)
        assert obj.exports == 1
        assert t.dtype == src.dtype and t.shape == src.shape
        src_before = src.copy()
        src[...] = 0                           # the tensor is a copy, not a view
        back = mgr.tensor(np.zeros(src.shape, src.dtype))
        made.append(back)
        mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorCopy([t, back]),
                sg.OpTensorSyncLocal([back]))
        np.testing.assert_array_equal(back.data(), src_before)
    t = mgr.tensor(_DLPackOnly(np.arange(4, dtype=np.int32)), dtype=np.float32)
    made.append(t)
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.data(), [0, 1, 2, 3])
    u = mgr.tensor(np.from_dlpack(made[0]))    # another tensor's export: a copy
    made.append(u)
    assert not np.shares_memory(u.data(), made[0].data())
    np.testing.assert_array_equal(u.data(), made[0].data())
    with pytest.raises(TypeError, match="OpTensorCopy"):
        mgr.tensor(u)                          # a Tensor itself: as before
    for t in made:
        t.destroy()


def test_tensor_refuses_dlpack_memory_off_the_cpu_naming_the_device(mgr):
    cuda = _DLPackOnly(np.ones(3, np.float32), device=(2, 1))
    with pytest.raises(TypeError, match=r"CUDA memory \(device 1\).*host \(CPU\) memory"):
        mgr.tensor(cuda)
    assert cuda.exports == 0                   # refused before any export
    with pytest.raises(TypeError, match="DLPack device type 99"):
        mgr.tensor(_DLPackOnly(np.ones(3, np.float32), device=(99, 0)))
    assert mgr.live_objects()["tensors"] == 0


def test_tensor_from_buffer_protocol_objects_keeps_dtype_and_shape(mgr):
    grid = ((ctypes.c_int32 * 3) * 2)((1, -2, 3), (4, 5, -6))
    strided = memoryview(np.arange(10, dtype=np.uint32))[::3]
    cases = [(grid, np.int32, (2, 3), [[1, -2, 3], [4, 5, -6]]),
             (strided, np.uint32, (4,), [0, 3, 6, 9]),
             (memoryview(np.ones((2, 2), np.float32)), np.float32, (2, 2), np.ones((2, 2)))]
    made = []
    for obj, dtype, shape, expect in cases:
        t = mgr.tensor(obj)
        made.append(t)
        assert t.dtype == dtype and t.shape == shape
        back = mgr.tensor(np.zeros(shape, dtype))
        made.append(back)
        mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorCopy([t, back]),
                sg.OpTensorSyncLocal([back]))
        np.testing.assert_array_equal(back.data(), expect)
    for t in made:
        t.destroy()


# -- PyTorch (CPU tensors), where installed ---------------------------------------------
def test_torch_from_dlpack_and_asarray_share_the_host_copy(mgr):
    torch = pytest.importorskip("torch", reason=TORCH_SKIP)
    a = mgr.tensor(np.zeros(8, np.float32))
    b = mgr.tensor(np.full(8, 2, np.float32))
    out = mgr.tensor(np.zeros(8, np.float32))
    ta = torch.from_dlpack(a)
    tb = torch.asarray(b)
    tout = torch.from_dlpack(out)
    assert ta.dtype == torch.float32 and tuple(ta.shape) == (8,) and ta.device.type == "cpu"
    assert ta.data_ptr() == a.data().ctypes.data and tb.data_ptr() == b.data().ctypes.data
    ta.copy_(torch.arange(8, dtype=torch.float32))
    np.testing.assert_array_equal(a.data(), np.arange(8))
    _mult(mgr, a, b, out)
    np.testing.assert_array_equal(tout.numpy(), np.arange(8) * 2)
    for t in (a, b, out):
        t.destroy()
    del ta, tb
    gc.collect()
    tout[0] = 5                       # the export outlives the tensor
    assert tout[0].item() == 5


def test_torch_tensors_become_tensors_keeping_dtype_and_shape(mgr):
    torch = pytest.importorskip("torch", reason=TORCH_SKIP)
    made = []
    for src in (torch.arange(12, dtype=torch.int32).reshape(3, 4) - 5,
                torch.arange(12, dtype=torch.float32).reshape(3, 4).t()):  # not contiguous
        t = mgr.tensor(src)
        made.append(t)
        assert t.dtype == np.dtype(str(src.dtype).removeprefix("torch."))
        assert t.shape == tuple(src.shape)
        np.testing.assert_array_equal(t.data(), src.numpy())
    with pytest.raises(TypeError, match="cannot read the Tensor through DLPack"):
        mgr.tensor(torch.ones(3, requires_grad=True))
    for t in made:
        t.destroy()
