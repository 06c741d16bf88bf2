"""Debug mode catches the forgotten sync ops (issue 21): a kernel that reads a tensor whose
host data never reached the device or changed since its last sync (a missing
OpTensorSyncDevice), and data() of a tensor a kernel wrote after its last download (a
missing OpTensorSyncLocal), each warn SyncWarning naming the tensor. What the shader only
writes, or only reads, gives no false alarm, and without debug mode nothing is checked."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu.testing import leak_checked_manager

ADD_ONE = """#version 450
layout(local_size_x = 64) in;
layout(binding = 0) buffer A { float a[]; };
layout(binding = 1) buffer B { float b[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < a.length()) b[i] = a[i] + 1.0; }"""

N = 256


@pytest.fixture
def dmgr():
    with leak_checked_manager(debug=True) as m:
        yield m


@pytest.fixture
def add_one(glsl):
    return glsl(ADD_ONE)


def _run(mgr, *ops):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        mgr.run(*ops)
    return [w for w in got if issubclass(w.category, sg.SyncWarning)]


def _read(t):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        data = t.data().copy()
    return data, [w for w in got if issubclass(w.category, sg.SyncWarning)]


def test_a_kernel_reading_a_tensor_never_uploaded_warns(dmgr, add_one):
    a = dmgr.tensor(np.arange(N, dtype=np.float32))
    b = dmgr.empty(N)
    with dmgr.algorithm([a, b], add_one) as algo:
        got = _run(dmgr, sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([b]))
        assert len(got) == 1
        msg = str(got[0].message)
        assert repr(a) in msg and "OpTensorSyncDevice" in msg and "never reached" in msg
        assert got[0].filename == __file__   # the user's line, not the library's
        np.testing.assert_array_equal(b.data(), np.ones(N, np.float32))   # zeros + 1
        # with the upload: no warning, and the right answer
        assert _run(dmgr, sg.OpTensorSyncDevice([a]), sg.OpAlgoDispatch(algo),
                    sg.OpTensorSyncLocal([b])) == []
        np.testing.assert_array_equal(b.data(), np.arange(N, dtype=np.float32) + 1)
    a.destroy()
    b.destroy()


def test_host_data_changed_since_the_upload_warns(dmgr, add_one):
    a = dmgr.tensor(np.arange(N, dtype=np.float32))
    b = dmgr.empty(N)
    with dmgr.algorithm([a, b], add_one) as algo, dmgr.sequence() as compute:
        compute.record(sg.OpAlgoDispatch(algo)).record(sg.OpTensorSyncLocal([b]))
        assert _run(dmgr, sg.OpTensorSyncDevice([a])) == []
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            compute.eval()
            a.data()[:] = 7          # a new input, and the upload forgotten
            compute.eval()
        sync = [w for w in got if issubclass(w.category, sg.SyncWarning)]
        assert len(sync) == 1 and "changed since its last sync" in str(sync[0].message)
        np.testing.assert_array_equal(b.data(), np.arange(N, dtype=np.float32) + 1)
        assert _run(dmgr, sg.OpTensorSyncDevice([a])) == []
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            compute.eval()
        assert [w for w in got if issubclass(w.category, sg.SyncWarning)] == []
        np.testing.assert_array_equal(b.data(), np.full(N, 8, np.float32))
    a.destroy()
    b.destroy()


def test_reading_data_a_kernel_wrote_without_a_download_warns_once(dmgr, add_one):
    a = dmgr.tensor(np.arange(N, dtype=np.float32))
    b = dmgr.tensor(np.zeros(N, np.float32))
    with dmgr.algorithm([a, b], add_one) as algo:
        assert _run(dmgr, sg.OpTensorSyncDevice([a]), sg.OpAlgoDispatch(algo)) == []
        data, got = _read(b)
        assert len(got) == 1
        msg = str(got[0].message)
        assert repr(b) in msg and "OpTensorSyncLocal" in msg
        np.testing.assert_array_equal(data, np.zeros(N, np.float32))   # stale, as warned
        assert _read(b)[1] == []          # once
        assert _read(a)[1] == []          # the kernel only reads a
        assert _run(dmgr, sg.OpTensorSyncLocal([b])) == []
        data, got = _read(b)
        assert got == []
        np.testing.assert_array_equal(data, np.arange(N, dtype=np.float32) + 1)
    a.destroy()
    b.destroy()


def test_an_output_the_kernel_only_writes_needs_no_upload(dmgr, add_one):
    """b holds host data that never reached the device, but the shader never reads it."""
    a = dmgr.tensor(np.arange(N, dtype=np.float32))
    b = dmgr.tensor(np.full(N, 3, np.float32))
    with dmgr.algorithm([a, b], add_one) as algo:
        assert _run(dmgr, sg.OpTensorSyncDevice([a]), sg.OpAlgoDispatch(algo),
                    sg.OpTensorSyncLocal([b])) == []
        np.testing.assert_array_equal(b.data(), np.arange(N, dtype=np.float32) + 1)
    a.destroy()
    b.destroy()


def test_without_debug_nothing_is_checked(add_one):
    with leak_checked_manager(debug=False) as mgr:
        assert not mgr.debug
        a = mgr.tensor(np.arange(N, dtype=np.float32))
        b = mgr.empty(N)
        with mgr.algorithm([a, b], add_one) as algo:
            assert _run(mgr, sg.OpAlgoDispatch(algo)) == []
            assert _read(b)[1] == []
        a.destroy()
        b.destroy()


def test_the_shader_says_what_it_reads_and_writes(glsl):
    """The reflection behind the checks: loads, stores, atomics, through access chains and
    a function's inout parameter (read and written), readonly and writeonly buffers."""
    from scopedgpu._spirv import reflect

    src = """#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) writeonly buffer B { float b[]; };
layout(binding = 2) buffer C { uint c[]; };
layout(binding = 3) buffer D { float d[]; };
layout(binding = 4) buffer E { float e[]; };
layout(binding = 5) buffer F { float f[]; };
void bump(inout float x) { x += 1.0; }
void main() {
    uint i = gl_GlobalInvocationID.x;
    b[i] = a[i] + e[i];
    atomicAdd(c[0], 1u);
    bump(d[i]);
}"""
    access = dict(reflect(glsl(src)).binding_access)
    # f is never used: the optimizer may drop its declaration
    assert access.pop(5, (False, False)) == (False, False)
    assert access == {0: (True, False), 1: (False, True), 2: (True, True), 3: (True, True),
                      4: (True, False)}
