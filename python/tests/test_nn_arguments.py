"""qkv.nn's constructors take torch.nn's arguments by torch's names with every default spelled out,
refuse by name what qkv's modules do not compute, and GRU/LSTM take unbatched input as torch does."""
import inspect

import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")  # conftest.py fails the run instead when QKV_REQUIRE_TORCH is set

RNN_DEFAULTS = dict(num_layers=1, bias=True, batch_first=False, dropout=0.0, bidirectional=False, device=None,
                    dtype=None)  # torch's RNN.__init__ takes *args, **kwargs: its documented defaults
REQUIRED = {"embed_dim": 8, "num_heads": 2, "d_model": 8, "nhead": 2, "input_size": 4, "hidden_size": 6}


@pytest.mark.parametrize("cls", ["MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer", "GRU",
                                 "LSTM"])
def test_every_torch_default_spelled(cls):
    params = inspect.signature(getattr(torch.nn, cls).__init__).parameters
    args = {n: REQUIRED[n] for n in params if n in REQUIRED}
    defaults = {n: p.default for n, p in params.items() if n not in ("self", "args", "kwargs") and
                p.default is not inspect.Parameter.empty}
    if cls in ("GRU", "LSTM"):
        args = {"input_size": 4, "hidden_size": 6}
        defaults = dict(RNN_DEFAULTS, **({"proj_size": 0} if cls == "LSTM" else {}))
    module = getattr(qkv.nn, cls)(**args, **defaults)
    assert isinstance(module, qkv.nn.Module)
    ours = getattr(qkv.nn, cls)(**args)
    assert sorted(ours.state_dict()) == sorted(getattr(torch.nn, cls)(**args).state_dict())


@pytest.mark.parametrize("cls,arg", [("GRU", {"device": "meta"}),
                                     ("LSTM", {"dtype": torch.float64})])
def test_what_qkv_does_not_compute_is_refused_by_name(cls, arg):
    args = {"MultiheadAttention": (8, 2), "GRU": (4, 6), "LSTM": (4, 6)}[cls]
    with pytest.raises(NotImplementedError, match=next(iter(arg))):
        getattr(qkv.nn, cls)(*args, **arg)


@pytest.mark.parametrize("extra", [{"add_bias_kv": True}, {"add_zero_attn": True},
                                   {"add_bias_kv": True, "add_zero_attn": True}])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "bool", "float"])
