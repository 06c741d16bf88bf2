"""Push constants typed by the shader (issue 21, items 1 and 2).

A list, tuple, dict or numpy structured scalar is packed member by member as the shader's
push-constant block declares it (checked: a value that does not fit raises, naming the
member); a numpy array or bytes is taken bit for bit. A block the shader declares and the
algorithm does not fill raises ShaderError. scopedgpu.kp keeps kp's float32 lists."""
from __future__ import annotations

import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu import kp
from scopedgpu._spirv import reflect
from tests.conftest import needs_glsl_compiler

# out[i] = x[i] * a for the first n elements, -1 after: a uint and a float in one block.
MIXED = """
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { uint n; float a; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer O { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(o.length())) return;
    o[i] = i < p.n ? x[i] * p.a : -1.0;
}
"""

# Every member kind a list can give, at std430 offsets: 4, 8 (uvec2), arrays of stride 4.
WIDE = """
#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { int k; uvec2 c; float d[3]; vec3 v; uint last; } p;
layout(set = 0, binding = 0) buffer O { float o[]; };
void main() {
    o[0] = float(p.k); o[1] = float(p.c.x); o[2] = float(p.c.y);
    o[3] = p.d[0]; o[4] = p.d[1]; o[5] = p.d[2];
    o[6] = p.v.x; o[7] = p.v.y; o[8] = p.v.z; o[9] = float(p.last);
}
"""

# 64-bit members: a double and an int64 (shaderFloat64, shaderInt64).
SIXTY_FOUR = """
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 1) in;
layout(push_constant) uniform P { uint n; double d; int64_t q; } p;
layout(set = 0, binding = 0) buffer O { double o[]; };
layout(set = 0, binding = 1) buffer Q { int64_t oq[]; };
void main() { o[0] = p.d * double(p.n); oq[0] = p.q - 1; }
"""


def _named(source: str) -> bytes:
    """SPIR-V that keeps its member names (OpMemberName): compile_glsl runs glslc -O,
    which strips them."""
    from scopedgpu.glsl import _compiler, _compiler_env
    comp = _compiler()
    assert comp is not None
    name, path = comp
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "s.comp", Path(tmp) / "s.spv"
        src.write_text(source)
        cmd = ([path, "--target-env=vulkan1.1"] if name == "glslc" else
               [path, "-V", "--target-env", "vulkan1.1"]) + [str(src), "-o", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, env=_compiler_env(path))
        return out.read_bytes()


def _run(mgr, spirv, x, push, n=None):
    """o of MIXED for input x and push constants `push`."""
    with mgr.tensor(x) as tx, mgr.tensor(np.zeros_like(x)) as to, \
            mgr.algorithm([tx, to], spirv, push_consts=push) as algo:
        mgr.run(sg.OpTensorSyncDevice([tx]), sg.OpAlgoDispatch(algo),
                sg.OpTensorSyncLocal([to]))
        return to.data().copy()


def _expected(x, n, a):
    return np.where(np.arange(x.size) < n, x * np.float32(a), np.float32(-1)).astype(np.float32)


X = np.arange(1, 129, dtype=np.float32)


# -- item 1: a list is packed as the shader declares it ------------------------------------
def test_mixed_uint_float_block_computes_as_numpy(mgr, glsl):
    """On main, [100, 2.0] went as two float32s, and the shader read n = 1120403456."""
    got = _run(mgr, glsl(MIXED), X, [100, 2.0])
    np.testing.assert_array_equal(got, _expected(X, 100, 2.0))


@pytest.mark.parametrize("push", [(100, 2.0), [np.uint32(100), np.float64(2.0)],
                                  [100.0, 2], [np.int64(100), True * 2]])
def test_tuples_and_numpy_scalars_are_typed_too(mgr, glsl, push):
    """A whole float gives a uint; an int gives a float."""
    np.testing.assert_array_equal(_run(mgr, glsl(MIXED), X, push), _expected(X, 100, 2.0))


