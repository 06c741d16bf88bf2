"""Dispatches beyond the device's maxComputeWorkGroupCount (issue 22): recorded as parts
within the limit, each pushing its base, the shader rewritten to add it where it reads
gl_GlobalInvocationID and gl_WorkGroupID (scopedgpu/_spirv_split.py). Checked against
numpy at sizes the device's own limit makes need the split; refused, saying why, where
the shader reads gl_NumWorkGroups. Shaders come precompiled from tests/kompute/spirv on
machines without glslc (tests.kompute.utils.compile_source)."""
from __future__ import annotations

import gc
import struct

import numpy as np
import pytest

import scopedgpu as sg
import scopedgpu.kp as kp
from scopedgpu._spirv import reflect
from scopedgpu._spirv_split import CannotSplit, split_module
from scopedgpu._spirv_val import check_module
from scopedgpu.algorithm import dispatch_parts
from scopedgpu.manager import live_vulkan_objects
from tests.kompute.utils import compile_source

# One invocation per element, gl_GlobalInvocationID.x its index (kp's default workgroup).
PER_ELEMENT = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(set = 0, binding = 1) writeonly buffer O { uint o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    o[i] = a[i] * 3u + i;
}
"""

# Groups of 4 on a 2-D grid: the index from gl_GlobalInvocationID, the value from
# gl_WorkGroupID and gl_LocalInvocationID.
GROUPS_2D = """
#version 450
layout(local_size_x = 4) in;
layout(set = 0, binding = 0) writeonly buffer O { uint o[]; };
void main() {
    uvec3 g = gl_GlobalInvocationID;
    o[g.y * 8u + g.x] = gl_WorkGroupID.y * 10u + gl_WorkGroupID.x * 5u + gl_LocalInvocationID.x;
}
"""

# The user's own push constants beside the base.
PUSHED = """
#version 450
layout(local_size_x = 2) in;
layout(push_constant) uniform P { uint mul; uint add; } p;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < a.length()) a[i] = a[i] * p.mul + p.add + gl_WorkGroupID.x;
}
"""

# Reads gl_NumWorkGroups: each part would see its own count.
NUM_GROUPS = """
#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() { a[gl_GlobalInvocationID.x] = gl_NumWorkGroups.x; }
"""

# A push-constant block of 128 bytes, every device's least maxPushConstantsSize.
FULL_PUSH = """
#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { vec4 v[8]; } p;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() { a[gl_GlobalInvocationID.x] = p.v[gl_GlobalInvocationID.x % 8u].x; }
"""

# kp's README kernel, kp style (float tensors, local_size_x = 1, the default workgroup).
KP_MULT = """
#version 450
layout (local_size_x = 1) in;
layout(set = 0, binding = 0) buffer buf_in_a { float in_a[]; };
layout(set = 0, binding = 1) buffer buf_in_b { float in_b[]; };
layout(set = 0, binding = 2) buffer buf_out { float out_a[]; };
void main() {
    uint index = gl_GlobalInvocationID.x;
    out_a[index] = in_a[index] * in_b[index];
}
"""


def _axis0_size(mgr, per_element_bytes: int = 4) -> int:
    """A count of elements just beyond 2 x maxComputeWorkGroupCount[0] (three parts);
    skips where that would be too large a tensor (a GPU's limit of 2^31 - 1)."""
    maxc = mgr.device.max_workgroup_count[0]
    n = 2 * maxc + 7
    if n * per_element_bytes > min(16 << 20, mgr.device.max_storage_buffer_range):
        pytest.skip(f"maxComputeWorkGroupCount[0] is {maxc}: a dispatch beyond it would "
                    f"take {n * per_element_bytes} bytes")
    return n


def _quiet_counts(mgr) -> dict:
    gc.collect()
    mgr.empty_cache()
    return mgr.live_objects()


def test_global_invocation_id_beyond_the_limit(mgr):
    """The default workgroup (one group per element) beyond maxComputeWorkGroupCount[0]
    runs as three parts and computes what one dispatch would; two dependent dispatches
    in one sequence are ordered as two (the parts of one are one dispatch to the
    recorder); everything made is freed."""
    n = _axis0_size(mgr)
    before = _quiet_counts(mgr)
    a = np.arange(n, dtype=np.uint32) % 1013
    ta = mgr.tensor(a)
    to = mgr.tensor(np.zeros(n, np.uint32))
    back = mgr.tensor(np.zeros(n, np.uint32))
    spirv = compile_source(PER_ELEMENT)
    algo = mgr.algorithm([ta, to], spirv)
    assert algo.workgroup == (n, 1, 1)
    maxc = mgr.device.max_workgroup_count
    assert algo.parts is not None and len(algo.parts) == -(-n // maxc[0]) == 3
    # ... and back: o -> a reads what the first dispatch wrote (a barrier between them).
    again = mgr.algorithm([to, back], spirv)
    mgr.run(sg.OpTensorSyncDevice([ta]), sg.OpAlgoDispatch(algo), sg.OpAlgoDispatch(again),
            sg.OpTensorSyncLocal([to, back]))
    i = np.arange(n, dtype=np.uint32)
    want = a * 3 + i
    np.testing.assert_array_equal(to.data(), want)
    np.testing.assert_array_equal(back.data(), want * 3 + i)
    for obj in (algo, again, ta, to, back):
        obj.destroy()
    assert _quiet_counts(mgr) == before


@pytest.mark.parametrize("spirv_version", ["1.3", "1.5"])
def test_workgroup_id_on_a_2d_grid_beyond_the_limit_on_y(mgr, spirv_version):
    """workgroup=(2, maxc[1] + 3, 1) with local size 4: the y axis runs in two parts;
    gl_GlobalInvocationID and gl_WorkGroupID keep their meaning in both."""
    _needs(mgr, spirv_version)
    maxc = mgr.device.max_workgroup_count
    ny = maxc[1] + 3
    if ny * 8 * 4 > min(16 << 20, mgr.device.max_storage_buffer_range):
        pytest.skip(f"maxComputeWorkGroupCount[1] is {maxc[1]}: too large a tensor")
    out = mgr.tensor(np.zeros(ny * 8, np.uint32))
    algo = mgr.algorithm([out], _compile(GROUPS_2D, spirv_version), workgroup=(2, ny, 1))
    assert algo.parts is not None and [c for _, c in algo.parts] == [(2, maxc[1], 1),
                                                                       (2, 3, 1)]
    mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([out]))
    gy, gx = np.meshgrid(np.arange(ny), np.arange(8), indexing="ij")
    want = (gy * 10 + (gx // 4) * 5 + gx % 4).astype(np.uint32).reshape(-1)
    np.testing.assert_array_equal(out.data(), want)
    algo.destroy()
    out.destroy()


def test_push_constants_beside_the_base(mgr):
    """The user's push constants, the algorithm's and an OpAlgoDispatch override, reach
    every part beside its base; a workgroup override beyond the limit on an algorithm
    whose own fits builds the split there."""
    n = _axis0_size(mgr)
    local = 2
    groups = -(-n // local)
    assert groups > mgr.device.max_workgroup_count[0]
    a = np.arange(n, dtype=np.uint32) % 101
    t = mgr.tensor(a)
    spirv = compile_source(PUSHED)
    algo = mgr.algorithm([t], spirv, push_consts=[3, 7])
    assert algo.parts is not None
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
    wid = (np.arange(n) // local).astype(np.uint32)
    want = a * 3 + 7 + wid
    np.testing.assert_array_equal(t.data(), want)
    mgr.run(sg.OpAlgoDispatch(algo, push_consts=[2, 1]), sg.OpTensorSyncLocal([t]))
    want = want * 2 + 1 + wid
    np.testing.assert_array_equal(t.data(), want)
    small = mgr.algorithm([t], spirv, workgroup=(1, 1, 1), push_consts=[1, 0])
    assert small.parts is None
    mgr.run(sg.OpAlgoDispatch(small, workgroup=(groups, 1, 1)), sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), want + wid)
    for obj in (algo, small, t):
        obj.destroy()


def test_kp_default_workgroup_beyond_the_limit():
    """kp's `mgr.algorithm([t], spirv)` with no workgroup (t.size() groups of one) on
    tensors beyond maxComputeWorkGroupCount[0]: kp's answer, and destroying the manager
    frees every Vulkan object."""
    before = live_vulkan_objects()
    m = kp.Manager()
    maxc = m.get_device_properties()["max_work_group_count"][0]
    n = 2 * maxc + 7
    if 4 * n > min(16 << 20, m._m.device.max_storage_buffer_range):
        m.destroy()
        pytest.skip(f"maxComputeWorkGroupCount[0] is {maxc}: too large a tensor")
    a = (np.arange(n) % 97).astype(np.float32)
    b = (np.arange(n) % 13 - 6).astype(np.float32)
    ta, tb, to = m.tensor(a), m.tensor(b), m.tensor(np.zeros(n))
    algo = m.algorithm([ta, tb, to], compile_source(KP_MULT))
    (m.sequence()
        .record(kp.OpTensorSyncDevice([ta, tb, to]))
        .record(kp.OpAlgoDispatch(algo))
        .record(kp.OpTensorSyncLocal([to]))
        .eval())
    np.testing.assert_array_equal(to.data(), a * b)
    m.destroy()
    gc.collect()
    assert live_vulkan_objects() == before


def test_num_workgroups_is_refused_saying_why(mgr):
    """A shader that reads gl_NumWorkGroups would see each part's count: the default
    workgroup, an explicit one and an OpAlgoDispatch override beyond the limit raise
    ValueError naming the limit and the reason (kp: also a RuntimeError); within the limit
    it runs."""
    maxc = mgr.device.max_workgroup_count
    t = mgr.tensor(np.zeros(4, np.uint32))
    spirv = compile_source(NUM_GROUPS)
    why = r"cannot be dispatched in parts: the shader reads gl_NumWorkGroups"
    with pytest.raises(ValueError, match=rf"exceeds this device's maxComputeWorkGroupCount "
                                         rf"\({maxc[0]}, {maxc[1]}, {maxc[2]}\) on axis 1, "
                                         rf"and it {why}"):
        mgr.algorithm([t], spirv, workgroup=(1, maxc[1] + 1, 1))
    algo = mgr.algorithm([t], spirv)
    with pytest.raises(ValueError, match=rf"on axis 2, and it {why}, which each part would "
                                         "see as its own count of groups"):
        sg.OpAlgoDispatch(algo, workgroup=(1, 1, maxc[2] + 1))
    mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
    assert t.data().tolist() == [4] * 4
    algo.destroy()
    t.destroy()


def test_num_workgroups_refusal_of_the_default_workgroup(mgr):
    """The default workgroup's message: today's advice (a larger local size, a 2D grid)
    and why the parts cannot do."""
    n = _axis0_size(mgr) // 2
    maxc = mgr.device.max_workgroup_count[0]
    big = mgr.tensor(np.zeros(n, np.uint32))
    with pytest.raises(ValueError, match=rf"no workgroup was given.*{n} groups.*"
                                         rf"maxComputeWorkGroupCount\[0\] \({maxc}\), and it "
                                         r"cannot be dispatched in parts: the shader reads "
                                         r"gl_NumWorkGroups.*local_size_x of at least 2"):
        mgr.algorithm([big], compile_source(NUM_GROUPS))
    big.destroy()


def test_num_workgroups_refusal_through_kp():
    m = kp.Manager()
    maxc = m.get_device_properties()["max_work_group_count"]
    t = m.tensor_t(np.zeros(4, np.uint32))
    with pytest.raises(RuntimeError, match="reads gl_NumWorkGroups"):
        m.algorithm([t], compile_source(NUM_GROUPS), (1, maxc[1] + 1, 1))
    m.destroy()


def test_no_room_for_the_base_in_the_push_constants_is_refused(mgr):
    """A shader whose push-constant block leaves no room for the base (16-byte aligned
    after it) within maxPushConstantsSize: ValueError naming both sizes and the limit,
    when the dispatch beyond the limit is asked for; within the limit it runs."""
    limit = mgr.device.max_push_constants_size
    if limit >= 128 + 12:
        pytest.skip(f"maxPushConstantsSize is {limit}: a 128-byte block leaves room")
    maxc = mgr.device.max_workgroup_count
    t = mgr.tensor(np.zeros(8, np.float32))
    push = np.arange(32, dtype=np.float32)
    algo = mgr.algorithm([t], compile_source(FULL_PUSH), push_consts=push)
    with pytest.raises(ValueError, match=rf"cannot be dispatched in parts: each part's base "
                                         rf"goes in the push constants after the shader's "
                                         rf"128 bytes, 140 bytes in all, more than this "
                                         rf"device's maxPushConstantsSize \({limit}\)"):
        sg.OpAlgoDispatch(algo, workgroup=(1, maxc[1] + 1, 1))
    mgr.run(sg.OpAlgoDispatch(algo), sg.OpTensorSyncLocal([t]))
    np.testing.assert_array_equal(t.data(), push[::4])
    algo.destroy()
    t.destroy()


def test_within_the_limit_nothing_changes(mgr):
    """An algorithm whose dispatches fit keeps its module and one pipeline: no rewrite,
    no second pipeline, one dispatch."""
    t = mgr.tensor(np.zeros(8, np.uint32))
    spirv = compile_source(PER_ELEMENT)
    pipelines = mgr.live_objects()["pipelines"]
    algo = mgr.algorithm([t, t], spirv)
    assert algo.parts is None
    assert sg.OpAlgoDispatch(algo).parts is None
    assert sg.OpAlgoDispatch(algo, workgroup=(8, 1, 1)).parts is None
    assert mgr.live_objects()["pipelines"] == pipelines + 1
    algo.destroy()
    t.destroy()


def _compile(source: str, spirv_version: str) -> bytes:
    """SPIR-V 1.3 (compile_glsl's Vulkan 1.1) or 1.5 (glslc --target-env=vulkan1.2, the
    interface that lists every global variable), precompiled like compile_source's for
    machines without glslc (KOMPUTE_TESTS_WRITE_SPIRV=1 writes the files)."""
    return compile_source(source, None if spirv_version == "1.3" else "vulkan1.2")


def _needs(mgr, spirv_version: str) -> None:
    api = tuple(int(x) for x in mgr.device.api_version.split(".")[:2])
    if spirv_version == "1.5" and api < (1, 2):
        pytest.skip(f"Vulkan {mgr.device.api_version}: SPIR-V 1.5 needs Vulkan 1.2")


@pytest.mark.parametrize("source", [PER_ELEMENT, GROUPS_2D, PUSHED, KP_MULT])
@pytest.mark.parametrize("spirv_version", ["1.3", "1.5"])
def test_the_rewritten_module_passes_the_validator(mgr, source, spirv_version):
    """The rewrite of each shader, in SPIR-V 1.3 (an interface of Input variables) and
    1.5 (every global variable in the interface; the shader's own names kept), passes
    the validator the library runs on user SPIR-V, and declares the bases where
    split_module says, after the user's block."""
    _needs(mgr, spirv_version)
    spirv = _compile(source, spirv_version)
    info = reflect(spirv)
    split = split_module(spirv, info.push_constant_size)
    check_module(split.spirv, mgr.device)
    members = reflect(split.spirv).push_constant_members
    offsets = [m.offset for m in members[len(info.push_constant_members):]]
    assert offsets == [o for o in (split.group_offset, split.invocation_offset) if o is not None]
    assert all(o % 16 == 0 and o >= info.push_constant_size for o in offsets)
    assert split.push_size == max(offsets) + 12


def test_a_use_the_rewrite_does_not_handle_is_refused(mgr):
    """A module that copies the gl_GlobalInvocationID pointer (OpCopyObject, valid SPIR-V
    the rewrite does not follow) is refused, naming the opcode, not run wrong."""
    spirv = compile_source(PER_ELEMENT)
    w = list(struct.unpack(f"<{len(spirv) // 4}I", spirv))
    gid = next(w[i + 1] for i in _instructions(w) if w[i] & 0xFFFF == 71
               and w[i + 2] == 11 and w[i + 3] == 28)
    gid_type = next(w[i + 1] for i in _instructions(w)
                    if w[i] & 0xFFFF == 59 and w[i + 2] == gid)
    ret = next(i for i in _instructions(w) if w[i] & 0xFFFF == 253)   # OpReturn
    new = w[3]
    w[3] += 1
    w[ret:ret] = [(4 << 16) | 83, gid_type, new, gid]                 # OpCopyObject
    bad = struct.pack(f"<{len(w)}I", *w)
    with pytest.raises(CannotSplit, match=r"gl_GlobalInvocationID in an instruction "
                                          r"\(opcode 83\) other than a load"):
        split_module(bad, 0)
    t = mgr.tensor(np.zeros(4, np.uint32))
    maxc = mgr.device.max_workgroup_count
    algo = mgr.algorithm([t, t], bad, workgroup=(1, 1, 1))   # valid: the validator agrees
    with pytest.raises(ValueError, match=r"cannot be dispatched in parts: .*opcode 83"):
        sg.OpAlgoDispatch(algo, workgroup=(1, maxc[1] + 1, 1))
    algo.destroy()
    t.destroy()


def _instructions(w: list[int]):
    i = 5
    while i < len(w):
        yield i
        i += w[i] >> 16


def test_dispatch_parts_cover_the_grid_once():
    """Each group of the grid in exactly one part, every part within the limit."""
    wg, maxc = (7, 5, 3), (3, 5, 2)
    seen = np.zeros(wg[::-1], np.int32)
    for base, counts in dispatch_parts(wg, maxc):
        assert all(0 < c <= m for c, m in zip(counts, maxc))
        seen[base[2]:base[2] + counts[2], base[1]:base[1] + counts[1],
             base[0]:base[0] + counts[0]] += 1
    assert (seen == 1).all()
