"""Issue #9, class 7: what a user passes is checked, and a wrong value raises a typed error
(ShaderError, ValueError, TypeError) naming the object, the value and the limit, instead
of zeros from the GPU, a bare OverflowError, or a silent misreading."""
from __future__ import annotations

import logging
import math

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._ffi import lib
from scopedgpu._spirv import reflect
from scopedgpu.manager import live_vulkan_objects
from tests import shaders
from tests.conftest import needs_glsl_compiler

# Shared memory sized by a specialization constant: one compile serves every size.
SHARED = """
#version 450
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint N = 64;
shared float tile[N];
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() {
    uint l = gl_LocalInvocationID.x;
    tile[(N - 1) - l] = a[gl_GlobalInvocationID.x];
    barrier();
    a[gl_GlobalInvocationID.x] = tile[(N - 1) - l] * 2.0 + float(N - 64u);
}
"""

SHARED_MIXED = """
#version 450
layout(local_size_x = 8) in;
struct S { vec3 p; uint k; };
shared S items[10];
shared double d[3];
shared uint16_t h[5];
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() {
    items[gl_LocalInvocationID.x].k = 1u;
    d[0] = 1.0;
    h[0] = uint16_t(1);
    a[gl_GlobalInvocationID.x] = float(items[0].k) + float(d[0]) + float(h[0]);
}
"""

PUSH_F16 = """
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float16_t a; float16_t b; float16_t c; } p;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length()) a[i] = float(p.a + p.b + p.c);
}
"""

