"""scopedgpu.kp, Kompute 0.9's Python API over scopedgpu, beyond what Kompute's own tests
(tests/kompute/) cover: kp's arguments and defaults, and where kp crashed or leaked,
scopedgpu's typed errors and lifetimes."""
from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest

import scopedgpu as sg
import scopedgpu.kp as kp
from scopedgpu.manager import live_vulkan_objects
from tests.kompute.utils import compile_source
from tests.test_binding_match import UNUSED_BINDING

ADD_ONE = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() { a[gl_GlobalInvocationID.x] += 1.0; }
"""


@pytest.fixture
def kmgr():
    """A kp.Manager, leak-checked: at teardown its live objects are back to what they
    were once it opened, and destroying it frees every Vulkan object."""
    before = live_vulkan_objects()
    m = kp.Manager()
    gc.collect()
    m._m.empty_cache()
    baseline = m._m.live_objects()
    yield m
    if not m._m.closed:
        gc.collect()
        m._m.empty_cache()
        assert m._m.live_objects() == baseline
        m.destroy()
    gc.collect()
    assert live_vulkan_objects() == before


def test_unused_binding_runs(kmgr):
    """Bindings 0, 1, 2 declared, 1 never used (glslc -O removes it): kp binds three
    tensors and runs it; so does scopedgpu.kp."""
    a, b, c = kmgr.tensor([1, 2, 3]), kmgr.tensor([7, 8, 9]), kmgr.tensor([0, 0, 0])
    params = [a, b, c]
    algo = kmgr.algorithm(params, compile_source(UNUSED_BINDING))
    kmgr.sequence().eval(kp.OpTensorSyncDevice(params))
    kmgr.sequence().record(kp.OpAlgoDispatch(algo)).record(kp.OpTensorSyncLocal(params)).eval()
    assert c.data().tolist() == [2.0, 4.0, 6.0]
    assert b.data().tolist() == [7.0, 8.0, 9.0]


def test_tensor_is_float32_and_flat(kmgr):
    t = kmgr.tensor(np.arange(12, dtype=np.int64).reshape(3, 4))
    assert t.data().dtype == np.float32 and t.data().shape == (12,)
    assert t.size() == len(t) == 12
    assert t.data_type() == kp.TensorDataTypes.float
    assert t.data().tolist() == list(map(float, range(12)))


@pytest.mark.parametrize("dtype,expected", [
    (np.float32, kp.TensorDataTypes.float), (np.uint32, kp.TensorDataTypes.unsigned_int),
    (np.int32, kp.TensorDataTypes.int), (np.float64, kp.TensorDataTypes.double),
    (np.bool_, kp.TensorDataTypes.bool)])
def test_tensor_t_keeps_the_dtype(kmgr, dtype, expected):
    if dtype == np.float64 and not kmgr._m.device.float64:
        pytest.skip("no shaderFloat64 on this device")
    arr = np.array([[1, 0], [1, 1]], dtype=dtype)
    t = kmgr.tensor_t(arr)
    assert t.data_type() == expected
    assert t.data().dtype == dtype and t.data().tolist() == arr.ravel().tolist()
    kmgr.sequence().eval(kp.OpTensorSyncDevice([t]))
    t.data()[:] = 0
    kmgr.sequence().eval(kp.OpTensorSyncLocal([t]))
    assert t.data().tolist() == arr.ravel().tolist()


def test_tensor_t_refuses_what_kp_refuses(kmgr):
    with pytest.raises(RuntimeError, match="no valid dtype supported"):
        kmgr.tensor_t(np.arange(3))              # int64
    with pytest.raises(TypeError):
        kmgr.tensor_t(np.arange(3, dtype=np.int16))


def test_tensor_types(kmgr):
    assert kp.device is kp.TensorTypes.device and kp.storage is kp.TensorTypes.storage
    h = kmgr.tensor([1, 2, 3], kp.TensorTypes.host)
    s = kmgr.tensor_t(np.array([1, 2, 3], np.float32), tensor_type=kp.TensorTypes.storage)
    d = kmgr.tensor([0, 0, 0])
    assert h.tensor_type() == kp.TensorTypes.host
    assert s.tensor_type() == kp.TensorTypes.storage
    assert d.tensor_type() == kp.TensorTypes.device
    with pytest.raises(sg.ScopedGPUError, match="storage"):
        s.data()                                  # kp: a null pointer
    (kmgr.sequence().record(kp.OpTensorCopy([s, d]))
        .record(kp.OpTensorSyncLocal([d])).eval())
    assert d.data().tolist() == [1.0, 2.0, 3.0]
    assert h.data().tolist() == [1.0, 2.0, 3.0]


def test_data_base_is_the_tensor_and_outlives_everything():
    m = kp.Manager()
    t = m.tensor([1, 2, 3])
    td = t.data()
    assert td.base is t and td.base.is_init()
    td[0] = 5                                    # writable, the memory data() returns
    assert t.data().tolist() == [5.0, 2.0, 3.0]
    m.destroy()
    assert not td.base.is_init()
    assert td.tolist() == [5.0, 2.0, 3.0]        # kp: freed memory
    td[1] = 7
    assert td.tolist() == [5.0, 7.0, 3.0]


def test_use_after_destroy_raises(kmgr):
    t = kmgr.tensor([1, 2, 3])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    seq = kmgr.sequence().record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
    algo.destroy()
    assert not algo.is_init()
    with pytest.raises(sg.DestroyedError):
        seq.eval()                                # kp: a destroyed pipeline, recorded
    with pytest.raises(sg.DestroyedError):
        kp.OpAlgoDispatch(algo)
    t.destroy()
    assert not t.is_init() and t.size() == 0     # kp's size() after destroy
    with pytest.raises(sg.DestroyedError):
        t.data()
    with pytest.raises(sg.DestroyedError):
        kmgr.sequence().record(kp.OpTensorSyncDevice([t]))
    seq.destroy()
    assert not seq.is_init()
    with pytest.raises(sg.DestroyedError):
        seq.record(kp.OpTensorSyncDevice([kmgr.tensor([1])]))


def test_after_manager_destroy_everything_raises():
    m = kp.Manager()
    t = m.tensor([1, 2, 3])
    seq = m.sequence()
    m.destroy()
    m.destroy()                                   # idempotent
    assert not t.is_init() and not seq.is_init()
    for call in (lambda: m.tensor([1]), lambda: m.sequence(), lambda: t.data(),
                 lambda: seq.eval(kp.OpTensorSyncDevice([t]))):
        with pytest.raises(sg.DestroyedError):
            call()


def test_anonymous_sequences_are_freed(kmgr):
    """A sequence that becomes unreachable is freed (after its GPU work), as the
    shared pointer of kp's freed it."""
    t = kmgr.tensor([0, 0, 0])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    kmgr.sequence().eval(kp.OpTensorSyncDevice([t]))
    gc.collect()
    base = kmgr._m.live_objects()["sequences"]
    for _ in range(50):
        kmgr.sequence().record(kp.OpAlgoDispatch(algo)).eval()
    kmgr.sequence().eval(kp.OpTensorSyncLocal([t]))
    gc.collect()
    assert kmgr._m.live_objects()["sequences"] == base
    assert t.data().tolist() == [50.0, 50.0, 50.0]


