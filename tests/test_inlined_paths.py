"""The inlined copies of the hot paths leave what the general code leaves (issue 25: 'no
unchecked copies'). Tensor.__init__ inlines Child.__init__ for small device tensors (the
churn path) and Tensor.destroy inlines Child.destroy: a small tensor (inlined path) and a
large one (Child.__init__) are made, registered, destroyed and collected alike."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._pool import SMALL_LIMIT
from tests import shaders

SIZES = {"inlined": 64, "general": SMALL_LIMIT // 4 + 1024}   # float32 elements


def _slots(t: sg.Tensor) -> dict[str, bool]:
    names = set()
    for cls in type(t).__mro__:
        names.update(n for n in getattr(cls, "__slots__", ()) if n not in ("__dict__", "__weakref__"))
    return {n: hasattr(t, n) for n in sorted(names)}


def _registration(mgr: sg.Manager, t: sg.Tensor) -> dict[str, object]:
    st = mgr._state
    return {"handle registered": st.handles.get(t._ref) is t._handle,
            "in tensors": t in st.tensors,
            "handle is ranges": t._handle is t.ranges,
            "device range": t.gpu_range is not None and t.gpu_range.nbytes == t.nbytes,
            "staging": t.stage_range is not None,
            "fresh": t.ranges.fresh,
            "destroyed": t.destroyed}


def test_made_alike(mgr):
    made = {k: mgr.tensor(np.arange(n, dtype=np.float32)) for k, n in SIZES.items()}
    assert _slots(made["inlined"]) == _slots(made["general"])
    assert all(_slots(made["inlined"]).values())
    want = {"handle registered": True, "in tensors": True, "handle is ranges": True,
            "device range": True, "staging": True, "fresh": True, "destroyed": False}
    for k, t in made.items():
        assert _registration(mgr, t) == want, k
    a, b = made["inlined"], made["general"]
    assert a._id < b._id and a.manager is b.manager is mgr
    for t in made.values():
        t.destroy()


def test_destroyed_alike(mgr):
    st = mgr._state
    for k, n in SIZES.items():
        with mgr.tensor(np.arange(n, dtype=np.float32)) as w:   # the pool's blocks and
            mgr.run(sg.OpTensorSyncDevice([w]), sg.OpTensorSyncLocal([w]))   # cached sequence
        before = mgr.live_objects()
        t = mgr.tensor(np.arange(n, dtype=np.float32))
        ref, handle = t._ref, t._handle
        mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorSyncLocal([t]))
        t.destroy()
        assert t.destroyed and ref not in st.handles and t not in st.tensors, k
        assert handle.gpu is None and handle.stage is None, k   # both ranges freed
        t.destroy()   # idempotent
        with pytest.raises(sg.DestroyedError):
            t.numpy()
        assert mgr.live_objects() == before, k


def test_collected_alike(mgr):
    for k, n in SIZES.items():
        mgr.tensor(np.arange(n, dtype=np.float32)).destroy()   # the pool's blocks made
        before = mgr.live_objects()
        t = mgr.tensor(np.arange(n, dtype=np.float32))
        handle = t._handle
        del t
        gc.collect()
        mgr.memory_stats()   # a manager call: what became unreachable is released
        assert handle.gpu is None and handle.stage is None, k
        assert mgr.live_objects() == before, k


def test_destroyed_objects_hold_no_weak_reference(mgr, glsl):
    """A destroyed tensor (either path) or algorithm keeps no weak reference of the
    manager's: destroy() unregistered it, and the reference's callback would only find
    nothing to release when the object goes. A user's own weak reference still works."""
    made = {k: mgr.tensor(np.arange(n, dtype=np.float32)) for k, n in SIZES.items()}
    algo = mgr.algorithm([made["inlined"]], glsl(shaders.ADD_ONE))
    objs = {**made, "algorithm": algo}
    for k, o in objs.items():
        assert weakref.getweakrefcount(o) == 1, k   # the manager's, while it lives
    mine = weakref.ref(algo)
    for o in objs.values():
        o.destroy()
    assert {k: weakref.getweakrefcount(o) for k, o in objs.items()} == {
        "inlined": 0, "general": 0, "algorithm": 1}   # (the last one: mine)
    assert mine() is algo
