"""Each error class: a typed exception whose message names the object, and the manager
still usable afterwards."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg
from tests import shaders


def still_usable(mgr):
    a = mgr.tensor([1.0, 2.0, 3.0])
    b = mgr.tensor([2.0, 2.0, 2.0])
    c = mgr.tensor([0.0, 0.0, 0.0])
    mgr.run(sg.OpTensorSyncDevice([a, b]), sg.OpMult([a, b, c]), sg.OpTensorSyncLocal([c]))
    np.testing.assert_array_equal(c.data(), [2.0, 4.0, 6.0])


def test_error_hierarchy():
    assert issubclass(sg.OutOfMemoryError, MemoryError)
    assert issubclass(sg.OutOfMemoryError, sg.DeviceError)
    for cls in (sg.NoDeviceError, sg.DeviceError, sg.OutOfMemoryError, sg.DestroyedError,
                sg.ShaderError, sg.ValidationError):
        assert issubclass(cls, sg.ScopedGPUError)


@pytest.mark.parametrize("spirv, match", [
    (b"", "not SPIR-V"),
    (b"\x00" * 40, "magic number"),
    (b"\x03\x02\x23\x07" + b"\x00" * 15, "not SPIR-V"),
    (b"\x03\x02\x23\x07\x00\x00\x01\x00" + b"\x00" * 12 + b"\xff\xff\xff\x7f", "malformed"),
])
def test_bad_spirv(mgr, spirv, match):
    t = mgr.tensor([1.0])
    with pytest.raises(sg.ShaderError, match=match):
        mgr.algorithm([t], spirv)
    still_usable(mgr)


def test_truncated_and_corrupted_spirv(mgr, glsl):
    good = glsl(shaders.ADD_ONE)
    t = mgr.tensor([1.0])
    with pytest.raises(sg.ShaderError):
        mgr.algorithm([t], good[: len(good) // 2 // 4 * 4])
    with pytest.raises(TypeError, match="bytes"):
        mgr.algorithm([t], "not bytes")
    still_usable(mgr)


def test_binding_count_mismatch(mgr, glsl):
    a, b, c = mgr.tensor([1.0]), mgr.tensor([2.0]), mgr.tensor([3.0])
    spirv = glsl(shaders.TWO_BINDINGS)
    with pytest.raises(sg.ShaderError, match=r"bindings \[0, 1\].*only 1 tensors"):
        mgr.algorithm([a], spirv)
    mgr.algorithm([a, b], spirv).destroy()
    # A tensor for a binding the shader does not declare is bound and skipped.
    mgr.algorithm([a, b, c], spirv).destroy()
    still_usable(mgr)


@pytest.mark.parametrize("workgroup", [(0, 1, 1), (1, 0, 1), (4, 1, 0), (-1,)])
def test_zero_workgroup(mgr, glsl, workgroup):
    t = mgr.tensor([1.0])
    with pytest.raises(ValueError, match="at least 1"):
        mgr.algorithm([t], glsl(shaders.ADD_ONE), workgroup=workgroup)
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    with pytest.raises(ValueError, match="at least 1"):
        sg.OpAlgoDispatch(algo, workgroup=workgroup)
    algo.destroy()
    still_usable(mgr)


def test_oversized_workgroup(mgr, glsl):
    t = mgr.tensor([1.0])
    with pytest.raises(ValueError, match="maxComputeWorkGroupCount"):
        mgr.algorithm([t], glsl(shaders.ADD_ONE), workgroup=(2**32, 1, 1))   # 32-bit ids
    with pytest.raises(sg.ShaderError, match="local size"):
        mgr.algorithm([mgr.tensor(np.zeros(1, np.uint32))], glsl(shaders.INDEX),
                      spec_consts=[mgr.device.max_workgroup_invocations + 1])
    still_usable(mgr)


@pytest.mark.parametrize("dtype", [np.complex64, np.dtype("<U3"), np.object_])
def test_unsupported_dtype(mgr, dtype):
    with pytest.raises(TypeError, match=r"not supported|cannot make"):
        mgr.tensor(np.zeros(4, dtype=dtype))
    still_usable(mgr)


def test_bad_tensor_input(mgr):
    with pytest.raises(ValueError, match="at least one element"):
        mgr.tensor([])
    with pytest.raises(ValueError, match="kind"):
        mgr.tensor([1.0], kind="gpu")
    with pytest.raises(TypeError):
        mgr.tensor(["a", "b"])
    still_usable(mgr)


def test_data_on_storage_tensor(mgr):
    t = mgr.tensor([1.0, 2.0], kind="storage")
    with pytest.raises(sg.ScopedGPUError, match="storage"):
        t.data()
    with pytest.raises(TypeError, match="storage"):
        sg.OpTensorSyncLocal([t])
    with pytest.raises(TypeError, match="storage"):
        sg.OpTensorSyncDevice([t])
    still_usable(mgr)


def test_unknown_sequence_name(mgr):
    mgr.sequence("known")
    with pytest.raises(KeyError, match=r"nope.*known"):
        mgr.delete_sequence("nope")
    mgr.delete_sequence("known")
    still_usable(mgr)


def test_bad_device_choice():
    n = len(sg.devices())
    with pytest.raises(sg.NoDeviceError, match=f"index {n + 5}"):
        sg.Manager(n + 5)
    with pytest.raises(sg.NoDeviceError, match="no-such-gpu"):
        sg.Manager("no-such-gpu")
    with pytest.raises(TypeError):
        sg.Manager(1.5)
    with sg.Manager(0) as m:  # and a right choice still works
        still_usable(m)


def test_bad_push_and_spec_consts(mgr, glsl):
    x, y, o = mgr.tensor([1.0]), mgr.tensor([2.0]), mgr.tensor([0.0])
    with pytest.raises(ValueError, match=r"gives 2 values, but the shader's push-constant "
                                          r"block `\{ float _0; \}` \(4 bytes\) has 1 member"):
        mgr.algorithm([x, y, o], glsl(shaders.SAXPY), push_consts=[1.0, 2.0])
    with pytest.raises(ValueError, match="4 bytes, 8 bytes were given"):
        mgr.algorithm([x, y, o], glsl(shaders.SAXPY),
                      push_consts=np.array([1.0, 2.0], np.float32))
    with pytest.raises(ValueError, match="declares none"):
        mgr.algorithm([x], glsl(shaders.ADD_ONE), push_consts=[1.0])
    with pytest.raises(ValueError, match="specialization constant 2 is not declared"):
        mgr.algorithm([x, o], glsl(shaders.SCALE_SPEC), spec_consts=[1.0, 2, 3])
    with pytest.raises(ValueError, match="64 bits"):
        mgr.algorithm([x, o], glsl(shaders.SCALE_SPEC), spec_consts=np.array([1.0]))
    still_usable(mgr)


def test_wrong_objects_in_ops(mgr):
    with pytest.raises(TypeError, match="Tensor"):
        sg.OpTensorSyncDevice([np.zeros(3)])
    with pytest.raises(TypeError, match="Algorithm"):
        sg.OpAlgoDispatch("algo")
    a = mgr.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="bytes"):
        sg.OpTensorCopy([a, mgr.tensor([1.0])])
    with pytest.raises(ValueError, match="same dtype and size"):
        sg.OpMult([a, a, mgr.tensor([1.0])])
    with pytest.raises(TypeError, match="record"):
        mgr.sequence().record("op")
    with pytest.raises(ValueError, match="queue"):
        mgr.sequence(queue=99)
    still_usable(mgr)


def test_objects_of_another_manager(mgr):
    with sg.Manager() as other:
        foreign = other.tensor([1.0, 2.0])
        mine = mgr.tensor([1.0, 2.0])
        with pytest.raises(ValueError, match="another manager"):
            mgr.sequence().record(sg.OpTensorCopy([foreign, mine]))
    still_usable(mgr)


def test_memory_limit_gives_out_of_memory():
    with sg.Manager(memory_limit=4 << 20) as m:
        keep = [m.tensor(np.zeros(256 << 10, dtype=np.uint8))]  # 256 KiB + staging
        with pytest.raises(sg.OutOfMemoryError, match="memory limit") as info:
            m.tensor(np.zeros(8 << 20, dtype=np.uint8))
        assert isinstance(info.value, MemoryError)
        still_usable(m)
        keep.clear()
    with pytest.raises(ValueError):
        sg.Manager(memory_limit=0)


def test_validation_error_is_raised_in_debug_mode():
    """With validation on, misuse that the layer catches raises ValidationError from the
    call that caused it: here a barrier whose access mask does not fit its stage, recorded
    through the shim directly (the public API never records one)."""
    from scopedgpu._ffi import lib
    with sg.Manager(debug=True) as m:
        if not m.debug:
            pytest.skip("the Khronos validation layer is not installed")
        seq = m.sequence()
        h = seq._h
        lib.sg_seq_begin(h)
        # compute-shader stage with a host-read access: VUID-vkCmdPipelineBarrier-srcAccessMask
        lib.sg_seq_barrier(h, 0x800, 0x2000, 0x800, 0x20)
        lib.sg_seq_end(h)
        with pytest.raises(sg.ValidationError, match="srcAccessMask"):
            m._state.check_validation("recording by hand")
        seq.destroy()
        still_usable(m)