@pytest.mark.parametrize("kdim", [None, 6])
def test_multihead_attention_bias_kv_zero_attn_equal_torch(extra, batch_first, masks, kdim):
    """add_bias_kv / add_zero_attn: torch's state_dict loads (bias_k, bias_v among the names), and the
    output, the averaged and per-head weights and every parameter's gradient equal torch's."""
    if masks == "float" and torch.__version__.startswith("1."):
        pytest.skip("torch 1.13's MultiheadAttention reads a float key_padding_mask otherwise (torch 2's _canonical_mask)")
    torch.manual_seed(3)
    E, H, L, S, N = 8, 2, 5, 7, 3
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=batch_first, kdim=kdim, vdim=kdim, **extra)
    ours = qkv.nn.MultiheadAttention(E, H, batch_first=batch_first, kdim=kdim, vdim=kdim, **extra)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())
    keys = ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert keys.missing_keys == [] and keys.unexpected_keys == []
    kd = kdim or E
    q = torch.randn(N, L, E) if batch_first else torch.randn(L, N, E)
    k = torch.randn(N, S, kd) if batch_first else torch.randn(S, N, kd)
    v = torch.randn_like(k)
    kpm = am = None
    if masks != "none":
        kpm = torch.zeros(N, S, dtype=torch.bool)
        kpm[0, -3:] = True
        am = torch.rand(L, S) > 0.7
        am[:, 0] = False
        if masks == "float":
            kpm = torch.zeros(N, S).masked_fill(kpm, float("-inf"))
            am = torch.randn(L, S)
    for average in (True, False):
        theirs.zero_grad()
        ours.zero_grad()
        out_t, w_t = theirs(q, k, v, key_padding_mask=kpm, attn_mask=am, average_attn_weights=average)
        out_q, w_q = ours(q.numpy(), k.numpy(), v.numpy(), key_padding_mask=None if kpm is None else kpm.numpy(),
                          attn_mask=None if am is None else am.numpy(), average_attn_weights=average)
        np.testing.assert_allclose(out_q.numpy(), out_t.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(w_q.numpy(), w_t.detach().numpy(), atol=1e-5)
        out_t.sum().backward()
        out_q.sum().backward()
        grads = dict(ours.named_parameters())
        for name, p in theirs.named_parameters():
            np.testing.assert_allclose(grads[name].grad.numpy(), p.grad.numpy(), atol=1e-5, err_msg=name)
    out_t, _ = theirs(q, k, v, key_padding_mask=kpm, attn_mask=am, need_weights=False)
    out_q, w_q = ours(q.numpy(), k.numpy(), v.numpy(), key_padding_mask=None if kpm is None else kpm.numpy(),
                      attn_mask=None if am is None else am.numpy(), need_weights=False)
    assert w_q is None
    np.testing.assert_allclose(out_q.numpy(), out_t.detach().numpy(), atol=1e-5)


def test_multihead_attention_bias_kv_unbatched_and_training():
    torch.manual_seed(4)
    theirs = torch.nn.MultiheadAttention(8, 4, add_bias_kv=True, add_zero_attn=True)
    ours = qkv.nn.MultiheadAttention(8, 4, add_bias_kv=True, add_zero_attn=True)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(6, 8)
    out_t, w_t = theirs(x, x, x)
    out_q, w_q = ours(x.numpy(), x.numpy(), x.numpy())
    assert tuple(out_q.shape) == (6, 8) and tuple(w_q.shape) == (6, 8)  # 6 keys + bias + zero
    np.testing.assert_allclose(out_q.numpy(), out_t.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(w_q.numpy(), w_t.detach().numpy(), atol=1e-5)
    # three SGD steps on qkv's gradients move every parameter (bias_k, bias_v too) as torch's do
    opt = torch.optim.SGD(theirs.parameters(), lr=0.1)
    params = dict(ours.named_parameters())
    for _ in range(3):
        opt.zero_grad()
        ours.zero_grad()
        theirs(x, x, x)[0].pow(2).sum().backward()
        y = ours(x.numpy(), x.numpy(), x.numpy())[0]
        (y * y).sum().backward()
        opt.step()
        for p in params.values():
            p.numpy()[...] -= 0.1 * p.grad.numpy()  # in place: the parameter's own memory
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(params[name].numpy(), p.detach().numpy(), atol=1e-5, err_msg=name)


@pytest.mark.parametrize("cls", ["GRU", "LSTM"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_unbatched_input_equals_torch(cls, batch_first, bidirectional):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls)(4, 6, num_layers=2, batch_first=batch_first, bidirectional=bidirectional)
    ours = getattr(qkv.nn, cls)(4, 6, num_layers=2, batch_first=batch_first, bidirectional=bidirectional)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = torch.randn(5, 4)
    h = torch.randn(4 if bidirectional else 2, 6)
    hx = (h, torch.randn_like(h)) if cls == "LSTM" else h
    out_t, state_t = theirs(x, hx)
    out_q, state_q = ours(x.numpy(), tuple(t.numpy() for t in hx) if cls == "LSTM" else hx.numpy())
    assert tuple(out_q.shape) == tuple(out_t.shape)
    np.testing.assert_allclose(out_q.numpy(), out_t.detach().numpy(), atol=1e-5)
    for a, b in zip(state_q if cls == "LSTM" else (state_q,), state_t if cls == "LSTM" else (state_t,)):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-5)


@pytest.mark.parametrize("layers,bidirectional,batch_first,bias", [(1, False, False, True), (2, True, True, True),
                                                                   (2, False, False, False)])
@pytest.mark.parametrize("given_state", [False, True])
def test_lstm_proj_size_equals_torch(layers, bidirectional, batch_first, bias, given_state):
    torch.manual_seed(layers + 2 * bidirectional + 4 * batch_first)
    theirs = torch.nn.LSTM(5, 6, layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional, proj_size=3)
    ours = qkv.nn.LSTM(5, 6, layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional, proj_size=3)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 4, 5)
    directions, batch = layers * (2 if bidirectional else 1), (2 if batch_first else 4)
    hx = (torch.randn(directions, batch, 3), torch.randn(directions, batch, 6)) if given_state else None
    y, (h, c) = theirs(x, hx)
    yq, (hq, cq) = ours(qkv.tensor(x.numpy()), None if hx is None else tuple(qkv.tensor(t.numpy()) for t in hx))
    for a, b in ((yq, y), (hq, h), (cq, c)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-5, rtol=1e-5)
    (y.sum() + h.sum() * 2 + c.sum()).backward()
    (yq.sum() + hq.sum() * 2.0 + cq.sum()).backward()
    grads = dict(theirs.named_parameters())
    for name, t in ours.named_parameters():
        np.testing.assert_allclose(t.grad.numpy(), grads[name].grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=name)
    yu, (hu, cu) = ours(qkv.tensor(x[0].numpy()))  # unbatched [L, H_in]
    ytu, (htu, ctu) = theirs(x[0])
    np.testing.assert_allclose(yu.numpy(), ytu.detach().numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(hu.numpy(), htu.detach().numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_lstm_proj_size_lengths_equal_torch_packed(bidirectional, batch_first):
    """Per-sequence lengths with proj_size: torch's pack_padded_sequence (outputs 0 past each length,
    h_n/c_n at each sequence's own end), forward and the parameters' gradients."""
    torch.manual_seed(11 + bidirectional + 2 * batch_first)
    theirs = torch.nn.LSTM(4, 6, 2, batch_first=batch_first, bidirectional=bidirectional, proj_size=3)
    ours = qkv.nn.LSTM(4, 6, 2, batch_first=batch_first, bidirectional=bidirectional, proj_size=3)
    ours.load_state_dict(theirs.state_dict())
    lengths = [5, 2, 4]
    x = torch.randn(3, 5, 4) if batch_first else torch.randn(5, 3, 4)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=False)
    y_p, (h, c) = theirs(packed)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y_p, batch_first=batch_first, total_length=5)
    yq, (hq, cq) = ours(x.numpy(), lengths=np.array(lengths, dtype=np.int64))
    for a, b in ((yq, y), (hq, h), (cq, c)):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-5, rtol=1e-5)
    (y.sum() + h.sum() * 2 + c.sum()).backward()
    (yq.sum() + hq.sum() * 2.0 + cq.sum()).backward()
    grads = dict(theirs.named_parameters())
    for name, t in ours.named_parameters():
        np.testing.assert_allclose(t.grad.numpy(), grads[name].grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=name)


