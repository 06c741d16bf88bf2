"""Issue #9, class 8: the C shim's own checks. Positive VkResults are success codes, not
failures; a timestamps sequence reads only the queries its recording wrote; every offset
and size is checked against its block before Vulkan sees it; a Vulkan function the
loader or driver lacks is a clear error naming it, never a call through NULL."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._vk import check
from scopedgpu._ffi import ffi, lib
from scopedgpu.manager import live_vulkan_objects
from tests import shaders
from tests.conftest import ROOT, source_env


def _needs_timestamps(mgr):
    if not mgr.device.timestamps:
        pytest.skip(f"{mgr.device.name} has no timestamps on its compute queue")


# -- timestamps -----------------------------------------------------------------------------
def test_timestamps_of_a_sequence_recorded_while_it_runs(mgr):
    """Ops recorded while the sequence runs have no timestamps in that run: completing it
    reads the queries it wrote (3), not one per op recorded by then (4); before, that
    asked for a query never written (VK_NOT_READY raised for finished work, and a wait
    that may never end on a stricter driver)."""
    _needs_timestamps(mgr)
    x = np.arange(64, dtype=np.float32)
    a, b = mgr.tensor(x), mgr.empty(64)
    with mgr.sequence(timestamps=True) as seq:
        seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpTensorCopy([a, b]))
        seq.eval_async()
        seq.record(sg.OpTensorSyncLocal([b]))
        assert seq.eval_await() is True
        ts = seq.timestamps()
        assert len(ts) == 3 and ts == sorted(ts)
        seq.eval()   # recorded again: now one more op, one more timestamp
        assert len(seq.timestamps()) == 4
        np.testing.assert_array_equal(b.data(), x)


def test_timestamps_beyond_what_was_written_are_refused(mgr):
    _needs_timestamps(mgr)
    a = mgr.tensor(np.zeros(16, np.float32))
    with mgr.sequence(timestamps=True) as seq:
        seq.eval(sg.OpTensorSyncDevice([a]))
        written = len(seq.timestamps())
        buf = ffi.new("uint64_t[]", 64)
        assert lib.sg_seq_timestamps(seq._h, written, buf) == 0
        assert lib.sg_seq_timestamps(seq._h, written + 1, buf) == lib.SG_ERR_RANGE
        assert ffi.string(lib.sg_last_call()) == b"sg_seq_timestamps"


# -- ranges -----------------------------------------------------------------------------------
def test_a_copy_outside_its_block_is_refused_at_end(mgr):
    """sg_seq_copy checks both ranges against their blocks, to the byte; the refused copy
    is not recorded and sg_seq_end reports it, naming sg_seq_copy. A copy that ends on the
    last byte of its source or destination block is recorded. The sequence records fine
    afterwards. (Nothing recorded by hand here is submitted: a range the check let
    through by mistake touches no memory.)"""
    x = np.arange(64, dtype=np.float32)
    a, b = mgr.tensor(x), mgr.empty(64)
    blk_a, blk_b = a._gpu.block, b._gpu.block
    with mgr.sequence() as seq:
        h = seq._h
        for src_off, dst_off, size in [
                (a._gpu.offset, b._gpu.offset, 0),          # empty copy
                (a._gpu.offset, blk_b.size - 128, 256),     # past the destination's end
                (a._gpu.offset, blk_b.size - 4, 5),         # one byte past it
                (blk_a.size - 4, b._gpu.offset, 5),         # one byte past the source's end
                (blk_a.size, b._gpu.offset, 4),             # source offset at the end
                (a._gpu.offset, 2**64 - 16, 32)]:           # offset + size overflows
            assert lib.sg_seq_begin(h) == 0
            lib.sg_seq_copy(h, blk_a.handle, src_off, blk_b.handle, dst_off, size)
            rc = lib.sg_seq_end(h)
            with pytest.raises(sg.DeviceError, match=r"sg_seq_copy failed with SG_ERR_RANGE "
                                                     r"\(an offset and size that reach outside"):
                check(rc, "recording by hand")
        for src_off, dst_off in [(blk_a.size - 4, b._gpu.offset),     # the last bytes
                                 (a._gpu.offset, blk_b.size - 4)]:
            assert lib.sg_seq_begin(h) == 0
            lib.sg_seq_copy(h, blk_a.handle, src_off, blk_b.handle, dst_off, 4)
            assert lib.sg_seq_end(h) == 0
        seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpTensorCopy([a, b]))
        seq.record(sg.OpTensorSyncLocal([b])).eval()
        np.testing.assert_array_equal(b.data(), x)


def test_a_descriptor_range_outside_its_block_is_refused(mgr, glsl):
    t = mgr.tensor(np.zeros(64, np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    prog = algo._handle.program.handle
    blk = t._gpu.block
    size = blk.size   # the bytes sg_block_create was given
    base = mgr.live_objects()["descriptor_pools"]
    blocks = ffi.new("sg_block *[]", [blk.handle])
    out = ffi.new("sg_dset **")
    # empty; past the end; one byte past it; at the end; overflowing
    for offset, rng in [(t._gpu.offset, 0), (size - 64, 128), (size - 64, 65), (size, 4),
                        (2**64 - 64, 128)]:
        rc = lib.sg_dset_create(mgr._state.dev, prog, 1, blocks, ffi.new("uint64_t[]", [offset]),
                                ffi.new("uint64_t[]", [rng]), out)
        if rc == 0:   # let through: freed before the failure below (a set is only written)
            lib.sg_dset_destroy(out[0])
        with pytest.raises(sg.DeviceError, match="sg_dset_create failed with SG_ERR_RANGE"):
            check(rc, "binding by hand")
        assert mgr.live_objects()["descriptor_pools"] == base   # nothing left behind
    # the whole block is fine
    rc = lib.sg_dset_create(mgr._state.dev, prog, 1, blocks, ffi.new("uint64_t[]", [0]),
                            ffi.new("uint64_t[]", [size]), out)
    assert rc == 0
    lib.sg_dset_destroy(out[0])
    algo.destroy()


def test_push_constants_larger_than_the_program_are_refused(mgr, glsl):
    x, y, o = mgr.tensor([1.0]), mgr.tensor([2.0]), mgr.tensor([0.0])
    algo = mgr.algorithm([x, y, o], glsl(shaders.SAXPY), push_consts=[2.0])   # 4 bytes
    handle = algo._handle
    with mgr.sequence() as seq:
        h = seq._h
        for push in (b"\0" * 8, b"\0" * 2):
            assert lib.sg_seq_begin(h) == 0
            lib.sg_seq_dispatch(h, handle.program.handle, handle.dset, push, len(push), 1, 1, 1)
            with pytest.raises(sg.DeviceError, match="sg_seq_dispatch failed with "
                                                     "SG_ERR_ARGUMENT"):
                check(lib.sg_seq_end(h), "recording by hand")
        seq.record(sg.OpTensorSyncDevice([x, y])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([o])).eval()
        np.testing.assert_array_equal(o.data(), [4.0])
    algo.destroy()


# -- missing Vulkan functions ----------------------------------------------------------------
@pytest.mark.parametrize("name, where", [
    ("vkCmdDispatch", "creating a logical device"),         # device level
    ("vkDestroyDevice", "creating a logical device"),
    ("vkEnumeratePhysicalDevices", "creating a Vulkan instance"),   # instance level
    ("vkGetDeviceProcAddr", "creating a Vulkan instance"),
])
def test_a_missing_vulkan_function_is_named(name, where):
    before = live_vulkan_objects()
    lib.sg_fault_missing(name.encode())
    try:
        with pytest.raises(sg.NoDeviceError, match=rf"{where}.*does not provide {name} "
                                                   r"\(SG_ERR_NO_FUNCTION\)"):
            sg.Manager()
    finally:
        lib.sg_fault_missing(ffi.NULL)
    assert live_vulkan_objects() == before   # what was made is gone
    with sg.Manager() as m:   # and the next manager works
        a = m.tensor([1.0, 2.0])
        m.run(sg.OpTensorSyncDevice([a]), sg.OpMult([a, a, a]), sg.OpTensorSyncLocal([a]))
        np.testing.assert_array_equal(a.data(), [1.0, 4.0])


def _required_functions() -> list[str]:
    """The functions the shim loads for every instance and device (csrc/sg_internal.h)."""
    text = (Path(ROOT) / "csrc" / "sg_internal.h").read_text()
    out = []
    for macro in ("SG_INSTANCE_FUNCS", "SG_DEVICE_FUNCS"):
        body = re.search(rf"#define {macro}\(X\)(.*?)\n\n", text, re.S)
        assert body is not None, macro
        out += re.findall(r"X\((\w+)\)", body.group(1))
    return out


def test_every_required_function_is_checked():
    """Each function the shim loads, missing in turn: NoDeviceError naming it, nothing
    left alive (a call through a NULL pointer would kill the process instead)."""
    names = _required_functions()
    assert len(names) > 40 and "vkCmdDispatch" in names and "vkDestroyInstance" in names
    before = live_vulkan_objects()
    for name in names:
        lib.sg_fault_missing(name.encode())
        try:
            with pytest.raises(sg.NoDeviceError, match=rf"does not provide {name} "):
                sg.Manager()
        finally:
            lib.sg_fault_missing(ffi.NULL)
        assert live_vulkan_objects() == before, name


def test_a_missing_loader_function_is_named():
    """Loader-level functions are loaded once per process: checked in a fresh one."""
    code = (
        "import scopedgpu as sg\n"
        "from scopedgpu._ffi import lib\n"
        "lib.sg_fault_missing(b'vkEnumerateInstanceLayerProperties')\n"
        "try:\n"
        "    sg.Manager()\n"
        "except sg.NoDeviceError as e:\n"
        "    print('NoDeviceError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=source_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NoDeviceError the Vulkan loader could not be loaded (the Vulkan loader has no " \
           "vkEnumerateInstanceLayerProperties)" in out.stdout


# -- destroying a pending sequence ------------------------------------------------------------
PENDING_DESTROY = """
import threading
import numpy as np
import scopedgpu as sg
from scopedgpu import _vk
from scopedgpu._ffi import ffi, lib
from tests.lifetime.endless import FLAG_GLSL, flag_tensor, set_flag