def test_numpy_array_keeps_its_bytes(mgr, glsl):
    """A numpy array is passed bit for bit with its own dtype, as before."""
    raw = np.array([100, np.float32(2.0).view(np.uint32)], np.uint32)
    np.testing.assert_array_equal(_run(mgr, glsl(MIXED), X, raw), _expected(X, 100, 2.0))
    floats = np.array([100, 2.0], np.float32)   # n is the bits of 100.0f: every element
    np.testing.assert_array_equal(_run(mgr, glsl(MIXED), X, floats),
                                  _expected(X, 1120403456, 2.0))
    as_bytes = struct.pack("<If", 7, 0.5)
    np.testing.assert_array_equal(_run(mgr, glsl(MIXED), X, as_bytes), _expected(X, 7, 0.5))


def test_structured_scalar_by_position(mgr, glsl):
    """A module without member names (glslc -O) takes the fields in order."""
    rec = np.array((100, 2.0), dtype=[("n", "<u4"), ("a", "<f4")])
    np.testing.assert_array_equal(_run(mgr, glsl(MIXED), X, rec[()]), _expected(X, 100, 2.0))
    np.testing.assert_array_equal(_run(mgr, glsl(MIXED), X, rec), _expected(X, 100, 2.0))
    wide = np.array((50.0, 3), dtype=[("f0", "<f8"), ("f1", "<i8")])[()]
    np.testing.assert_array_equal(_run(mgr, glsl(MIXED), X, wide), _expected(X, 50, 3.0))


@needs_glsl_compiler("member names need a compile without -O, which no cache holds")
def test_dict_and_structured_scalar_by_name(mgr):
    spirv = _named(MIXED)
    assert [m.name for m in reflect(spirv).push_constant_members] == ["n", "a"]
    np.testing.assert_array_equal(_run(mgr, spirv, X, {"a": 2.0, "n": 100}),
                                  _expected(X, 100, 2.0))
    rec = np.array((2.0, 100), dtype=[("a", "<f4"), ("n", "<u4")])[()]   # by name, any order
    np.testing.assert_array_equal(_run(mgr, spirv, X, rec), _expected(X, 100, 2.0))
    t = mgr.tensor(X)
    o = mgr.tensor(np.zeros_like(X))
    with pytest.raises(sg.ShaderError, match=r"push_consts leaves member `a` of the shader's "
                                             r"push-constant block `P \{ uint n; float a; \}` "
                                             r"\(8 bytes\) unset"):
        mgr.algorithm([t, o], spirv, push_consts={"n": 1})
    with pytest.raises(ValueError, match=r"push_consts names 'b', which the shader's "
                                         r"push-constant block `P \{ uint n; float a; \}`"):
        mgr.algorithm([t, o], spirv, push_consts={"n": 1, "a": 1.0, "b": 2})
    with pytest.raises(ValueError, match=r"push_consts\['n'\]=-1 does not fit member `n`, "
                                         r"a uint \(32-bit uint\)"):
        mgr.algorithm([t, o], spirv, push_consts={"n": -1, "a": 1.0})
    with pytest.raises(ValueError, match=r"push_consts\[0\]=2.5 does not fit member `n`"):
        mgr.algorithm([t, o], spirv, push_consts=[2.5, 1.0])
    with pytest.raises(ValueError, match=r"push_consts names 'x'"):
        mgr.algorithm([t, o], spirv,
                      push_consts=np.array((1, 2.0), dtype=[("x", "<u4"), ("a", "<f4")])[()])
    t.destroy()
    o.destroy()


def test_dict_needs_member_names(mgr, glsl):
    with mgr.tensor(X) as t, mgr.tensor(np.zeros_like(X)) as o, pytest.raises(
            ValueError, match=r"push constants were given by name, but the module does not "
                              r"name the members.*glslc -O.*`\{ uint _0; float _1; \}`"):
        mgr.algorithm([t, o], glsl(MIXED), push_consts={"n": 1, "a": 2.0})