def test_lstm_proj_size_parameters_are_the_modules():
    """weight_hr_l{k} is a parameter of the C++ module: state_dict shares its memory, .to() moves it with
    the rest (one set of parameters, no Python-side copies)."""
    m = qkv.nn.LSTM(4, 6, 2, bidirectional=True, proj_size=3)
    assert m.proj_size == 3
    names = [n for n, _ in m.named_parameters()]
    assert names.count("weight_hr_l1_reverse") == 1 and len(names) == 20
    assert m.to("cpu") is m
    assert [n for n, _ in m.named_parameters()] == names
    sd = m.state_dict()
    sd["weight_hr_l0"].numpy()[...] = 0.5  # shares memory with the parameter, as torch's state_dict
    assert float(dict(m.named_parameters())["weight_hr_l0"].numpy()[0, 0]) == 0.5
    if qkv.cuda.is_available():
        m.to("cuda")
        assert all(str(t.device).startswith("cuda") for _, t in m.named_parameters())
        with pytest.raises(qkv.Error, match="proj_size 3 runs on the cpu only"):
            m(qkv.tensor(np.zeros((3, 2, 4), np.float32)).to("cuda"))


def test_lstm_proj_size_refusals():
    with pytest.raises(ValueError, match="proj_size"):
        qkv.nn.LSTM(4, 6, proj_size=6)
    with pytest.raises(qkv.Error, match="initial state must be"):  # h0 has proj_size features, not hidden_size
        h = qkv.tensor(np.zeros((1, 2, 6), np.float32))
        qkv.nn.LSTM(4, 6, proj_size=3)(qkv.tensor(np.zeros((3, 2, 4), np.float32)), (h, h))
