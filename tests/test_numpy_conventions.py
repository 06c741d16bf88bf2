"""Tensors follow numpy's conventions: len() is the first dimension, ndim, and the
numpy 2 __array__ protocol (dtype, copy); `with` gives back the object's own type."""
from __future__ import annotations

import numpy as np
import pytest

import scopedgpu as sg


def test_len_is_the_first_dimension_and_ndim_the_rank(mgr):
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = mgr.tensor(src)
    assert len(t) == len(src) == 2
    assert t.ndim == src.ndim == 3
    assert t.size == 24 and t.shape == (2, 3, 4)
    v = mgr.tensor(np.arange(5, dtype=np.int32))
    assert (len(v), v.ndim) == (5, 1)


def test_len_of_a_0d_tensor_raises_as_numpy(mgr):
    t = mgr.tensor(np.array(7.0, dtype=np.float32))
    assert t.ndim == 0 and t.size == 1
    with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
        len(t)
    with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
        len(np.array(7.0))


def test_array_protocol_copies_and_honours_dtype(mgr):
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = mgr.tensor(src)
    a = np.array(t)     # (np.asarray(t) is a view: __array_interface__, test_protocols.py)
    np.testing.assert_array_equal(a, src)
    a[0, 0] = 99                     # a copy: the tensor's host data is unchanged
    assert t.data()[0, 0] == 0
    b = np.array(t, dtype=np.float64)
    assert b.dtype == np.float64
    np.testing.assert_array_equal(b, src.astype(np.float64))
    c = t.__array__(copy=True)
    assert c is not t.data() and not np.shares_memory(c, t.data())
    np.testing.assert_array_equal(c, src)


def test_array_copy_false_raises_as_numpy_2_does(mgr):
    t = mgr.tensor(np.arange(4, dtype=np.float32))
    with pytest.raises(ValueError, match="copy=False"):
        t.__array__(copy=False)
    # numpy reads __array_interface__ before __array__: copy=False gets a view
    assert np.shares_memory(np.array(t, copy=False), t.data())
    np.testing.assert_array_equal(np.asarray(t), np.arange(4, dtype=np.float32))


def test_enter_returns_the_object_itself(mgr):
    with mgr.tensor(np.ones(3, np.float32)) as t:
        assert type(t) is sg.Tensor
    assert t.destroyed
    with mgr.sequence() as seq:
        assert type(seq) is sg.Sequence
    assert seq.destroyed
    with sg.Manager() as m:
        assert type(m) is sg.Manager
    assert m.closed


def test_non_numeric_input_is_refused_and_buffers_keep_their_bytes(mgr):
    """tensor(None) made a NaN tensor and [None] a NaN element; bytes and memoryviews
    were parsed as float32. Now None and non-numeric elements raise TypeError, and any
    buffer-protocol object keeps its own element type and shape (bytes: uint8)."""
    import array
    for bad in (None, [None], [1.0, None], ["a"], [[1.0], "x"], {"a": 1}):
        with pytest.raises(TypeError, match=r"mgr\.tensor\(\)"):
            mgr.tensor(bad)
    made = []
    raw = bytes([1, 2, 250, 0])
    if mgr.device.int8:
        t = mgr.tensor(raw)
        made.append(t)
        assert t.dtype == np.uint8 and t.shape == (4,)
        np.testing.assert_array_equal(t.data(), [1, 2, 250, 0])
        made.append(mgr.tensor(bytearray(raw)))
        assert made[-1].dtype == np.uint8
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = mgr.tensor(memoryview(x))
    made.append(t)
    assert t.dtype == np.float32 and t.shape == (2, 3)
    np.testing.assert_array_equal(t.data(), x)
    t = mgr.tensor(array.array("i", [5, -6, 7]))
    made.append(t)
    assert t.dtype == np.int32
    np.testing.assert_array_equal(t.data(), [5, -6, 7])
    t = mgr.tensor([True, 2, 3.5, 2**70])          # numbers of any Python type: float32, as kp
    made.append(t)
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.data(), np.array([1.0, 2.0, 3.5, 2.0**70], np.float32))
    for t in made:
        t.destroy()
