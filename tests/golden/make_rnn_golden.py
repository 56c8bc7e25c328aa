#!/usr/bin/python3
"""Golden file for qkv's GRU, LSTM and alignment (Bahdanau/Luong attention) modules
(tests/nn/rnn_golden_test.cpp), computed with PyTorch.

Run with Debian's interpreter, which has PyTorch 1.13 (CPU):

    /usr/bin/python3 tests/golden/make_rnn_golden.py

It writes tests/golden/rnn.json. Each case builds torch.nn.GRU or torch.nn.LSTM with the given
options, draws its parameters and inputs as float32 (seeded by the case's index), and computes
in float64: the padded batch goes through pack_padded_sequence(enforce_sorted=False) when the case
has lengths, and the output comes back through pad_packed_sequence (zeros past each length). The
loss is sum(output · go) + sum(h_n · gh) [+ sum(c_n · gc)]; "grads" holds its gradient with respect
to the input, the initial states and every parameter (PyTorch's names). The "lstm_proj_*" cases are
torch.nn.LSTM(…, proj_size=P) (weight_hr_l{k} among the parameters; options carry proj_size).

The alignment cases ("kind": "alignment") compute the scores' formulas directly in PyTorch (it has
no such module): additive vᵀ tanh(W_q q + W_k k + b_k), general qᵀ W_a k, dot qᵀ k, a softmax over
the positions the mask allows, and context = Σ a k; the loss is sum(context · gc) + sum(weights · gw).
"""

import json
import math
import os

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

HERE = os.path.dirname(os.path.abspath(__file__))


def enc(t):
    t = t.detach().to(torch.float32)
    return {"shape": list(t.shape), "dtype": "f32", "data": [float(x) for x in t.reshape(-1).tolist()]}


CASES = [
    # name, kind, input_size, hidden, layers, bidirectional, batch_first, bias, B, T, lengths, with_h0
    ("gru_uni_1layer_ragged", "gru", 4, 5, 1, False, True, True, 3, 6, [6, 3, 5], True),
    ("gru_bi_2layers_ragged_seq_first", "gru", 4, 6, 2, True, False, True, 3, 6, [4, 6, 2], False),
    ("gru_uni_2layers_full", "gru", 3, 5, 2, False, True, True, 2, 4, None, True),
    ("gru_bi_nobias_ragged", "gru", 5, 4, 1, True, True, False, 4, 5, [5, 1, 3, 5], True),
    ("lstm_uni_2layers_ragged", "lstm", 4, 5, 2, False, True, True, 3, 6, [2, 6, 4], True),
    ("lstm_bi_1layer_ragged", "lstm", 3, 6, 1, True, True, True, 3, 5, [5, 3, 1], True),
    ("lstm_bi_2layers_seq_first", "lstm", 4, 3, 2, True, False, True, 2, 4, [4, 3], False),
    ("lstm_nobias_full", "lstm", 4, 5, 1, False, True, False, 2, 5, None, True),
]

# LSTM(…, proj_size=P): h_t = W_hr (o_t ⊙ tanh c_t); h0 and the output have P features, c0 has H.
# name, input_size, hidden, proj, layers, bidirectional, batch_first, bias, B, T, lengths, with_h0
PROJ_CASES = [
    ("lstm_proj_uni_1layer_full", 5, 6, 3, 1, False, False, True, 3, 4, None, True),
    ("lstm_proj_bi_2layers_ragged", 4, 6, 3, 2, True, True, True, 3, 5, [5, 2, 4], True),
    ("lstm_proj_uni_2layers_ragged_seq_first_nobias", 3, 5, 2, 2, False, False, False, 4, 4, [1, 4, 3, 4], False),
    ("lstm_proj_bi_1layer_ragged_zero_state", 4, 7, 4, 1, True, True, True, 2, 6, [3, 6], False),
]


def case(i, name, kind, inp, hid, layers, bidi, batch_first, bias, B, T, lengths, with_h0, proj=0):
    torch.manual_seed(3000 + i)
    if kind == "gru":
        m = torch.nn.GRU(inp, hid, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidi)
    elif proj:
        m = torch.nn.LSTM(inp, hid, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidi,
                          proj_size=proj)
    else:
        m = torch.nn.LSTM(inp, hid, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidi)
    params32 = {k: v.detach().clone() for k, v in m.state_dict().items()}
    D = 2 if bidi else 1
    x32 = torch.randn(B, T, inp) if batch_first else torch.randn(T, B, inp)
    if lengths is not None:  # zeros past each length, as a padded batch has
        for b, n in enumerate(lengths):
            if batch_first:
                x32[b, n:] = 0
            else:
                x32[n:, b] = 0
    h032 = torch.randn(layers * D, B, proj or hid) if with_h0 else None
    c032 = torch.randn(layers * D, B, hid) if (with_h0 and kind == "lstm") else None
    md = m.double()
    x = x32.double().requires_grad_(True)
    h0 = h032.double().requires_grad_(True) if h032 is not None else None
    c0 = c032.double().requires_grad_(True) if c032 is not None else None
    state = None
    if kind == "gru":
        state = h0
    elif h0 is not None:
        state = (h0, c0)
    if lengths is not None:
        packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False)
        out_p, hid_out = md(packed, state)
        out, _ = pad_packed_sequence(out_p, batch_first=batch_first, total_length=T)
    else:
        out, hid_out = md(x, state)
    h_n, c_n = (hid_out, None) if kind == "gru" else hid_out
    go = torch.randn(*out.shape).double()
    gh = torch.randn(*h_n.shape).double()
    loss = (out * go).sum() + (h_n * gh).sum()
    grad_outputs = {"output": enc(go), "h_n": enc(gh)}
    outputs = {"output": enc(out), "h_n": enc(h_n)}
    if c_n is not None:
        gc = torch.randn(*c_n.shape).double()
        loss = loss + (c_n * gc).sum()
        grad_outputs["c_n"] = enc(gc)
        outputs["c_n"] = enc(c_n)
    wrt = {"input": x}
    if h0 is not None:
        wrt["h0"] = h0
    if c0 is not None:
        wrt["c0"] = c0
    for k, v in md.named_parameters():
        wrt[k] = v
    got = torch.autograd.grad(loss, list(wrt.values()))
    inputs = {"input": enc(x32)}
    if h032 is not None:
        inputs["h0"] = enc(h032)
    if c032 is not None:
        inputs["c0"] = enc(c032)
    options = {"input_size": inp, "hidden_size": hid, "num_layers": layers, "bidirectional": bidi,
               "batch_first": batch_first, "bias": bias}
    if proj:
        options["proj_size"] = proj
    return {
        "name": name, "kind": kind,
        "options": options,
        "lengths": lengths,
        "parameters": {k: enc(v) for k, v in params32.items()},
        "inputs": inputs,
        "grad_outputs": grad_outputs,
        "outputs": outputs,
        "grads": {k: enc(g) for k, g in zip(wrt.keys(), got)},
    }


