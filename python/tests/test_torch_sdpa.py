"""qkv.torch.scaled_dot_product_attention against the contract of torch.nn.functional's: the cases of
PyTorch's own CPU tests of scaled_dot_product_attention (test/test_transformers.py: fused vs math,
masks of every broadcast shape, an infinite band mask, a negative scale, gradcheck, the failure
modes, CausalBias masks), written anew against the formula in float64, plus the parts of the
contract those tests assume (retain_graph, double backward, dropout's generator, subclasses)."""
import math

import pytest

torch = pytest.importorskip("torch")  # conftest.py fails the run instead when QKV_REQUIRE_TORCH is set
import qkv.torch  # noqa: E402

sdpa = qkv.torch.scaled_dot_product_attention
TOL = {torch.float64: (1e-5, 5e-6), torch.float32: (1e-5, 5e-6), torch.bfloat16: (5e-2, 5e-2),
       torch.float16: (1e-2, 1e-2)}  # PyTorch's tolerances in these tests (atol, rtol)
DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
has_causal_bias = pytest.mark.skipif(not hasattr(torch.nn, "attention"),
                                     reason="torch.nn.attention.bias (CausalBias) needs torch >= 2.1")


def formula(q, k, v, mask=None, is_causal=False, scale=None):
    """softmax(Q Kᵀ · scale + M) V in float64 (fully masked rows: 0), differentiable by torch."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0) @ v


def assert_close(actual, expected, dtype):
    atol, rtol = TOL[dtype]
    expected = expected.detach().to(dtype).double()
    actual = actual.detach().double()
    bad = (actual - expected).abs() > atol + rtol * expected.abs()
    assert not bad.any(), f"{int(bad.sum())} elements off, max {(actual - expected).abs().max().item():.3g}"


def packed_qkv(batch, seq, heads, dim, dtype, seed):
    """torch's packed layout: one [B, L, 3·H·E] tensor split into q, k, v viewed as [B, H, L, E] (strided)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, 3 * heads * dim, generator=g).to(dtype)


def heads_view(t, batch, seq, heads, dim):
    return t.view(batch, seq, heads, dim).transpose(1, 2)


# test_scaled_dot_product_fused_attention_vs_math_cpu: dtype × batch × seq × heads × head dim × causal ×
# train (batch 12 with 1030 positions left out: its float64 reference alone is 300 MB)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch,seq", [(2, 267), (12, 267), (2, 1030)])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("dim", [8, 16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("train", [True, False])
def test_fused_vs_math(dtype, batch, seq, heads, dim, causal, train):
    x = packed_qkv(batch, seq, heads, dim, dtype, seed=seq + 7 * heads + dim).requires_grad_(train)
    x64 = x.detach().double().requires_grad_(train)
    q, k, v = (heads_view(t, batch, seq, heads, dim) for t in x.split(heads * dim, dim=2))
    q2, k2, v2 = (heads_view(t, batch, seq, heads, dim) for t in x64.split(heads * dim, dim=2))
    actual = sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=causal)
    expected = formula(q2, k2, v2, is_causal=causal)
    assert actual.dtype == dtype and actual.shape == (batch, heads, seq, dim)
    assert_close(actual, expected, dtype)
    if train:
        actual.sum().backward()
        expected.sum().backward()
        assert x.grad.dtype == dtype
        assert_close(x.grad, x64.grad, dtype)


