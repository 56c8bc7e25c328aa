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


@pytest.mark.parametrize("cls,arg", [("MultiheadAttention", {"add_bias_kv": True}),
                                     ("MultiheadAttention", {"add_zero_attn": True}), ("LSTM", {"proj_size": 3}),
                                     ("GRU", {"device": "meta"}), ("LSTM", {"dtype": torch.float64})])
def test_what_qkv_does_not_compute_is_refused_by_name(cls, arg):
    args = {"MultiheadAttention": (8, 2), "GRU": (4, 6), "LSTM": (4, 6)}[cls]
    with pytest.raises(NotImplementedError, match=next(iter(arg))):
        getattr(qkv.nn, cls)(*args, **arg)


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
