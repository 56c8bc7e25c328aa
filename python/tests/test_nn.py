"""qkv.nn modules loaded with a torch.nn module's state_dict compute what it computes, forward and
backward; qkv.nn.functional.multi_head_attention equals torch's with the same weights."""
import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")


def close(actual, expected, what, tol=1e-5):
    a = torch.from_numpy(np.array(actual.numpy() if isinstance(actual, qkv.Tensor) else actual)).double()
    e = expected.detach().double()
    err, top = (a - e).abs().max().item(), e.abs().max().item()
    assert err <= tol * top + 1e-6, f"{what}: max error {err:.3g}, largest value {top:.3g}"


def load_from(mine, theirs):
    mine.load_state_dict({k: v.detach() for k, v in theirs.state_dict().items()})
    return mine


def grads_match(mine, theirs):
    for name, p in theirs.named_parameters():
        close(dict(mine.named_parameters())[name].grad, p.grad, f"d {name}")


def test_linear_and_state_dict_names():
    torch.manual_seed(0)
    t = torch.nn.Linear(5, 3)
    m = load_from(qkv.nn.Linear(5, 3), t)
    assert sorted(m.state_dict()) == sorted(t.state_dict())
    x = torch.randn(4, 5)
    close(m(x.numpy()), t(x), "output")
    with pytest.raises(qkv.Error, match="weight"):
        m.load_state_dict({"weight": np.zeros((3, 4), np.float32), "bias": np.zeros(3, np.float32)})
    with pytest.raises(qkv.Error):
        m.load_state_dict({"weight": np.zeros((3, 5), np.float32)})  # strict: the bias is missing


def test_load_state_dict_returns_missing_and_unexpected_keys_as_torch():
    m, t = qkv.nn.Linear(5, 3), torch.nn.Linear(5, 3)
    full = {"weight": np.ones((3, 5), np.float32), "bias": np.ones(3, np.float32)}
    r = m.load_state_dict(full)
    assert r == t.load_state_dict({k: torch.from_numpy(v) for k, v in full.items()})
    assert r.missing_keys == [] and r.unexpected_keys == [] and repr(r) == "<All keys matched successfully>"
    partial = {"weight": np.zeros((3, 5), np.float32), "extra": np.zeros(2, np.float32)}
    r = m.load_state_dict(partial, strict=False)
    theirs = t.load_state_dict({k: torch.from_numpy(v) for k, v in partial.items()}, strict=False)
    assert (r.missing_keys, r.unexpected_keys) == (theirs.missing_keys, theirs.unexpected_keys) == (["bias"], ["extra"])
    missing, unexpected = r  # a named tuple, as torch's
    assert missing == ["bias"] and unexpected == ["extra"]
    assert float(np.asarray(m.state_dict()["weight"]).sum()) == 0  # what matched was loaded
    mha = qkv.nn.MultiheadAttention(8, 2)  # a subclass: the same method
    assert mha.load_state_dict({}, strict=False).missing_keys == [k for k, _ in mha.named_parameters()]


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_forward_backward(batch_first):
    torch.manual_seed(1)
    t = torch.nn.MultiheadAttention(16, 4, batch_first=batch_first)
    m = load_from(qkv.nn.MultiheadAttention(16, 4, batch_first=batch_first), t)
    shape_q, shape_k = ((2, 5, 16), (2, 7, 16)) if batch_first else ((5, 2, 16), (7, 2, 16))
    q, k = torch.randn(*shape_q), torch.randn(*shape_k)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[1, 5:] = True
    out_t, w_t = t(q, k, k, key_padding_mask=kpm)
    out_m, w_m = m(q.numpy(), k.numpy(), k.numpy(), key_padding_mask=kpm.numpy())
    close(out_m, out_t, "output")
    close(w_m, w_t, "weights")
    g = torch.randn(out_t.shape)
    out_t.backward(g)
    out_m.backward(qkv.tensor(g.numpy()))
    grads_match(m, t)