# test_scaled_dot_product_fused_attention_mask_vs_math_cpu: every mask shape that broadcasts to
# [B, H, L, S] (2-D: [L|1, S|1]; 4-D: [B|1, H|1, L|1, S|1]), bool or of q's dtype
def mask_shapes(mask_dim, b, h, lq, lk):
    if mask_dim == 2:
        return [(a, c) for a in (lq, 1) for c in (lk, 1)]
    return [(w, x, y, z) for w in (b, 1) for x in (h, 1) for y in (lq, 1) for z in (lk, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_dim", [2, 4])
@pytest.mark.parametrize("bool_mask", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_mask_vs_math(dtype, mask_dim, bool_mask, train):
    b, h, lq, lk, e = 2, 3, 267, 514, 8
    g = torch.Generator().manual_seed(5 + mask_dim + bool_mask)
    for shape in mask_shapes(mask_dim, b, h, lq, lk):
        q = torch.randn(b, lq, h, e, generator=g).to(dtype).transpose(1, 2).requires_grad_(train)
        k = torch.randn(b, lk, h, e, generator=g).to(dtype).transpose(1, 2).requires_grad_(train)
        v = torch.randn(b, lk, h, e, generator=g).to(dtype).transpose(1, 2).requires_grad_(train)
        mask = (torch.randint(0, 2, shape, generator=g, dtype=torch.bool) if bool_mask
                else torch.randn(shape, generator=g).to(dtype))
        ref = [t.detach().double().requires_grad_(train) for t in (q, k, v)]
        actual = sdpa(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)
        expected = formula(*ref, mask=mask)
        assert_close(actual, expected, dtype)
        if train:
            actual.sum().backward()
            expected.sum().backward()
            for t, r in zip((q, k, v), ref):
                assert_close(t.grad, r.grad, dtype)


def test_mask_with_infinite_band():  # test_scaled_dot_product_fused_attention_with_inf (pytorch#127055)
    full = torch.full((600, 600), float("-inf"))
    mask = torch.triu(full, diagonal=1) + torch.tril(full, diagonal=-10)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 600, 8, generator=g) for _ in range(3))
    assert_close(sdpa(q, k, v, attn_mask=mask), formula(q, k, v, mask=mask), torch.float32)


def test_negative_scale():  # test_scaled_dot_product_attention_math_with_negative_scale (pytorch#105190)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    expected = torch.matmul((torch.matmul(x, x.transpose(-1, -2)) / -0.0001).softmax(dim=-1), x)
    actual = sdpa(x, x, x, scale=-1.0 / 0.0001)
    assert torch.allclose(actual, expected, atol=1e-5, rtol=1.3e-6)


@pytest.mark.parametrize("contiguous_inputs", [True, False])
def test_gradcheck_float64(contiguous_inputs):  # test_sdp_math_gradcheck
    b, lq, h, e = 4, 4, 2, 16
    x = torch.randn(b, lq, 3 * h * e, dtype=torch.float64, requires_grad=True)
    q, k, v = (t.view(b, -1, h, e).transpose(1, 2) for t in x.chunk(3, dim=-1))
    if contiguous_inputs:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    assert torch.autograd.gradcheck(lambda *a: sdpa(*a), (q, k, v, None, 0.0, False))
    mask = torch.randn(lq, lq, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), (q, k, v, mask))


def test_float64_is_computed_in_float64():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 9, 8, dtype=torch.float64, generator=g) for _ in range(3))
    y = sdpa(q, k, v, is_causal=True)
    assert y.dtype == torch.float64
    assert (y - formula(q, k, v, is_causal=True)).abs().max().item() < 1e-13


