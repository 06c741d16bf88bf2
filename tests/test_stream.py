"""Manager.stream(): numpy arrays through a kernel in chunks, upload / kernel / download
overlapped. Results against numpy, every chunking edge, both host paths (import and
staging), bad input, and the lifetime contract (nothing leaks, also when interrupted)."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import threading

import numpy as np
import pytest

import scopedgpu as sg
import scopedgpu.stream as sst
from scopedgpu._shaders import builtin_spirv
from tests.conftest import source_env

SAXPY = builtin_spirv("saxpy")      # binding 0: x, binding 1: y; y = a * x + y

ROWS2D = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { int a[]; };
layout(set = 0, binding = 1) writeonly buffer O { int o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < o.length()) o[i] = a[i] * 3 - 1;
}
"""


@pytest.fixture(params=["import", "stage", "auto"])
def host_mode(request, monkeypatch):
    monkeypatch.setenv("SCOPEDGPU_STREAM_HOST", request.param)
    return request.param


@pytest.mark.parametrize("n,chunk", [(1000, 256), (4096, 4096), (100_003, 40_000),
                                     (1, 64), (50_000, 1 << 30)])
def test_saxpy_in_place_matches_numpy(mgr, host_mode, n, chunk):
    rng = np.random.default_rng(n)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    ref = np.float32(2.5) * x + y
    out = mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[2.5], chunk_bytes=chunk,
                     workgroup=sg.ops.elementwise_groups(min(n, max(1, chunk // 4))))
    assert out == [y]
    np.testing.assert_allclose(y, ref, rtol=1e-6)


def test_separate_output_and_rows_of_2d_arrays(mgr, glsl, host_mode):
    a = np.arange(7 * 33, dtype=np.int32).reshape(7 * 11, 3)      # 77 rows of 3
    o = np.full_like(a, -7)
    mgr.stream(glsl(ROWS2D), inputs=[a], outputs=[o], chunk_bytes=5 * 12, depth=2)
    np.testing.assert_array_equal(o, a * 3 - 1)


def test_empty_arrays_do_nothing(mgr):
    x = np.zeros(0, np.float32)
    y = np.zeros(0, np.float32)
    assert mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.0]) == [y]


def stream_unaligned_views(mgr, chunk_bytes, around=None):
    """Streams y = 0.5 x + y over views that start and end mid-page (`around(x, y)`, when
    given, is entered around the stream), and checks the result and that the bytes around the
    views are untouched: an import rounds to pages, the copies must not."""
    big_x = np.arange(70_001, dtype=np.float32)
    big_y = np.ones(70_001, dtype=np.float32)
    x, y = big_x[3:-5], big_y[7:-1]
    y = y[:x.size]
    keep = big_y.copy()
    ref = 0.5 * x + y
    with around(x, y) if around else contextlib.nullcontext():
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[0.5],
                   chunk_bytes=chunk_bytes)
    np.testing.assert_allclose(y, ref)
    np.testing.assert_array_equal(big_y[:7], keep[:7])
    np.testing.assert_array_equal(big_y[7 + x.size:], keep[7 + x.size:])


def test_unaligned_views_are_read_and_written_exactly(mgr, host_mode):
    stream_unaligned_views(mgr, 1 << 16)


@pytest.mark.parametrize("bad,match", [
    (lambda x, y: {"inputs": [x, np.ones(7, np.float32)], "outputs": [y]}, "same length"),
    (lambda x, y: {"inputs": [x[::2], y[::2]], "outputs": [y[::2]]}, "C-contiguous"),
    (lambda x, y: {"inputs": [x, y], "outputs": []}, "at least one output"),
    (lambda x, y: {"inputs": [x, y], "outputs": [y[:]]}, "overlaps"),
    (lambda x, y: {"inputs": [x, [1.0] * 8], "outputs": [y]}, "numpy array"),
    (lambda x, y: {"inputs": [x, y], "outputs": [y], "chunk_bytes": 0}, "chunk_bytes"),
    (lambda x, y: {"inputs": [x, y], "outputs": [y], "depth": 0}, "depth"),
])
def test_bad_arguments_raise_before_any_work(mgr, bad, match):
    x = np.ones(8, np.float32)
    y = np.ones(8, np.float32)
    with pytest.raises((ValueError, TypeError), match=match):
        mgr.stream(SAXPY, push_consts=[1.0], **bad(x, y))
    np.testing.assert_array_equal(y, 1.0)


