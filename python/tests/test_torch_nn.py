"""qkv.torch.nn: torch.nn's attention modules with qkv's attention equal torch's own — same
constructor (every argument, every default spelled out), same initial parameters from the same
seed, same outputs, weights and gradients — and a torch model trains with them swapped in."""
import inspect
import itertools

import pytest

torch = pytest.importorskip("torch")  # conftest.py fails the run instead when QKV_REQUIRE_TORCH is set
import qkv.torch.nn as qnn  # noqa: E402


def max_diff(a, b):
    return 0.0 if a is None and b is None else (a - b).abs().max().item()


def twins(cls, *args, **kwargs):
    """torch's module and qkv's, built from the same seed."""
    torch.manual_seed(1)
    theirs = getattr(torch.nn, cls)(*args, **kwargs)
    torch.manual_seed(1)
    ours = getattr(qnn, cls)(*args, **kwargs)
    return theirs, ours


@pytest.mark.parametrize("cls", ["MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer"])
def test_torch_constructor_every_default_spelled(cls):
    ours = getattr(qnn, cls)
    assert issubclass(ours, getattr(torch.nn, cls)) and issubclass(ours, torch.nn.Module)
    params = inspect.signature(getattr(torch.nn, cls).__init__).parameters
    defaults = {n: p.default for n, p in params.items()
                if n != "self" and p.default is not inspect.Parameter.empty}
    required = {"embed_dim": 8, "num_heads": 2, "d_model": 8, "nhead": 2}
    m = ours(**{n: required[n] for n in params if n in required}, **defaults)
    assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())


@pytest.mark.parametrize("bias,add_bias_kv,add_zero_attn,kdim,batch_first",
                         list(itertools.product([True, False], [False, True], [False, True], [None, 6], [False, True])))
def test_multihead_attention_equals_torch(bias, add_bias_kv, add_zero_attn, kdim, batch_first):
    E, H, N, L, S = 8, 2, 3, 4, 5
    theirs, ours = twins("MultiheadAttention", E, H, bias=bias, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                         kdim=kdim, vdim=kdim, batch_first=batch_first)
    for name, p in theirs.named_parameters():
        assert torch.equal(p, dict(ours.named_parameters())[name])
    g = torch.Generator().manual_seed(2)
    kd = kdim or E
    q = torch.randn((N, L, E) if batch_first else (L, N, E), generator=g)
    kv = torch.randn((N, S, kd) if batch_first else (S, N, kd), generator=g)
    bool_mask = torch.rand(L, S, generator=g) > 0.7
    bool_mask[:, 0] = False
    padding = torch.zeros(N, S, dtype=torch.bool)
    padding[:, -1] = True
    for need_weights, average, mask, kpm in itertools.product(
            [False, True], [True, False], [None, bool_mask, torch.randn(N * H, L, S, generator=g)], [None, padding]):
        theirs.zero_grad()
        ours.zero_grad()
        o1, w1 = theirs(q, kv, kv, key_padding_mask=kpm, need_weights=need_weights, attn_mask=mask,
                        average_attn_weights=average)
        o2, w2 = ours(q, kv, kv, key_padding_mask=kpm, need_weights=need_weights, attn_mask=mask,
                      average_attn_weights=average)
        assert max_diff(o1, o2) < 1e-5 and max_diff(w1, w2) < 1e-5
        o1.square().sum().backward()
        o2.square().sum().backward()
        for (name, p1), p2 in zip(theirs.named_parameters(), ours.parameters()):
            assert max_diff(p1.grad, p2.grad) < 1e-4, name


def test_multihead_self_attention_unbatched():
    theirs, ours = twins("MultiheadAttention", 8, 2)
    x = torch.randn(4, 8)
    (o1, w1), (o2, w2) = theirs(x, x, x), ours(x, x, x)
    assert o2.shape == (4, 8) and max_diff(o1, o2) < 1e-5 and max_diff(w1, w2) < 1e-6


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_layers_equal_torch(norm_first, activation, batch_first):
    kw = dict(dim_feedforward=32, dropout=0.0, activation=activation, batch_first=batch_first, norm_first=norm_first)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 7, 16, generator=g)
    mem = torch.randn(3, 5, 16, generator=g)
    if not batch_first:
        x, mem = x.transpose(0, 1), mem.transpose(0, 1)
    causal = torch.triu(torch.full((7, 7), float("-inf")), diagonal=1)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[0, -2:] = True
    theirs, ours = twins("TransformerEncoderLayer", 16, 4, **kw)
    assert max_diff(theirs(x, src_mask=causal, src_key_padding_mask=padding),
                    ours(x, src_mask=causal, src_key_padding_mask=padding)) < 1e-5
    theirs.eval(), ours.eval()
    with torch.no_grad():
        assert max_diff(theirs(x), ours(x)) < 1e-5
    theirs, ours = twins("TransformerDecoderLayer", 16, 4, **kw)
    assert max_diff(theirs(x, mem, tgt_mask=causal, tgt_key_padding_mask=padding),
                    ours(x, mem, tgt_mask=causal, tgt_key_padding_mask=padding)) < 1e-5


def test_a_torch_model_trains_with_the_layer_swapped():
    """torch.nn.TransformerEncoder over qkv's layer: the same losses as over torch's, step by step."""
    def run(layer_cls):
        torch.manual_seed(4)
        model = torch.nn.Sequential(torch.nn.Embedding(20, 16),
                                    torch.nn.TransformerEncoder(layer_cls(16, 4, 32, dropout=0.0, batch_first=True), 2),
                                    torch.nn.Linear(16, 20))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(5)
        losses = []
        for _ in range(5):
            ids = torch.randint(0, 20, (4, 9), generator=g)
            loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    theirs, ours = run(torch.nn.TransformerEncoderLayer), run(qnn.TransformerEncoderLayer)
    assert max(abs(a - b) for a, b in zip(theirs, ours)) < 1e-4, (theirs, ours)
    assert ours[-1] < ours[0]


def test_attention_is_qkvs(monkeypatch):
    calls = []
    import qkv.torch
    real = qkv.torch.nn.scaled_dot_product_attention
    monkeypatch.setattr(qkv.torch.nn, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(2, 5, 8)
    qnn.TransformerEncoderLayer(8, 2, 16, batch_first=True)(x)
    qnn.MultiheadAttention(8, 2)(x, x, x)
    assert len(calls) == 2