with sg.Manager() as m:
    flag = flag_tensor(m)                       # the dispatch spins until it is set
    one = m.tensor(np.ones(1, np.uint32), kind="host")
    done = m.tensor(np.zeros(1, np.uint32), kind="host")
    spin = m.algorithm([flag], sg.compile_glsl(FLAG_GLSL), workgroup=(65535, 1, 1))
    program, dset = spin.dispatch_handles()
    src, dst = one.gpu_range, done.gpu_range
    out = ffi.new("sg_seq **")
    assert lib.sg_seq_create(m._state.dev, 0, 0, out) == 0
    h = out[0]
    assert lib.sg_seq_begin(h) == 0
    lib.sg_seq_dispatch(h, program, dset, ffi.NULL, 0, 65535, 1, 1)
    lib.sg_seq_barrier(h, _vk.STAGE_COMPUTE, _vk.ACCESS_SHADER_WRITE, _vk.STAGE_TRANSFER,
                       _vk.ACCESS_TRANSFER_READ)
    lib.sg_seq_copy(h, src.block.handle, src.offset, dst.block.handle, dst.offset, 4)
    lib.sg_seq_barrier(h, _vk.STAGE_TRANSFER, _vk.ACCESS_TRANSFER_WRITE, _vk.STAGE_HOST,
                       _vk.ACCESS_HOST_READ)
    assert lib.sg_seq_end(h) == 0
    assert lib.sg_seq_submit(h) == 0
    timer = threading.Timer(0.3, set_flag, (flag,))
    timer.start()
    lib.sg_seq_destroy(h)                       # still pending: waits for it first
    copied = ffi.cast("uint32_t *", dst.address)[0]
    print("destroy returned with the copy", "done" if copied == 1 else "not done", flush=True)
    timer.join()
    m.wait_idle()
    for obj in (spin, flag, one, done):
        obj.destroy()