# TestTransformers.test_scaled_dot_product_attention: [N, L, E] and [N, N', L, E] inputs, bool masks of
# 2, 3 or 4 dims (one row fully masked: 0 there, as torch ≥ 2.5 gives), is_causal against the
# lower-triangular mask (and refused beside it), in float64 and float32
@pytest.mark.parametrize("input_dim,mask_dim,causal", [(3, None, False), (3, 2, False), (3, 2, True), (3, 3, False),
                                                       (3, 3, True), (4, None, False), (4, 2, False), (4, 2, True),
                                                       (4, 4, False), (4, 4, True)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_bool_masks_of_every_rank(input_dim, mask_dim, causal, dtype):
    g = torch.Generator().manual_seed(input_dim * 10 + (mask_dim or 0) + 5 * causal)
    n, n2, lq, lk, e = 5, 2, 4, 3, 6
    lead = (n,) if input_dim == 3 else (n, n2)
    q = torch.randn(*lead, lq, e, generator=g, dtype=dtype)
    k, v = (torch.randn(*lead, lk, e, generator=g, dtype=dtype) for _ in range(2))
    mask = None
    if mask_dim is not None:
        shape = (lq, lk) if mask_dim == 2 else (*lead, lq, lk)
        if causal:
            mask = torch.ones(shape, dtype=torch.bool).tril()
        else:
            mask = torch.randint(0, 2, shape, generator=g).bool()
            mask[..., 0, :] = False  # a row with nothing to attend to
    if causal:
        y = sdpa(q, k, v, None, 0.0, True)
        with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
            sdpa(q, k, v, mask, 0.0, True)
    else:
        y = sdpa(q, k, v, mask)
    assert y.dtype == dtype and y.shape == q.shape
    assert_close(y, formula(q, k, v, mask=mask), dtype)
    if mask is not None and not causal:
        assert torch.equal(y[..., 0, :], torch.zeros_like(y[..., 0, :]))


# the same test's dropout cases in float64 (the reference path draws torch's own dropout, in the order
# torch's math does: same seed, same mask as softmax(QKᵀ/√E) then F.dropout), and gradcheck with dropout
@pytest.mark.parametrize("p", [0.2, 0.5])
def test_float64_dropout_is_torch_formula_stream(p):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(5, 4, 6, generator=g, dtype=torch.float64)
    k, v = (torch.randn(5, 3, 6, generator=g, dtype=torch.float64) for _ in range(2))
    torch.manual_seed(21)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(6), dim=-1)
    expected = torch.nn.functional.dropout(w, p=p) @ v
    torch.manual_seed(21)
    assert torch.allclose(sdpa(q, k, v, dropout_p=p), expected, atol=1e-12, rtol=1e-12)


def test_gradcheck_float64_with_dropout():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(5, 4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(5, 3, 6, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))

    def seeded(*args):
        torch.manual_seed(0)
        return sdpa(*args, None, 0.2)

    assert torch.autograd.gradcheck(seeded, (q, k, v))


# TestSDPAFailureModes (the cases that run on the CPU): torch raises RuntimeError
def test_different_dtypes_raise():
    q = torch.randn(1, 4, 8, 16)
    k, v = torch.randn(1, 4, 8, 16).half(), torch.randn(1, 4, 8, 16).half()
    with pytest.raises(RuntimeError, match="Expected query, key, and value to have the same dtype"):
        sdpa(q, k, v)


def test_one_dimensional_inputs_raise():
    q = torch.randn(4).half()
    k, v = torch.randn(1, 4).half(), torch.randn(1, 4).half()
    with pytest.raises(RuntimeError, match="at least 2 dimensional"):
        sdpa(q, k, v)


def test_causal_with_explicit_mask_raises():
    q = torch.randn(2, 3, 4, 8)
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
        sdpa(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool), is_causal=True)


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float16])
def test_mask_of_another_dtype_raises(mask_dtype):
    q = torch.randn(2, 3, 4, 8)
    with pytest.raises(RuntimeError, match="Expected attn_mask dtype to be bool or float or to match query dtype"):
        sdpa(q, q, q, attn_mask=torch.ones(4, 4).to(mask_dtype))


@pytest.mark.parametrize("p", [-0.5, 1.5])
def test_dropout_out_of_range_raises(p):
    q = torch.randn(2, 3, 4, 8)
    with pytest.raises(RuntimeError):
        sdpa(q, q, q, dropout_p=p)


def test_shape_errors_raise():
    q = torch.randn(2, 3, 4, 8)
    with pytest.raises(RuntimeError):  # head dims differ
        sdpa(q, torch.randn(2, 3, 4, 6), torch.randn(2, 3, 4, 8))
    with pytest.raises(RuntimeError):  # batch dims do not broadcast
        sdpa(q, torch.randn(3, 3, 4, 8), torch.randn(3, 3, 4, 8))
    with pytest.raises(RuntimeError):  # a mask that does not broadcast
        sdpa(q, q, q, attn_mask=torch.ones(5, 4))
    with pytest.raises(RuntimeError):  # heads that do not divide
        sdpa(torch.randn(2, 4, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), enable_gqa=True)


