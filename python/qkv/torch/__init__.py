"""A drop-in scaled_dot_product_attention for PyTorch on CPU, computed by qkv's flash kernels.

    import torch, qkv.torch
    y = qkv.torch.scaled_dot_product_attention(q, k, v, is_causal=True)   # q, k, v: torch CPU tensors
    y.sum().backward()                                                    # q.grad … from qkv's backward

torch.nn.functional.scaled_dot_product_attention's signature and contract:
- q, k, v reach qkv through DLPack without copies, as the views they are: contiguous, permuted
  (`x.view(B, L, H, E).transpose(1, 2)`) or split from one fused projection (nanoGPT's
  `qkv(x).split(C, 2)` then that transpose) — any layout whose rows have a unit stride; float16/bfloat16 are computed in float32 and returned in their dtype;
- float64 is computed in float64 by the formula in torch's own ops (the reference path; qkv's
  kernels are float32), so torch.autograd.gradcheck works;
- torch's errors where torch raises (RuntimeError with torch's message): q, k, v of different
  dtypes or devices, fewer than 2 dims, a mask of another dtype than bool/float32/q's, is_causal
  with an explicit mask, dropout_p outside [0, 1], GQA heads that do not divide;
- `__torch_function__`: torch.nn.attention.bias.CausalBias masks (causal_upper_left,
  causal_lower_right) mean what they mean in torch (upper left: is_causal; lower right with L ≠ S:
  its materialized mask), other subclasses and torch function modes get the call as for any torch
  function;
- dropout draws its seed from torch's default generator (so torch.manual_seed reproduces it) and
  seeds qkv's generator with it: the mask is the one `qkv.manual_seed(seed)` then a qkv call would
  draw — a different stream from torch's own dropout masks;
- backward is qkv's (once differentiable: a double backward is refused, as torch's CPU flash
  attention refuses it); backward may run again with retain_graph=True;
- nested (jagged) tensors are handed to torch's own implementation (torch ≥ 2: torch._C._nn), which
  is what they get in torch;
- torch.compile (torch ≥ 2.4) sees it as one op, `torch.ops.qkv.scaled_dot_product_attention`
  (torch.library.custom_op with a fake kernel and registered autograd), so `fullgraph=True` holds
  and a compiled function is one frame; its backward is a second op that recomputes qkv's forward
  (same dropout seed, passed as a tensor drawn from torch's generator) and runs qkv's backward.
  float64 under compile is the reference formula, traced as torch's ops. Eager calls (every torch)
  take the autograd.Function below (no recomputation); torch 2.0–2.3 compile it with graph breaks.

PyTorch's own CPU tests of scaled_dot_product_attention (test/test_transformers.py, run with this
function patched in; the cases are ported to python/tests/test_torch_sdpa.py) pass but for: the
float32 dropout cases of test_scaled_dot_product_attention (torch's math backend's mask stream, see
above; float64 takes the reference path and matches it), test_fused_sdp_choice_cpu (which backend
torch picks; it never calls this function, so it passes, checking nothing of qkv's), and the random-mask cases that the torch
release the test file comes from also fails (a fully masked row: NaN there, 0 in torch ≥ 2.5 and here).
"""
import math

import torch as _torch
from torch.autograd.function import once_differentiable as _once_differentiable

from .. import _qkv

try:  # torch ≥ 2.1: the causal masks that are tensor subclasses
    from torch.nn.attention.bias import CausalBias as _CausalBias, CausalVariant as _CausalVariant
except ImportError:  # torch 1.13
    _CausalBias = _CausalVariant = None

_torch_sdpa = getattr(getattr(_torch._C, "_nn", None), "scaled_dot_product_attention", None)  # torch's own, unpatched


def _fail(message):
    raise RuntimeError(message)


def _dtype_name(dtype):  # torch's C++ spelling in its messages: float, c10::Half, double …
    return {_torch.float32: "float", _torch.float64: "double", _torch.float16: "c10::Half",
            _torch.bfloat16: "c10::BFloat16", _torch.int64: "long int", _torch.int32: "int",
            _torch.bool: "bool"}.get(dtype, str(dtype).replace("torch.", ""))


