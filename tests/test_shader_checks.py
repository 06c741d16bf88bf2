"""Checks made at algorithm() and compile_glsl() time: dtype against the shader's element
type, and compiler errors that name the line."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._spirv import reflect

SHADER = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 1) buffer B { uint n; vec4 b[]; };
layout(set = 0, binding = 2) buffer C { int c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = int(a[i] + b[i].x); }
"""


def test_reflection_reports_element_types(glsl):
    info = reflect(glsl(SHADER))
    assert info.element_types == {0: ("float", 32), 1: ("float", 32), 2: ("int", 32)}


def test_float64_into_float_array_is_an_error(mgr, glsl):
    spirv = glsl(SHADER)
    x = np.arange(4, dtype=np.float32) / np.sqrt(2)   # numpy promotes: float64
    assert x.dtype == np.float64
    a, b, c = mgr.tensor(x), mgr.empty(16), mgr.empty(4, np.int32)
    with pytest.raises(sg.ShaderError) as exc:
        mgr.algorithm([a, b, c], spirv)
    msg = str(exc.value)
    assert "binding 0" in msg and "float64" in msg and "`float[]`" in msg
    assert "dtype=float32" in msg


def test_int64_into_int_array_is_an_error(mgr, glsl):
    a, b, c = mgr.empty(4), mgr.empty(16), mgr.tensor(np.arange(4, dtype=np.int64))
    with pytest.raises(sg.ShaderError, match=r"binding 2 .*int64.*`int\[\]`"):
        mgr.algorithm([a, b, c], glsl(SHADER))


def test_same_width_reinterpretation_is_an_error(mgr, glsl):
    a = mgr.tensor(np.arange(4, dtype=np.uint32))        # uint bits read as float
    b, c = mgr.empty(16), mgr.tensor(np.zeros(4, np.uint32))  # int/uint: silent
    with pytest.raises(sg.ShaderError, match=r"binding 0 .*uint32.*`float\[\]`"):
        mgr.algorithm([a, b, c], glsl(SHADER))


def test_reinterpret_opts_in(mgr, glsl):
    """reinterpret=True passes the bytes as they are: uint32 1.0f bit patterns read as
    float by the shader, no error, no warning."""
    bits = np.array([1.0, 2.0, 3.0, 4.0], np.float32).view(np.uint32)
    a = mgr.tensor(bits)
    b = mgr.tensor(np.zeros(32, np.float32))   # uint n, then vec4 b[4]
    c = mgr.tensor(np.zeros(4, np.int32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        algo = mgr.algorithm([a, b, c], glsl(SHADER), reinterpret=True)
    mgr.run(sg.OpTensorSyncDevice([a, b, c]), sg.OpAlgoDispatch(algo, workgroup=(4, 1, 1)),
            sg.OpTensorSyncLocal([c]))
    assert c.data().tolist() == [1, 2, 3, 4]
    algo.destroy()


def test_view_says_it_is_deliberate(mgr, glsl):
    raw = np.arange(4, dtype=np.uint32)
    a = mgr.tensor(raw.view(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mgr.algorithm([a, mgr.empty(16), mgr.empty(4, np.int32)], glsl(SHADER)).destroy()


def test_packed_bytes_into_uint_array_is_an_error(mgr, glsl):
    spirv = glsl("""#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() { a[gl_GlobalInvocationID.x] += 1u; }
""")
    t = mgr.tensor(np.zeros(16, np.uint8))
    with pytest.raises(sg.ShaderError, match="uint8"):
        mgr.algorithm([t], spirv, workgroup=(4, 1, 1))
    mgr.algorithm([mgr.tensor(np.zeros(16, np.uint8).view(np.uint32))], spirv,
                  workgroup=(4, 1, 1)).destroy()


@pytest.mark.skipif(shutil.which("glslc") is None and shutil.which("glslangValidator") is None,
                    reason="no GLSL compiler installed (compile errors need one)")
def test_compile_error_names_the_line():
    src = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n  undefined_thing = 1;\n}\n"
    with pytest.raises(sg.ShaderError) as exc:
        sg.compile_glsl(src)
    assert exc.value.line == 4                       # type: ignore[attr-defined]
    assert "undefined_thing" in str(exc.value)
    assert "4 |   undefined_thing = 1;" in str(exc.value)


GLSL_TYPES = {  # shader element type -> (kind, bits)
    "float": ("float", 32), "double": ("float", 64), "int": ("int", 32),
    "uint": ("uint", 32), "int64_t": ("int", 64), "uint8_t": ("uint", 8),
    "float16_t": ("float", 16),
}


def documented_outcome(dtype: np.dtype, glsl: str) -> str:
    """The table of docs/guide.md, section 3, written out independently of the code."""
    kind = {"f": "float", "i": "int", "u": "uint"}[dtype.kind]
    bits = dtype.itemsize * 8
    skind, sbits = GLSL_TYPES[glsl]
    if (kind, bits) == (skind, sbits):
        return "ok"
    if kind != "float" and skind != "float" and bits == sbits:
        return "ok"                                  # int/uint of one width
    return "error"                                   # any other type or width


def test_every_dtype_against_every_element_type(mgr, glsl):
    from scopedgpu.testing import supported_dtypes
    ext = ("#extension GL_EXT_shader_explicit_arithmetic_types : require\n"
           "#extension GL_EXT_shader_16bit_storage : require\n"
           "#extension GL_EXT_shader_8bit_storage : require\n")
    seen = set()
    for shader_type in GLSL_TYPES:
        kind, bits = GLSL_TYPES[shader_type]
        if (bits == 64 and kind == "float" and not mgr.device.float64) or \
                (bits == 64 and kind != "float" and not mgr.device.int64) or \
                (bits == 16 and not mgr.device.float16) or (bits == 8 and not mgr.device.int8):
            continue
        spirv = glsl(f"#version 450\n{ext}layout(local_size_x = 1) in;\n"
                     f"layout(set = 0, binding = 0) buffer A {{ {shader_type} a[]; }};\n"
                     f"void main() {{ a[gl_GlobalInvocationID.x] = a[0]; }}\n")
        for dt in supported_dtypes(mgr):
            expected = documented_outcome(dt, shader_type)
            t = mgr.tensor(np.zeros(8, dt))
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                try:
                    mgr.algorithm([t], spirv, workgroup=(1, 1, 1)).destroy()
                    got = "ok"
                except sg.ShaderError as exc:
                    assert f"`{shader_type}[]`" in str(exc) and str(dt) in str(exc)
                    got = "error"
            assert got == expected, f"{dt} on {shader_type}[]: {got}, documented {expected}"
            seen.add(got)
            t.destroy()
    assert seen == {"ok", "error"}