ONE_PER_GROUP = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() { a[gl_GlobalInvocationID.x] += 1.0; }
"""

# Valid SPIR-V that needs shaderBufferInt64Atomics, which scopedgpu does not enable: the
# validation layer reports it when the pipeline is made.
ATOMIC_INT64 = """
#version 450
#extension GL_EXT_shader_atomic_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer A { uint64_t a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length()) atomicAdd(a[i], uint64_t(1));
}
"""


# -- shared memory -------------------------------------------------------------------------
def test_reflection_reports_shared_memory(glsl):
    info = reflect(glsl(SHARED))
    assert info.shared_memory_size == 64 * 4
    assert info.shared_memory_size_with({0: 1000}) == 4000
    assert info.shared_memory_size_with({1: 7}) == 64 * 4   # another id: default kept
    # members packed: struct {vec3, uint} = 16 bytes x 10, 3 doubles, 5 uint16
    mixed = reflect(glsl(SHARED_MIXED.replace(
        "#version 450",
        "#version 450\n#extension GL_EXT_shader_explicit_arithmetic_types : require")))
    assert mixed.shared_memory_size == 10 * 16 + 3 * 8 + 5 * 2
    assert reflect(glsl(shaders.ADD_ONE)).shared_memory_size == 0


def test_shared_memory_above_the_device_limit_is_a_shader_error(mgr, glsl):
    limit = mgr.device.max_shared_memory_size
    assert limit >= 16384   # Vulkan's minimum for maxComputeSharedMemorySize
    spirv = glsl(SHARED)
    x = np.arange(64, dtype=np.float32)
    with mgr.tensor(x) as t:
        n = limit // 4   # exactly the limit: accepted, and it computes
        with mgr.algorithm([t], spirv, spec_consts=[n]) as algo:
            mgr.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo),
                    sg.OpTensorSyncLocal([t]))
        np.testing.assert_array_equal(t.data(), x * 2 + (n - 64))
        with pytest.raises(sg.ShaderError, match=(
                rf"declares {(n + 1) * 4} bytes of shared memory.*"
                rf"maxComputeSharedMemorySize \({limit} bytes\)")):
            mgr.algorithm([t], spirv, spec_consts=[n + 1])


@needs_glsl_compiler("the shader's size is the device's limit: no compile cache holds it")
def test_shared_memory_size_written_into_the_shader_is_checked_too(mgr, glsl):
    """The same limit for a size written into the shader (no specialization constant)."""
    limit = mgr.device.max_shared_memory_size
    literal = glsl(SHARED.replace("layout(constant_id = 0) const uint N = 64;",
                                  f"const uint N = {4 * limit // 4}u;"))
    with mgr.tensor(np.arange(64, dtype=np.float32)) as t, \
            pytest.raises(sg.ShaderError, match=rf"{4 * limit} bytes of shared memory"):
        mgr.algorithm([t], literal)


# -- push constants ------------------------------------------------------------------------
def test_narrow_push_constant_block_is_a_shader_error(mgr, glsl):
    t = mgr.tensor(np.zeros(64, np.float32))
    # The device-capability check (StoragePushConstant16, which scopedgpu never enables)
    # refuses these modules first where it runs; the block check is the fallback.
    with pytest.raises(sg.ShaderError, match=r"capability StoragePushConstant16|push-constant "
                                             r"block takes 6 bytes with 16-bit members.*32- "
                                             r"and 64-bit"):
        mgr.algorithm([t], glsl(PUSH_F16), push_consts=np.zeros(3, np.float16))
    eight = glsl(PUSH_F16.replace("float16_t c;", "float16_t c; float16_t d;"))
    with pytest.raises(sg.ShaderError, match=r"capability StoragePushConstant16|takes 8 bytes "
                                             r"with 16-bit members"):
        mgr.algorithm([t], eight, push_consts=np.zeros(4, np.float16))


@pytest.mark.parametrize("push, exc, match", [
    ([None], TypeError, r"push_consts\[0\] is None"),
    (["2"], TypeError, r"push_consts\[0\] is '2' \(str\), but member 0 of the push-constant "
                       r"block is a float"),
    ([1.0, 2.0], ValueError, r"push_consts gives 2 values, but the shader's push-constant "
                             r"block `\{ float _0; \}` \(4 bytes\) has 1 member"),
    ("12", TypeError, "push_consts must be a list of numbers.*not str '12'"),
    ([1e39], ValueError, r"push_consts\[0\]=1e\+39 does not fit member 0, a float \(32-bit "
                         r"float\)"),
])
def test_bad_push_constant_values(mgr, glsl, push, exc, match):
    x, y, o = mgr.tensor([1.0]), mgr.tensor([2.0]), mgr.tensor([0.0])
    with pytest.raises(exc, match=match):
        mgr.algorithm([x, y, o], glsl(shaders.SAXPY), push_consts=push)
    algo = mgr.algorithm([x, y, o], glsl(shaders.SAXPY), push_consts=[3.0])
    with pytest.raises(exc, match=match):
        sg.OpAlgoDispatch(algo, push_consts=push)
    # inf is a float32 value like any other: passed on
    mgr.run(sg.OpTensorSyncDevice([x, y]), sg.OpAlgoDispatch(algo, push_consts=[math.inf]),
            sg.OpTensorSyncLocal([o]))
    assert o.data()[0] == math.inf
    algo.destroy()


# -- specialization constants --------------------------------------------------------------
@pytest.mark.parametrize("spec, exc, match", [
    ([64, math.inf], ValueError,
     r"specialization constant 1=inf does not fit the shader's 32-bit int \(constant_id 1\)"
     r": give a whole number from -2147483648 to 2147483647"),
    ([1.0, 2**31], ValueError, r"constant 1=2147483648 does not fit.*-2147483648 to"),
    ([1.0, 1.5], ValueError, r"constant 1=1.5 does not fit"),
    ([1e39], ValueError, r"constant 0=1e\+39 does not fit the shader's 32-bit float"),
    ("64", TypeError, "spec_consts must be a list of numbers.*not str '64'"),
    ([None], TypeError, r"spec_consts\[0\] is None"),
    (64, TypeError, "spec_consts must be a list of numbers.*not int 64"),
])
def test_bad_spec_constant_values(mgr, glsl, spec, exc, match):
    x, o = mgr.tensor(np.arange(16, dtype=np.float32)), mgr.empty(16)
    with pytest.raises(exc, match=match):
        mgr.algorithm([x, o], glsl(shaders.SCALE_SPEC), spec_consts=spec)
    # whole floats are fine for an int constant, inf for a float one
    algo = mgr.algorithm([x, o], glsl(shaders.SCALE_SPEC), spec_consts=[2.0, 5.0])
    mgr.run(sg.OpTensorSyncDevice([x]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([o]))
    np.testing.assert_array_equal(o.data(), np.arange(16, dtype=np.float32) * 2 + 5)
    algo.destroy()
    mgr.algorithm([x, o], glsl(shaders.SCALE_SPEC), spec_consts=[math.inf, 0]).destroy()


# -- workgroups ----------------------------------------------------------------------------
@pytest.mark.parametrize("wg, match", [
    ("12", "workgroup must be a tuple of up to three integers, not str '12'"),
    ((1.5, 1), r"workgroup must be up to three integers, not \(1.5, 1\)"),
    (4, "workgroup must be a tuple.*not int 4"),
])
def test_bad_workgroup_types(mgr, glsl, wg, match):
    t = mgr.tensor([1.0])
    with pytest.raises(TypeError, match=match):
        mgr.algorithm([t], glsl(shaders.ADD_ONE), workgroup=wg)
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE), workgroup=(np.int64(2), 1))
    assert algo.workgroup == (2, 1, 1)
    with pytest.raises(TypeError, match=match):
        sg.OpAlgoDispatch(algo, workgroup=wg)
    algo.destroy()


def test_default_workgroup_too_large_says_what_to_do(mgr, glsl):
    """A tensor with more elements than maxComputeWorkGroupCount[0] x local_size_x and no
    workgroup given, for a shader that reads gl_NumWorkGroups (others run in parts:
    tests/test_big_dispatch.py): the message names the tensor's size, the limit and both
    ways out (a larger local size, an explicit 2D grid); the 2D grid then covers it."""
    maxc = mgr.device.max_workgroup_count[0]
    n = maxc + 100   # local_size_x = 1
    if 4 * n > min(64 << 20, mgr.device.max_storage_buffer_range):
        pytest.skip(f"maxComputeWorkGroupCount[0] = {maxc}: a tensor beyond it would take "
                    f"{4 * n} bytes")
    t = mgr.tensor(np.zeros(n, np.float32))
    spirv = glsl(ONE_PER_GROUP.replace("1.0", "float(gl_NumWorkGroups.x)"))
    with pytest.raises(ValueError, match=(
            rf"no workgroup was given.*{n} elements, {4 * n} bytes.*needs {n} groups.*"
            rf"maxComputeWorkGroupCount\[0\] \({maxc}\).*local_size_x of at least 2 .*"
            rf"workgroup=\({maxc}, 2, 1\)")):
        mgr.algorithm([t], spirv)
    # Without bounds checks this shader must cover exactly n: one group per element.
    algo = mgr.algorithm([t], spirv, workgroup=(n - maxc, 1, 1))
    assert algo.workgroup == (100, 1, 1)
    algo.destroy()


# -- waits and environment -----------------------------------------------------------------
def test_eval_await_timeout_values(mgr, glsl):
    t = mgr.tensor(np.zeros(256, np.float32))
    algo = mgr.algorithm([t], glsl(shaders.ADD_ONE))
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([t])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([t]))
        seq.eval_async()
        assert seq.eval_await(math.inf) is True   # no limit, like None
        np.testing.assert_array_equal(t.data(), np.ones(256, np.float32))
        seq.eval_async()
        assert seq.eval_await(1e300) is True
        with pytest.raises(TypeError, match=r"eval_await\(\): timeout must be None or a "
                                            r"number of seconds, not str '1'"):
            seq.eval_await("1")
        with pytest.raises(ValueError, match=r"eval_await\(\).*not nan"):
            seq.eval_await(math.nan)
        with pytest.raises(ValueError, match=r">= 0 seconds, not -1"):
            seq.eval_await(-1)
    algo.destroy()


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-5", "0", "1.5"])
def test_memory_limit_environment_variable(monkeypatch, value):
    before = live_vulkan_objects()
    monkeypatch.setenv("SCOPEDGPU_MEMORY_LIMIT", value)
    with pytest.raises(ValueError, match=(
            rf"the environment variable SCOPEDGPU_MEMORY_LIMIT must be a positive whole "
            rf"number of bytes \(e.g. 1073741824 or 1e9\), not '{value}'")):
        sg.Manager()
    assert live_vulkan_objects() == before
    monkeypatch.setenv("SCOPEDGPU_MEMORY_LIMIT", "1e9")
    with sg.Manager() as m:
        assert m.memory_stats()["memory_limit"] == 10**9
    with pytest.raises(TypeError, match="memory_limit must be a positive number of bytes, "
                                        "not list"):
        sg.Manager(memory_limit=[1])


# -- validation messages belong to the call that caused them -------------------------------
def _debug_manager() -> sg.Manager:
    m = sg.Manager(debug=True)
    if not m.debug:
        m.close()
        pytest.skip("the Khronos validation layer is not installed")
    return m


@pytest.mark.allow_scopedgpu_log
def test_earlier_validation_messages_are_not_raised_by_a_valid_algorithm(glsl, caplog):
    """Messages that no call collected (here: a barrier recorded through the shim by hand)
    are logged as an earlier call's; the next, valid algorithm() does not raise them."""
    m = _debug_manager()
    with m:
        seq = m.sequence()
        h = seq._h
        lib.sg_seq_begin(h)
        lib.sg_seq_barrier(h, 0x800, 0x2000, 0x800, 0x20)   # srcAccessMask misfits its stage
        lib.sg_seq_end(h)
        t = m.tensor(np.zeros(64, np.float32))
        with caplog.at_level(logging.ERROR, logger="scopedgpu"):
            algo = m.algorithm([t], glsl(shaders.ADD_ONE))
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(logged) == 1 and "of an earlier call" in logged[0]
        assert "srcAccessMask" in logged[0]
        m.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
        np.testing.assert_array_equal(t.data(), np.ones(64, np.float32))
        seq.destroy()


