"""A drop-in scaled_dot_product_attention for PyTorch on CPU, computed by qkv's flash kernels.

    import torch, qkv.torch
    y = qkv.torch.scaled_dot_product_attention(q, k, v, is_causal=True)   # q, k, v: torch CPU tensors
    y.sum().backward()                                                    # q.grad … from qkv's backward

It is a torch.autograd.Function: the forward hands q, k, v (and a mask) to qkv through DLPack
without copying (after .contiguous() and, for other dtypes, a cast to float32), keeps qkv's graph
for the backward, and returns torch tensors that share qkv's memory. Dropout draws from qkv's own
generator (qkv.manual_seed), not torch's.
"""
import torch as _torch

from . import _qkv


def _to_qkv(t):
    t = t.detach()
    if t.dtype not in (_torch.float32, _torch.bool):
        t = t.to(_torch.float32)
    return _qkv.from_dlpack(t.contiguous())


class _ScaledDotProductAttention(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.device.type != "cpu":
                raise ValueError(f"qkv.torch.scaled_dot_product_attention: {name} is on {t.device}, not the CPU")
        inputs = [_to_qkv(t) for t in (query, key, value)]
        mask = None if attn_mask is None else _to_qkv(attn_mask)
        wants = list(ctx.needs_input_grad[:4])
        for t, w in zip(inputs, wants):
            t.requires_grad = bool(w)
        if mask is not None and wants[3]:
            if attn_mask.dtype == _torch.bool:
                wants[3] = False
            else:
                mask.requires_grad = True
        out = _qkv.functional.scaled_dot_product_attention(inputs[0], inputs[1], inputs[2], mask, dropout_p, is_causal,
                                                           scale, enable_gqa=enable_gqa)
        ctx.qkv_graph = (out, inputs + [mask], wants)
        ctx.out_dtype = query.dtype
        y = _torch.from_dlpack(out.detach())
        return y if y.dtype == query.dtype else y.to(query.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        out, inputs, wants = ctx.qkv_graph
        del ctx.qkv_graph  # the graph is used once
        sources = [t for t, w in zip(inputs, wants) if w]
        grads = iter(_qkv.autograd.grad([out], sources, [_to_qkv(grad_output)]) if sources else [])
        result = []
        for w in wants:
            g = next(grads) if w else None
            result.append(None if g is None else _torch.from_dlpack(g).to(ctx.out_dtype))
        return (*result, None, None, None, None)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature and semantics, on CPU tensors,
    forward and backward by qkv (flash kernels: O(L) memory)."""
    return _ScaledDotProductAttention.apply(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


__all__ = ["scaled_dot_product_attention"]
