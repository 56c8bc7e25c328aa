#!/usr/bin/python3
"""Golden files for qkv's model tests (tests/nn/model_golden_test.cpp), computed with PyTorch 1.13:

    /usr/bin/python3 tests/golden/make_model_golden.py

writes tests/golden/models.json. Same conventions as make_golden.py (float32 inputs and parameters,
reference computed in float64, results rounded to float32):

- "gpt" cases: the nanoGPT-style model of ../shared/pytorch-reference/gpt_model.py (the model the
  issues' PyTorch figures come from), random parameters; outputs the logits [B, T, V] and the mean
  cross-entropy loss, and the gradient of the loss with respect to every parameter. Parameter names
  are translated to qkv's (the mapping is NANOGPT_TO_QKV below, documented in docs/ARCHITECTURE.md).
- "encoder_layer" / "decoder_layer" cases: torch.nn.TransformerEncoderLayer / DecoderLayer
  (dropout 0, batch_first), whose parameter names qkv shares; outputs and the gradients of the
  inputs and of every parameter for grad_output.
- "seq2seq" cases: torch.nn.Transformer with a shared, √d-scaled embedding, tied output projection
  and sinusoidal positions (the model of ../shared/pytorch-reference/seq2seq_train.py) under qkv's
  names (embedding.weight, transformer.*); padded batches; outputs the logits, the label-smoothed
  cross-entropy (padding ignored) and the gradient of every parameter.
"""

import json
import math
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "shared", "pytorch-reference"))
from gpt_model import GPT, GPTConfig  # noqa: E402

sys.path.insert(0, HERE)
from make_golden import enc, randn, write  # noqa: E402

NANOGPT_TO_QKV = [
    (r"\.ln_1\.", ".norm1."),
    (r"\.ln_2\.", ".norm2."),
    (r"\.attn\.c_attn\.weight$", ".self_attn.in_proj_weight"),
    (r"\.attn\.c_attn\.bias$", ".self_attn.in_proj_bias"),
    (r"\.attn\.c_proj\.", ".self_attn.out_proj."),
    (r"\.mlp\.c_fc\.", ".linear1."),
    (r"\.mlp\.c_proj\.", ".linear2."),
]


def qkv_name(n):
    for pat, rep in NANOGPT_TO_QKV:
        n = re.sub(pat, rep, n)
    return n


def randomize(module, scale):
    params = {}
    with torch.no_grad():
        for n, p in module.named_parameters():
            v32 = randn(*p.shape, scale=scale)
            p.copy_(v32.double())
            params[n] = v32
    return params


def gpt_case(name, V, block, L, H, E, bias, B, T):
    torch.manual_seed(len(name) * 7919 + V)
    m = GPT(GPTConfig(vocab_size=V, block_size=block, n_layer=L, n_head=H, n_embd=E, dropout=0.0, bias=bias)).double()
    params = randomize(m, 0.3)
    idx = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    logits, loss = m(idx, targets)
    named = dict(m.named_parameters())
    grads = torch.autograd.grad(loss, list(named.values()))
    return {
        "name": name, "op": "gpt",
        "params": {"vocab_size": V, "block_size": block, "n_layer": L, "n_head": H, "n_embd": E, "bias": bias},
        "parameters": {qkv_name(n): enc(params[n]) for n in named},
        "inputs": {"idx": enc(idx), "targets": enc(targets)},
        "outputs": {"logits": enc(logits), "loss": enc(loss.reshape(1))},
        "grads": {qkv_name(n): enc(g) for n, g in zip(named, grads)},
    }


def layer_case(name, kind, E, H, F, activation, norm_first, B, T, S=0, causal=False, kpm=None):
    torch.manual_seed(len(name) * 104729 + E)
    cls = torch.nn.TransformerEncoderLayer if kind == "encoder_layer" else torch.nn.TransformerDecoderLayer
    m = cls(E, H, F, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first).double()
    params = randomize(m, 0.3)
    x32 = randn(B, T, E)
    x = x32.double().requires_grad_(True)
    inputs = {"x": x32}
    targets = {"x": x}
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T).double() if causal else None
    if kind == "encoder_layer":
        out = m(x, src_mask=mask, src_key_padding_mask=kpm)
    else:
        mem32 = randn(B, S, E)
        mem = mem32.double().requires_grad_(True)
        inputs["memory"] = mem32
        targets["memory"] = mem
        out = m(x, mem, tgt_mask=mask, memory_key_padding_mask=kpm)
    if kpm is not None:
        inputs["key_padding_mask"] = kpm
    named = dict(m.named_parameters())
    targets.update(named)
    go = randn(*out.shape)
    grads = torch.autograd.grad((out * go.double()).sum(), list(targets.values()))
    return {
        "name": name, "op": kind,
        "params": {"d_model": E, "nhead": H, "dim_feedforward": F, "activation": activation,
                   "norm_first": norm_first, "causal": causal},
        "parameters": {n: enc(params[n]) for n in named},
        "inputs": {k: enc(v) for k, v in inputs.items()},
        "grad_output": enc(go),
        "outputs": {"out": enc(out)},
        "grads": {k: enc(g) for k, g in zip(targets, grads)},
    }


