"""Bindings are matched by number: binding i is tensors[i]. A binding the module does not
use (never declared, or removed by compile_glsl's optimizer) still takes a tensor, which
the shader ignores; sparse binding numbers work."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg
from tests.kompute.utils import compile_source

# Declares bindings 0, 1 and 2 and never uses 1 (valid Vulkan; kp runs it). glslc -O
# removes binding 1 from the module.
UNUSED_BINDING = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 1) buffer B { float b[]; };
layout(set = 0, binding = 2) buffer C { float c[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    c[i] = a[i] * 2.0;
}
"""

# Bindings 0 and 3 only.
SPARSE = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 3) buffer D { int d[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    d[i] = int(a[i]) + 1;
}
"""


def test_unused_binding_takes_a_tensor_and_skips_it(mgr):
    a = mgr.tensor([1.0, 2.0, 3.0])
    b = mgr.tensor([7.0, 8.0, 9.0])
    c = mgr.tensor([0.0, 0.0, 0.0])
    algo = mgr.algorithm([a, b, c], compile_source(UNUSED_BINDING), (3, 1, 1))
    mgr.run(sg.OpTensorSyncDevice([a, b, c]), sg.OpAlgoDispatch(algo),
            sg.OpTensorSyncLocal([b, c]))
    assert c.data().tolist() == [2.0, 4.0, 6.0]
    assert b.data().tolist() == [7.0, 8.0, 9.0]
    algo.destroy()


def test_unused_binding_takes_any_dtype(mgr):
    """The skipped binding has no declared element type in the module, so no dtype check."""
    a = mgr.tensor([1.0, 2.0, 3.0])
    b = mgr.tensor(np.arange(5, dtype=np.int64 if mgr.device.int64 else np.uint8))
    c = mgr.tensor([0.0, 0.0, 0.0])
    algo = mgr.algorithm([a, b, c], compile_source(UNUSED_BINDING), (3, 1, 1))
    mgr.run(sg.OpTensorSyncDevice([a, c]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([c]))
    assert c.data().tolist() == [2.0, 4.0, 6.0]
    algo.destroy()


def test_a_used_binding_without_a_tensor_is_an_error(mgr):
    a, c = mgr.tensor([1.0, 2.0, 3.0]), mgr.tensor([0.0, 0.0, 0.0])
    with pytest.raises(sg.ShaderError, match=r"declares storage-buffer bindings \[0, 2\].*"
                                             r"binding 2 needs at least 3 tensors"):
        mgr.algorithm([a, c], compile_source(UNUSED_BINDING), (3, 1, 1))


def test_sparse_bindings(mgr):
    a = mgr.tensor([1.0, 2.0, 3.0, 4.0])
    skip1, skip2 = mgr.tensor([5.0]), mgr.tensor(np.zeros(2, np.uint32))
    d = mgr.tensor(np.zeros(4, np.int32))
    algo = mgr.algorithm([a, skip1, skip2, d], compile_source(SPARSE), (4, 1, 1))
    mgr.run(sg.OpTensorSyncDevice([a]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([d]))
    assert d.data().tolist() == [2, 3, 4, 5]
    # More tensors than the module's highest binding: the extra ones are skipped too.
    extra = mgr.tensor([0.0])
    algo2 = mgr.algorithm([a, skip1, skip2, d, extra], compile_source(SPARSE), (4, 1, 1))
    mgr.run(sg.OpAlgoDispatch(algo2), sg.OpTensorSyncLocal([d]))
    assert d.data().tolist() == [2, 3, 4, 5]
    with pytest.raises(sg.ShaderError, match="binding 3 needs at least 4 tensors"):
        mgr.algorithm([a, skip1, skip2], compile_source(SPARSE), (4, 1, 1))
    algo.destroy()
    algo2.destroy()


def test_one_shader_over_different_binding_counts_shares_nothing_wrong(mgr):
    """The pipeline cache keys on the number of bindings: the same SPIR-V bound to three
    and to four tensors gets a layout of each size."""
    a = mgr.tensor([1.0, 2.0])
    b, c, e = mgr.tensor([0.0, 0.0]), mgr.tensor([0.0, 0.0]), mgr.tensor([0.0, 0.0])
    spirv = compile_source(UNUSED_BINDING)
    algo3 = mgr.algorithm([a, b, c], spirv, (2, 1, 1))
    algo4 = mgr.algorithm([a, b, c, e], spirv, (2, 1, 1))
    mgr.run(sg.OpTensorSyncDevice([a]), sg.OpAlgoDispatch(algo3), sg.OpAlgoDispatch(algo4),
            sg.OpTensorSyncLocal([c]))
    assert c.data().tolist() == [2.0, 4.0]
    algo3.destroy()
    algo4.destroy()