def test_a_pipeline_the_layer_rejects_is_not_cached(glsl, monkeypatch):
    """Each creation with a shader the layer rejects raises ValidationError (the rejected
    pipeline is destroyed, not cached for the next algorithm() to reuse silently); a
    valid algorithm() right after does not see those messages. scopedgpu's own capability
    check refuses this module before the driver sees it: it is turned off here, so that
    the layer is what rejects it."""
    import collections

    from scopedgpu import _spirv_val
    monkeypatch.setattr(_spirv_val, "check_capabilities", lambda spirv, features: None)
    monkeypatch.setattr(_spirv_val, "_verdicts", collections.OrderedDict())
    m = _debug_manager()
    with m:
        t = m.tensor(np.zeros(64, np.uint64))
        f = m.tensor(np.zeros(64, np.float32))
        base = m.live_objects()["pipelines"]
        spirv = glsl(ATOMIC_INT64)
        for _ in range(2):
            with pytest.raises(sg.ValidationError, match="Int64Atomics"):
                m.algorithm([t], spirv)
            assert m.live_objects()["pipelines"] == base
        algo = m.algorithm([f], glsl(shaders.ADD_ONE))
        m.run(sg.OpTensorSyncDevice([f]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([f]))
        np.testing.assert_array_equal(f.data(), np.ones(64, np.float32))


@pytest.mark.allow_scopedgpu_log
def test_a_failed_call_carries_the_validation_messages_pending(glsl, caplog):
    """When a call fails (here vkDeviceWaitIdle, made to fail), what the layer reported
    and no call collected goes with that exception as a note; the next, valid call does
    not raise it."""
    m = _debug_manager()
    with m:
        seq = m.sequence()
        h = seq._h
        lib.sg_seq_begin(h)
        lib.sg_seq_barrier(h, 0x800, 0x2000, 0x800, 0x20)   # srcAccessMask misfits its stage
        lib.sg_seq_end(h)
        lib.sg_fault_set(1, -4)   # VK_ERROR_DEVICE_LOST
        try:
            with pytest.raises(sg.DeviceError, match="vkDeviceWaitIdle failed") as info:
                m.wait_idle()
        finally:
            lib.sg_fault_set(0, 0)
        # An exception note (Python 3.11+); before 3.11 the same text is logged.
        notes = getattr(info.value, "__notes__", None) or [
            r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(notes) == 1 and "srcAccessMask" in notes[0]
        assert "waiting for the device to be idle: the validation layer also reported" \
            in notes[0]
        t = m.tensor(np.zeros(64, np.float32))
        algo = m.algorithm([t], glsl(shaders.ADD_ONE))
        m.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
        np.testing.assert_array_equal(t.data(), np.ones(64, np.float32))
        seq.destroy()


def test_scopedgpu_queues_caps_the_compute_queues(monkeypatch):
    """The H200 has 16 compute queues, lavapipe one: a Manager opens at most 8, or at most
    SCOPEDGPU_QUEUES (each costs some 20 ms at open on NVIDIA)."""
    monkeypatch.setenv("SCOPEDGPU_QUEUES", "1")
    with sg.Manager() as m:
        assert m.queue_count == 1
        with pytest.raises(ValueError, match="queue must be an index below 1"):
            m.sequence(queue=1)
        t = m.tensor(np.arange(8, dtype=np.float32))
        out = m.empty(8)
        m.run(sg.OpTensorSyncDevice([t]), sg.OpMult([t, t, out]), sg.OpTensorSyncLocal([out]))
        np.testing.assert_array_equal(out.data(), np.arange(8, dtype=np.float32) ** 2)
        t.destroy()
        out.destroy()
    monkeypatch.delenv("SCOPEDGPU_QUEUES")
    with sg.Manager() as m:
        assert m.queue_count == min(8, m.device.queue_count)
    for bad in ("0", "x", "2.5", "65"):
        monkeypatch.setenv("SCOPEDGPU_QUEUES", bad)
        with pytest.raises(ValueError, match=rf"SCOPEDGPU_QUEUES={bad!r}: .* from 1 to 64"):
            sg.Manager()