class Seq2Seq(torch.nn.Module):
    """The translation model of ../shared/pytorch-reference/seq2seq_train.py (nn.Transformer, one
    embedding shared by source, target and output projection, scaled by √d_model, sinusoidal
    positions), with qkv's parameter names: embedding.weight, transformer.* (nn.Transformer's)."""

    def __init__(self, V, D, H, ne, nd, F, norm_first, max_len=64):
        super().__init__()
        self.D = D
        self.embedding = torch.nn.Embedding(V, D)
        self.transformer = torch.nn.Transformer(d_model=D, nhead=H, num_encoder_layers=ne, num_decoder_layers=nd,
                                                dim_feedforward=F, dropout=0.0, batch_first=True,
                                                norm_first=norm_first)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
        pe = torch.zeros(max_len, D)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def embed(self, t):
        return self.embedding(t) * math.sqrt(self.D) + self.pe[: t.size(1)]

    def forward(self, src, tgt_in, pad):
        T = tgt_in.size(1)
        mask = self.transformer.generate_square_subsequent_mask(T).to(self.pe.dtype)
        kpm = src == pad
        h = self.transformer(self.embed(src), self.embed(tgt_in), tgt_mask=mask, src_key_padding_mask=kpm,
                             memory_key_padding_mask=kpm)
        return h @ self.embedding.weight.t()


def seq2seq_case(name, V, D, H, ne, nd, F, norm_first, src, tgt_in, tgt_out, label_smoothing, pad=0):
    torch.manual_seed(len(name) * 31337 + V)
    m = Seq2Seq(V, D, H, ne, nd, F, norm_first).double()
    params = randomize(m, 0.3)
    src, tgt_in, tgt_out = torch.tensor(src), torch.tensor(tgt_in), torch.tensor(tgt_out)
    logits = m(src, tgt_in, pad)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad,
                                             label_smoothing=label_smoothing)
    named = dict(m.named_parameters())
    grads = torch.autograd.grad(loss, list(named.values()))
    return {
        "name": name, "op": "seq2seq",
        "params": {"vocab_size": V, "d_model": D, "nhead": H, "num_encoder_layers": ne, "num_decoder_layers": nd,
                   "dim_feedforward": F, "norm_first": norm_first, "dropout": 0.0, "max_len": 64, "pad_id": pad,
                   "bos_id": 2, "eos_id": 3},
        "label_smoothing": label_smoothing,
        "parameters": {n: enc(params[n]) for n in named},
        "inputs": {"src": enc(src), "tgt_in": enc(tgt_in), "tgt_out": enc(tgt_out)},
        "outputs": {"logits": enc(logits), "loss": enc(loss.reshape(1))},
        "grads": {n: enc(g) for n, g in zip(named, grads)},
    }


def main():
    torch.set_num_threads(1)
    cases = [
        gpt_case("gpt_nobias", V=13, block=8, L=2, H=2, E=16, bias=False, B=2, T=7),
        gpt_case("gpt_bias_full_block", V=11, block=6, L=3, H=4, E=8, bias=True, B=3, T=6),
        layer_case("encoder_post_ln_relu", "encoder_layer", 8, 2, 12, "relu", False, 2, 5),
        layer_case("encoder_pre_ln_gelu_causal", "encoder_layer", 8, 2, 12, "gelu", True, 2, 5, causal=True),
        layer_case("encoder_padding", "encoder_layer", 8, 4, 16, "relu", False, 2, 5,
                   kpm=torch.tensor([[False] * 5, [False, False, False, True, True]])),
        layer_case("decoder_post_ln_causal", "decoder_layer", 8, 2, 12, "relu", False, 2, 5, S=6, causal=True,
                   kpm=torch.tensor([[False] * 6, [False, False, False, False, True, True]])),
        layer_case("decoder_pre_ln_gelu", "decoder_layer", 8, 2, 12, "gelu", True, 2, 4, S=3, causal=True),
        # two sentences, the second padded (pad 0): src ends in EOS 3, tgt_in starts with BOS 2
        seq2seq_case("seq2seq_post_ln_smoothing", V=12, D=8, H=2, ne=2, nd=2, F=12, norm_first=False,
                     src=[[5, 6, 7, 8, 3], [9, 4, 3, 0, 0]], tgt_in=[[2, 10, 11, 5], [2, 7, 0, 0]],
                     tgt_out=[[10, 11, 5, 3], [7, 3, 0, 0]], label_smoothing=0.1),
        seq2seq_case("seq2seq_pre_ln", V=10, D=8, H=4, ne=1, nd=2, F=16, norm_first=True,
                     src=[[4, 5, 3], [6, 3, 0]], tgt_in=[[2, 8, 9, 7, 6], [2, 4, 5, 0, 0]],
                     tgt_out=[[8, 9, 7, 6, 3], [4, 5, 3, 0, 0]], label_smoothing=0.0),
    ]
    write(os.path.join(HERE, "models.json"), cases, generator="tests/golden/make_model_golden.py")


if __name__ == "__main__":
    main()