def test_manager_arguments():
    m = kp.Manager(0, [0], [])
    try:
        assert m.sequence(queue_index=0).is_init()
        with pytest.raises(ValueError, match="queue_index"):
            m.sequence(queue_index=1)
    finally:
        m.destroy()
    with pytest.raises(TypeError):
        kp.Manager(0, [0], [42])


def test_timestamps(kmgr):
    t = kmgr.tensor([0, 0, 0])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    seq = kmgr.sequence(queue_index=0, total_timestamps=4)
    seq.record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
    seq.record(kp.OpTensorSyncLocal([t])).eval()
    stamps = seq.get_timestamps()
    assert len(stamps) == 4 and stamps == sorted(stamps)
    assert t.data().tolist() == [1.0, 1.0, 1.0]


def test_eval_async_is_running_and_await(kmgr):
    t = kmgr.tensor([0, 0, 0])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    seq = kmgr.sequence()
    seq.record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
    assert seq.is_recording() and not seq.is_running()
    seq.record(kp.OpTensorSyncLocal([t]))
    seq.eval_async()
    assert seq.is_running()                       # until eval_await, as in kp
    with pytest.raises(RuntimeError, match="eval_await"):
        seq.eval_async()
    assert seq.eval_await(10**12) is seq
    assert not seq.is_running() and not seq.is_recording()
    assert t.data().tolist() == [1.0, 1.0, 1.0]
    seq.rerecord()
    seq.eval()
    assert t.data().tolist() == [2.0, 2.0, 2.0]


