"""Manager.pinned(): arrays imported once, streamed by DMA alone. Results against numpy,
arrays cut into several imports, views that start and end mid-page, the release waiting
for a stream that uses them, close() freeing what is still pinned, a device that cannot
import, and bad input. (Cut at every line: tests/lifetime/test_interrupts.py.)"""
from __future__ import annotations

import copy
import gc
import threading

import numpy as np
import pytest

import scopedgpu as sg
import scopedgpu.pinned as spn
import scopedgpu.stream as sst
from scopedgpu._pool import aligned_empty
from scopedgpu._shaders import builtin_spirv
from tests.test_stream import REFUSED_DTYPES, _array_of, stream_unaligned_views

SAXPY = builtin_spirv("saxpy")      # binding 0: x, binding 1: y; y = a * x + y


@pytest.fixture
def streams(monkeypatch):
    """The Streamer of every stream() call, to read how its chunks reached the device."""
    seen: list[sst.Streamer] = []
    orig = sst.Streamer.run

    def run(self):
        seen.append(self)
        return orig(self)

    monkeypatch.setattr(sst.Streamer, "run", run)
    return seen


def counts(mgr):
    mgr.empty_cache()
    return mgr.live_objects()


@pytest.mark.parametrize("piece", [spn.PIECE_BYTES, 1 << 16, 12288])
def test_pinned_arrays_are_streamed_by_dma_alone(mgr, streams, monkeypatch, piece):
    # piece: one import per array, or many, so that chunks straddle two imports
    monkeypatch.setattr(spn, "PIECE_BYTES", piece)
    rng = np.random.default_rng(piece)
    n = 250_007
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    ref = np.float32(1.5) * x + y
    base = counts(mgr)
    with mgr.pinned(x, y) as p:
        assert p.unpinned == {} and p.pinned_bytes >= x.nbytes + y.nbytes
        held = counts(mgr)
        assert held["pinned"] == base["pinned"] + 1
        # one block (memory and buffer) per import
        assert held["memory_blocks"] - base["memory_blocks"] >= 2 * max(1, x.nbytes // piece)
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.5], chunk_bytes=40_000)
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    s = streams[-1]
    assert (s.pinned, s.staged, s.imported) == (2 * s.nchunks, 0, 0)
    assert counts(mgr) == base
    assert p.destroyed and "destroyed" in repr(p)


def test_unaligned_views_pinned_are_read_and_written_exactly(mgr, streams, monkeypatch):
    monkeypatch.setattr(spn, "PIECE_BYTES", 1 << 16)
    stream_unaligned_views(mgr, 30_000, around=mgr.pinned)
    assert streams[-1].staged == 0 and streams[-1].pinned > 0


def test_arrays_on_import_boundaries_are_found_whole(mgr, streams):
    """Arrays that start and end exactly on the import alignment (as aligned_empty makes
    them; a view then starts where its region starts, or ends where it ends): the region
    look-up finds every view of them, the first chunk and the last one included, and every
    chunk goes by DMA. (Found off by one at either end, those chunks went through staging
    with the right result, which no other test saw.)"""
    align = mgr._state.pool.import_align
    if not align:
        pytest.skip(f"{mgr.device.name} cannot import host memory")
    n = 4 * align // 4                   # four alignments of float32
    x = aligned_empty((n,), np.float32, align)
    y = aligned_empty((n,), np.float32, align)
    x[:] = np.arange(n, dtype=np.float32)
    y[:] = 1.0
    assert x.ctypes.data % align == 0 and y.ctypes.data % align == 0
    with mgr.pinned(x, y) as p:
        assert p.unpinned == {} and p.pinned_bytes == x.nbytes + y.nbytes
        for name, view in [("x", x), ("x[:1]", x[:1]), ("x[-1:]", x[-1:]), ("y", y),
                           ("y[:1]", y[:1]), ("y[-1:]", y[-1:])]:
            assert p.copies(view) is not None, f"{name} is not found in its pinned region"
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0], chunk_bytes=align)
    np.testing.assert_array_equal(y, 2 * np.arange(n, dtype=np.float32) + 1)
    s = streams[-1]
    assert (s.pinned, s.staged, s.imported) == (2 * s.nchunks, 0, 0)


def test_arrays_not_wholly_pinned_are_copied(mgr, streams):
    x = np.arange(50_000, dtype=np.float32)
    y = np.ones(50_000, dtype=np.float32)
    with mgr.pinned(x[:1000]) as p:      # part of x only; y not at all
        assert p.pinned_bytes > 0
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0], chunk_bytes=1 << 14)
    np.testing.assert_array_equal(y, 2 * x + 1)
    assert streams[-1].pinned == 0 and streams[-1].staged == 2 * streams[-1].nchunks


def test_a_destroyed_pin_is_not_used(mgr, streams):
    x = np.arange(20_000, dtype=np.float32)
    y = np.ones(20_000, dtype=np.float32)
    p = mgr.pinned(x, y)
    p.destroy()
    p.destroy()                          # idempotent
    assert p.destroyed
    mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0], chunk_bytes=1 << 14)
    np.testing.assert_array_equal(y, 2 * x + 1)
    assert streams[-1].pinned == 0


