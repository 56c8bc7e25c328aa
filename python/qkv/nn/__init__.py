"""qkv.nn: modules with torch.nn's names, arguments and parameter names (a PyTorch state_dict loads
one to one with load_state_dict), and the functional ops (qkv.nn.functional).

Every constructor takes torch's arguments by torch's names, and each of torch's defaults may be
spelled out (MultiheadAttention(…, add_bias_kv=False, add_zero_attn=False, kdim=None, device=None,
dtype=None), LSTM(…, proj_size=0)). What qkv's modules do not compute — add_bias_kv=True,
add_zero_attn=True, proj_size > 0, a device other than the CPU or a dtype other than float32 at
construction — is refused by name (qkv.torch.nn's modules, over torch tensors, take the first two).
GRU and LSTM take unbatched input ([L, H_in], hx [layers·directions, H]) as torch does."""
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
        _refuse("MultiheadAttention", add_bias_kv=(add_bias_kv, False), add_zero_attn=(add_zero_attn, False))
        _refuse_placement("MultiheadAttention", device, dtype)
        super().__init__(embed_dim, num_heads, dropout, bias, kdim or 0, vdim or 0, batch_first)


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
        _refuse("LSTM", proj_size=(proj_size, 0))
        _refuse_placement("LSTM", device, dtype)
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)
        self._batch_first = batch_first

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