def _check(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
    """torch's validate_sdpa_input and the checks of its math path, with torch's messages."""
    if not (query.dtype == key.dtype == value.dtype):
        _fail("Expected query, key, and value to have the same dtype, but got query.dtype: "
              f"{_dtype_name(query.dtype)} key.dtype: {_dtype_name(key.dtype)} and value.dtype: "
              f"{_dtype_name(value.dtype)} instead.")
    if not (query.device == key.device == value.device):
        _fail("Expected query, key, and value to have the same device type, but got query.device: "
              f"{query.device} key.device: {key.device} and value.device: {value.device} instead.")
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        _fail("Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
              f"{query.dim()} key.dim: {key.dim()} and value.dim: {value.dim()} instead.")
    if not query.dtype.is_floating_point:
        _fail(f"expected scalar type Float but found {str(query.dtype).replace('torch.', '').capitalize()}")
    if attn_mask is not None:
        if attn_mask.dtype not in (_torch.bool, _torch.float32, query.dtype):
            _fail("Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: "
                  f"{_dtype_name(attn_mask.dtype)} and  query.dtype: {_dtype_name(query.dtype)} instead.")
        if is_causal:
            _fail("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if not 0.0 <= dropout_p <= 1.0:
        _fail(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.device.type != "cpu":
            raise ValueError(f"qkv.torch.scaled_dot_product_attention: {name} is on {t.device}, not the CPU")
    if key.shape[-1] != query.shape[-1]:
        _fail(f"scaled_dot_product_attention: query's last dim {query.shape[-1]} and key's {key.shape[-1]} differ")
    if key.shape[-2] != value.shape[-2]:
        _fail(f"scaled_dot_product_attention: key has {key.shape[-2]} positions, value {value.shape[-2]}")
    if enable_gqa and query.dim() >= 3 and key.dim() >= 3:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hk == 0 or hv == 0 or hq % hk or hq % hv:
            _fail("Number of heads in key and value must divide the number of heads in query")


# ---- q, k, v into qkv without copies -------------------------------------------------------------

def _into_qkv(t):
    """(qkv tensor, how to bring a gradient of the qkv leaf back to t's layout): a float32 (or bool)
    tensor whose dims are a permutation of a dense block travels as that block, then a qkv permute."""
    t = t.detach()
    if t.dtype not in (_torch.float32, _torch.bool):
        t = t.to(_torch.float32)
    if t.is_contiguous():
        return _qkv.from_dlpack(t), None
    if t.dim() < 2 or t.stride(-1) != 1 or min(t.stride()) < 0:  # the kernels read rows with a unit stride
        return _qkv.from_dlpack(t.contiguous()), None
    # any other layout travels as the strided view it is — nanoGPT's q, k, v, split from one fused
    # projection and transposed, included: no copy (python/src/convert.cpp)
    return _qkv.from_dlpack(t), None


def _grad_into_qkv(g):
    """An output gradient into qkv in the output's order (a permuted block travels as the block)."""
    t, layout = _into_qkv(g)
    return t if layout is None else t.permute(*layout[1])


def _mask_into_qkv(m):
    m = m.detach()
    if m.dtype not in (_torch.float32, _torch.bool):
        m = m.to(_torch.float32)
    return _qkv.from_dlpack(m.contiguous())


def _torch_grad(g, layout, dtype):
    if g is None:
        return None
    y = _torch.from_dlpack(g)  # the leaf's gradient, in the leaf's (block) layout
    if layout is not None:
        y = y.permute(layout[1])
    return y if y.dtype == dtype else y.to(dtype)


def _broadcast_batch(query, key, value, enable_gqa):
    """torch broadcasts the batch dims of q, k, v (all but the last two; with enable_gqa, all but the
    heads dim too); qkv's kernels take equal ones: broadcast dims become expanded (copied) views."""
    lead = [tuple(t.shape[:-2]) for t in (query, key, value)]
    if lead[0] == lead[1] == lead[2]:
        return query, key, value
    if enable_gqa and min(len(s) for s in lead) >= 1:
        if lead[0][:-1] == lead[1][:-1] == lead[2][:-1]:
            return query, key, value
        outer = _torch.broadcast_shapes(*(s[:-1] for s in lead))
        return tuple(t.expand(*outer, *t.shape[-3:]) for t in (query, key, value))
    batch = _torch.broadcast_shapes(*lead)
    return tuple(t.expand(*batch, *t.shape[-2:]) for t in (query, key, value))


# ---- the two engines: qkv's kernels (f32, f16, bf16) and the formula in torch's ops (f64) ----------

def _reference(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """softmax(Q Kᵀ · scale + M) V in torch's ops, in the inputs' dtype; fully masked rows give 0."""
    L, S = query.shape[-2], key.shape[-2]
    if enable_gqa and query.dim() >= 3:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
        value = value.repeat_interleave(query.shape[-3] // value.shape[-3], dim=-3)
    s = (query @ key.transpose(-2, -1)) * (1.0 / math.sqrt(query.shape[-1]) if scale is None else scale)
    if is_causal:
        s = s.masked_fill(_torch.ones(L, S, dtype=_torch.bool).triu(1), float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == _torch.bool else s + attn_mask
    row_max = s.amax(dim=-1, keepdim=True) if S else s.sum(dim=-1, keepdim=True)
    dead = _torch.isneginf(row_max)
    p = _torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    if dropout_p > 0.0:
        p = _torch.nn.functional.dropout(p, dropout_p)
    return p @ value


class _ScaledDotProductAttention(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        wants = list(ctx.needs_input_grad[:4])
        if attn_mask is not None and attn_mask.dtype == _torch.bool:
            wants[3] = False
        ctx.out_dtype = query.dtype
        if query.dtype == _torch.float64:  # the reference path: torch's ops, in float64
            leaves = [None if t is None else t.detach().requires_grad_(w)
                      for t, w in zip((query, key, value, attn_mask), wants)]
            with _torch.enable_grad():
                out = _reference(*leaves, dropout_p, is_causal, scale, enable_gqa)
            ctx.graph = ("torch", out, leaves, wants, None)
            y = out.detach()
        else:
            # torch's generator picks the seed: torch.manual_seed reproduces the mask
            seed = int(_torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0.0 else 0
            out, leaves, layouts = _op_forward(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                               enable_gqa, seed, wants)
            ctx.graph = ("qkv", out, leaves, wants, layouts)
            y = _torch.from_dlpack(out.detach())
            if y.dtype != query.dtype:
                y = y.to(query.dtype)
        ctx.save_for_backward(y)  # torch's checks: y changed in place, or a second backward without retain_graph
        return y

    @staticmethod
    @_once_differentiable
    def backward(ctx, grad_output):
        ctx.saved_tensors  # noqa: B018 — raises torch's error for a second backward without retain_graph
        engine, out, inputs, wants, layouts = ctx.graph
        sources = [t for t, w in zip(inputs, wants) if w]
        if not sources:
            return (None,) * 8
        if engine == "torch":
            grads = iter(_torch.autograd.grad([out], sources, [grad_output], retain_graph=True, allow_unused=True))
            result = [next(grads) if w else None for w in wants]
        else:
            grads = iter(_qkv.autograd.grad([out], sources, [_grad_into_qkv(grad_output)], retain_graph=True))
            result = [_torch_grad(next(grads), layout, ctx.out_dtype) if w else None
                      for w, layout in zip(wants, layouts)]
        return (*result, None, None, None, None)


# ---- torch.compile: the call as one custom op (torch ≥ 2.4), so dynamo keeps one graph ----------------

def _op_forward(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed, wants):
    """qkv's forward on torch tensors: (qkv output, qkv leaves, layouts). `seed` (an int, or a tensor
    holding it: the compiled op's input) seeds dropout; `wants` says which leaves require grad."""
    converted = [_into_qkv(t) for t in (query, key, value)]
    inputs = [c[0] for c in converted]
    mask = None if attn_mask is None else _mask_into_qkv(attn_mask)
    for t, w in zip(inputs + [mask], wants):
        if t is not None:
            t.requires_grad = bool(w)
    # the views that put a permuted block back in order are the op's operands (no copies)
    views = [t if c[1] is None else t.permute(*c[1][1]) for t, c in zip(inputs, converted)]
    if dropout_p > 0.0:  # (compiled: the seed travels as an input, so the backward's recomputation draws the same mask)
        _qkv.manual_seed(int(seed.reshape(-1)[0].item()) if isinstance(seed, _torch.Tensor) else seed)
    out = _qkv.functional.scaled_dot_product_attention(views[0], views[1], views[2], mask, dropout_p, is_causal,
                                                       scale, enable_gqa=enable_gqa)
    return out, inputs + [mask], [c[1] for c in converted] + [None]


_compiled_op = None
if hasattr(getattr(_torch, "library", None), "custom_op") and hasattr(getattr(_torch, "compiler", None),
                                                                       "is_compiling"):
    from typing import Optional as _Optional

    @_torch.library.custom_op("qkv::scaled_dot_product_attention", mutates_args=())
    def _compiled_op(query: _torch.Tensor, key: _torch.Tensor, value: _torch.Tensor,
                     attn_mask: _Optional[_torch.Tensor], dropout_p: float, is_causal: bool,
                     scale: _Optional[float], enable_gqa: bool, seed: _torch.Tensor) -> _torch.Tensor:
        out, _, _ = _op_forward(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed,
                                (False,) * 4)
        y = _torch.from_dlpack(out.detach())
        return (y if y.dtype == query.dtype else y.to(query.dtype)).contiguous()

    @_compiled_op.register_fake
    def _(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed):
        return query.new_empty((*query.shape[:-1], value.shape[-1]))

    @_torch.library.custom_op("qkv::scaled_dot_product_attention_backward", mutates_args=())
    def _compiled_backward(grad: _torch.Tensor, query: _torch.Tensor, key: _torch.Tensor, value: _torch.Tensor,
                           attn_mask: _Optional[_torch.Tensor], dropout_p: float, is_causal: bool,
                           scale: _Optional[float], enable_gqa: bool, seed: _torch.Tensor,
                           mask_grad: bool) -> tuple[_torch.Tensor, _torch.Tensor, _torch.Tensor, _torch.Tensor]:
        """qkv's backward after recomputing its forward (same seed, same dropout mask)."""
        wants = (True, True, True, mask_grad)
        out, inputs, layouts = _op_forward(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                           seed, wants)
        sources = [t for t, w in zip(inputs, wants) if w]
        grads = list(_qkv.autograd.grad([out], sources, [_grad_into_qkv(grad)]))
        result = [_torch_grad(d, lay, t.dtype).contiguous()
                  for d, lay, t in zip(grads, layouts, (query, key, value, attn_mask))]
        if not mask_grad:
            result.append(query.new_empty((0,)))
        return tuple(result)

    @_compiled_backward.register_fake
    def _(grad, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed, mask_grad):
        m = attn_mask.new_empty(attn_mask.shape) if mask_grad else query.new_empty((0,))
        return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape), m

    def _setup_context(ctx, inputs, output):
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed = inputs
        ctx.save_for_backward(query, key, value, attn_mask, seed)
        ctx.options = (dropout_p, is_causal, scale, enable_gqa)

    def _backward(ctx, grad):
        query, key, value, attn_mask, seed = ctx.saved_tensors
        mask_grad = bool(attn_mask is not None and attn_mask.dtype != _torch.bool and ctx.needs_input_grad[3])
        gq, gk, gv, gm = _compiled_backward(grad, query, key, value, attn_mask, *ctx.options, seed, mask_grad)
        return gq, gk, gv, (gm if mask_grad else None), None, None, None, None, None

    _compiled_op.register_autograd(_backward, setup_context=_setup_context)


def _compiling():
    return _compiled_op is not None and _torch.compiler.is_compiling()


def _causal_bias(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """torch's CausalBias._dispatch, through qkv."""
    if is_causal:
        raise ValueError("CausalBias should not be used with causal=True")
    if attn_mask.seq_len_q == attn_mask.seq_len_kv or attn_mask.variant == _CausalVariant.UPPER_LEFT:
        return scaled_dot_product_attention(query, key, value, None, dropout_p, True, scale, enable_gqa=enable_gqa)
    return scaled_dot_product_attention(query, key, value, attn_mask._materialize(query.device), dropout_p, False,
                                        scale, enable_gqa=enable_gqa)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature and contract, on CPU tensors,
    forward and backward by qkv (flash kernels: O(L) memory; float64 by the formula in torch's ops)."""
    if _CausalBias is not None and isinstance(attn_mask, _CausalBias):
        return _causal_bias(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    tensors = (query, key, value) if attn_mask is None else (query, key, value, attn_mask)
    if any(getattr(t, "is_nested", False) for t in tensors):
        if _torch_sdpa is None:
            _fail("qkv.torch.scaled_dot_product_attention: nested tensors need torch ≥ 2 (torch's own attention)")
        return _torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if _torch.overrides.has_torch_function(tensors):
        return _torch.overrides.handle_torch_function(
            scaled_dot_product_attention, tensors, query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    _check(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    query, key, value = _broadcast_batch(query, key, value, enable_gqa)
    L, S = query.shape[-2], key.shape[-2]
    if L == 0 or S == 0 or query.shape[-1] == 0 or query.numel() == 0 or key.numel() == 0:  # nothing to attend
        return _reference(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if _compiling():  # torch.compile: one op in the graph (float64 by the reference formula, traced as is)
        if query.dtype == _torch.float64:
            return _reference(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        seed = (_torch.randint(0, 2**62, (1,)) if dropout_p > 0.0 else _torch.zeros(1, dtype=_torch.int64))
        return _compiled_op(query, key, value, attn_mask, float(dropout_p), bool(is_causal),
                            None if scale is None else float(scale), bool(enable_gqa), seed)
    return _ScaledDotProductAttention.apply(query, key, value, attn_mask, float(dropout_p), bool(is_causal), scale,
                                            bool(enable_gqa))


from . import nn  # noqa: E402  (qkv.torch.nn: torch.nn modules whose attention is qkv's)

__all__ = ["scaled_dot_product_attention", "nn"]