# shapes torch takes beyond [B, H, L, E]
@pytest.mark.parametrize("qs,ks", [((5, 8), (6, 8)), ((3, 5, 8), (2, 3, 6, 8)), ((1, 4, 5, 8), (2, 4, 6, 8)),
                                   ((2, 3, 4, 5, 8), (2, 3, 4, 6, 8))])
def test_batch_dims_broadcast(qs, ks):
    g = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(qs, generator=g), torch.randn(ks, generator=g), torch.randn(ks, generator=g)
    assert_close(sdpa(q, k, v, scale=0.3), formula(q, k, v, scale=0.3), torch.float32)


def test_grouped_query_attention():
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 6, 5, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 2, 7, 8, generator=g, requires_grad=True) for _ in range(2))
    y = sdpa(q, k, v, enable_gqa=True)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = formula(ref[0], ref[1].repeat_interleave(3, dim=1), ref[2].repeat_interleave(3, dim=1))
    assert_close(y, expected, torch.float32)
    y.sum().backward()
    expected.sum().backward()
    for t, r in zip((q, k, v), ref):
        assert_close(t.grad, r.grad, torch.float32)


def test_empty_sequences():
    assert torch.equal(sdpa(torch.randn(2, 4, 8), torch.randn(2, 0, 8), torch.randn(2, 0, 8)), torch.zeros(2, 4, 8))
    assert sdpa(torch.randn(2, 0, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8)).shape == (2, 0, 8)


# the autograd contract
def test_backward_again_with_retain_graph():
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    y = sdpa(q, k, v, is_causal=True)
    y.sum().backward(retain_graph=True)
    first = q.grad.clone()
    y.sum().backward()
    assert torch.allclose(q.grad, 2 * first)
    z = sdpa(q, k, v)
    z.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        z.sum().backward()


def test_double_backward_is_refused():
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    (gq,) = torch.autograd.grad(sdpa(q, k, v).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        gq.sum().backward()


def test_output_changed_in_place_is_caught():
    q = torch.randn(2, 3, 5, 8, requires_grad=True)
    y = sdpa(q, q, q)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_dropout_follows_torch_generator():
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    torch.manual_seed(11)
    a = sdpa(q, k, v, dropout_p=0.5)
    torch.manual_seed(11)
    b = sdpa(q, k, v, dropout_p=0.5)
    c = sdpa(q, k, v, dropout_p=0.5)
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert not torch.allclose(a, sdpa(q, k, v))


def test_torch_function_subclass_is_dispatched():
    calls = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(2, 3, 5, 8)
    y = sdpa(x.as_subclass(Logged), x, x)
    assert sdpa in calls and isinstance(y, Logged)
    assert torch.allclose(torch.Tensor(y), sdpa(x, x, x))


# TestAttnBias (the CPU cases): causal_upper_left / causal_lower_right against their materialized masks
@has_causal_bias
@pytest.mark.parametrize("variant", ["upper_left", "lower_right"])
@pytest.mark.parametrize("lq,lk", [(4, 4), (4, 6), (6, 4), (12, 16), (17, 9), (1, 8)])
def test_causal_bias(variant, lq, lk):
    from torch.nn.attention import bias
    make = getattr(bias, "causal_" + variant)
    g = torch.Generator().manual_seed(lq * 31 + lk)
    q = torch.randn(2, 3, lq, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 3, lk, 8, generator=g, requires_grad=True) for _ in range(2))
    dense = make(lq, lk)._materialize(q.device)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    y = sdpa(q, k, v, attn_mask=make(lq, lk))
    expected = formula(*ref, mask=dense)
    assert_close(y, expected, torch.float32)
    y.sum().backward()
    expected.sum().backward()
    for t, r in zip((q, k, v), ref):
        assert_close(t.grad, r.grad, torch.float32)
    with pytest.raises(ValueError):
        sdpa(q, k, v, attn_mask=make(lq, lk), is_causal=True)