# What tensor() refuses (scopedgpu never supports these, or GPUs cannot read them).
REFUSED_DTYPES = [">f4", "complex64", "U1", "S4", "V4", "datetime64[s]",
                  "timedelta64[s]", [("a", "<f4")], object]


def _array_of(dtype, n: int) -> np.ndarray:
    return np.full(n, 1.0, dtype=object) if dtype is object else np.ones(n, dtype)


@pytest.mark.parametrize("where", ["inputs", "outputs"])
@pytest.mark.parametrize("dtype", REFUSED_DTYPES, ids=str)
def test_dtypes_tensor_refuses_stream_refuses(mgr, dtype, where):
    """stream() once took these: a big-endian array came back as garbage, complex64 was
    processed over half of each chunk, the others were rewritten bytewise as floats. It
    applies tensor()'s rule now, with tensor()'s message, naming the argument."""
    bad = _array_of(dtype, 64)
    keep = bad.tobytes()
    with pytest.raises(TypeError) as by_tensor:
        mgr.tensor(bad)
    x, y = np.ones(64, np.float32), np.ones(64, np.float32)
    args = {"inputs": [bad, y], "outputs": [y]} if where == "inputs" else \
        {"inputs": [x], "outputs": [bad]}
    with pytest.raises(TypeError) as by_stream:
        mgr.stream(SAXPY, push_consts=[2.0], **args)
    assert f"stream(): {where}[0]" in str(by_stream.value)
    assert str(by_tensor.value) in str(by_stream.value)
    assert bad.tobytes() == keep
    np.testing.assert_array_equal(y, 1.0)


@pytest.mark.parametrize("dtype,where", [(np.float64, "inputs"), (np.int32, "outputs"),
                                         (np.float16, "inputs")])
def test_binding_element_types_are_checked_against_the_arrays(mgr, dtype, where):
    """algorithm()'s rule (ShaderError when a binding's declared element type cannot be
    the dtype), with the message naming the argument, not an internal tensor."""
    if dtype == np.float16 and not mgr.device.float16:
        pytest.skip("the device has no float16")
    bad = np.ones(64, dtype)
    x, y = np.ones(64, np.float32), np.ones(64, np.float32)
    args = {"inputs": [bad, y], "outputs": [y]} if where == "inputs" else \
        {"inputs": [x], "outputs": [bad]}
    binding = 0 if where == "inputs" else 1
    with pytest.raises(sg.ShaderError, match=rf"stream\(\): binding {binding} is {where}\[0\] "
                       rf"\(dtype {np.dtype(dtype)}\).*`float\[\]`"):
        mgr.stream(SAXPY, push_consts=[2.0], **args)
    np.testing.assert_array_equal(bad, 1)
    # int and uint of one width pass, as they do in algorithm()
    u = np.arange(64, dtype=np.uint32)
    o = np.zeros(64, np.int32)
    mgr.stream(_ROWS2D_SPIRV(mgr), inputs=[u], outputs=[o])
    np.testing.assert_array_equal(o, u.astype(np.int32) * 3 - 1)


def _ROWS2D_SPIRV(mgr):
    return sg.compile_glsl(ROWS2D)


