"""qkv.nn: modules with torch.nn's names, arguments and parameter names (a PyTorch state_dict loads
one to one with load_state_dict), and the functional ops (qkv.nn.functional).

Every constructor takes torch's arguments by torch's names, and each of torch's defaults may be
spelled out (MultiheadAttention(…, add_bias_kv=False, add_zero_attn=False, kdim=None, device=None,
dtype=None), LSTM(…, proj_size=0)). MultiheadAttention takes add_bias_kv=True (bias_k, bias_v
parameters under torch's names, in state_dict and parameters()) and add_zero_attn=True, composed of
qkv's ops in Python (the in-projection by linear, the extra key/value positions appended by a linear
over the sequence — O(S²·E) more work than the C++ module, which computes the default case). What
qkv's modules do not compute — a device other than the CPU or a dtype other than float32 at
construction — is refused by name. LSTM(…, proj_size=P > 0) is the C++ module's (h_t = W_hr
(o_t ⊙ tanh c_t), weight_hr_l{k} under torch's names, the fused time loop lstm_proj_scan, lengths
included; CPU only). GRU and LSTM take unbatched input ([L, H_in], hx [layers·directions, H]) as
torch does."""
from collections import namedtuple

from .._qkv import nn as _nn
from .._qkv.nn import Embedding, LayerNorm, Linear, Module
from . import functional


def _refuse(cls, **given):
    """Non-default values of torch arguments that qkv's module does not compute, named."""
    for name, (value, default) in given.items():
        if value != default:
            raise NotImplementedError(f"qkv.nn.{cls}: {name}={value!r} is not supported (torch's default "
                                      f"{default!r} is); qkv.torch.nn's modules take torch tensors and more")


def _refuse_placement(cls, device, dtype):
    if device is not None and str(device) != "cpu":
        raise NotImplementedError(f"qkv.nn.{cls}: device={device!r}: build on the CPU, then .to(device)")
    if dtype is not None and str(dtype).replace("torch.", "") not in ("float32", "float"):
        raise NotImplementedError(f"qkv.nn.{cls}: dtype={dtype!r}: qkv's modules hold float32 parameters")


class MultiheadAttention(_nn.MultiheadAttention):
    __doc__ = _nn.MultiheadAttention.__doc__

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        _refuse_placement("MultiheadAttention", device, dtype)
        super().__init__(embed_dim, num_heads, dropout, bias, kdim or 0, vdim or 0, batch_first)
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.add_zero_attn, self._dropout = bool(add_zero_attn), float(dropout)
        self.bias_k = self.bias_v = None
        if add_bias_kv:  # torch's xavier_normal_ of a [1, 1, E] tensor: std = 1/√E
            import numpy as np
            from .. import tensor
            rng = np.random.default_rng()
            self.bias_k, self.bias_v = (tensor(rng.standard_normal((1, 1, embed_dim), dtype=np.float32)
                                               / np.float32(embed_dim ** 0.5), requires_grad=True) for _ in range(2))

    # bias_k/bias_v join the module's parameters and state_dict under torch's names (the C++ module's
    # own are in_proj_weight …, out_proj.*)
    def _extra(self):
        return [] if self.bias_k is None else [("bias_k", self.bias_k), ("bias_v", self.bias_v)]

    def named_parameters(self):
        return super().named_parameters() + self._extra()

    def parameters(self):
        return super().parameters() + [t for _, t in self._extra()]

    def num_parameters(self):
        return super().num_parameters() + sum(t.numel() for _, t in self._extra())

    def state_dict(self):
        d = super().state_dict()
        d.update(self._extra())
        return d

    def load_state_dict(self, state_dict, strict=True):
        import numpy as np
        from .._qkv import Error
        names = [k for k, _ in self.named_parameters()] + [k for k, _ in self.named_buffers()]
        missing = [k for k in names if k not in state_dict]
        unexpected = [k for k in state_dict if k not in set(names)]
        rest = dict(state_dict)
        for name, t in self._extra():
            if name not in rest:
                if strict:
                    raise Error(f"load_state_dict: {name} is missing from the state dict")
                continue
            src = rest.pop(name)
            src = np.asarray(src.detach().cpu().numpy() if hasattr(src, "detach") and hasattr(src, "cpu")
                             else src, dtype=np.float32)
            if src.shape != tuple(t.shape):
                raise Error(f"load_state_dict: {name} is {src.shape} in the state dict, {tuple(t.shape)} here")
            np.copyto(t.numpy(), src)  # in place: a tensor an optimizer holds stays the parameter
        _load_state_dict(self, rest, strict)  # the C++ module's own names (strict: qkv.Error on a mismatch)
        return IncompatibleKeys(missing, unexpected)

    def zero_grad(self):
        super().zero_grad()
        for _, t in self._extra():
            t.grad = None

    def __call__(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                 average_attn_weights=True, is_causal=False):
        if self.bias_k is None and not self.add_zero_attn:
            return super().__call__(query, key, value, key_padding_mask, need_weights, attn_mask,
                                    average_attn_weights, is_causal)
        return _mha_extended(self, query, key, value, key_padding_mask, need_weights, attn_mask,
                             average_attn_weights, is_causal)

    forward = __call__