# TestAttnBias in float16 at two of its shapes ([B, H, Lq, Lk, E]; the odd head dim 15 among them):
# the CausalBias mask against its materialized mask (forward 1e-3, gradients 5e-3, torch's tolerances)
# and causal_upper_left against is_causal=True
@has_causal_bias
@pytest.mark.parametrize("variant", ["upper_left", "lower_right"])
@pytest.mark.parametrize("shape", [(2, 2, 128, 256, 32), (2, 2, 256, 128, 32), (1, 1, 23, 56, 15)])
def test_causal_bias_float16(variant, shape):
    from torch.nn.attention import bias
    b, h, lq, lk, e = shape
    if variant == "lower_right" and lq > lk:
        pytest.skip("torch's test skips it too: rows with nothing to attend to")
    make = getattr(bias, "causal_" + variant)
    g = torch.Generator().manual_seed(lq + lk + e)
    q = torch.rand(b, h, lq, e, generator=g).half().requires_grad_()
    k, v = (torch.rand(b, h, lk, e, generator=g).half().requires_grad_() for _ in range(2))
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    y = sdpa(q, k, v, attn_mask=make(lq, lk))
    expected = sdpa(*ref, attn_mask=make(lq, lk)._materialize(q.device))
    torch.testing.assert_close(y, expected, atol=1e-3, rtol=1e-3)
    d_out = torch.randn(y.shape, generator=g).half()
    y.backward(d_out)
    expected.backward(d_out)
    for t, r in zip((q, k, v), ref):
        torch.testing.assert_close(t.grad, r.grad, atol=5e-3, rtol=5e-3)
    assert_close(y, formula(q, k, v, mask=make(lq, lk)._materialize(q.device)), torch.float16)
    if variant == "upper_left":
        torch.testing.assert_close(y, sdpa(q, k, v, is_causal=True), atol=1e-3, rtol=1e-3)


@pytest.mark.skipif(not hasattr(torch, "nested") or not hasattr(torch, "jagged"), reason="jagged tensors: torch >= 2.3")
def test_nested_tensors_get_torch_attention():
    parts = [torch.randn(3, n, 8) for n in (5, 7)]
    nt = torch.nested.nested_tensor(parts, layout=torch.jagged).transpose(1, 2).contiguous().transpose(1, 2)
    try:
        out = sdpa(nt, nt, nt)
    except RuntimeError as e:  # torch's own message, where torch refuses the layout
        pytest.skip(f"torch refuses: {e}")
    for o, p in zip(out.unbind(), parts):
        assert_close(o, formula(p, p, p), torch.float32)


# torch.compile: the call is one custom op (qkv::scaled_dot_product_attention, torch >= 2.4), so dynamo
# keeps one graph (test_causal_variants_compile counts one frame); results and gradients equal eager's
needs_custom_op = pytest.mark.skipif(not hasattr(getattr(torch, "library", None), "custom_op"),
                                     reason="torch.library.custom_op needs torch >= 2.4")


def attend_packed(x, w, causal, p):
    q, k, v = (x @ w).view(x.shape[0], x.shape[1], 3, 2, 8).unbind(2)  # strided [B, H, L, E] views
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return sdpa(q, k, v, is_causal=causal, dropout_p=p).relu().sum(dim=-1)


@needs_custom_op
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_compile_fullgraph_equals_eager(dtype):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 5, 16, generator=g).to(dtype)
    w = torch.randn(16, 48, generator=g).to(dtype).requires_grad_()
    compiled = torch.compile(attend_packed, fullgraph=True)  # inductor: a graph break would raise
    y = compiled(x, w, True, 0.0)
    (gw,) = torch.autograd.grad(y.square().sum(), w)
    ye = attend_packed(x, w, True, 0.0)
    (gwe,) = torch.autograd.grad(ye.square().sum(), w)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(y, ye, atol=atol, rtol=rtol)
    torch.testing.assert_close(gw, gwe, atol=atol * 10, rtol=rtol * 10)