def test_opmult_rebuilds_the_algorithm(kmgr):
    a, b, out = kmgr.tensor([2, 2, 2]), kmgr.tensor([1, 2, 3]), kmgr.tensor([0, 0, 0])
    algo = kmgr.algorithm([a], compile_source(ADD_ONE))
    kmgr.sequence().eval(kp.OpTensorSyncDevice([a, b]))
    (kmgr.sequence().record(kp.OpMult([a, b, out], algo))
        .record(kp.OpTensorSyncLocal([out])).eval())
    assert out.data().tolist() == [2.0, 4.0, 6.0]
    assert algo.get_tensors() == [a, b, out]
    assert isinstance(kp.OpMult([a, b, out], algo), kp.OpBase)


def test_tensor_copy_copies_host_data_too(kmgr):
    a, b = kmgr.tensor([1, 2, 3]), kmgr.tensor([0, 0, 0])
    kmgr.sequence().record(kp.OpTensorSyncDevice([a])).record(kp.OpTensorCopy([a, b])).eval()
    assert b.data().tolist() == [1.0, 2.0, 3.0]   # no OpTensorSyncLocal, as in kp
    b.data()[:] = 0
    kmgr.sequence().eval(kp.OpTensorSyncLocal([b]))
    assert b.data().tolist() == [1.0, 2.0, 3.0]   # and on the device


def test_default_workgroup_is_the_first_tensors_size(kmgr):
    t = kmgr.tensor(np.zeros(37))
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))           # Workgroup() = 0, 0, 0
    (kmgr.sequence().record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
        .record(kp.OpTensorSyncLocal([t])).eval())
    assert t.data().tolist() == [1.0] * 37
    algo2 = kmgr.algorithm([t], compile_source(ADD_ONE), (2, 0, 0))  # y, z of 0 are 1
    kmgr.sequence().record(kp.OpAlgoDispatch(algo2)).record(kp.OpTensorSyncLocal([t])).eval()
    assert t.data().tolist() == [2.0, 2.0] + [1.0] * 35


def test_push_constant_dtypes(kmgr):
    spirv = compile_source("""
#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { uint x; } p;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() { a[gl_GlobalInvocationID.x] += p.x; }
""")
    t = kmgr.tensor_t(np.zeros(2, np.uint32))
    algo = kmgr.algorithm([t], spirv, (2, 1, 1), [], np.array([3], np.uint32))
    with pytest.raises(RuntimeError, match="no valid dtype"):
        kp.OpAlgoDispatch(algo, np.array([1], np.int64))
    (kmgr.sequence().record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
        .record(kp.OpAlgoDispatch(algo, np.array([4], np.uint32)))
        .record(kp.OpTensorSyncLocal([t])).eval())
    assert t.data().tolist() == [7, 7]