def _additive_mask(m):
    """torch's _canonical_mask in NumPy: bool (True = masked) → −inf/0, float as it is."""
    import numpy as np
    m = np.asarray(m)
    if m.dtype == np.bool_:
        return np.where(m, np.float32(-np.inf), np.float32(0.0))
    if not np.issubdtype(m.dtype, np.floating):
        raise AssertionError("only bool and floating types of masks are supported")
    return m.astype(np.float32)


def _mha_extended(self, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
                  is_causal):
    """torch.nn.functional.multi_head_attention_forward with add_bias_kv and/or add_zero_attn, composed
    of qkv's ops (autograd through all of them): the in-projection by linear, bias_k/bias_v and the
    zero position appended to the keys and values along the sequence (a linear by a constant
    [S + extra, S] selection plus the bias as an outer product), the masks padded with a column of
    zeros, then qkv's scaled_dot_product_attention and the out-projection."""
    import numpy as np
    from .. import as_tensor, tensor
    F = functional
    query, key, value = as_tensor(query), as_tensor(key), as_tensor(value)
    batched = query.dim() == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = np.asarray(key_padding_mask)[None]
    elif self.batch_first:
        query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
    L, N, E = query.shape
    S, H = key.shape[0], self.num_heads
    hd = E // H
    if E != self.embed_dim:
        raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {E}")
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                           "module method `generate_square_subsequent_mask` to create this mask.")
    params = dict(super(MultiheadAttention, self).named_parameters())
    b = params.get("in_proj_bias")
    if b is not None:
        b = b.view(3, E)
    if "in_proj_weight" in params:  # packed: the rows of W for q, k, v by a constant selection
        W = params["in_proj_weight"]
        sel = np.zeros((3, E, 3 * E), np.float32)
        for i in range(3):
            sel[i, :, i * E:(i + 1) * E] = np.eye(E, dtype=np.float32)
        ws = [F.matmul(tensor(sel[i]), W) for i in range(3)]
    else:
        ws = [params["q_proj_weight"], params["k_proj_weight"], params["v_proj_weight"]]
    if b is not None:
        pick = np.eye(3, dtype=np.float32)
        bs = [F.matmul(tensor(pick[i:i + 1]), b).view(E) for i in range(3)]
    else:
        bs = [None] * 3
    q = F.linear(query, ws[0], bs[0])
    k = F.linear(key, ws[1], bs[1])
    v = F.linear(value, ws[2], bs[2])

    extra = (self.bias_k is not None) + self.add_zero_attn
    St = S + extra
    # [S, N, E] → [N, H, hd, S] → linear by [St, S] (the identity over the first S rows) → + bias column
    grow = tensor(np.eye(St, S, dtype=np.float32))

    def extend(t, bias):
        t = F.linear(t.view(S, N, H, hd).permute(1, 2, 3, 0), grow)
        if bias is not None:
            col = np.zeros((1, 1, 1, St), np.float32)
            col[..., S] = 1.0
            t = t + bias.view(1, H, hd, 1) * tensor(col)
        return t.permute(0, 1, 3, 2)  # [N, H, St, hd]

    k4 = extend(k, self.bias_k)
    v4 = extend(v, self.bias_v)
    q4 = q.view(L, N, H, hd).permute(1, 2, 0, 3)

    mask = None
    if attn_mask is not None:
        m = _additive_mask(attn_mask)
        if m.ndim == 2:
            if m.shape != (L, S):
                raise RuntimeError(f"The shape of the 2D attn_mask is {m.shape}, but should be {(L, S)}.")
            m = m[None, None]
        elif m.shape == (N * H, L, S):
            m = m.reshape(N, H, L, S)
        else:
            raise RuntimeError(f"The shape of the 3D attn_mask is {m.shape}, but should be {(N * H, L, S)}.")
        mask = np.concatenate([m, np.zeros(m.shape[:-1] + (extra,), np.float32)], axis=-1)
    if key_padding_mask is not None:
        kp = _additive_mask(key_padding_mask)
        if kp.shape != (N, S):
            raise AssertionError(f"expecting key_padding_mask shape of {(N, S)}, but got {kp.shape}")
        kp = np.concatenate([kp, np.zeros((N, extra), np.float32)], axis=-1)[:, None, None, :]
        mask = kp if mask is None else mask + kp
    mask = None if mask is None else tensor(np.ascontiguousarray(mask, dtype=np.float32))

    p = self._dropout if self.training else 0.0
    weights = None
    if need_weights:
        out, weights = F.scaled_dot_product_attention_with_weights(q4, k4, v4, mask)
        if p > 0.0:  # torch drops the weights it returns and multiplies them by V: the same here
            out = F.scaled_dot_product_attention(q4, k4, v4, mask, p)
        if average_attn_weights:
            weights = weights.mean([1])
        if not batched:
            weights = weights.squeeze(0)
    else:
        out = F.scaled_dot_product_attention(q4, k4, v4, mask, p)
    out = out.permute(2, 0, 1, 3).reshape(L, N, E)
    out = F.linear(out, params["out_proj.weight"], params.get("out_proj.bias"))
    if not batched:
        out = out.squeeze(1)
    elif self.batch_first:
        out = out.transpose(0, 1)
    return out, weights


