"""qkv.nn.functional.scaled_dot_product_attention and the drop-in qkv.torch.scaled_dot_product_attention
against the formula softmax(Q Kᵀ · scale + M) V computed by PyTorch in float64, forward and backward."""
import math

import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")  # conftest.py fails the run instead when QKV_REQUIRE_TORCH is set
import qkv.torch  # noqa: E402

# (batch dims, L, S, E, Ev, heads of k/v for GQA or None)
SHAPES = [((2, 3), 5, 5, 8, 8, None), ((1, 2), 7, 11, 16, 4, None), ((3,), 1, 9, 8, 8, None),
          ((2, 4), 33, 33, 32, 32, None), ((1, 4), 6, 6, 8, 8, 2), ((2, 1), 70, 45, 64, 64, None)]
MASKS = ["none", "causal", "bool", "float"]


def reference(q, k, v, mask, is_causal, scale, gqa, softcap=0.0):
    """The formula in float64 with torch's autograd: the golden value and gradients (softcap > 0: the
    scores softcap·tanh(s/softcap) before the mask, as Gemma 2's eager attention)."""
    if gqa:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    p = torch.softmax(s, dim=-1)
    return torch.nan_to_num(p, nan=0.0) @ v


def make(shape, mask_kind, seed):
    batch, L, S, E, Ev, hkv = shape
    g = torch.Generator().manual_seed(seed)
    kv_batch = batch[:-1] + (hkv,) if hkv else batch
    q = torch.randn(*batch, L, E, generator=g)
    k = torch.randn(*kv_batch, S, E, generator=g)
    v = torch.randn(*kv_batch, S, Ev, generator=g)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(L, S, generator=g) > 0.3
        mask[:, 0] = True  # every query sees at least one key
    elif mask_kind == "float":
        mask = torch.randn(*batch, L, S, generator=g)
    return q, k, v, mask


def close(actual, expected, what):
    """|actual − expected| ≤ 1e-5 · max|expected| + 1e-6 (the 1e-6 for gradients that are exactly 0)."""
    a, e = actual.detach().double(), expected.detach()
    err, top = (a - e).abs().max().item(), e.abs().max().item()
    assert err <= 1e-5 * top + 1e-6, f"{what}: max error {err:.3g}, largest value {top:.3g}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask_kind", MASKS)
def test_functional_forward_and_backward(shape, mask_kind):
    q, k, v, mask = make(shape, mask_kind, seed=hash((shape, mask_kind)) % 1000)
    gqa = shape[5] is not None
    causal = mask_kind == "causal"
    qt, kt, vt = (qkv.tensor(t.numpy(), requires_grad=True) for t in (q, k, v))
    out = qkv.nn.functional.scaled_dot_product_attention(qt, kt, vt, None if mask is None else mask.numpy(),
                                                         is_causal=causal, enable_gqa=gqa)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = reference(q64, k64, v64, None if mask is None else mask.double() if mask.is_floating_point() else mask,
                    causal, None, gqa)
    close(torch.from_numpy(out.numpy()), ref, "output")
    dout = torch.randn(ref.shape, generator=torch.Generator().manual_seed(7))
    out.backward(qkv.tensor(dout.float().numpy()))
    ref.backward(dout.double())
    for name, mine, theirs in (("dq", qt, q64), ("dk", kt, k64), ("dv", vt, v64)):
        close(torch.from_numpy(mine.grad.numpy()), theirs.grad, name)


