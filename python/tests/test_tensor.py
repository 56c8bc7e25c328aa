"""qkv.Tensor from Python: zero-copy ways in and out, dtypes, autograd, errors."""
import numpy as np
import pytest

import qkv


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = qkv.from_numpy(a)
    a[0, 0] = 42.0  # NumPy writes, qkv sees
    assert t.tolist() == [[42.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    b = t.numpy()
    b[1, 2] = -7.0  # qkv's view writes, NumPy sees
    assert a[1, 2] == -7.0
    assert np.shares_memory(a, b)


def test_tensor_copies_as_torch_tensor():
    a = np.ones((2, 2), dtype=np.float32)
    t = qkv.tensor(a)
    a[0, 0] = 5.0
    assert t.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_the_array_outlives_its_python_name():
    t = qkv.from_numpy(np.full((3,), 2.5, dtype=np.float32))  # the only reference is the tensor's
    import gc
    gc.collect()
    assert t.tolist() == [2.5, 2.5, 2.5]


def test_numpy_view_keeps_the_tensor_alive():
    b = (qkv.ones([2, 2]) * 3.0).numpy()  # the tensor has no Python name left
    import gc
    gc.collect()
    assert b.tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_strided_arrays_are_viewed_and_foreign_dtypes_copied():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = qkv.as_tensor(a.T)  # strided: a view of the same memory, as torch.as_tensor(a.T)
    assert t.shape == (4, 3) and not t.is_contiguous() and t.stride() == (1, 4)
    np.testing.assert_array_equal(t.numpy(), a.T)
    a[0, 1] = 100.0
    assert t.tolist()[1][0] == 100.0  # shared, not copied
    s = qkv.as_tensor(a[:, ::2])  # every other column: strides (4, 2)
    assert s.stride() == (4, 2) and s.tolist() == a[:, ::2].tolist()
    r = qkv.as_tensor(a[::-1])  # a negative stride: a dense copy
    assert r.is_contiguous() and r.tolist() == a[::-1].tolist()
    a[2, 0] = -1.0
    assert r.tolist()[0][0] == 8.0
    d = qkv.as_tensor(np.array([[1.5, 2.5]], dtype=np.float64))  # float64 → float32 copy
    assert d.dtype == "float32" and d.tolist() == [[1.5, 2.5]]
    i = qkv.as_tensor(np.array([1, 2, 3], dtype=np.int64))  # int64 → int32
    assert i.dtype == "int32" and i.tolist() == [1, 2, 3]
    m = qkv.as_tensor(np.array([True, False]))
    assert m.dtype == "bool" and m.tolist() == [True, False]
    ro = np.zeros(3, dtype=np.float32)
    ro.flags.writeable = False
    assert qkv.as_tensor(ro).tolist() == [0.0, 0.0, 0.0]  # read-only arrays are copied, never written


def test_lists_and_numbers():
    t = qkv.tensor([[1, 2], [3, 4]])
    assert t.shape == (2, 2) and t.dtype == "int32"
    f = qkv.tensor([[1.0, 2.0]])
    assert f.dtype == "float32" and (f * 2.0).tolist() == [[2.0, 4.0]]
    assert qkv.tensor(3.0).item() == 3.0


def test_dlpack_round_trip_with_numpy():
    t = qkv.tensor(np.arange(4, dtype=np.float32))
    a = np.from_dlpack(t)
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert a.__array_interface__["data"][0] == t.numpy().__array_interface__["data"][0]


def test_autograd_matches_the_formula():
    x = qkv.tensor(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32), requires_grad=True)
    w = qkv.tensor(np.array([[0.5], [-1.0]], dtype=np.float32), requires_grad=True)
    y = ((x @ w) * (x @ w)).sum()  # Σ_i (x_i · w)²
    y.backward()
    xw = np.array([[-1.5], [-2.5]], dtype=np.float32)
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.array([[1.0, 3.0], [2.0, 4.0]]) @ xw, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), 2 * xw @ np.array([[0.5, -1.0]]), rtol=1e-6)
    assert x.is_leaf and not y.is_leaf
    x.grad = None
    assert x.grad is None