def test_device_properties(kmgr):
    props = kmgr.get_device_properties()
    assert set(props) == {"device_name", "max_work_group_count",
                          "max_work_group_invocations", "max_work_group_size",
                          "timestamps_supported"}
    assert props["device_name"] == kmgr._m.device.name
    devices = kmgr.list_devices()
    assert [d["device_name"] for d in devices] == [d.name for d in sg.devices()]


def test_destroy_while_running_waits_for_the_gpu(kmgr):
    """kp freed the Vulkan objects of a tensor or sequence destroyed while its GPU work
    ran; scopedgpu.kp waits for that work (the validation layer, on under
    SCOPEDGPU_DEBUG=1, would report a use of a freed object)."""
    t = kmgr.tensor(np.zeros(4096))
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    seq = kmgr.sequence()
    seq.record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
    seq.record(kp.OpTensorSyncLocal([t]))
    td = t.data()
    seq.eval_async()
    t.destroy()
    algo.destroy()
    seq.destroy()
    assert not seq.is_init() and not t.is_init()
    assert td.tolist() == [1.0] * 4096           # the sync completed into the array


def test_constants_the_shader_does_not_declare_are_ignored(kmgr):
    """Vulkan ignores specialization constants a module lacks and push constants it does
    not read (glslc -O removes unused ones), and so did kp."""
    t = kmgr.tensor([0, 0])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE), (2, 1, 1), [1.0, 2.0], [3.0])
    (kmgr.sequence().record(kp.OpTensorSyncDevice([t]))
        .record(kp.OpAlgoDispatch(algo, [4.0]))
        .record(kp.OpTensorSyncLocal([t])).eval())
    assert t.data().tolist() == [1.0, 1.0]


def test_copying_or_pickling_a_kp_object_raises(kmgr):
    """A copy would share the native handle (destroying it destroyed the original):
    copy.copy, copy.deepcopy and pickle raise TypeError, as for the native classes."""
    t = kmgr.tensor([1, 2, 3])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    seq = kmgr.sequence()
    for obj, hint in [(t, "tensor_t"), (algo, r"mgr\.algorithm"), (seq, r"mgr\.sequence"),
                      (kmgr, r"kp\.Manager")]:
        for how, call in [("copied", copy.copy), ("copied", copy.deepcopy),
                          ("pickled", pickle.dumps)]:
            with pytest.raises(TypeError, match=f"cannot be {how}.*{hint}"):
                call(obj)
    assert t.is_init() and algo.is_init() and seq.is_init()
    seq.eval(kp.OpTensorSyncDevice([t])).eval(kp.OpAlgoDispatch(algo))
    seq.eval(kp.OpTensorSyncLocal([t]))
    assert t.data().tolist() == [2.0, 3.0, 4.0]


@pytest.mark.parametrize("wait, exc, match", [
    (float("nan"), ValueError, r"wait must be None or a number of nanoseconds >= 0, not nan"),
    (-1, ValueError, r"wait must be None or a number of nanoseconds >= 0, not -1"),
    ("a", TypeError, r"wait must be None or a number of nanoseconds, not str 'a'"),
    ([1], TypeError, r"wait must be None or a number of nanoseconds, not list \[1\]"),
])
def test_eval_await_checks_its_argument(kmgr, wait, exc, match):
    """eval_await(nan), ('a') gave int()'s errors, naming nothing."""
    t = kmgr.tensor([0, 0, 0])
    seq = kmgr.sequence().eval_async(kp.OpTensorSyncDevice([t]))
    with pytest.raises(exc, match=match):
        seq.eval_await(wait)
    assert seq.is_running()
    seq.eval_await()
    with pytest.raises(exc, match=match):   # also without an eval_async() to await
        seq.eval_await(wait)


