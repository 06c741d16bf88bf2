"""The built-in vectorised grid-stride kernels: every size (whole vec4s, tails of 1 to 3
elements, one and many grid-stride passes) against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg
from scopedgpu._shaders import builtin_spirv
from scopedgpu.ops import elementwise_groups


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 1023, 1024, 1025, 4099, 262_147])
def test_opmult_every_tail(mgr, dtype, n):
    rng = np.random.default_rng(n)
    a = rng.integers(0, 1000, n).astype(dtype)
    b = rng.integers(0, 1000, n).astype(dtype)
    ta, tb = mgr.tensor(a), mgr.tensor(b)
    out = mgr.tensor(np.full(n, 7, dtype=dtype))
    mgr.run(sg.OpTensorSyncDevice([ta, tb, out]), sg.OpMult([ta, tb, out]),
            sg.OpTensorSyncLocal([out]))
    np.testing.assert_array_equal(out.data(), a * b)


@pytest.mark.parametrize("groups", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 6, 4096, 10_001])
def test_saxpy_grid_stride_with_fewer_groups_than_elements(mgr, groups, n):
    """A grid smaller than the data: each invocation loops over several vec4s."""
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    tx, ty = mgr.tensor(x), mgr.tensor(y)
    algo = mgr.algorithm([tx, ty], builtin_spirv("saxpy"), workgroup=(groups, 1, 1),
                         push_consts=[3.0])
    mgr.run(sg.OpTensorSyncDevice([tx, ty]), sg.OpAlgoDispatch(algo),
            sg.OpTensorSyncLocal([ty]))
    np.testing.assert_array_equal(ty.data(), 3.0 * x + y)


def test_elementwise_groups_stay_within_limits():
    assert elementwise_groups(0) == (1, 1, 1)
    assert elementwise_groups(1024) == (1, 1, 1)
    assert elementwise_groups(1025) == (2, 1, 1)
    assert elementwise_groups(1 << 30) == (65535, 1, 1)
    assert elementwise_groups(1 << 30, limit=1000) == (1000, 1, 1)