ONE_WIDE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer V { float v[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < v.length()) v[i] = v[i] * 2.0 + 1.0;
}
"""


def _small_group_count(mgr) -> int:
    maxc = mgr.device.max_workgroup_count[0]
    if maxc > 1 << 20:
        pytest.skip(f"maxComputeWorkGroupCount[0] is {maxc}: a chunk that the default grid "
                    "cannot cover would take gigabytes")
    return maxc


def test_default_grid_covers_chunks_larger_than_one_dispatch(mgr, glsl):
    """No workgroup given: each chunk is cut to what one dispatch of the shader's local
    size covers (here 1 wide, so maxComputeWorkGroupCount elements), instead of a refusal
    that named an internal tensor and not chunk_bytes."""
    maxc = _small_group_count(mgr)
    v = np.arange(2 * maxc + 5, dtype=np.float32)
    ref = v * 2 + 1
    mgr.stream(glsl(ONE_WIDE), inputs=[v], outputs=[v], chunk_bytes=v.nbytes)
    np.testing.assert_array_equal(v, ref)


def test_a_row_the_default_grid_cannot_cover_names_workgroup(mgr, glsl):
    maxc = _small_group_count(mgr)
    v = np.ones((2, maxc + 1), np.float32)
    with pytest.raises(ValueError, match=rf"stream\(\): .*inputs\[0\].*\(2, {maxc + 1}\)"
                       r".*workgroup"):
        mgr.stream(glsl(ONE_WIDE), inputs=[v], outputs=[v])
    np.testing.assert_array_equal(v, 1)


@pytest.mark.parametrize("kw,exc,match", [
    ({"chunk_bytes": float("inf")}, TypeError, r"chunk_bytes.*inf"),
    ({"chunk_bytes": float("nan")}, TypeError, r"chunk_bytes.*nan"),
    ({"chunk_bytes": "4096"}, TypeError, r"chunk_bytes.*'4096'"),
    ({"chunk_bytes": 4096.0}, TypeError, r"chunk_bytes.*4096\.0"),
    ({"chunk_bytes": True}, TypeError, r"chunk_bytes.*True"),
    ({"chunk_bytes": -1}, ValueError, r"chunk_bytes.*-1"),
    ({"depth": 2.5}, TypeError, r"depth.*2\.5"),
    ({"depth": "3"}, TypeError, r"depth.*'3'"),
    ({"depth": -2}, ValueError, r"depth.*-2"),
    ({"workers": "2"}, TypeError, r"workers.*'2'"),
    ({"workers": 0}, ValueError, r"workers.*0"),
    ({"workers": 1.0}, TypeError, r"workers.*1\.0"),
    ({"inputs": 5}, TypeError, r"inputs.*int 5"),
    ({"outputs": "y"}, TypeError, r"outputs.*str 'y'"),
    ({"inputs": [np.ones((10, 0), np.float32)]}, ValueError, r"inputs\[0\].*\(10, 0\)"),
    ({"outputs": [np.ones((0, 0), np.float32)]}, ValueError, r"outputs\[0\].*\(0, 0\)"),
    ({"workgroup": "a"}, TypeError, r"workgroup.*str 'a'"),
    ({"workgroup": (0, 1)}, ValueError, r"workgroup \(0, 1, 1\)"),
    ({"push_consts": "x"}, TypeError, r"push_consts.*str 'x'"),
    ({"spec_consts": [1.0]}, ValueError, r"specialization constant 0"),
    ({"inputs": [], "outputs": [np.ones(8, np.float32)]}, sg.ShaderError,
     r"bindings \[0, 1\], but 1 distinct array\(s\).*outputs\[0\]"),
])
def test_every_argument_error_names_the_argument_and_the_value(mgr, kw, exc, match):
    x = np.ones(8, np.float32)
    y = np.ones(8, np.float32)
    args = {"inputs": [x, y], "outputs": [y], "push_consts": [1.0], **kw}
    with pytest.raises(exc, match=match) as got:
        mgr.stream(SAXPY, **args)
    assert "stream()" in str(got.value)
    np.testing.assert_array_equal(y, 1.0)


def test_arguments_of_integer_types_are_taken(mgr):
    x = np.ones(300, np.float32)
    y = np.ones(300, np.float32)
    mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.0],
               chunk_bytes=np.int64(256), depth=np.uint8(2), workers=np.int32(1))
    np.testing.assert_array_equal(y, 2.0)


def test_read_only_output_is_refused(mgr):
    x = np.ones(8, np.float32)
    y = np.ones(8, np.float32)
    y.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.0])


def test_closed_manager_raises_destroyed():
    m = sg.Manager()
    m.close()
    x = np.ones(8, np.float32)
    with pytest.raises(sg.DestroyedError):
        m.stream(SAXPY, inputs=[x, x.copy()], outputs=[x], push_consts=[1.0])


@pytest.mark.parametrize("phase", ["pin", "up", "kernel", "down", "drain", "free"])
def test_interrupt_in_any_phase_frees_everything_after_the_gpu(mgr, monkeypatch, phase,
                                                               host_mode):
    """A KeyboardInterrupt as the second chunk enters `phase`: stream() raises it, and has
    waited for everything submitted before freeing (the mgr fixture checks the live
    counts; the validation layer, when on, checks nothing was freed in use)."""
    orig = sst.Streamer._enter
    seen = []

    def enter(self, slot, ph):
        orig(self, slot, ph)
        seen.append((slot.chunk, ph))
        if ph == phase and slot.chunk == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(sst.Streamer, "_enter", enter)
    x = np.ones(1 << 16, np.float32)
    y = np.ones(1 << 16, np.float32)
    with pytest.raises(KeyboardInterrupt):
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.0],
                   chunk_bytes=1 << 14, depth=3)
    assert (1, phase) in seen
    monkeypatch.setattr(sst.Streamer, "_enter", orig)
    # still usable
    y[:] = 1
    mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.0], chunk_bytes=1 << 14)
    np.testing.assert_array_equal(y, 2.0)


def test_streams_from_two_threads_at_once(mgr):
    xs = [np.full(30_000, i + 1, np.float32) for i in range(2)]
    ys = [np.ones(30_000, np.float32) for _ in range(2)]
    errors = []

    def work(i):
        try:
            mgr.stream(SAXPY, inputs=[xs[i], ys[i]], outputs=[ys[i]], push_consts=[2.0],
                       chunk_bytes=1 << 14)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i in range(2):
        np.testing.assert_array_equal(ys[i], 2.0 * (i + 1) + 1)


CLOSE_DURING_STREAM = """
import sys, threading
import numpy as np
import scopedgpu as sg
import scopedgpu.stream as sst
from scopedgpu._shaders import builtin_spirv
before = sg.live_vulkan_objects()
m = sg.Manager()
x = np.ones(1 << 21, np.float32)
y = np.ones(1 << 21, np.float32)
started = threading.Event()
orig = sst.Streamer._loop
def loop(self):
    started.set()
    orig(self)
