"""numpy bool arrays (issue 21, item 5): one byte of 0 or 1 each, so a shader reads and
writes them as `uint8_t[]` (GL_EXT_shader_8bit_storage, the device's int8 feature, as for
uint8). They used to be refused, where numpy users expect uint8-backed booleans."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg

NOT = """#version 450
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { uint8_t a[]; };
layout(set = 0, binding = 1) buffer B { uint8_t b[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length()) b[i] = uint8_t(1u - uint(a[i]));
}
"""


@pytest.fixture
def int8(mgr):
    if not mgr.device.int8:
        pytest.skip("the device has no 8-bit storage (int8): bool tensors need it")
    return mgr


def test_bool_tensor_round_trips_and_a_kernel_negates_it(int8, glsl):
    mgr = int8
    x = np.random.default_rng(1).random(1000) < 0.5
    a = mgr.tensor(x)
    b = mgr.tensor(np.zeros(1000, bool))
    assert a.dtype == np.bool_ and a.nbytes == 1000
    algo = mgr.algorithm([a, b], glsl(NOT))
    with mgr.sequence() as s:
        s.record(sg.OpTensorSyncDevice([a, b])).record(sg.OpAlgoDispatch(algo))
        s.record(sg.OpTensorSyncLocal([b]))
        s.eval()
    assert b.data().dtype == np.bool_
    np.testing.assert_array_equal(b.data(), ~x)
    algo.destroy()
    a.destroy()
    b.destroy()


UINT = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < a.length()) a[i] += 1u; }
"""


def test_bool_on_a_wider_binding_is_a_shader_error(int8, glsl):
    t = int8.tensor(np.ones(64, bool))
    with pytest.raises(sg.ShaderError, match=r"dtype bool.*`uint\[\]`"):
        int8.algorithm([t], glsl(UINT))
    t.destroy()


def test_bool_arrays_stream(int8, glsl):
    x = np.arange(5000) % 3 == 0
    out = np.zeros(5000, bool)
    int8.stream(glsl(NOT), inputs=[x], outputs=[out], chunk_bytes=1024)
    np.testing.assert_array_equal(out, ~x)
