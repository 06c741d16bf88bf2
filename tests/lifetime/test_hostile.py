"""Copies and pickles of handle-owning objects, and one sequence evaluated from several
threads at once (issue 9, classes 2 and 7)."""
from __future__ import annotations

import copy
import pickle
import threading

import numpy as np
import pytest

import scopedgpu as sg

from lt_shaders import add_one_spirv


def _objects(m: sg.Manager):
    a = m.tensor(np.arange(64, dtype=np.float32))
    b = m.empty(64)
    algo = m.algorithm([a, b], add_one_spirv(np.float32))
    seq = m.sequence().record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(algo))
    seq.record(sg.OpTensorSyncLocal([b]))
    return a, b, algo, seq


COPIERS = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
    "pickle-protocol-0": lambda o: pickle.dumps(o, protocol=0),
}


@pytest.mark.parametrize("how", list(COPIERS))
def test_copies_and_pickles_are_refused_and_say_what_to_do(mgr, how):
    a, b, algo, seq = _objects(mgr)
    h = mgr.tensor(np.ones(8, np.int32), kind="host")
    s = mgr.tensor(np.ones(8, np.uint32), kind="storage")
    hints = {a: "mgr.tensor(t.numpy())", h: "mgr.tensor(t.numpy())",
             s: "OpTensorCopy", algo: "mgr.algorithm(", seq: "mgr.sequence()",
             mgr: "sg.Manager("}
    for obj, hint in hints.items():
        with pytest.raises(TypeError) as info:
            COPIERS[how](obj)
        assert hint in str(info.value) and repr(obj) in str(info.value), str(info.value)
    # An op only refers to tensors: copying it shallowly shares no handle, but a deep
    # copy or a pickle would copy the tensors, and is refused the same way.
    op = sg.OpTensorSyncDevice([a])
    if how == "copy":
        assert copy.copy(op).tensors == [a]
    else:
        with pytest.raises(TypeError, match="cannot be"):
            COPIERS[how](op)
    # The originals are untouched and work.
    seq.eval()
    np.testing.assert_array_equal(b.data(), np.arange(64, dtype=np.float32) + 1)
    for obj in (seq, algo, a, b, h, s):
        obj.destroy()


def test_destroying_after_a_refused_copy_leaves_nothing_shared(mgr):
    """What the issue saw: a copy that shared the handle, destroyed, left the original
    on freed memory (a tensor whose range went to the next new tensor)."""
    a = mgr.tensor(np.arange(16, dtype=np.float32))
    with pytest.raises(TypeError):
        copy.copy(a)
    b = mgr.tensor(np.full(16, 5, np.float32))
    assert (a._gpu.block, a._gpu.offset) != (b._gpu.block, b._gpu.offset)
    mgr.run(sg.OpTensorSyncDevice([b]), sg.OpTensorCopy([b, a]), sg.OpTensorSyncLocal([a]))
    np.testing.assert_array_equal(a.data(), np.full(16, 5, np.float32))
    a.destroy()
    b.destroy()


def _validation_manager() -> sg.Manager:
    m = sg.Manager(debug=True)
    if not m.debug:
        m.close()
        pytest.skip("the Khronos validation layer is not installed")
    return m


def test_one_sequence_evaluated_from_four_threads_is_serialized():
    """Four threads evaluate one Sequence at once. Each eval() waits for a submission
    another thread made and only then submits: the validation layer (on here) reports
    no fence reset or command buffer resubmitted while pending, and every result is
    right."""
    m = _validation_manager()
    try:
        a = m.tensor(np.arange(4096, dtype=np.float32))
        b = m.empty(4096)
        algo = m.algorithm([a, b], add_one_spirv(np.float32))
        seq = m.sequence("shared")
        seq.record(sg.OpTensorSyncDevice([a])).record(sg.OpAlgoDispatch(algo))
        seq.record(sg.OpTensorSyncLocal([b]))
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def work(i: int) -> None:
            try:
                start.wait()
                for k in range(40):
                    if (i + k) % 3 == 0:
                        seq.eval_async()
                        seq.eval_await()
                    else:
                        seq.eval()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "an evaluation hung"
        assert not errors, errors
        assert not seq.is_running
        np.testing.assert_array_equal(b.data(), np.arange(4096, dtype=np.float32) + 1)
        m.delete_sequence("shared")
        for obj in (algo, a, b):
            obj.destroy()
        m.empty_cache()
        counts = m.live_objects()
        assert counts["sequences"] == counts["fences"] == counts["command_pools"] == 0
    finally:
        m.close()