ALIGN = [
    # name, score, q, k, A, B, T, S, mask (per batch row: allowed source positions)
    ("alignment_additive", "additive", 5, 6, 4, 2, 3, 4, [[1, 1, 1, 0], [1, 1, 1, 1]]),
    ("alignment_general", "general", 5, 6, 0, 2, 3, 4, [[1, 1, 0, 0], [1, 1, 1, 1]]),
    ("alignment_dot", "dot", 5, 5, 0, 2, 1, 4, [[1, 0, 1, 1], [1, 1, 1, 1]]),
    # wide enough for the fused score's vector loops and their tail (A = 37)
    ("alignment_additive_wide", "additive", 12, 20, 37, 3, 4, 7,
     [[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 0]]),
]


def alignment_case(i, name, score, q, k, A, B, T, S, mask):
    """e = vᵀ tanh(W_q q + W_k k + b_k) | qᵀ W_a k | qᵀ k;  a = masked softmax;  context = a k."""
    torch.manual_seed(4000 + i)
    params32 = {}
    if score == "additive":
        params32 = {"query_proj.weight": torch.randn(A, q) * 0.5, "key_proj.weight": torch.randn(A, k) * 0.5,
                    "key_proj.bias": torch.randn(A) * 0.5, "v": torch.randn(A)}
    elif score == "general":
        params32 = {"weight": torch.randn(q, k) * 0.5}
    query32, keys32 = torch.randn(B, T, q), torch.randn(B, S, k)
    P = {n: t.double().requires_grad_(True) for n, t in params32.items()}
    query, keys = query32.double().requires_grad_(True), keys32.double().requires_grad_(True)
    if score == "additive":
        e = torch.tanh((query @ P["query_proj.weight"].T).unsqueeze(2) +
                       (keys @ P["key_proj.weight"].T + P["key_proj.bias"]).unsqueeze(1)) @ P["v"]
    elif score == "general":
        e = query @ (keys @ P["weight"].T).transpose(1, 2)
    else:
        e = query @ keys.transpose(1, 2)
    m = torch.tensor(mask, dtype=torch.bool)[:, None, :]
    w = torch.softmax(e.masked_fill(~m, float("-inf")), -1)
    ctx = w @ keys
    gc, gw = torch.randn(*ctx.shape).double(), torch.randn(*w.shape).double()
    wrt = {"query": query, "keys": keys, **P}
    got = torch.autograd.grad((ctx * gc).sum() + (w * gw).sum(), list(wrt.values()))
    return {"name": name, "kind": "alignment", "score": score, "dims": [q, k, A],
            "mask": mask, "parameters": {n: enc(t) for n, t in params32.items()},
            "inputs": {"query": enc(query32), "keys": enc(keys32)},
            "grad_outputs": {"context": enc(gc), "weights": enc(gw)},
            "outputs": {"context": enc(ctx), "weights": enc(w)},
            "grads": {n: enc(g) for n, g in zip(wrt.keys(), got)}}


def main():
    torch.set_num_threads(1)
    cases = [case(i, *c) for i, c in enumerate(CASES)]
    cases += [alignment_case(i, *c) for i, c in enumerate(ALIGN)]
    cases += [case(100 + i, name, "lstm", inp, hid, *rest, proj=proj)
              for i, (name, inp, hid, proj, *rest) in enumerate(PROJ_CASES)]
    path = os.path.join(HERE, "rnn.json")
    with open(path, "w") as f:
        header = {"generator": "tests/golden/make_rnn_golden.py", "torch": torch.__version__}
        f.write(json.dumps(header)[:-1] + ', "cases": [\n')
        for i, c in enumerate(cases):
            f.write(json.dumps(c, separators=(",", ":"), allow_nan=False))
            f.write(",\n" if i + 1 < len(cases) else "\n")
        f.write("]}\n")
    print(f"{path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