@pytest.mark.parametrize("push, exc, match", [
    ([2.5, 1.0], ValueError, r"push_consts\[0\]=2.5 does not fit member 0, a uint \(32-bit "
                             r"uint\): give a whole number from 0 to 4294967295"),
    ([-1, 1.0], ValueError, r"push_consts\[0\]=-1 does not fit member 0, a uint"),
    ([2 ** 32, 1.0], ValueError, r"push_consts\[0\]=4294967296 does not fit member 0, a uint"),
    ([float("nan"), 1.0], ValueError, r"push_consts\[0\]=nan does not fit member 0"),
    ([1, 1e39], ValueError, r"push_consts\[1\]=1e\+39 does not fit member 1, a float "
                            r"\(32-bit float\): give a number of magnitude at most 3.40282e\+38"),
    ([1, 10 ** 400], ValueError, r"push_consts\[1\]=1000.* does not fit member 1, a float"),
    (["7", 1.0], TypeError, r"push_consts\[0\] is '7' \(str\), but member 0 of the "
                            r"push-constant block is a uint: give a number"),
    ([1, None], TypeError, r"push_consts\[1\] is None \(NoneType\), but member 1"),
    ([1, 1j], TypeError, r"push_consts\[1\] is 1j \(complex\)"),
    ([[1, 2], 1.0], ValueError, r"push_consts\[0\] gives 2 values, but member 0 is a uint"),
    ([1, 2.0, 3], ValueError, r"push_consts gives 3 values, but the shader's push-constant "
                              r"block `\{ uint _0; float _1; \}` \(8 bytes\) has 2 members"),
    ([1], sg.ShaderError, r"push_consts gives 1 value, but the shader's push-constant block "
                          r"`\{ uint _0; float _1; \}` \(8 bytes\) has 2 members: member 1 "
                          r"would be left unset"),
    ("12", TypeError, r"push_consts must be a list of numbers, a dict by member name or a "
                      r"numpy array, not str '12'"),
    (5, TypeError, r"push_consts must be a list of numbers.*not int 5"),
    (np.zeros(1, np.uint32), sg.ShaderError, r"the shader's push-constant block "
                                             r"`\{ uint _0; float _1; \}` \(8 bytes\) takes 8 "
                                             r"bytes, 4 bytes were given"),
    (np.zeros(3, np.uint32), ValueError, r"the shader's push-constant block `.*` \(8 bytes\) "
                                         r"takes 8 bytes, 12 bytes were given"),
    (np.array(["a"]), TypeError, r"push constants of dtype <U1 are not supported"),
    (np.zeros(2, dtype=[("n", "<u4")]), ValueError, r"a structured array of push constants "
                                                    r"must hold one record, not 2"),
])
def test_values_that_do_not_fit_are_refused(mgr, glsl, push, exc, match):
    """At algorithm creation and at an OpAlgoDispatch override, naming the member."""
    spirv = glsl(MIXED)
    with mgr.tensor(X) as t, mgr.tensor(np.zeros_like(X)) as o:
        with pytest.raises(exc, match=r"algorithm over 2 tensors: " + match):
            mgr.algorithm([t, o], spirv, push_consts=push)
        with mgr.algorithm([t, o], spirv, push_consts=[1, 1.0]) as algo:
            with pytest.raises(exc, match=r"OpAlgoDispatch\(.*\): " + match):
                sg.OpAlgoDispatch(algo, push_consts=push)


def test_vectors_arrays_and_ints(mgr, glsl):
    spirv = glsl(WIDE)
    members = reflect(spirv).push_constant_members
    assert [(m.offset, m.type_name, m.slots) for m in members] == [
        (0, "int", (0,)), (8, "uvec2", (8, 12)), (16, "float[3]", (16, 20, 24)),
        (32, "vec3", (32, 36, 40)), (44, "uint", (44,))]
    want = [-7, 3, 4, 0.5, 1.5, 2.5, -1, -2, -3, 9]
    for push in ([-7, [3, 4], [0.5, 1.5, 2.5], (-1, -2, -3), 9],
                 [-7, np.array([3, 4]), np.array([0.5, 1.5, 2.5]), [-1.0, -2.0, -3.0], 9.0]):
        with mgr.tensor(np.zeros(10, np.float32)) as o, \
                mgr.algorithm([o], spirv, (1, 1, 1), push_consts=push) as algo:
            mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([o]))
            assert o.data().tolist() == want
    with mgr.tensor(np.zeros(10, np.float32)) as o:
        with pytest.raises(TypeError, match=r"push_consts\[1\] is 3 \(int\), but member 1 is "
                                            r"a uvec2: give its 2 values as a list"):
            mgr.algorithm([o], spirv, (1, 1, 1), push_consts=[0, 3, [0] * 3, [0] * 3, 0])
        with pytest.raises(ValueError, match=r"push_consts\[2\] gives 2 values, but member 2 "
                                             r"is a float\[3\] of 3"):
            mgr.algorithm([o], spirv, (1, 1, 1), push_consts=[0, [0, 0], [0] * 2, [0] * 3, 0])
        with pytest.raises(ValueError, match=r"push_consts\[1\]\[1\]=-4 does not fit member 1, "
                                             r"a uvec2 \(32-bit uint\)"):
            mgr.algorithm([o], spirv, (1, 1, 1), push_consts=[0, [3, -4], [0] * 3, [0] * 3, 0])
        with pytest.raises(ValueError, match=r"push_consts\[0\]=2147483648 does not fit "
                                             r"member 0, a int \(32-bit int\): give a whole "
                                             r"number from -2147483648 to 2147483647"):
            mgr.algorithm([o], spirv, (1, 1, 1),
                          push_consts=[2 ** 31, [0, 0], [0] * 3, [0] * 3, 0])