sst.Streamer._loop = loop
errors = []
def work():
    try:
        m.stream(builtin_spirv("saxpy"), inputs=[x, y], outputs=[y], push_consts=[1.0],
                 chunk_bytes=1 << 12, depth=2, workers=2)
    except BaseException as exc:
        errors.append(exc)
t = threading.Thread(target=work)
t.start()
assert started.wait(30)
m.close()                  # waits for the stream to stop and free what it made
t.join(30)
assert not t.is_alive()
assert m.closed and sg.abandoned_managers() == 0
assert len(errors) == 1 and isinstance(errors[0], sg.DestroyedError), errors
assert "closing" in str(errors[0]), errors
assert sg.live_vulkan_objects() == before, (sg.live_vulkan_objects(), before)
print("OK")
"""


def test_close_from_another_thread_stops_the_stream_and_frees_everything():
    """In a child process: before close() waited for streams, it destroyed the device
    under their command buffers."""
    res = subprocess.run([sys.executable, "-c", CLOSE_DURING_STREAM], capture_output=True,
                         text=True, timeout=120, env=source_env())
    assert res.returncode == 0 and res.stdout.strip().endswith("OK"), res.stdout + res.stderr


def test_an_unknown_host_path_is_refused(mgr, monkeypatch):
    monkeypatch.setenv("SCOPEDGPU_STREAM_HOST", "pin")
    x = np.ones(8, np.float32)
    y = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="SCOPEDGPU_STREAM_HOST"):
        mgr.stream(SAXPY, inputs=[x, y], outputs=[y], push_consts=[1.0])
    np.testing.assert_array_equal(y, 1.0)