class TransformerEncoderLayer(_nn.TransformerEncoderLayer):
    __doc__ = _nn.TransformerEncoderLayer.__doc__

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        _refuse_placement("TransformerEncoderLayer", device, dtype)
        super().__init__(d_model, nhead, dim_feedforward, dropout, _activation(activation), layer_norm_eps,
                         batch_first, norm_first, bias)


class TransformerDecoderLayer(_nn.TransformerDecoderLayer):
    __doc__ = _nn.TransformerDecoderLayer.__doc__

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        _refuse_placement("TransformerDecoderLayer", device, dtype)
        super().__init__(d_model, nhead, dim_feedforward, dropout, _activation(activation), layer_norm_eps,
                         batch_first, norm_first, bias)


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What Module.load_state_dict returns, as torch's: the module's names the dict lacked and the
    dict's names the module has not (both empty under strict=True, which raises otherwise)."""
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


_load_state_dict = Module.load_state_dict


def _load_state_dict_keys(self, state_dict, strict=True):
    names = [k for k, _ in self.named_parameters()] + [k for k, _ in self.named_buffers()]
    known = set(names)
    missing = [k for k in names if k not in state_dict]
    unexpected = [k for k in state_dict if k not in known]
    _load_state_dict(self, state_dict, strict)  # strict: a qkv.Error naming the first mismatch
    return IncompatibleKeys(missing, unexpected)


_load_state_dict_keys.__doc__ = (_load_state_dict.__doc__ or "") + (
    "\nReturns (missing_keys, unexpected_keys) as torch does.")
_load_state_dict_keys.__name__ = "load_state_dict"
Module.load_state_dict = _load_state_dict_keys  # every module (qkv's bound classes derive from Module)


def _activation(a):
    """torch takes "relu"/"gelu" or a callable; qkv the names (F.relu / F.gelu by their names)."""
    if isinstance(a, str):
        return a
    name = getattr(a, "__name__", "")
    if name in ("relu", "gelu"):
        return name
    raise NotImplementedError(f"qkv.nn: activation {a!r}: qkv's layers take \"relu\" or \"gelu\"")


def _unbatched(x, batch_dim):
    from .. import as_tensor
    x = as_tensor(x)
    return x.unsqueeze(batch_dim)


class GRU(_nn.GRU):
    __doc__ = _nn.GRU.__doc__

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        _refuse_placement("GRU", device, dtype)
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)
        self._batch_first = batch_first

    def __call__(self, input, hx=None, lengths=None):
        if len(getattr(input, "shape", ())) != 2:
            return super().__call__(input, hx, lengths)
        # unbatched [L, H_in] (hx [layers·directions, H]): a batch of one, then the batch dim dropped
        x = _unbatched(input, 0 if self._batch_first else 1)
        h0 = None if hx is None else _unbatched(hx, 1)
        out, h_n = super().__call__(x, h0, lengths)
        return out.squeeze(0 if self._batch_first else 1), h_n.squeeze(1)

    forward = __call__


class LSTM(_nn.LSTM):
    __doc__ = _nn.LSTM.__doc__

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        _refuse_placement("LSTM", device, dtype)
        if proj_size < 0 or (proj_size and proj_size >= hidden_size):  # torch's ValueError, before C++'s check
            raise ValueError("proj_size has to be a positive integer smaller than hidden_size" if proj_size >= 0
                             else "proj_size should be a positive integer or zero to disable projections")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         int(proj_size))
        self._batch_first = batch_first
        self.proj_size = int(proj_size)

    def __call__(self, input, hx=None, lengths=None):
        if len(getattr(input, "shape", ())) != 2:
            return super().__call__(input, hx, lengths)
        x = _unbatched(input, 0 if self._batch_first else 1)
        hc = None if hx is None else (_unbatched(hx[0], 1), _unbatched(hx[1], 1))
        out, (h_n, c_n) = super().__call__(x, hc, lengths)
        return out.squeeze(0 if self._batch_first else 1), (h_n.squeeze(1), c_n.squeeze(1))

    forward = __call__


__all__ = ["GRU", "LSTM", "Embedding", "IncompatibleKeys", "LayerNorm", "Linear", "Module", "MultiheadAttention",
           "TransformerDecoderLayer", "TransformerEncoderLayer", "functional"]