def test_64_bit_members(mgr, glsl):
    if not (mgr.device.float64 and mgr.device.int64):
        pytest.skip(f"{mgr.device.name} lacks shaderFloat64 or shaderInt64")
    spirv = glsl(SIXTY_FOUR)
    assert [(m.offset, m.type_name) for m in reflect(spirv).push_constant_members] == [
        (0, "uint"), (8, "double"), (16, "int64_t")]
    big = -(2 ** 62) + 5
    with mgr.tensor(np.zeros(1, np.float64)) as o, mgr.tensor(np.zeros(1, np.int64)) as q, \
            mgr.algorithm([o, q], spirv, (1, 1, 1), push_consts=[3, 0.1, big]) as algo:
        mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([o, q]))
        assert o.data()[0] == 0.1 * 3          # a double, not a float32's 0.1
        assert q.data()[0] == big - 1
        with pytest.raises(ValueError, match=r"push_consts\[2\]=9223372036854775808 does not "
                                             r"fit member 2, a int64_t \(64-bit int\)"):
            sg.OpAlgoDispatch(algo, push_consts=[3, 0.1, 2 ** 63])


def test_dispatch_override_is_typed(mgr, glsl):
    spirv = glsl(MIXED)
    with mgr.tensor(X) as t, mgr.tensor(np.zeros_like(X)) as o, \
            mgr.algorithm([t, o], spirv, push_consts=[100, 2.0]) as algo:
        mgr.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo, push_consts=(50, 3.0)),
                sg.OpTensorSyncLocal([o]))
        np.testing.assert_array_equal(o.data(), _expected(X, 50, 3.0))
        mgr.run(sg.OpAlgoDispatch(algo, push_consts=None), sg.OpTensorSyncLocal([o]))
        np.testing.assert_array_equal(o.data(), _expected(X, 100, 2.0))   # its own again
        mgr.run(sg.OpAlgoDispatch(algo, push_consts=np.array([0, 0], np.uint32)),
                sg.OpTensorSyncLocal([o]))
        np.testing.assert_array_equal(o.data(), _expected(X, 0, 0.0))


def test_stream_with_a_typed_block(mgr, glsl):
    spirv = glsl("""
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { float a; int k; uint m; } p;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer O { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(o.length())) o[i] = x[i] * p.a + float(p.k) + float(p.m % 7u);
}
""")
    x = np.arange(10000, dtype=np.float32)
    out = np.zeros_like(x)
    mgr.stream(spirv, inputs=[x], outputs=[out], push_consts=[2.0, -3, 4_000_000_000],
               chunk_bytes=8192)
    np.testing.assert_array_equal(out, x * 2 - 3 + 4_000_000_000 % 7)
    with pytest.raises(ValueError, match=r"stream\(\): push_consts\[1\]=1.5 does not fit "
                                         r"member 1, a int"):
        mgr.stream(spirv, inputs=[x], outputs=[out], push_consts=[2.0, 1.5, 0])
    with pytest.raises(sg.ShaderError, match=r"stream\(\): the shader declares the "
                                             r"push-constant block `\{ float _0; int _1; "
                                             r"uint _2; \}` \(12 bytes\)"):
        mgr.stream(spirv, inputs=[x], outputs=[out])