def test_release_waits_for_the_stream_that_uses_the_arrays(mgr, streams, monkeypatch):
    started, go = threading.Event(), threading.Event()
    orig = sst.Streamer._loop

    def loop(self):
        started.set()
        assert go.wait(30)
        orig(self)

    monkeypatch.setattr(sst.Streamer, "_loop", loop)
    x = np.arange(60_000, dtype=np.float32)
    y = np.ones(60_000, dtype=np.float32)
    errors: list[BaseException] = []
    p = mgr.pinned(x, y)

    def work():
        try:
            mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[3.0],
                       chunk_bytes=1 << 14)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=work)
    t.start()
    assert started.wait(30)
    r = threading.Thread(target=p.destroy)
    r.start()
    r.join(0.3)
    assert r.is_alive() and not mgr.closed     # waiting for the stream
    go.set()
    t.join(30)
    r.join(30)
    assert not t.is_alive() and not r.is_alive() and errors == []
    np.testing.assert_array_equal(y, 3 * x + 1)
    assert streams[-1].pinned == 2 * streams[-1].nchunks
    assert mgr.live_objects()["pinned"] == 0


def test_close_frees_what_is_still_pinned():
    before = sg.live_vulkan_objects()
    x = np.arange(10_000, dtype=np.float32)
    y = np.ones(10_000, dtype=np.float32)
    m = sg.Manager()
    p = m.pinned(x, y)
    assert p.pinned_bytes > 0
    m.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0])
    m.close()
    assert sg.live_vulkan_objects() == before
    assert p.destroyed
    p.destroy()                          # a no-op now
    np.testing.assert_array_equal(y, 2 * x + 1)
    y += 1                               # the arrays are the user's, as before
    np.testing.assert_array_equal(y, 2 * x + 2)


def test_a_dropped_pin_is_freed_by_the_collector(mgr):
    x = np.arange(20_000, dtype=np.float32)
    base = counts(mgr)
    p = mgr.pinned(x)
    assert counts(mgr)["memory_blocks"] > base["memory_blocks"]
    del p
    gc.collect()
    assert counts(mgr) == base
    np.testing.assert_array_equal(x, np.arange(20_000, dtype=np.float32))


def test_a_pin_is_not_copied_and_not_reentered_after_destroy(mgr):
    p = mgr.pinned(np.ones(16, np.float32))
    with pytest.raises(TypeError, match=r"mgr\.pinned"):
        copy.copy(p)
    p.destroy()
    with pytest.raises(sg.DestroyedError):
        with p:
            pass


def test_a_device_that_cannot_import_pins_nothing(mgr, streams, monkeypatch):
    monkeypatch.setattr(mgr._state.pool, "import_align", 0)
    x = np.arange(20_000, dtype=np.float32)
    y = np.ones(20_000, dtype=np.float32)
    base = counts(mgr)
    with mgr.pinned(x, y) as p:
        assert p.pinned_bytes == 0
        assert sorted(p.unpinned) == [0, 1] and "cannot import" in p.unpinned[0]
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.0], chunk_bytes=1 << 14)
    np.testing.assert_array_equal(y, 2 * x + 1)
    assert streams[-1].pinned == 0 and streams[-1].staged > 0
    assert counts(mgr) == base


@pytest.mark.parametrize("dtype", REFUSED_DTYPES, ids=str)
def test_dtypes_tensor_refuses_pinned_refuses(mgr, dtype):
    """pinned() applies tensor()'s dtype rule (once it imported a big-endian, complex,
    or string array for stream() to rewrite bytewise), with tensor()'s message."""
    bad = _array_of(dtype, 64)
    with pytest.raises(TypeError) as by_tensor:
        mgr.tensor(bad)
    base = counts(mgr)
    with pytest.raises(TypeError) as by_pinned:
        mgr.pinned(np.ones(64, np.float32), bad)
    assert str(by_pinned.value) == f"pinned(): argument 1: {by_tensor.value}"
    assert counts(mgr) == base


def test_bad_arguments(mgr):
    x = np.ones(64, np.float32)
    base = counts(mgr)
    with pytest.raises(TypeError, match="argument 1 must be a numpy array"):
        mgr.pinned(x, [1.0, 2.0])
    with pytest.raises(ValueError, match="C-contiguous"):
        mgr.pinned(x[::2])
    assert counts(mgr) == base
    m = sg.Manager()
    m.close()
    with pytest.raises(sg.DestroyedError):
        m.pinned(x)


@pytest.mark.parametrize("dtype", [object, "U4", "S4", "V4", "datetime64[s]",
                                   "timedelta64[s]", [("a", "<f4"), ("b", "<i4")], ">f4",
                                   np.complex64])
def test_a_dtype_tensor_refuses_is_refused(mgr, dtype):
    """pinned() took object arrays (a stream then failed in numpy's "Cannot change
    data-type for array of references", or wrote floats over the references), strings,
    datetimes, records and big-endian data: it applies tensor()'s dtype rule and imports
    nothing. (bool is taken: one byte of 0 or 1, see test_bool.py.)"""
    good = np.ones(64, np.float32)
    bad = np.zeros(64, dtype=dtype)
    base = counts(mgr)
    with pytest.raises(TypeError, match=r"pinned\(\): argument 1: dtype .*(not supported by "
                                        r"scopedgpu; use one of float32|big-endian)"):
        mgr.pinned(good, bad)
    assert counts(mgr) == base