def test_eval_await_of_inf_waits_without_a_limit(kmgr):
    """eval_await(inf) raised OverflowError: inf nanoseconds is no limit, as None."""
    t = kmgr.tensor([0, 0, 0])
    seq = kmgr.sequence().eval_async(kp.OpTensorSyncDevice([t]))
    assert not seq.eval_await(float("inf")).is_running()
    assert not seq.eval_async().eval_await(10**30).is_running()


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"family_queue_indices": ["a"]}, TypeError,
     r"family_queue_indices must be queue family indices \(integers >= 0\), not str 'a'"),
    ({"family_queue_indices": [1.5]}, TypeError, r"family_queue_indices .* not float 1\.5"),
    ({"family_queue_indices": [-1]}, ValueError, r"family_queue_indices .* not int -1"),
    ({"family_queue_indices": 5}, TypeError, r"family_queue_indices must be a list .* not int 5"),
    ({"family_queue_indices": "0"}, TypeError, r"family_queue_indices must be a list .* '0'"),
    ({"desired_extensions": 5}, TypeError, r"desired_extensions must be a list .* not int 5"),
    ({"desired_extensions": "VK_KHR_x"}, TypeError,
     r"desired_extensions must be a list .* not str 'VK_KHR_x'"),
    ({"desired_extensions": [42]}, TypeError, r"desired_extensions must be .*strings.* 42"),
    ({"device": 1.5}, TypeError, r"device must be a device index .* not float 1\.5"),
])
def test_manager_arguments_are_checked(kwargs, exc, match):
    """kp.Manager(family_queue_indices=['a']) gave "invalid literal for int()", 5 gave
    "'int' object is not iterable", [1.5] and [-1] were taken."""
    before = live_vulkan_objects()
    with pytest.raises(exc, match=match):
        kp.Manager(**kwargs)
    assert live_vulkan_objects() == before


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"queue_index": "0"}, TypeError, r"queue_index must be .* not str '0'"),
    ({"queue_index": 1}, ValueError, r"queue_index must be below 1 .* not int 1"),
    ({"total_timestamps": "a"}, TypeError,
     r"total_timestamps must be a number of timestamps \(an integer >= 0\), not str 'a'"),
    ({"total_timestamps": float("inf")}, TypeError, r"total_timestamps .* not float inf"),
    ({"total_timestamps": -1}, ValueError, r"total_timestamps .* not int -1"),
])
def test_sequence_arguments_are_checked(kmgr, kwargs, exc, match):
    """total_timestamps='a' gave "'>' not supported", inf and -1 were taken."""
    with pytest.raises(exc, match=match):
        kmgr.sequence(**kwargs)
    assert kmgr.sequence(queue_index=np.int64(0), total_timestamps=np.uint32(0)).is_init()


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"workgroup": (float("inf"), 1, 1)}, TypeError,
     r"workgroup must be three integers >= 0 \(numbers of workgroups\), not tuple \(inf, 1, 1\)"),
    ({"workgroup": (1.5, 1, 1)}, TypeError, r"workgroup must be three integers .*1\.5"),
    ({"workgroup": (2, -1, 1)}, ValueError, r"workgroup must be three integers .*-1"),
    ({"workgroup": (2, 1)}, TypeError, r"workgroup must be three integers .*\(2, 1\)"),
    ({"workgroup": 5}, TypeError, r"workgroup must be three integers .* not int 5"),
    ({"spec_consts": 5}, TypeError,
     r"spec_consts must be a list of numbers or a numpy array, not int 5"),
    ({"spec_consts": ["a"]}, TypeError, r"spec_consts\[0\] must be a number, not str 'a'"),
    ({"push_consts": [1.0, None]}, TypeError,
     r"push_consts\[1\] must be a number, not NoneType None"),
    ({"push_consts": np.array([1], dtype=object)}, TypeError, r"push_consts of dtype object"),
])
def test_algorithm_arguments_are_checked(kmgr, kwargs, exc, match):
    """workgroup=(inf, 1, 1) gave OverflowError, (1.5, 1, 1) ran 1 group, a negative
    count ran the default; constants that are not numbers failed deep inside."""
    t = kmgr.tensor([0, 0, 0])
    with pytest.raises(exc, match=match):
        kmgr.algorithm([t], compile_source(ADD_ONE), **kwargs)


