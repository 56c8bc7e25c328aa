"""torch.nn's attention modules whose attention is qkv's: swap torch.nn.X for qkv.torch.nn.X and train.

    layer = qkv.torch.nn.TransformerEncoderLayer(d_model=384, nhead=6, batch_first=True)
    layer.load_state_dict(torch_layer.state_dict())    # the same parameters, names and shapes

Each is a subclass of torch's module of that name: the constructor is torch's own (every argument
of the installed torch, its defaults, its parameter initialisation and RNG draws), the parameters
are torch Parameters, only forward differs — its attention is qkv.torch.scaled_dot_product_attention
(qkv's flash kernels forward and backward), the projections, norms and feed-forward stay torch's.
MultiheadAttention follows torch.nn.functional.multi_head_attention_forward: packed or separate
in-projections (kdim/vdim), add_bias_kv, add_zero_attn, bool (True = masked) or float attn_mask of
[L, S] or [N·H, L, S], key_padding_mask, batch_first, unbatched input, is_causal as a hint that the
mask is causal; need_weights=True returns the weights computed by torch's softmax beside qkv's
output (with dropout in training, both by torch's formula, so that the weights are the output's).
The layers never take torch's fused fast path (their forward is the "slow" path, the attention qkv's).
"""
import torch
import torch.nn.functional as F

from . import scaled_dot_product_attention


def _float_mask(mask, dtype, what):
    """torch's _canonical_mask: a bool mask (True = not allowed) → −inf/0; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    if not mask.is_floating_point():
        raise AssertionError(f"only bool and floating types of {what} are supported")
    return mask.to(dtype)


class MultiheadAttention(torch.nn.MultiheadAttention):
    __doc__ = "torch.nn.MultiheadAttention (constructor, parameters, state_dict) with qkv's attention.\n\n" + (
        torch.nn.MultiheadAttention.__doc__ or "")

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        batched = query.dim() == 3
        if not batched:  # unbatched [L, E]: a batch of one
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:  # [N, L, E] → [L, N, E]
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        L, N, E = query.shape
        S, H = key.shape[0], self.num_heads
        hd = E // H
        if E != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {E}")
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                               "module method `generate_square_subsequent_mask` to create this mask.")
        use_causal = is_causal and key_padding_mask is None and not need_weights

        # in-projection: y = x Wᵀ + b, one product when q, k, v are one tensor
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        if self._qkv_same_embed_dim and query is key and key is value:
            q, k, v = F.linear(query, self.in_proj_weight, b).chunk(3, dim=-1)
        elif self._qkv_same_embed_dim:
            wq, wk, wv = self.in_proj_weight.chunk(3)
            q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        else:
            q = F.linear(query, self.q_proj_weight, bq)
            k = F.linear(key, self.k_proj_weight, bk)
            v = F.linear(value, self.v_proj_weight, bv)

        attn_mask = None if use_causal else _float_mask(attn_mask, q.dtype, "attn_mask")
        key_padding_mask = _float_mask(key_padding_mask, q.dtype, "key_padding_mask")
        if attn_mask is not None:
            if attn_mask.dim() == 2:
                if attn_mask.shape != (L, S):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, "
                                       f"but should be {(L, S)}.")
                attn_mask = attn_mask.unsqueeze(0)
            elif attn_mask.shape != (N * H, L, S):
                raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, "
                                   f"but should be {(N * H, L, S)}.")
        if self.bias_k is not None:  # add_bias_kv: one learned key and value appended to every sequence
            k = torch.cat([k, self.bias_k.repeat(1, N, 1)])
            v = torch.cat([v, self.bias_v.repeat(1, N, 1)])
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
            S += 1

        # [L, N, E] → [N, H, L, hd]: views, no copies
        q = q.view(L, N, H, hd).permute(1, 2, 0, 3)
        k = k.view(S, N, H, hd).permute(1, 2, 0, 3)
        v = v.view(S, N, H, hd).permute(1, 2, 0, 3)
        if self.add_zero_attn:  # a zero key and value appended to every sequence
            k = torch.cat([k, k.new_zeros(N, H, 1, hd)], dim=2)
            v = torch.cat([v, v.new_zeros(N, H, 1, hd)], dim=2)
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
            S += 1

        # one additive mask [N|1, H|1, L|1, S]
        mask = None
        if attn_mask is not None:
            mask = attn_mask.view(N, H, L, S) if attn_mask.shape[0] == N * H and N * H > 1 else attn_mask.view(1, 1, L, S)
        if key_padding_mask is not None:
            if key_padding_mask.shape != (N, S):
                raise AssertionError(f"expecting key_padding_mask shape of {(N, S)}, but got "
                                     f"{tuple(key_padding_mask.shape)}")
            kpm = key_padding_mask.view(N, 1, 1, S)
            mask = kpm if mask is None else mask + kpm
        dropout_p = self.dropout if self.training else 0.0

        weights = None
        if need_weights:  # the weights softmax(Q Kᵀ/√hd + M), by torch's ops (they carry gradients)
            scores = q @ k.transpose(-2, -1) / (hd ** 0.5)
            if mask is not None:
                scores = scores + mask
            weights = torch.softmax(scores, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, p=dropout_p)
                out = weights @ v
        if weights is None or dropout_p == 0.0:
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=use_causal)

        # [N, H, L, hd] → [L, N, E], out-projection
        out = out.permute(2, 0, 1, 3).reshape(L * N, E)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias).view(L, N, E)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


class TransformerEncoderLayer(torch.nn.TransformerEncoderLayer):
    __doc__ = "torch.nn.TransformerEncoderLayer (constructor, parameters, state_dict) with qkv's attention.\n\n" + (
        torch.nn.TransformerEncoderLayer.__doc__ or "")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn.__class__ = MultiheadAttention  # the same parameters, drawn as torch draws them
        self.activation_relu_or_gelu = 0  # no fused fast path (torch.nn.TransformerEncoder checks it too)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._qkv_sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._qkv_sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _qkv_sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal and attn_mask is not None)[0]
        return self.dropout1(x)


class TransformerDecoderLayer(torch.nn.TransformerDecoderLayer):
    __doc__ = "torch.nn.TransformerDecoderLayer (constructor, parameters, state_dict) with qkv's attention.\n\n" + (
        torch.nn.TransformerDecoderLayer.__doc__ or "")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn.__class__ = MultiheadAttention
        self.multihead_attn.__class__ = MultiheadAttention

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._qkv_sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._qkv_mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._qkv_sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._qkv_mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _qkv_sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal and attn_mask is not None)[0]
        return self.dropout1(x)

    def _qkv_mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=is_causal and attn_mask is not None)[0]
        return self.dropout2(x)


for _cls in (TransformerEncoderLayer, TransformerDecoderLayer):  # torch's signature, for help() and inspect
    try:
        import inspect as _inspect
        _cls.__init__.__signature__ = _inspect.signature(_cls.__mro__[1].__init__)
    except (TypeError, ValueError):
        pass

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer"]