def test_autograd_grad_returns_instead_of_accumulating():
    x = qkv.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (g,) = qkv.autograd.grad([(x * x).sum()], [x])
    assert g.tolist() == [2.0, 4.0, 6.0]
    assert x.grad is None


def test_qkv_errors_arrive_with_qkv_message():
    a, b = qkv.ones([2, 3]), qkv.ones([4, 5])
    with pytest.raises(qkv.Error, match=r"matmul"):
        a @ b
    assert issubclass(qkv.Error, RuntimeError)
    with pytest.raises(TypeError, match="cannot make a tensor"):
        qkv.tensor(object())
    with pytest.raises(RuntimeError, match="item"):
        qkv.ones([2]).item()


def test_views_and_reductions():
    t = qkv.tensor(np.arange(6, dtype=np.float32))
    r = t.reshape(2, 3)
    assert r.shape == (2, 3) and r.transpose(0, 1).shape == (3, 2)
    assert r.sum().item() == 15.0 and r.mean([1]).tolist() == [1.0, 4.0]
    assert r.unsqueeze(0).shape == (1, 2, 3) and r.permute(1, 0).shape == (3, 2)
    assert len(r) == 2 and r.size(1) == 3 and r.ndim == 2 and r.numel() == 6


def test_devices_as_torch_spells_them():
    t = qkv.tensor(np.arange(4, dtype=np.float32))
    assert t.to("cpu").tolist() == [0.0, 1.0, 2.0, 3.0] and t.cpu().device == "cpu"
    assert t.to("bfloat16").dtype == "bfloat16"  # a dtype still works
    if not qkv.cuda.is_available():
        assert qkv.cuda.device_count() == 0
        with pytest.raises(qkv.Error, match="cuda"):  # no backend or no GPU: a clear error
            t.to("cuda")
        with pytest.raises(qkv.Error, match="cuda:0"):
            t.cuda()
    else:
        g = t.to("cuda")
        assert g.device == "cuda:0" and (g * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_modules_move_in_place_as_torchs():
    m = qkv.nn.Linear(4, 3)
    assert m.to("cpu") is m and m.cpu() is m and m.to("float32") is m  # the module itself, as torch's
    with pytest.raises(qkv.Error, match="expected a device"):
        m.to("float16")
    x = qkv.tensor(np.ones((2, 4), dtype=np.float32))
    if not qkv.cuda.is_available():
        with pytest.raises(qkv.Error, match="cuda"):
            m.cuda()
        assert m.weight.device == "cpu"  # nothing moved
    else:
        want = m(x).numpy().copy()
        assert m.cuda() is m and m.weight.device == "cuda:0"
        got = m(x.cuda()).cpu().numpy()
        assert np.abs(got - want).max() < 1e-2 * np.abs(want).max() + 1e-6  # (TF32 products)
        m.cpu()
    assert tuple(m(x).shape) == (2, 3)


def test_integers_int32_cannot_hold_are_an_overflow_error_not_wrapped():
    # qkv has no int64: torch would make int64 of these; qkv refuses rather than wrap to -2**31
    with pytest.raises(OverflowError, match=r"element 0 .* 1099511627776"):
        qkv.as_tensor([2**40, -2**40, 3, 2**31])
    with pytest.raises(OverflowError, match="element 1"):
        qkv.as_tensor(np.array([1, 2**31], dtype=np.int64))
    with pytest.raises(OverflowError, match="uint32"):
        qkv.as_tensor(np.array([4000000000], dtype=np.uint32))
    assert qkv.as_tensor([2**31 - 1, -2**31]).tolist() == [2**31 - 1, -2**31]


def test_repr_of_a_tensor_of_many_dimensions():
    t = qkv.zeros([1] * 200)
    assert repr(t).startswith("qkv.Tensor[1,1,1,")  # not "Critical nanobind error" and an abort
    with pytest.raises(ValueError, match="200 dimensions"):
        t.numpy()
    assert qkv.zeros([1] * 32).numpy().ndim == 32