@pytest.mark.parametrize("push, exc, match", [
    (5, TypeError, r"push_consts must be a list of numbers or a numpy array, not int 5"),
    (["a"], TypeError, r"push_consts\[0\] must be a number, not str 'a'"),
])
def test_dispatch_push_constants_are_checked(kmgr, push, exc, match):
    """OpAlgoDispatch(algo, push_consts=['a']) was taken, and failed at record()."""
    t = kmgr.tensor([0, 0, 0])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    with pytest.raises(exc, match=match):
        kp.OpAlgoDispatch(algo, push_consts=push)


# -- kp's exceptions, logging, timestamps and enum strings (issue 22) -------------------
PUSH_TWO = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(push_constant) uniform P { float x; float y; };
void main() { a[gl_GlobalInvocationID.x] = x + y; }
"""


def _runtime_error_cases(m):
    """(what, call) pairs where kp 0.9 raised RuntimeError (its std::runtime_error
    checks in src/*.cpp and python/src/main.cpp, or vulkan-hpp's errors)."""
    a, b = m.tensor([1, 2]), m.tensor([1, 2, 3])
    i = m.tensor_t(np.array([1, 2], dtype=np.int32))
    push = m.algorithm([a], compile_source(PUSH_TWO), push_consts=[1.0, 2.0])
    return [
        ("queue index", lambda: m.sequence(queue_index=3)),
        ("zero-sized tensor", lambda: m.tensor([])),
        ("OpTensorCopy of 1", lambda: kp.OpTensorCopy([a])),
        ("OpTensorCopy types", lambda: kp.OpTensorCopy([a, i])),
        ("OpTensorCopy sizes", lambda: kp.OpTensorCopy([a, b])),
        ("OpTensorSyncDevice of 0", lambda: kp.OpTensorSyncDevice([])),
        ("OpTensorSyncLocal of 0", lambda: kp.OpTensorSyncLocal([])),
        ("OpMult of 2", lambda: kp.OpMult([a, a], push)),
        ("push-constant size", lambda: m.sequence().eval(kp.OpAlgoDispatch(push, [1.0]))),
        ("timestamps not enabled", lambda: m.sequence().get_timestamps()),
        ("invalid SPIR-V", lambda: m.algorithm([a], b"\x03\x02\x23\x07" * 5)),
        ("push-constant dtype", lambda: kp.OpAlgoDispatch(push, np.zeros(2, np.int8))),
    ]


def test_errors_kp_raised_as_runtime_error_are_runtime_errors(kmgr):
    """kp programs catch RuntimeError; scopedgpu.kp's typed errors are also
    RuntimeErrors (a kp-layer subclass of each, keeping its message and class)."""
    for what, call in _runtime_error_cases(kmgr):
        with pytest.raises(RuntimeError) as info:
            call()
        assert isinstance(info.value, (sg.ScopedGPUError, ValueError, TypeError)), what
        assert str(info.value), what
    assert kmgr.sequence().eval(kp.OpTensorSyncDevice([kmgr.tensor([1])])).is_init()


def test_bad_device_index_is_a_runtime_error_and_native_classes_are_unchanged():
    """kp.Manager(7): kp raised RuntimeError ("There is no such physical index or
    device"); scopedgpu.kp raises scopedgpu.NoDeviceError, also a RuntimeError. The
    native API's classes are not RuntimeErrors."""
    before = live_vulkan_objects()
    with pytest.raises(RuntimeError, match="no Vulkan device with index 7") as info:
        kp.Manager(7)
    assert isinstance(info.value, sg.NoDeviceError)
    assert type(info.value).__module__ == "scopedgpu.kp"
    with pytest.raises(sg.NoDeviceError) as native:
        sg.Manager(7)
    assert not isinstance(native.value, RuntimeError)
    assert not issubclass(sg.NoDeviceError, RuntimeError)
    assert not issubclass(sg.DeviceError, RuntimeError)
    assert live_vulkan_objects() == before


def test_runtime_variant_keeps_attributes_and_traceback():
    """A DeviceError's result/call survive, a builtin ValueError's args too; the
    traceback still reaches where the error was raised."""
    from scopedgpu.kp import _as_runtime

    def oom():
        return sg.OutOfMemoryError("out", result="VK_ERROR_OUT_OF_DEVICE_MEMORY",
                                   call="vkAllocateMemory", code=-2)
    new = _as_runtime(oom())
    assert isinstance(new, sg.OutOfMemoryError) and isinstance(new, MemoryError)
    assert isinstance(new, RuntimeError) and str(new) == "out"
    assert (new.result, new.call, new.code) == ("VK_ERROR_OUT_OF_DEVICE_MEMORY",
                                                "vkAllocateMemory", -2)
    assert type(_as_runtime(oom())) is type(new)   # one variant per class
    assert _as_runtime(new) is new                 # already a RuntimeError
    value = _as_runtime(ValueError("bad", 3))
    assert type(value).__mro__[1:3] == (ValueError, RuntimeError)
    assert value.args == ("bad", 3)
    with pytest.raises(RuntimeError) as info:
        kp.Manager(7)
    assert any(entry.path.name == "manager.py" for entry in info.traceback)
    with pytest.raises(RuntimeError) as info:
        kp.OpTensorSyncDevice([])
    assert info.traceback[-1].name == "_at_least" and info.value.__context__ is not None
    assert info.value.__suppress_context__


def test_import_configures_logging_as_kp_does():
    """`import kp` runs logging.basicConfig(): a kp program's logging.debug() after
    setLevel(DEBUG) reaches stderr. `import scopedgpu` alone configures nothing."""
    import subprocess
    import sys
    from tests.conftest import source_env
    prog = ("import logging, sys\n"
            "import scopedgpu\n"
            "print(len(logging.getLogger().handlers))\n"
            "import scopedgpu.kp as kp\n"
            "print(len(logging.getLogger().handlers))\n"
            "logging.getLogger().setLevel(logging.DEBUG)\n"
            "logging.debug('hello from a kp program')\n")
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                         env=source_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]
    assert "DEBUG:root:hello from a kp program" in out.stderr


def test_timestamps_are_raw_ticks(kmgr):
    """kp returns the counter's raw ticks; the native API nanoseconds (ticks times
    timestampPeriod). lavapipe's period is 1: the test gives the device a period of 4
    (native nanoseconds are then 4 x ticks) and of 2.5."""
    t = kmgr.tensor([0, 0, 0])
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    seq = kmgr.sequence(total_timestamps=3)
    seq.record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
    info = kmgr._m.device
    real = info.timestamp_period
    assert real == 1.0   # lavapipe: ticks are nanoseconds
    for period in (4.0, 2.5, 52.08):
        object.__setattr__(info, "timestamp_period", period)
        try:
            seq.eval()
            ticks, ns = seq.get_timestamps(), seq._s.timestamps()
        finally:
            object.__setattr__(info, "timestamp_period", real)
        assert len(ticks) == 3 and ticks == sorted(ticks)
        assert [int(v * period) for v in ticks] == ns
        assert ticks[0] < ns[0] / (period * 0.99)
    seq.eval()
    assert seq.get_timestamps() == seq._s.timestamps()


def test_enum_strings_are_pybind11s():
    """pybind11's enums print 'TensorTypes.device' (IntEnum on Python 3.11+: '0');
    repr, name, value and == as before."""
    for enum_cls in (kp.TensorTypes, kp.TensorDataTypes):
        for member in enum_cls:
            expected = f"{enum_cls.__name__}.{member.name}"
            assert str(member) == f"{member}" == format(member) == expected
            assert str(enum_cls(member.value)) == expected
            assert repr(member) == f"<{expected}: {member.value}>"
    assert str(kp.TensorTypes.device) == "TensorTypes.device"
    assert str(kp.host) == "TensorTypes.host" and kp.host == 1 and kp.host.name == "host"
    with pytest.raises(TypeError):
        format(kp.TensorTypes.device, ">20")   # as object.__format__ (pybind11)


def test_binding_beyond_max_storage_buffer_range_is_refused_with_what_to_do(kmgr):
    """kp binds a tensor larger than maxStorageBufferRange (128 MiB on lavapipe), which
    Vulkan forbids; scopedgpu refuses at mgr.algorithm(), naming the limit, the size and
    what to do (a RuntimeError through scopedgpu.kp). The test lowers the device's limit
    to 64 bytes rather than allocating 128 MiB."""
    small, big = kmgr.tensor(np.zeros(16)), kmgr.tensor(np.zeros(17))
    info = kmgr._m.device
    real = info.max_storage_buffer_range
    object.__setattr__(info, "max_storage_buffer_range", 64)
    try:
        kmgr.algorithm([small], compile_source(ADD_ONE)).destroy()   # 64 bytes: bound
        with pytest.raises(RuntimeError) as exc:
            kmgr.algorithm([big], compile_source(ADD_ONE))
        with pytest.raises(ValueError) as native:
            kmgr._m.algorithm([big._t], compile_source(ADD_ONE))
    finally:
        object.__setattr__(info, "max_storage_buffer_range", real)
    assert not isinstance(native.value, RuntimeError)
    for message in (str(exc.value), str(native.value)):
        assert "binding 0" in message and "68 bytes" in message
        assert "maxStorageBufferRange (64 bytes)" in message
        assert "smaller tensors" in message and "several bindings" in message
        assert "a device with a larger maxStorageBufferRange" in message


def test_default_workgroup_beyond_the_device_limit_runs(kmgr):
    """kp's default (one group per element) beyond maxComputeWorkGroupCount[0]: kp
    dispatches it anyway (outside what the device promises); scopedgpu.kp runs it in
    parts within the limit (tests/test_big_dispatch.py), with kp's answer."""
    maxc = kmgr.get_device_properties()["max_work_group_count"][0]
    n = maxc + 1
    if 4 * n > min(64 << 20, kmgr._m.device.max_storage_buffer_range):
        pytest.skip(f"maxComputeWorkGroupCount[0] = {maxc}: too large a tensor")
    t = kmgr.tensor(np.arange(n, dtype=np.float32))
    algo = kmgr.algorithm([t], compile_source(ADD_ONE))
    (kmgr.sequence().record(kp.OpTensorSyncDevice([t])).record(kp.OpAlgoDispatch(algo))
        .record(kp.OpTensorSyncLocal([t])).eval())
    np.testing.assert_array_equal(t.data(), np.arange(n, dtype=np.float32) + 1)


def test_data_taken_before_destroy_keeps_its_memory():
    """data()'s base is the kp tensor (as in kp), which holds the host memory itself: a
    view taken before destroy() never shows the pool range's next tensor (it showed
    [100, 100, 100, 100] where 7 was written)."""
    m = kp.Manager()
    t = m.tensor_t(np.full(4, 7, np.uint32))
    td = t.data()
    t.destroy()
    others = [m.tensor_t(np.full(4, 100, np.uint32)) for _ in range(8)]
    for o in others:
        m.sequence().eval(kp.OpTensorSyncDevice([o]))
    assert td.tolist() == [7, 7, 7, 7]
    td[:] = 9                                    # writes no other tensor's memory
    assert all(o.data().tolist() == [100] * 4 for o in others)
    m.destroy()