def test_functional_multi_head_attention_equals_torch():
    torch.manual_seed(2)
    E, H = 12, 3
    q = torch.randn(4, 2, E, requires_grad=True)
    w_in, b_in = torch.randn(3 * E, E, requires_grad=True), torch.randn(3 * E, requires_grad=True)
    w_out, b_out = torch.randn(E, E, requires_grad=True), torch.randn(E, requires_grad=True)
    mask = torch.ones(4, 4, dtype=torch.bool).triu(1)  # True = masked out
    out_t, w_t = torch.nn.functional.multi_head_attention_forward(q, q, q, E, H, w_in, b_in, None, None, False, 0.0,
                                                                  w_out, b_out, attn_mask=mask)
    leaves = [qkv.tensor(x.detach().numpy(), requires_grad=True) for x in (q, w_in, b_in, w_out, b_out)]
    out_m, w_m = qkv.nn.functional.multi_head_attention(leaves[0], leaves[0], leaves[0], H, *leaves[1:],
                                                        attn_mask=mask.numpy())
    close(out_m, out_t, "output")
    close(w_m, w_t, "weights")
    g = torch.randn(out_t.shape)
    out_t.backward(g)
    out_m.backward(qkv.tensor(g.numpy()))
    for name, mine, theirs in zip(("q", "in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias"), leaves,
                                  (q, w_in, b_in, w_out, b_out)):
        close(mine.grad, theirs.grad, f"d {name}")


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_layers(norm_first):
    torch.manual_seed(3)
    enc_t = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    dec_t = torch.nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    enc = load_from(qkv.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first), enc_t)
    dec = load_from(qkv.nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first), dec_t)
    src, tgt = torch.randn(2, 6, 16), torch.randn(2, 4, 16)
    mem_t = enc_t(src)
    mem = enc(src.numpy())
    close(mem, mem_t, "encoder")
    causal = torch.nn.Transformer.generate_square_subsequent_mask(4)
    close(dec(tgt.numpy(), mem, tgt_mask=causal.numpy()), dec_t(tgt, mem_t, tgt_mask=causal), "decoder")


@pytest.mark.parametrize("cls", ["GRU", "LSTM"])
def test_recurrent_layers_with_lengths(cls):
    torch.manual_seed(4)
    t = getattr(torch.nn, cls)(6, 8, num_layers=2, bidirectional=True, batch_first=True)
    m = load_from(getattr(qkv.nn, cls)(6, 8, num_layers=2, bidirectional=True, batch_first=True), t)
    x = torch.randn(3, 5, 6)
    lengths = [5, 3, 1]
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
    out_t, state_t = t(packed)
    out_t, _ = torch.nn.utils.rnn.pad_packed_sequence(out_t, batch_first=True)
    out_m, state_m = m(x.numpy(), lengths=np.array(lengths, dtype=np.int32))
    close(out_m, out_t, "output")
    h_t, h_m = (state_t[0], state_m[0]) if cls == "LSTM" else (state_t, state_m)
    close(h_m, h_t, "h_n")
    g = torch.randn(out_t.shape)
    out_t.backward(g)
    out_m.backward(qkv.tensor(g.numpy()))
    grads_match(m, t)


def test_embedding_and_layer_norm():
    torch.manual_seed(5)
    e_t, n_t = torch.nn.Embedding(10, 4, padding_idx=0), torch.nn.LayerNorm(4)
    e, n = load_from(qkv.nn.Embedding(10, 4, padding_idx=0), e_t), load_from(qkv.nn.LayerNorm(4), n_t)
    ids = torch.tensor([[1, 0, 9], [3, 3, 2]])
    close(n(e(ids.numpy())), n_t(e_t(ids)), "layer_norm(embedding)")


@pytest.mark.parametrize("reduction,bias,chunk_rows", [("mean", True, 0), ("sum", False, 5), ("mean", True, 16)])
def test_functional_linear_cross_entropy_equals_torch(reduction, bias, chunk_rows):
    """qkv.nn.functional.linear_cross_entropy (the logits never whole) and cross_entropy against torch's
    cross_entropy(linear(…)) in float64, forward and backward, with ignored targets and label smoothing."""
    torch.manual_seed(3)
    x, w, b = torch.randn(37, 12), torch.randn(300, 12) * 0.3, torch.randn(300)
    y = torch.randint(0, 300, (37,))
    y[[2, 20]] = -100
    mine = [qkv.tensor(t.numpy(), requires_grad=True) for t in ((x, w, b) if bias else (x, w))]
    theirs = [t.double().requires_grad_() for t in ((x, w, b) if bias else (x, w))]
    loss = qkv.nn.functional.linear_cross_entropy(*mine[:2], y.numpy(), mine[2] if bias else None, reduction=reduction,
                                                  label_smoothing=0.1, chunk_rows=chunk_rows)
    want = torch.nn.functional.cross_entropy(torch.nn.functional.linear(*theirs), y, reduction=reduction,
                                             label_smoothing=0.1)
    close(loss, want, "loss")
    (loss * 2.0).backward()
    (want * 2.0).backward()
    for name, m, t in zip(("x", "weight", "bias"), mine, theirs):
        close(m.grad, t.grad, f"d {name}")
    plain = qkv.nn.functional.cross_entropy(qkv.nn.functional.linear(x.numpy(), w.numpy()), y.numpy(), reduction="none")
    close(plain, torch.nn.functional.cross_entropy(x.double() @ w.double().T, y, reduction="none"), "per-row losses")
    with pytest.raises(qkv.Error, match="reduction must be mean or sum, got none"):
        qkv.nn.functional.linear_cross_entropy(x.numpy(), w.numpy(), y.numpy(), reduction="none")
