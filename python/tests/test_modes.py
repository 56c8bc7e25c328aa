"""qkv.no_grad / enable_grad / set_grad_enabled and qkv.autocast, with torch's behaviour: context
managers and decorators that restore the mode they found; autocast computes linear layers and
attention in bf16 (f32 accumulation) forward and backward, and hands back f32."""
import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")  # conftest.py fails the run instead when QKV_REQUIRE_TORCH is set
F = qkv.nn.functional


def leaf(shape, seed):
    return qkv.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), requires_grad=True)


def test_grad_modes_nest_and_restore_like_torchs():
    x = leaf((2, 3), 0)
    assert qkv.is_grad_enabled() and (x * 2).requires_grad
    assert (x * 2).dtype == "float32" and np.allclose((1 - x * 2).detach().numpy(), 1 - 2 * x.detach().numpy())
    with qkv.no_grad():
        assert not qkv.is_grad_enabled() and not (x * 2).requires_grad
        with qkv.enable_grad():
            assert (x * 2).requires_grad
        assert not qkv.is_grad_enabled()
    assert qkv.is_grad_enabled()

    @qkv.no_grad()
    def infer(t):
        return t * 2

    assert not infer(x).requires_grad and not infer(x).requires_grad  # a decorator, called twice
    assert qkv.is_grad_enabled()
    qkv.set_grad_enabled(False)  # called alone: from now on, as torch's
    assert not qkv.is_grad_enabled()
    qkv.set_grad_enabled(True)
    with qkv.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert qkv.is_grad_enabled()
    with pytest.raises(ZeroDivisionError), qkv.no_grad():
        1 / 0
    assert qkv.is_grad_enabled(), "an exception leaves the mode restored"


def bf16(a):
    """a rounded to bfloat16 (as torch rounds: nearest even), in float32"""
    return torch.from_numpy(np.ascontiguousarray(a)).to(torch.bfloat16).to(torch.float32)


def test_autocast_runs_linear_and_attention_in_bf16_as_torch():
    x, w = leaf((4, 16), 1), leaf((8, 16), 2)
    with qkv.autocast("cpu", dtype=torch.bfloat16):
        assert qkv.is_autocast_enabled()
        y = F.linear(x, w)
        with qkv.autocast("cpu", enabled=False):
            y32 = F.linear(x, w)
    assert not qkv.is_autocast_enabled()
    assert y.dtype == "float32"  # qkv's autocast hands back f32
    want = (bf16(x.detach().numpy()) @ bf16(w.detach().numpy()).T).numpy()  # bf16 operands, f32 sums
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-5, atol=1e-5)
    assert np.abs(y32.detach().numpy() - want).max() > 1e-4, "enabled=False computes in f32"

    q, k, v = leaf((1, 2, 9, 16), 3), leaf((1, 2, 12, 16), 4), leaf((1, 2, 12, 16), 5)
    with qkv.autocast("cuda"):  # the mode is per thread, for every device
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(qkv.tensor(np.ones((1, 2, 9, 16), np.float32)))
    tq, tk, tv = (torch.tensor(t.detach().numpy(), dtype=torch.float64, requires_grad=True) for t in (q, k, v))
    s = tq @ tk.transpose(-2, -1) / 4.0  # 1/√16
    s = s.masked_fill(torch.ones(9, 12, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(s, dim=-1) @ tv  # in float64
    ref.sum().backward()
    err = np.abs(out.detach().numpy() - ref.detach().numpy()).max() / np.abs(ref.detach().numpy()).max()
    assert 1e-5 < err < 1e-2, "bf16 products: close to f64, and not f32-exact"
    for got, t in ((q, tq), (k, tk), (v, tv)):
        g = got.grad.numpy()
        assert np.abs(g - t.grad.numpy()).max() <= 2e-2 * np.abs(t.grad.numpy()).max()

    with pytest.raises(ValueError, match="bfloat16 only"):
        qkv.autocast("cpu", dtype=torch.float16)
    with pytest.raises(ValueError, match="device_type"):
        qkv.autocast("mps")