"""


def test_destroying_a_pending_sequence_waits_for_it():
    """sg_seq_destroy of a submitted sequence waits for its fence before it destroys the
    command pool and the fence (vkDestroyCommandPool: no command buffer of it may be
    pending). The Python layer always waits first, so only a direct call reaches it: a
    dispatch that spins until a timer sets a flag, then a copy that marks the end. In a
    child process: a destroy that does not wait frees a command buffer the device still
    runs."""
    out = subprocess.run([sys.executable, "-c", PENDING_DESTROY], env=source_env(),
                         capture_output=True, text=True, timeout=120)
    assert "destroy returned with the copy done" in out.stdout, (out.stdout, out.stderr[-2000:])
    assert out.returncode == 0, out.stderr[-2000:]


# -- the host copy of stream()'s chunks -----------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 63, 64, 65, 4095, 1 << 20, (1 << 20) + 77])
@pytest.mark.parametrize("dst_off,src_off", [(0, 0), (1, 0), (0, 3), (9, 14), (15, 1)])
def test_copy_large_copies_every_byte_and_nothing_else(n, dst_off, src_off):
    """sg_copy_large (streaming stores on x86-64 from the first 16-byte aligned byte of
    the destination, memcpy for the head and tail): every byte of [dst, dst + n) equals
    the source, at any alignment of either, and the bytes around it are untouched."""
    rng = np.random.default_rng(n + 31 * dst_off + src_off)
    src = rng.integers(0, 256, n + 64, dtype=np.uint8)
    dst = np.full(n + 64, 0xA5, dtype=np.uint8)
    before = dst.copy()
    lib.sg_copy_large(dst.ctypes.data + dst_off, src.ctypes.data + src_off, n)
    assert np.array_equal(dst[dst_off:dst_off + n], src[src_off:src_off + n])
    assert np.array_equal(dst[:dst_off], before[:dst_off])
    assert np.array_equal(dst[dst_off + n:], before[dst_off + n:])