# -- item 2: a declared block must be given ------------------------------------------------
def test_a_declared_block_left_unset_is_a_shader_error(mgr, glsl):
    """On main, the algorithm ran with zeros the user never gave."""
    spirv = glsl(MIXED)
    with mgr.tensor(X) as t, mgr.tensor(np.zeros_like(X)) as o:
        for missing in (None, [], np.zeros(0, np.float32)):
            with pytest.raises(sg.ShaderError, match=(
                    r"algorithm over 2 tensors: the shader declares the push-constant block "
                    r"`\{ uint _0; float _1; \}` \(8 bytes\) and no push constants were "
                    r"given.*zeros on purpose: push_consts=\[0, 0\]")):
                mgr.algorithm([t, o], spirv, push_consts=missing)
        # zeros on purpose are values like any other
        for zeros in ([0, 0], np.zeros(2, np.uint32), bytes(8)):
            with mgr.algorithm([t, o], spirv, push_consts=zeros) as algo:
                mgr.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo),
                        sg.OpTensorSyncLocal([o]))
                np.testing.assert_array_equal(o.data(), np.full_like(X, -1))
                # an override that fills part of the block
                with pytest.raises(sg.ShaderError, match=(
                        r"OpAlgoDispatch\(.*\): the shader's push-constant block "
                        r"`\{ uint _0; float _1; \}` \(8 bytes\) takes 8 bytes, 4 bytes were "
                        r"given: the rest would be left unset")):
                    sg.OpAlgoDispatch(algo, push_consts=np.array([5], np.uint32))


def test_a_shader_without_a_block_takes_none(mgr, glsl):
    spirv = glsl("""
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer O { float o[]; };
void main() { o[gl_GlobalInvocationID.x] += 1.0; }
""")
    with mgr.tensor(np.zeros(4, np.float32)) as o:
        with mgr.algorithm([o], spirv, push_consts=[]) as algo:
            mgr.run(sg.OpTensorSyncDevice([o]), sg.OpAlgoDispatch(algo),
                    sg.OpTensorSyncLocal([o]))
        assert o.data().tolist() == [1.0] * 4
        with pytest.raises(ValueError, match=r"push constants were given \(1 value\) but the "
                                             r"shader declares none"):
            mgr.algorithm([o], spirv, push_consts=[1.0])


# -- scopedgpu.kp keeps kp's conventions ---------------------------------------------------
@pytest.fixture
def kmgr():
    m = kp.Manager()
    yield m
    m.destroy()


def test_kp_lists_stay_float32(kmgr, glsl):
    """kp sends a list as float32 values whatever the shader declares: n reads the bits
    of 100.0f (1120403456), so every element is scaled."""
    x = kmgr.tensor(X)
    o = kmgr.tensor(np.zeros_like(X))
    algo = kmgr.algorithm([x, o], glsl(MIXED), (2, 1, 1), [], [100, 2.0])
    kmgr.sequence().record(kp.OpTensorSyncDevice([x])).record(kp.OpAlgoDispatch(algo)) \
        .record(kp.OpTensorSyncLocal([o])).eval()
    np.testing.assert_array_equal(o.data(), _expected(X, 1120403456, 2.0))
    with pytest.raises(ValueError, match=r"push_consts\[0\]=1e\+39 does not fit a float32"):
        kmgr.sequence().record(kp.OpAlgoDispatch(algo, [1e39, 1.0]))


def test_kp_algorithm_without_push_constants_runs_with_zeros(kmgr, glsl):
    """Kompute builds the pipeline without a push-constant range (the shader reads
    undefined values) and raises nothing; scopedgpu.kp gives the block zeros."""
    x = kmgr.tensor(X)
    o = kmgr.tensor(np.zeros_like(X))
    algo = kmgr.algorithm([x, o], glsl(MIXED), (2, 1, 1))
    kmgr.sequence().record(kp.OpTensorSyncDevice([x])).record(kp.OpAlgoDispatch(algo)) \
        .record(kp.OpTensorSyncLocal([o])).eval()
    np.testing.assert_array_equal(o.data(), np.full_like(X, -1))