def test_scale_and_weights():
    q, k, v, _ = make(((2, 2), 4, 6, 8, 8, None), "none", seed=3)
    out, w = qkv.nn.functional.scaled_dot_product_attention_with_weights(q.numpy(), k.numpy(), v.numpy(), scale=0.3)
    ref = reference(q.double(), k.double(), v.double(), None, False, 0.3, False)
    close(torch.from_numpy(out.numpy()), ref, "output")
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("mask_kind", MASKS)
def test_softcap_forward_and_backward(mask_kind):
    """softcap (flash-attn's, Gemma 2's), a keyword beyond PyTorch's: a cap of 1.5 on scores of spread ~3
    bends them all; the flash kernel's forward and backward, and the reference kernel's weights."""
    q, k, v, mask = make(((2, 4), 9, 13, 8, 8, 2), mask_kind, seed=5)
    q, k = q * 2, k * 2
    causal = mask_kind == "causal"
    qt, kt, vt = (qkv.tensor(t.numpy(), requires_grad=True) for t in (q, k, v))
    m = None if mask is None else mask.numpy()
    out = qkv.nn.functional.scaled_dot_product_attention(qt, kt, vt, m, is_causal=causal, enable_gqa=True, softcap=1.5)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = reference(q64, k64, v64, None if mask is None else mask.double() if mask.is_floating_point() else mask,
                    causal, None, True, softcap=1.5)
    close(torch.from_numpy(out.numpy()), ref, "output")
    dout = torch.randn(ref.shape, generator=torch.Generator().manual_seed(8))
    out.backward(qkv.tensor(dout.float().numpy()))
    ref.backward(dout.double())
    for name, mine, theirs in (("dq", qt, q64), ("dk", kt, k64), ("dv", vt, v64)):
        close(torch.from_numpy(mine.grad.numpy()), theirs.grad, name)
    if mask_kind == "none":  # (the weights' call repeats no key/value heads: GQA is the flash call's)
        k2, v2 = (t.repeat_interleave(2, dim=-3) for t in (k, v))
        out2, w = qkv.nn.functional.scaled_dot_product_attention_with_weights(q.numpy(), k2.numpy(), v2.numpy(),
                                                                              softcap=1.5)
        close(torch.from_numpy(out2.numpy()), ref, "output with weights")
        np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-6)
    for bad in (-1.0, float("nan"), float("inf"), 1e-40):  # (1e-40: a subnormal float, 1/softcap = ∞)
        with pytest.raises(qkv.Error, match="softcap"):
            qkv.nn.functional.scaled_dot_product_attention(qt, kt, vt, softcap=bad, enable_gqa=True)


def test_shape_errors_carry_qkv_message():
    with pytest.raises(qkv.Error, match="scaled_dot_product_attention"):
        qkv.nn.functional.scaled_dot_product_attention(np.ones((2, 4, 8), np.float32), np.ones((2, 5, 7), np.float32),
                                                       np.ones((2, 5, 8), np.float32))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask_kind", MASKS)
def test_torch_bridge_gradients_equal_the_formula(shape, mask_kind):
    q, k, v, mask = make(shape, mask_kind, seed=11)
    gqa = shape[5] is not None
    causal = mask_kind == "causal"
    if mask is not None and mask.is_floating_point():
        mask.requires_grad_()
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = qkv.torch.scaled_dot_product_attention(*leaves, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    out.backward(dout)
    leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
    mask64 = None if mask is None else mask.detach().double().requires_grad_() if mask.is_floating_point() else mask
    ref = reference(*leaves64, mask64, causal, None, gqa)
    ref.backward(dout.double())
    close(out, ref, "output")
    for name, mine, theirs in zip(("dq", "dk", "dv"), leaves, leaves64):
        close(mine.grad, theirs.grad, name)
    if mask is not None and mask.is_floating_point():
        close(mask.grad, mask64.grad, "d attn_mask")


def test_torch_bridge_in_a_module_trains_like_torch():
    """Two copies of one attention layer, one on torch's formula and one on qkv's kernel: the same
    losses over a few Adam steps."""
    def layer(attend):
        torch.manual_seed(0)
        proj = torch.nn.Linear(16, 48)
        out = torch.nn.Linear(16, 16)

        def forward(x):
            q, k, v = proj(x).view(x.shape[0], x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
            y = attend(q, k, v)
            return out(y.transpose(1, 2).reshape(x.shape))
        return forward, list(proj.parameters()) + list(out.parameters())

    def formula(q, k, v):
        return reference(q, k, v, None, True, None, False)

    losses = {}
    for name, attend in (("torch", formula),
                         ("qkv", lambda q, k, v: qkv.torch.scaled_dot_product_attention(q, k, v, is_causal=True))):
        f, params = layer(attend)
        opt = torch.optim.Adam(params, lr=1e-2)
        g = torch.Generator().manual_seed(1)
        x, target = torch.randn(4, 10, 16, generator=g), torch.randn(4, 10, 16, generator=g)
        losses[name] = []
        for _ in range(5):
            opt.zero_grad()
            loss = ((f(x) - target) ** 2).mean()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    np.testing.assert_allclose(losses["qkv"], losses["torch"], rtol=1e-5)
