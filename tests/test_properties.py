"""Property tests: bit-exact round trips and a built-in op against numpy."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import scopedgpu as sg

sizes = st.integers(min_value=1, max_value=3000)
f32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@given(data=st.one_of(arrays(np.float32, sizes, elements=f32),
                      arrays(np.int32, sizes, elements=i32)),
       kind=st.sampled_from(["device", "host"]))
def test_round_trip_is_bit_exact(mgr, data, kind):
    t = mgr.tensor(data, kind=kind)
    out = mgr.tensor(np.zeros_like(data))
    mgr.run(sg.OpTensorSyncDevice([t]), sg.OpTensorCopy([t, out]), sg.OpTensorSyncLocal([out, t]))
    assert out.data().tobytes() == data.tobytes()
    assert t.data().tobytes() == data.tobytes()
    t.destroy()
    out.destroy()


@given(n=sizes, seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float32, np.int32, np.uint32]))
def test_opmult_matches_numpy(mgr, n, seed, dtype):
    rng = np.random.default_rng(seed)
    if dtype == np.float32:
        a = rng.standard_normal(n).astype(np.float32) * 100
        b = rng.standard_normal(n).astype(np.float32)
    else:
        a = rng.integers(-(2**15), 2**15, n).astype(dtype)
        b = rng.integers(-(2**15), 2**15, n).astype(dtype)
    ta, tb, tc = mgr.tensor(a), mgr.tensor(b), mgr.empty(n, dtype)
    mgr.run(sg.OpTensorSyncDevice([ta, tb]), sg.OpMult([ta, tb, tc]), sg.OpTensorSyncLocal([tc]))
    expected = a * b  # float32 products round the same on IEEE hardware
    assert tc.data().tobytes() == expected.tobytes()
    for t in (ta, tb, tc):
        t.destroy()
