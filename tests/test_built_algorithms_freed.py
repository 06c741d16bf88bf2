"""The algorithm a sequence builds for an op (OpMult's, over a built-in shader) belongs to
that sequence: destroy(), the end of its `with` block, clear(), eval(op) and
delete_sequence() free it then and there, not whenever the collector next finds it
unreachable. Counted in the shim (sg.live_vulkan_objects(): no collection first): each
algorithm holds one descriptor pool (its pipeline stays cached), which a freed algorithm
leaves to its program for the next one (counted apart: Programs.spares)."""
from __future__ import annotations

import numpy as np

import scopedgpu as sg


def _descriptor_pools(mgr: sg.Manager) -> int:
    """The descriptor pools of live algorithms: the shim's, less the spare sets kept."""
    return sg.live_vulkan_objects()["descriptor_pools"] - mgr._state.programs.spares


def test_the_algorithm_of_an_opmult_is_freed_with_its_sequence(mgr):
    a = mgr.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    b = mgr.tensor(np.array([4.0, 5.0, 6.0], np.float32))
    out = mgr.tensor(np.zeros(3, np.float32))
    base = _descriptor_pools(mgr)
    with mgr.sequence() as seq:
        seq.record(sg.OpTensorSyncDevice([a, b])).record(sg.OpMult([a, b, out]))
        seq.record(sg.OpTensorSyncLocal([out])).eval()
        assert _descriptor_pools(mgr) == base + 1
    assert _descriptor_pools(mgr) == base, "the end of the with block left OpMult's algorithm"
    np.testing.assert_array_equal(out.data(), [4.0, 10.0, 18.0])

    seq = mgr.sequence("mult")
    seq.eval(sg.OpMult([a, b, out]))
    seq.eval(sg.OpMult([b, a, out]))     # clear() and record again: one algorithm, not two
    assert _descriptor_pools(mgr) == base + 1, "eval(op) kept the algorithm of the op before"
    seq.clear()
    assert _descriptor_pools(mgr) == base, "clear() left OpMult's algorithm"
    seq.record(sg.OpMult([a, a, out])).record(sg.OpTensorSyncLocal([out])).eval()
    np.testing.assert_array_equal(out.data(), [1.0, 4.0, 9.0])
    mgr.delete_sequence("mult")
    assert _descriptor_pools(mgr) == base, "delete_sequence() left OpMult's algorithm"
    for t in (a, b, out):
        t.destroy()