@needs_custom_op
def test_compile_dropout_same_mask_forward_and_backward():
    import torch._dynamo.testing
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")  # torch's RNG, as eager's
    g = torch.Generator().manual_seed(12)
    x, w = torch.randn(2, 5, 16, generator=g), torch.randn(16, 48, generator=g).requires_grad_()
    compiled = torch.compile(attend_packed, backend=counter, fullgraph=True)
    torch.manual_seed(3)
    y = compiled(x, w, False, 0.4)
    (gw,) = torch.autograd.grad(y.sum(), w)
    torch.manual_seed(3)
    ye = attend_packed(x, w, False, 0.4)
    (gwe,) = torch.autograd.grad(ye.sum(), w)
    assert counter.frame_count == 1
    torch.testing.assert_close(y, ye, atol=1e-5, rtol=5e-6)
    torch.testing.assert_close(gw, gwe, atol=1e-5, rtol=5e-6)


@needs_custom_op
@has_causal_bias
@pytest.mark.parametrize("variant", ["upper_left", "lower_right", "float", "bool"])
@pytest.mark.parametrize("lq,lk", [(4, 4), (4, 6)])
def test_compile_masks_one_frame(variant, lq, lk):  # test_causal_variants_compile, plus plain masks
    import torch._dynamo.testing
    from torch.nn.attention import bias
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    g = torch.Generator().manual_seed(lq * 10 + lk)
    q = torch.randn(2, 3, lq, 8, generator=g).requires_grad_()
    k, v = (torch.randn(2, 3, lk, 8, generator=g).requires_grad_() for _ in range(2))
    mask = {"upper_left": lambda: bias.causal_upper_left(lq, lk), "lower_right": lambda: bias.causal_lower_right(lq, lk),
            "float": lambda: torch.randn(lq, lk, generator=g).requires_grad_(),
            "bool": lambda: torch.rand(lq, lk, generator=g) > 0.3}[variant]()
    wrt = [q, k, v] + ([mask] if variant == "float" else [])
    y = torch.compile(sdpa, backend=counter, fullgraph=True)(q, k, v, attn_mask=mask)
    grads = torch.autograd.grad(y.sum(), wrt)
    ye = sdpa(q, k, v, attn_mask=mask)
    grads_eager = torch.autograd.grad(ye.sum(), wrt)
    assert counter.frame_count == 1
    torch.testing.assert_close(y, ye, atol=1e-5, rtol=5e-6)
    for a, b in zip(grads, grads_eager):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=5e-6)


def test_split_projection_views_reach_qkv_without_copies():
    """nanoGPT's q, k, v — one fused projection split and transposed — are strided views; they reach
    qkv as those views (the same memory), and attention and gradients through them equal the formula's."""
    torch.manual_seed(3)
    B, L, H, D = 2, 7, 3, 4
    x = torch.randn(B, L, 3 * H * D, requires_grad=True)
    q, k, v = (t.view(B, L, H, D).transpose(1, 2) for t in x.split(H * D, dim=2))
    for t in (q, k, v):
        view, layout = qkv.torch._into_qkv(t)
        assert layout is None and torch.from_dlpack(view).data_ptr() == t.data_ptr()
        assert view.stride() == t.stride()
    out = sdpa(q, k, v, is_causal=True)
    g = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, x, g)
    xr = x.detach().double().requires_grad_()
    qr, kr, vr = (t.view(B, L, H, D).transpose(1, 2) for t in xr.split(H * D, dim=2))
    ref = formula(qr, kr, vr, is_causal=True)
    (gr,) = torch.autograd.grad(ref, xr, g.double())
    assert_close(out, ref, torch.float32)
    assert_close(gx, gr, torch.float32)
