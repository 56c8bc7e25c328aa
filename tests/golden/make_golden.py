#!/usr/bin/python3
"""Golden files for qkv's op and MultiheadAttention tests, computed with PyTorch.

Run with Debian's interpreter, which has PyTorch 1.13 (CPU):

    /usr/bin/python3 tests/golden/make_golden.py

It writes tests/golden/ops.json and tests/golden/attention.json next to this script. Both files are
deterministic: every case seeds torch.manual_seed(<its index>) before drawing its inputs.

Method: inputs are drawn as float32 values; the reference computation runs in float64 on those
values (so the golden answer is the exact answer to float32 rounding), and results are rounded to
float32. Every float is stored as repr() of the Python float holding the float32 value, which
round-trips float32 exactly. Non-finite values (only in masks) are stored as the strings "inf",
"-inf", "nan" because JSON has no literal for them.

Case format (one JSON object per line inside {"cases": [...]}):
    {"name": str, "op": str, "params": {...},
     "inputs": {name: tensor}, "grad_output": tensor,
     "outputs": {name: tensor}, "grads": {input_name: tensor}}
    tensor = {"shape": [...], "dtype": "f32" | "i32" | "bool", "data": [flat, row-major]}
The gradient of input x is d(sum(outputs[main] * grad_output)) / dx, where main is "out" for ops
and "output" for MultiheadAttention. Only inputs listed in "grads" require grad.

MultiheadAttention cases (attention.json, op "mha") also carry "parameters": {pytorch_name: tensor}
(the state_dict of torch.nn.MultiheadAttention) and "grads" holds the gradients of the inputs and of
every parameter, under the same names.

scaled_dot_product_attention cases (attention.json, op "sdpa") have the outputs "out" and
"weights" (the softmax probabilities [..., Lq, Lk]). PyTorch 1.13 has no
F.scaled_dot_product_attention: sdpa_reference() below implements its documented semantics (boolean
mask: True = may attend; float mask: added; is_causal: key j allowed iff j <= i, top-left aligned,
and here it may be combined with attn_mask; a query row with no allowed key gives zeros and zero
gradients; enable_gqa: query head h uses kv head h // (H / Hkv)). Dropout is not tested (random).
"""

import json
import math
import os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float32)
HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------------
# tensor helpers


def _num(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def enc(t):
    """A tensor → its JSON form (float tensors rounded to float32)."""
    t = t.detach()
    if t.dtype == torch.bool:
        dtype, data = "bool", [bool(x) for x in t.reshape(-1).tolist()]
    elif t.dtype in (torch.int32, torch.int64):
        dtype, data = "i32", [int(x) for x in t.reshape(-1).tolist()]
    else:
        dtype, data = "f32", [_num(float(x)) for x in t.float().reshape(-1).tolist()]
    return {"shape": list(t.shape), "dtype": dtype, "data": data}


def randn(*shape, scale=1.0):
    """float32 normal values (scaled in float32), as a float32 tensor."""
    return (torch.randn(tuple(shape), dtype=torch.float32) * scale).float()


def rand_pos(*shape, low=0.2, high=3.0):
    return (torch.rand(tuple(shape), dtype=torch.float32) * (high - low) + low).float()


def rand_away_from_zero(*shape):
    sign = torch.where(torch.rand(tuple(shape)) < 0.5, -1.0, 1.0)
    return (sign * (torch.rand(tuple(shape)) * 1.5 + 0.5)).float()


def leaf(t32):
    """A float64 leaf requiring grad, holding the float32 values exactly."""
    return t32.detach().double().requires_grad_(True)


def grad_out_like(out):
    return randn(*out.shape)


class Builder:
    def __init__(self):
        self.cases = []
        self.names = set()

    def seed(self):
        torch.manual_seed(1000 + len(self.cases))

    def add(self, name, op, params, inputs, fn, grad_inputs=None, main="out", positive_grad_output=False):
        """inputs: {name: float32/int/bool tensor}. fn(**tensors64) → tensor or dict of tensors.
        grad_inputs: names of inputs that require grad (default: every float input).
        positive_grad_output: draw grad_output from [0.5, 1.5] rather than N(0, 1), for cases whose
        gradient is a long sum (broadcast to a 0-d input), so that it does not cancel to near zero
        (float32 rounding would then dominate the relative-error metric)."""
        assert name not in self.names, name
        self.names.add(name)
        if grad_inputs is None:
            grad_inputs = [k for k, v in inputs.items() if v.is_floating_point()]
        xs = {}
        for k, v in inputs.items():
            if v.is_floating_point():
                xs[k] = v.detach().double().requires_grad_(k in grad_inputs)
            else:
                xs[k] = v
        outs = fn(**xs)
        if not isinstance(outs, dict):
            outs = {main: outs}
        go = rand_pos(*outs[main].shape, low=0.5, high=1.5) if positive_grad_output else grad_out_like(outs[main])
        gs = {}
        if grad_inputs:
            targets = [xs[k] for k in grad_inputs]
            got = torch.autograd.grad((outs[main] * go.double()).sum(), targets, allow_unused=True)
            for k, g in zip(grad_inputs, got):
                gs[k] = enc(g if g is not None else torch.zeros_like(xs[k]))
        self.cases.append({
            "name": name,
            "op": op,
            "params": params,
            "inputs": {k: enc(v) for k, v in inputs.items()},
            "grad_output": enc(go),
            "outputs": {k: enc(v) for k, v in outs.items()},
            "grads": gs,
        })


# ---------------------------------------------------------------------------------------------
# ops.json


def gen_ops():
    b = Builder()

    # -- binary arithmetic with broadcasting
    bin_shapes = [
        ("same", [5, 7], [5, 7]),
        ("row_bcast", [3, 17], [17]),
        ("both_bcast", [4, 1, 6], [3, 6]),
        ("lead_bcast", [2, 1, 3, 1], [5, 1, 19]),
        ("scalar_rhs", [2, 9], []),
        ("scalar_lhs", [], [3, 5]),
    ]
    fns = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
    for op, fn in fns.items():
        for tag, sa, sb in bin_shapes:
            b.seed()
            scalar = tag.startswith("scalar")  # keep the 0-d operand's gradient (a sum) away from 0
            a = rand_pos(*sa) if scalar else randn(*sa)
            bb = rand_pos(*sb) if scalar else rand_away_from_zero(*sb) if op == "div" else randn(*sb)
            b.add(f"{op}_{tag}", op, {}, {"a": a, "b": bb}, lambda a, b, fn=fn: fn(a, b), positive_grad_output=scalar)

    # -- tensor ∘ scalar
    for op, s, shape in [("mul_scalar", 2.5, [4, 9]), ("mul_scalar", -0.75, [2, 3, 5]),
                         ("add_scalar", 1.25, [17]), ("add_scalar", -3.0, [3, 6])]:
        b.seed()
        b.add(f"{op}_{'x'.join(map(str, shape))}", op, {"scalar": s}, {"a": randn(*shape)},
              lambda a, s=s, op=op: a * s if op == "mul_scalar" else a + s)

    # -- unary
    unary = {
        "neg": (torch.neg, randn),
        "exp": (torch.exp, randn),
        "log": (torch.log, rand_pos),
        "tanh": (torch.tanh, lambda *s: randn(*s, scale=2.0)),
        "sigmoid": (torch.sigmoid, lambda *s: randn(*s, scale=3.0)),
        "sqrt": (torch.sqrt, rand_pos),
        "relu": (torch.relu, randn),
    }
    for op, (fn, gen) in unary.items():
        for shape in ([7], [3, 17], [2, 3, 5]):
            b.seed()
            b.add(f"{op}_{'x'.join(map(str, shape))}", op, {}, {"a": gen(*shape)}, lambda a, fn=fn: fn(a))
    for approx in ("none", "tanh"):
        for shape in ([19], [4, 33], [2, 3, 5]):
            b.seed()
            b.add(f"gelu_{approx}_{'x'.join(map(str, shape))}", "gelu", {"approximate": approx},
                  {"a": randn(*shape, scale=2.0)}, lambda a, approx=approx: F.gelu(a, approximate=approx))

    # -- reductions
    red_cases = [
        ([3, 4, 5], [], False),
        ([3, 4, 5], [], True),
        ([3, 4, 5], [1], False),
        ([3, 4, 5], [0, 2], True),
        ([3, 4, 5], [-1], True),
        ([2, 17], [0], False),
        ([6, 1, 7], [1], False),
        ([4, 3, 2, 5], [1, 3], False),
        ([19], [0], True),
    ]
    for op in ("sum", "mean"):
        for shape, dims, keepdim in red_cases:
            b.seed()
            dims_t = tuple(dims) if dims else tuple(range(len(shape)))
            name = f"{op}_{'x'.join(map(str, shape))}_d{'_'.join(map(str, dims)) or 'all'}{'_keep' if keepdim else ''}"

            def fn(a, op=op, dims_t=dims_t, keepdim=keepdim):
                return getattr(torch, op)(a, dim=dims_t, keepdim=keepdim)

            b.add(name, op, {"dims": dims, "keepdim": keepdim}, {"a": randn(*shape)}, fn)

    # -- matmul
    mm_cases = [
        ("2d", [5, 7], [7, 3]),
        ("2d_odd", [17, 19], [19, 13]),
        ("batched", [2, 5, 7], [2, 7, 3]),
        ("bcast_batch", [2, 1, 5, 7], [3, 7, 4]),
        ("bcast_rhs2d", [3, 5, 7], [7, 4]),
        ("bcast_lhs2d", [5, 7], [2, 7, 3]),
        ("vec_mat", [7], [7, 3]),
        ("mat_vec", [5, 7], [7]),
        ("dot", [9], [9]),
        ("batched_vec", [2, 3, 5, 7], [7]),
        ("vec_batched", [7], [2, 7, 3]),
    ]
    for tag, sa, sb in mm_cases:
        b.seed()
        b.add(f"matmul_{tag}", "matmul", {}, {"a": randn(*sa), "b": randn(*sb)}, lambda a, b: torch.matmul(a, b))

    # -- linear
    lin_cases = [
        ("2d_bias", [5, 7], 3, True),
        ("3d_bias", [2, 5, 17], 9, True),
        ("3d_nobias", [2, 5, 17], 9, False),
        ("4d_bias", [2, 3, 4, 6], 5, True),
        ("1d_bias", [11], 4, True),
    ]
    for tag, sx, out_f, bias in lin_cases:
        b.seed()
        inputs = {"x": randn(*sx), "weight": randn(out_f, sx[-1], scale=0.5)}
        if bias:
            inputs["bias"] = randn(out_f)
        b.add(f"linear_{tag}", "linear", {}, inputs, lambda x, weight, bias=None: F.linear(x, weight, bias))

    # -- softmax / log_softmax
    # (scale, offset): inputs scale·N(0, 1) + offset. An offset of ±100 overflows exp() in float32
    # unless the max is subtracted first.
    sm_cases = [([4, 19], -1, 1.0, 0.0), ([3, 5, 7], 1, 1.0, 0.0), ([2, 3, 4, 5], 0, 1.0, 0.0),
                ([3, 33], -1, 2.0, 100.0), ([2, 17, 3], -2, 4.0, 0.0), ([5, 6], 0, 2.0, -100.0),
                ([4, 7], -1, 3.0, 1000.0)]
    for op in ("softmax", "log_softmax"):
        for shape, dim, scale, offset in sm_cases:
            b.seed()
            tag = (f"_x{int(scale)}" if scale != 1.0 else "") + (f"_plus{int(offset)}" if offset else "")
            b.add(f"{op}_{'x'.join(map(str, shape))}_dim{dim}{tag}".replace("plus-", "minus"), op,
                  {"dim": dim}, {"a": (randn(*shape, scale=scale) + offset).float()},
                  lambda a, op=op, dim=dim: getattr(torch, op)(a, dim=dim))

    # -- layer_norm
    ln_cases = [
        ("2d_affine", [4, 19], [19], True, True, 1e-5),
        ("2d_noaffine", [4, 19], [19], False, False, 1e-5),
        ("3d_affine_eps", [2, 3, 20], [20], True, True, 1e-3),
        ("4d_two_dims", [2, 3, 4, 5], [4, 5], True, True, 1e-5),
        ("weight_only", [5, 6], [6], True, False, 1e-5),
        ("offset_input", [3, 33], [33], True, True, 1e-5),
    ]
    for tag, sx, ns, w, bias, eps in ln_cases:
        b.seed()
        x = randn(*sx)
        if tag == "offset_input":
            x = (x * 0.5 + 4.0).float()
        inputs = {"x": x}
        if w:
            inputs["weight"] = (1.0 + randn(*ns, scale=0.3)).float()
        if bias:
            inputs["bias"] = randn(*ns, scale=0.5)

        def fn(x, weight=None, bias=None, ns=ns, eps=eps):
            return F.layer_norm(x, ns, weight, bias, eps)

        b.add(f"layer_norm_{tag}", "layer_norm", {"normalized_shape": ns, "eps": eps}, inputs, fn)

    # -- embedding
    emb_cases = [
        ("1d_nopad", [7], 10, 6, -1),
        ("2d_pad", [3, 5], 11, 7, 0),
        ("2d_pad_mid", [4, 6], 9, 5, 4),
        ("3d_repeats", [2, 2, 5], 4, 17, 2),
    ]
    for tag, sids, V, E, pad in emb_cases:
        b.seed()
        ids = torch.randint(0, V, sids, dtype=torch.int32)
        if pad >= 0:
            flat = ids.view(-1)
            flat[0] = pad
            flat[-2] = pad
        weight = randn(V, E)

        def fn(ids, weight, pad=pad):
            return F.embedding(ids.long(), weight, padding_idx=pad if pad >= 0 else None)

        b.add(f"embedding_{tag}", "embedding", {"padding_idx": pad}, {"ids": ids, "weight": weight}, fn)

    # -- cross_entropy
    ce_cases = [
        ("mean", [6, 5], 0.0, "mean", -100, []),
        ("mean_ls", [6, 5], 0.1, "mean", -100, []),
        ("sum", [7, 13], 0.0, "sum", -100, []),
        ("sum_ls", [7, 13], 0.1, "sum", -100, []),
        ("none", [5, 9], 0.0, "none", -100, []),
        ("none_ls", [5, 9], 0.1, "none", -100, []),
        ("mean_ignore", [8, 6], 0.0, "mean", -100, [1, 5]),
        ("mean_ls_ignore", [8, 6], 0.1, "mean", -100, [1, 5]),
        ("sum_ls_ignore", [8, 6], 0.1, "sum", -100, [0, 3]),
        ("none_ls_ignore", [8, 6], 0.1, "none", -100, [2, 7]),
        ("mean_ignore_class", [9, 4], 0.1, "mean", 2, []),
        ("mean_large_logits", [4, 33], 0.0, "mean", -100, []),
        ("none_offset_logits", [4, 7], 0.1, "none", -100, []),
    ]
    for tag, (N, C), ls, red, ign, ignored_rows in ce_cases:
        b.seed()
        logits = randn(N, C, scale=10.0 if "large" in tag else 2.0)
        if "offset" in tag:
            logits = (logits + 1000.0).float()  # as softmax: only differences matter
        target = torch.randint(0, C, (N,), dtype=torch.int32)
        for r in ignored_rows:
            target[r] = ign
        if ign >= 0:
            target[0] = ign  # make sure the ignored class appears

        def fn(logits, target, ls=ls, red=red, ign=ign):
            return F.cross_entropy(logits, target.long(), ignore_index=ign, label_smoothing=ls, reduction=red)

        b.add(f"cross_entropy_{tag}", "cross_entropy",
              {"ignore_index": ign, "label_smoothing": ls, "reduction": red},
              {"logits": logits, "target": target}, fn)

    # -- cat
    cat_cases = [
        ("dim0", [[2, 3], [4, 3], [1, 3]], 0),
        ("dim1_3d", [[2, 3, 4], [2, 5, 4]], 1),
        ("dim_last", [[2, 3, 4], [2, 3, 1], [2, 3, 7]], -1),
        ("single", [[3, 5]], 0),
    ]
    for tag, shapes, dim in cat_cases:
        b.seed()
        inputs = {f"x{i}": randn(*s) for i, s in enumerate(shapes)}

        def fn(dim=dim, **xs):
            return torch.cat([xs[f"x{i}"] for i in range(len(xs))], dim)

        b.add(f"cat_{tag}", "cat", {"dim": dim, "n": len(shapes)}, inputs, fn)

    # -- transpose + contiguous, permute, reshape of a non-contiguous view
    for tag, shape, d0, d1 in [("2d", [5, 7], 0, 1), ("3d_01", [2, 3, 4], 0, 1), ("3d_neg", [2, 3, 17], -1, -2),
                               ("4d_13", [2, 3, 4, 5], 1, 3)]:
        b.seed()
        b.add(f"transpose_{tag}", "transpose", {"d0": d0, "d1": d1}, {"a": randn(*shape)},
              lambda a, d0=d0, d1=d1: a.transpose(d0, d1).contiguous())
    for tag, shape, dims in [("3d", [2, 3, 4], [2, 0, 1]), ("4d", [2, 3, 4, 5], [0, 2, 3, 1])]:
        b.seed()
        b.add(f"permute_{tag}", "permute", {"dims": dims}, {"a": randn(*shape)},
              lambda a, dims=dims: a.permute(*dims).contiguous())
    b.seed()
    b.add("transpose_reshape", "transpose_reshape", {"d0": 0, "d1": 1, "shape": [3, -1]}, {"a": randn(4, 3, 5)},
          lambda a: a.transpose(0, 1).reshape(3, -1))

    # -- slice
    for tag, shape, dim, start, end in [("dim0", [7, 3], 0, 2, 5), ("mid", [2, 9, 4], 1, 3, 9),
                                        ("last_neg", [3, 4, 17], -1, -10, -1), ("empty_tail", [6, 5], 0, 4, 100)]:
        b.seed()
        sl = [slice(None)] * len(shape)
        sl[dim] = slice(start, end)
        b.add(f"slice_{tag}", "slice", {"dim": dim, "start": start, "end": end}, {"a": randn(*shape)},
              lambda a, sl=tuple(sl): a[sl].contiguous())

    # -- masked_fill (broadcast mask)
    for tag, sa, sm, val in [("same", [3, 5], [3, 5], -2.5), ("bcast", [2, 3, 4], [3, 1], 7.0)]:
        b.seed()
        mask = torch.rand(*sm) < 0.4
        b.add(f"masked_fill_{tag}", "masked_fill", {"value": val}, {"a": randn(*sa), "mask": mask},
              lambda a, mask, val=val: a.masked_fill(mask, val))

    # -- index_select (decoding regroups its rows with it): repeats, drops, any dim; f32 with its
    # gradient (repeats add up), i32 and bool without
    for tag, shape, dim, index in [("rows", [5, 3], 0, [4, 0, 0, 2]), ("mid", [2, 6, 3], 1, [5, 1, 1]),
                                   ("last", [3, 4], -1, [3, 3, 0])]:
        b.seed()
        b.add(f"index_select_{tag}", "index_select", {"dim": dim, "index": index}, {"a": randn(*shape)},
              lambda a, dim=dim, index=index: torch.index_select(a, dim, torch.tensor(index)))
    b.seed()
    b.add("index_select_i32", "index_select", {"dim": 0, "index": [3, 1, 1]},
          {"a": torch.randint(0, 9, (4, 5), dtype=torch.int32)},
          lambda a: torch.index_select(a, 0, torch.tensor([3, 1, 1])))
    b.seed()
    b.add("index_select_bool", "index_select", {"dim": 0, "index": [1, 1, 0]}, {"a": torch.rand(2, 1, 1, 5) < 0.5},
          lambda a: torch.index_select(a, 0, torch.tensor([1, 1, 0])))

    # -- comparisons with a scalar and logic (boolean results, no gradient)
    cmp = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
    for op, fn in cmp.items():
        b.seed()
        a = torch.randint(-2, 3, (3, 7)).float()  # many ties with the scalar
        b.add(f"{op}_f32", op, {"scalar": 1.0}, {"a": a}, lambda a, fn=fn: fn(a, 1.0), grad_inputs=[])
        b.seed()
        b.add(f"{op}_i32", op, {"scalar": 2.0}, {"a": torch.randint(0, 4, (2, 9), dtype=torch.int32)},
              lambda a, fn=fn: fn(a, 2))
    for op, fn in {"logical_and": torch.logical_and, "logical_or": torch.logical_or}.items():
        b.seed()
        b.add(f"{op}_bcast", op, {}, {"a": torch.rand(2, 1, 5) < 0.5, "b": torch.rand(3, 5) < 0.5},
              lambda a, b, fn=fn: fn(a, b))
    b.seed()
    b.add("logical_not", "logical_not", {}, {"a": torch.rand(4, 6) < 0.5}, lambda a: torch.logical_not(a))

    # -- attention masks in qkv's convention, SDPA's (True = may attend): a causal mask with an
    # offset is torch.ones(Lq, Lk).tril(offset); a key padding mask [B, S] becomes [B, 1, 1, S]
    for Lq, Lk, off in [(4, 4, 0), (3, 7, 4), (5, 3, -1), (2, 6, 0)]:
        b.seed()
        b.add(f"causal_mask_{Lq}x{Lk}_off{off}".replace("-", "minus"), "causal_mask",
              {"Lq": Lq, "Lk": Lk, "offset": off}, {},
              lambda Lq=Lq, Lk=Lk, off=off: torch.ones(Lq, Lk, dtype=torch.bool).tril(off))
    b.seed()
    b.add("attention_mask_from_padding", "attention_mask_from_padding", {},
          {"key_padding_mask": torch.rand(3, 6) < 0.3}, lambda key_padding_mask: (~key_padding_mask)[:, None, None, :])

    # -- log_mean_exp: an ensemble's log mean probability (no gradient)
    for n, shape in [(2, [3, 11]), (3, [2, 5])]:
        b.seed()
        inputs = {f"x{i}": torch.log_softmax(randn(*shape, scale=3.0), -1) for i in range(n)}
        b.add(f"log_mean_exp_{n}", "log_mean_exp", {"n": n}, inputs,
              lambda **xs: torch.logsumexp(torch.stack([xs[f"x{i}"] for i in range(len(xs))]), 0) - math.log(len(xs)),
              grad_inputs=[])

    # (New ops from here on: appended, so that every case above keeps its seed.)
    # -- silu (F.silu): x · σ(x)
    for shape in ([7], [3, 17], [2, 3, 5]):
        b.seed()
        b.add(f"silu_{'x'.join(map(str, shape))}", "silu", {}, {"a": randn(*shape, scale=3.0)}, lambda a: F.silu(a))

    # -- rms_norm over the last dim, as torch.nn.functional.rms_norm(x, (n,), weight, eps) (PyTorch ≥ 2.4;
    # 1.13 has none, so its formula): x / √(mean(x²) + ε) · γ
    rms_cases = [
        ("2d", [4, 19], True, 1e-6),
        ("3d", [2, 3, 20], True, 1e-5),
        ("noweight", [5, 8], False, 1e-6),
        ("offset_input", [3, 33], True, 1e-6),
        ("large_eps", [2, 7], True, 0.5),
    ]
    for tag, sx, w, eps in rms_cases:
        b.seed()
        x = randn(*sx)
        if tag == "offset_input":
            x = (x * 0.5 + 4.0).float()
        inputs = {"x": x}
        if w:
            inputs["weight"] = (1.0 + randn(sx[-1], scale=0.3)).float()

        def fn(x, weight=None, eps=eps):
            y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
            return y * weight if weight is not None else y

        b.add(f"rms_norm_{tag}", "rms_norm", {"eps": eps}, inputs, fn)

    # -- apply_rotary_pos_emb: Hugging Face's rotate-half RoPE on the first rot features of x [B, H, T, D],
    # cos/sin [T, rot] (θ repeated over both halves, positions from `start`); the rest of x unchanged.
    # Gradient for x only (cos/sin are constants of the positions).
    def rope_tables(T, rot, start, base):
        inv = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
        ang = torch.arange(start, start + T, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], -1)
        return ang.cos().float(), ang.sin().float()

    def rope_reference(x, cos, sin):
        rot = cos.shape[-1]
        xr = x[..., :rot]
        x1, x2 = xr[..., : rot // 2], xr[..., rot // 2:]
        return torch.cat([xr * cos + torch.cat([-x2, x1], -1) * sin, x[..., rot:]], -1)

    rope_cases = [
        ("full", [2, 3, 5, 8], 8, 0, 10000.0),
        ("partial_half", [1, 2, 6, 10], 4, 0, 10000.0),
        ("partial_2", [2, 1, 4, 6], 2, 3, 10000.0),
        ("offset_positions", [1, 2, 7, 16], 16, 100, 500.0),
        ("partial_odd_rest", [2, 2, 3, 12], 6, 5, 10000.0),
    ]
    for tag, sx, rot, start, base in rope_cases:
        b.seed()
        cos, sin = rope_tables(sx[2], rot, start, base)
        b.add(f"apply_rotary_pos_emb_{tag}", "apply_rotary_pos_emb", {},
              {"x": randn(*sx), "cos": cos, "sin": sin}, rope_reference, grad_inputs=["x"])

    # -- topk along the last dim (beam search's 2K best continuations a row on a GPU): values with
    # their gradient (scattered back to the picked entries), indices; distinct values, since
    # PyTorch does not promise an order among ties (qkv's, the lower index first, is tested apart)
    for tag, shape, k in [("rows", [3, 10], 4), ("one", [5, 7], 1), ("all_3d", [2, 3, 6], 6), ("none", [2, 5], 0)]:
        b.seed()
        b.add(f"topk_{tag}", "topk", {"k": k}, {"a": randn(*shape)},
              lambda a, k=k: dict(zip(("out", "indices"), torch.topk(a, k, dim=-1))))

    # -- add_layer_norm: layer_norm(x + residual) (a post-LN sublayer's ending, fused), both inputs
    # taking the sum's gradient
    for tag, shape, affine in [("affine", [3, 8], True), ("plain_3d", [2, 3, 8], False)]:
        b.seed()
        inputs = {"x": randn(*shape), "residual": randn(*shape)}
        if affine:
            inputs["weight"] = (1.0 + randn(8, scale=0.3)).float()
            inputs["bias"] = randn(8, scale=0.5)

        def fn(x, residual, weight=None, bias=None):
            return F.layer_norm(x + residual, [8], weight, bias, 1e-5)

        b.add(f"add_layer_norm_{tag}", "add_layer_norm", {"normalized_shape": [8], "eps": 1e-5}, inputs, fn)

    # -- add_rms_norm: rms_norm(x + residual) (a pre-norm decoder's residual and next norm, fused), both
    # inputs taking the sum's gradient
    for tag, shape, w, eps in [("weight", [4, 19], True, 1e-6), ("plain_3d", [2, 3, 20], False, 1e-5)]:
        b.seed()
        inputs = {"x": randn(*shape), "residual": randn(*shape)}
        if w:
            inputs["weight"] = (1.0 + randn(shape[-1], scale=0.3)).float()

        def fn(x, residual, weight=None, eps=eps):
            s = x + residual
            y = s / torch.sqrt((s * s).mean(-1, keepdim=True) + eps)
            return y * weight if weight is not None else y

        b.add(f"add_rms_norm_{tag}", "add_rms_norm", {"eps": eps}, inputs, fn)

    # -- silu_mul: F.silu(gate) * up, SwiGLU's product (Llama's MLP), one op
    for shape in ([9], [3, 17], [2, 3, 70]):
        b.seed()
        inputs = {"gate": randn(*shape, scale=3.0), "up": randn(*shape)}
        b.add(f"silu_mul_{'x'.join(map(str, shape))}", "silu_mul", {}, inputs, lambda gate, up: F.silu(gate) * up)

    # -- paged_attention: each query token over its sequence's keys, gathered from shuffled pages,
    # against softmax(q kᵀ/√D) v on the gathered keys (sdpa_reference) (inference only: no gradients)
    def paged_reference(q, k_cache, v_cache, block_table, seq, seq_len, page, window, G, softcap=0.0):
        outs = []
        for t in range(q.shape[0]):
            n = int(seq_len[t])
            lo = max(0, n - window) if window > 0 else 0
            pages = [int(block_table[int(seq[t]), j // page]) for j in range(lo, n)]
            k = torch.stack([k_cache[p, :, j % page] for p, j in zip(pages, range(lo, n))], 1)  # [Hkv, keys, D]
            v = torch.stack([v_cache[p, :, j % page] for p, j in zip(pages, range(lo, n))], 1)
            k, v = k.repeat_interleave(G, 0), v.repeat_interleave(G, 0)  # [H, keys, D]
            outs.append(sdpa_reference(q[t].unsqueeze(1), k, v, softcap=softcap)[0].squeeze(1))  # [H, Dv]
        return torch.stack(outs)

    for tag, H, Hkv, D, Dv, page, lengths, window in (("mha", 2, 2, 8, 8, 4, [5, 1, 9], 0),
                                                      ("gqa_window", 4, 2, 6, 5, 2, [7, 3], 3)):
        b.seed()
        pages_per = [(n + page - 1) // page for n in lengths]
        P = sum(pages_per) + 1
        order = torch.randperm(P).tolist()
        width = max(pages_per)
        table = torch.full((len(lengths), width), -1, dtype=torch.int32)
        at = 0
        for r, n in enumerate(pages_per):
            table[r, :n] = torch.tensor(order[at:at + n], dtype=torch.int32)
            at += n
        # the queries: each sequence's last token, and the first sequence's prompt (lengths 1 … n)
        seq = [r for r in range(len(lengths))] + [0] * lengths[0]
        seq_len = list(lengths) + list(range(1, lengths[0] + 1))
        T = len(seq)
        inputs = {"q": randn(T, H, D), "k_cache": randn(P, Hkv, page, D), "v_cache": randn(P, Hkv, page, Dv),
                  "block_table": table, "seq": torch.tensor(seq, dtype=torch.int32),
                  "seq_len": torch.tensor(seq_len, dtype=torch.int32)}
        b.add(f"paged_attention_{tag}", "paged_attention", {"window": window}, inputs,
              lambda page=page, window=window, G=H // Hkv, **x: paged_reference(**x, page=page, window=window, G=G),
              grad_inputs=[])

    # -- paged_attention over shared pages: three sequences begin with the same 66 pages of 4 (264
    # keys; the CPU's cascade attends their tokens together over the first 256), then pages of their
    # own; the queries: each one's last token and two more of the first (its later chunk)
    b.seed()
    H, Hkv, D, Dv, page, shared = 4, 2, 6, 5, 4, 66
    lengths = [shared * page + 5, shared * page + 2, shared * page + 11]
    pages_per = [(n + page - 1) // page for n in lengths]
    P = shared + sum(n - shared for n in pages_per) + 1
    order = torch.randperm(P).tolist()
    table = torch.full((len(lengths), max(pages_per)), -1, dtype=torch.int32)
    at = shared
    for r, n in enumerate(pages_per):
        table[r, :shared] = torch.tensor(order[:shared], dtype=torch.int32)
        table[r, shared:n] = torch.tensor(order[at:at + n - shared], dtype=torch.int32)
        at += n - shared
    seq = [0, 1, 2, 0, 0]
    seq_len = lengths + [lengths[0] - 2, lengths[0] - 1]
    T = len(seq)
    inputs = {"q": randn(T, H, D), "k_cache": randn(P, Hkv, page, D), "v_cache": randn(P, Hkv, page, Dv),
              "block_table": table, "seq": torch.tensor(seq, dtype=torch.int32),
              "seq_len": torch.tensor(seq_len, dtype=torch.int32)}
    b.add("paged_attention_shared_pages", "paged_attention", {"window": 0}, inputs,
          lambda **x: paged_reference(**x, page=page, window=0, G=H // Hkv), grad_inputs=[])

    # -- linear_cross_entropy: F.cross_entropy(F.linear(x, weight, bias), target) without the logits
    # (qkv's chunks of rows: chunk_rows 0 chooses, 1, 2 and 3 leave a short last chunk)
    lce_cases = [
        ("mean", [7, 5], 11, True, 0.0, "mean", -100, [], 0),
        ("mean_ls_chunks", [7, 5], 11, True, 0.1, "mean", -100, [2], 3),
        ("sum_nobias_rows", [6, 9], 13, False, 0.0, "sum", -100, [0, 4], 1),
        ("sum_ls_chunks", [9, 4], 6, True, 0.2, "sum", -100, [8], 2),
        ("mean_ignore_class", [8, 6], 5, False, 0.1, "mean", 3, [], 3),
    ]
    for tag, (N, d), C, bias, ls, red, ign, ignored_rows, chunk in lce_cases:
        b.seed()
        inputs = {"x": randn(N, d), "weight": randn(C, d, scale=0.5)}
        if bias:
            inputs["bias"] = randn(C)
        target = torch.randint(0, C, (N,), dtype=torch.int32)
        for r in ignored_rows:
            target[r] = ign
        if ign >= 0:
            target[0] = ign
        inputs["target"] = target

        def fn(x, weight, target, bias=None, ls=ls, red=red, ign=ign):
            return F.cross_entropy(F.linear(x, weight, bias), target.long(), ignore_index=ign, label_smoothing=ls,
                                   reduction=red)

        b.add(f"linear_cross_entropy_{tag}", "linear_cross_entropy",
              {"ignore_index": ign, "label_smoothing": ls, "reduction": red, "chunk_rows": chunk}, inputs, fn)

    # -- paged_attention with soft-capped scores (Gemma 2), cap 1.5 on scores of spread ~3 so that
    # every one bends; a window, grouped queries, shuffled pages (appended: the cases above keep theirs)
    b.seed()
    H, Hkv, D, Dv, page, lengths, window = 4, 2, 6, 5, 2, [7, 3], 3
    pages_per = [(n + page - 1) // page for n in lengths]
    P = sum(pages_per) + 1
    order = torch.randperm(P).tolist()
    table = torch.full((len(lengths), max(pages_per)), -1, dtype=torch.int32)
    at = 0
    for r, n in enumerate(pages_per):
        table[r, :n] = torch.tensor(order[at:at + n], dtype=torch.int32)
        at += n
    seq = [0, 1] + [0] * lengths[0]
    seq_len = list(lengths) + list(range(1, lengths[0] + 1))
    T = len(seq)
    inputs = {"q": randn(T, H, D, scale=2.0), "k_cache": randn(P, Hkv, page, D, scale=2.0),
              "v_cache": randn(P, Hkv, page, Dv), "block_table": table, "seq": torch.tensor(seq, dtype=torch.int32),
              "seq_len": torch.tensor(seq_len, dtype=torch.int32)}
    b.add("paged_attention_softcap", "paged_attention", {"window": window, "softcap": 1.5}, inputs,
          lambda **x: paged_reference(**x, page=page, window=window, G=H // Hkv, softcap=1.5), grad_inputs=[])
    return b.cases


# ---------------------------------------------------------------------------------------------
# attention.json: scaled_dot_product_attention


def sdpa_reference(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, softcap=0.0):
    Lq, Lk = q.shape[-2], k.shape[-2]
    if enable_gqa and q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if softcap > 0:  # Gemma 2's attn_logit_softcapping, before the mask (transformers' eager attention)
        s = torch.tanh(s / softcap) * softcap
    allowed = torch.ones(Lq, Lk, dtype=torch.bool)
    if is_causal:
        allowed = torch.ones(Lq, Lk, dtype=torch.bool).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = allowed & attn_mask
    elif attn_mask is not None:
        s = s + attn_mask
    s = s.masked_fill(~allowed, -math.inf)
    dead = (s == -math.inf).all(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return p @ v, p


def gen_sdpa(b):
    def case(name, q, k, v, mask=None, is_causal=False, scale=None, enable_gqa=False, mask_grad=False):
        inputs = {"q": q, "k": k, "v": v}
        if mask is not None:
            inputs["attn_mask"] = mask
        grads = ["q", "k", "v"] + (["attn_mask"] if mask_grad else [])
        params = {"is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa, "mask_requires_grad": mask_grad}

        def fn(q, k, v, attn_mask=None):
            out, weights = sdpa_reference(q, k, v, attn_mask, is_causal, scale, enable_gqa)
            return {"out": out, "weights": weights}

        b.add(name, "sdpa", params, inputs, fn, grad_inputs=grads)

    B, H = 2, 2
    b.seed(); case("4d_basic", randn(B, H, 5, 8), randn(B, H, 5, 8), randn(B, H, 5, 8))
    b.seed(); case("4d_lq_ne_lk_d_ne_dv", randn(B, H, 7, 6), randn(B, H, 11, 6), randn(B, H, 11, 5))
    b.seed(); case("3d", randn(B, 9, 4), randn(B, 13, 4), randn(B, 13, 7))
    b.seed(); case("2d", randn(6, 5), randn(17, 5), randn(17, 3))
    b.seed(); case("4d_odd_sizes", randn(1, 1, 19, 17), randn(1, 1, 23, 17), randn(1, 1, 23, 13))
    b.seed(); case("custom_scale", randn(B, H, 5, 8), randn(B, H, 6, 8), randn(B, H, 6, 4), scale=0.7)
    b.seed(); case("bool_mask_2d", randn(B, H, 5, 4), randn(B, H, 7, 4), randn(B, H, 7, 4),
                   mask=torch.rand(5, 7) < 0.7)
    b.seed(); case("bool_mask_b1", randn(B, H, 5, 4), randn(B, H, 7, 4), randn(B, H, 7, 6),
                   mask=torch.rand(B, 1, 5, 7) < 0.6)
    b.seed()
    kpm = torch.ones(B, 1, 1, 9, dtype=torch.bool)
    kpm[0, ..., 6:] = False
    kpm[1, ..., 3:] = False
    case("key_padding_bool", randn(B, H, 4, 8), randn(B, H, 9, 8), randn(B, H, 9, 8), mask=kpm)
    b.seed()
    dead = torch.rand(B, H, 6, 5) < 0.6
    dead[0, 1, 2, :] = False  # query row 2 of (0, 1) sees nothing
    dead[1, :, 4, :] = False  # query row 4 of batch 1 sees nothing, every head
    case("bool_mask_dead_rows", randn(B, H, 6, 4), randn(B, H, 5, 4), randn(B, H, 5, 4), mask=dead)
    b.seed(); case("float_mask", randn(B, H, 5, 4), randn(B, H, 7, 4), randn(B, H, 7, 4), mask=randn(5, 7))
    b.seed(); case("float_mask_grad", randn(B, H, 5, 4), randn(B, H, 7, 4), randn(B, H, 7, 4),
                   mask=randn(B, 1, 5, 7), mask_grad=True)
    b.seed(); case("float_mask_grad_2d", randn(B, 5, 4), randn(B, 8, 4), randn(B, 8, 3),
                   mask=randn(5, 8), mask_grad=True)
    b.seed()
    fm = randn(B, 1, 6, 5)
    fm[torch.rand(B, 1, 6, 5) < 0.3] = -math.inf
    fm[1, 0, 3, :] = -math.inf  # a dead row through the float mask
    case("float_mask_neg_inf", randn(B, H, 6, 4), randn(B, H, 5, 4), randn(B, H, 5, 4), mask=fm)
    b.seed(); case("causal_square", randn(B, H, 6, 4), randn(B, H, 6, 4), randn(B, H, 6, 4), is_causal=True)
    b.seed(); case("causal_lq_lt_lk", randn(B, H, 4, 8), randn(B, H, 9, 8), randn(B, H, 9, 5), is_causal=True)
    b.seed(); case("causal_lq_gt_lk", randn(B, H, 9, 8), randn(B, H, 4, 8), randn(B, H, 4, 5), is_causal=True)
    b.seed(); case("causal_3d", randn(B, 7, 5), randn(B, 7, 5), randn(B, 7, 5), is_causal=True)
    b.seed(); case("causal_and_bool_mask", randn(B, H, 6, 4), randn(B, H, 6, 4), randn(B, H, 6, 4),
                   mask=torch.rand(6, 6) < 0.7, is_causal=True)
    b.seed(); case("gqa_6_2", randn(B, 6, 5, 4), randn(B, 2, 7, 4), randn(B, 2, 7, 3), enable_gqa=True)
    b.seed(); case("gqa_4_1_causal", randn(1, 4, 6, 8), randn(1, 1, 6, 8), randn(1, 1, 6, 8), enable_gqa=True,
                   is_causal=True)
    b.seed(); case("gqa_equal_heads", randn(B, 2, 5, 4), randn(B, 2, 5, 4), randn(B, 2, 5, 4), enable_gqa=True)
    b.seed(); case("large_scores", randn(1, 2, 5, 16, scale=4.0), randn(1, 2, 7, 16, scale=4.0),
                   randn(1, 2, 7, 16))


# ---------------------------------------------------------------------------------------------
# attention.json: MultiheadAttention


MHA_PARAM_ORDER = ["in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                   "out_proj.weight", "out_proj.bias"]


def gen_mha(b):
    def case(name, E, H, query, key=None, value=None, bias=True, kdim=0, vdim=0, batch_first=False,
             key_padding_mask=None, attn_mask=None, need_weights=True, average_attn_weights=True, kv_same=False):
        assert name not in b.names, name
        b.names.add(name)
        mha = torch.nn.MultiheadAttention(E, H, dropout=0.0, bias=bias, kdim=kdim or None, vdim=vdim or None,
                                          batch_first=batch_first).double()
        # float32 parameter values (biases nonzero, unlike PyTorch's init)
        params = {}
        with torch.no_grad():
            for n, p in mha.named_parameters():
                v32 = randn(*p.shape, scale=0.4)
                p.copy_(v32.double())
                params[n] = v32
        self_attn = key is None
        if self_attn:
            x = leaf(query)
            q_in = k_in = v_in = x
            inputs = {"query": query}
        else:
            if kv_same:
                assert value is None
            q_in, k_in = leaf(query), leaf(key)
            v_in = k_in if kv_same else leaf(value)
            inputs = {"query": query, "key": key}
            if not kv_same:
                inputs["value"] = value
        kw = {"need_weights": need_weights, "average_attn_weights": average_attn_weights}
        if key_padding_mask is not None:
            inputs["key_padding_mask"] = key_padding_mask
            kw["key_padding_mask"] = key_padding_mask if key_padding_mask.dtype == torch.bool \
                else key_padding_mask.double()
        if attn_mask is not None:
            inputs["attn_mask"] = attn_mask
            kw["attn_mask"] = attn_mask if attn_mask.dtype == torch.bool else attn_mask.double()
        mha.train()
        out, w = mha(q_in, k_in, v_in, **kw)
        go = grad_out_like(out)
        named = dict(mha.named_parameters())
        grad_targets = {"query": q_in}
        if not self_attn:
            grad_targets["key"] = k_in
            if not kv_same:
                grad_targets["value"] = v_in
        grad_targets.update(named)
        got = torch.autograd.grad((out * go.double()).sum(), list(grad_targets.values()))
        outputs = {"output": enc(out)}
        if need_weights:
            outputs["weights"] = enc(w)
        b.cases.append({
            "name": name,
            "op": "mha",
            "params": {"embed_dim": E, "num_heads": H, "bias": bias, "kdim": kdim, "vdim": vdim,
                       "batch_first": batch_first, "need_weights": need_weights,
                       "average_attn_weights": average_attn_weights, "self_attention": self_attn,
                       "kv_same": kv_same},
            "parameters": {n: enc(params[n]) for n in MHA_PARAM_ORDER if n in params},
            "inputs": {k: enc(v) for k, v in inputs.items()},
            "grad_output": enc(go),
            "outputs": outputs,
            "grads": {k: enc(g) for k, g in zip(grad_targets.keys(), got)},
        })

    B, L, S, E, H = 2, 5, 7, 8, 2
    b.seed(); case("self_batch_first_weights", E, H, randn(B, L, E), batch_first=True)
    b.seed(); case("self_seq_first", E, H, randn(L, B, E))
    b.seed(); case("self_odd_sizes", 12, 3, randn(3, 9, 12), batch_first=True)
    b.seed(); case("self_unbatched", E, H, randn(L, E))
    b.seed(); case("self_no_weights", E, 4, randn(B, L, E), batch_first=True, need_weights=False)
    b.seed(); case("self_per_head_weights", E, H, randn(B, L, E), batch_first=True, average_attn_weights=False)
    b.seed(); case("cross_batch_first", E, H, randn(B, L, E), randn(B, S, E), randn(B, S, E), batch_first=True)
    b.seed(); case("cross_seq_first", E, 4, randn(L, B, E), randn(S, B, E), randn(S, B, E))
    b.seed(); case("cross_kv_same", E, H, randn(B, L, E), randn(B, S, E), batch_first=True, kv_same=True)
    b.seed(); case("cross_kdim_vdim", E, H, randn(B, L, E), randn(B, S, 5), randn(B, S, 11), kdim=5, vdim=11,
                   batch_first=True)
    b.seed(); case("cross_kdim_vdim_seq_first_nobias", E, 4, randn(L, B, E), randn(S, B, 6), randn(S, B, 3),
                   kdim=6, vdim=3, bias=False)
    b.seed(); case("self_no_bias", E, H, randn(B, L, E), batch_first=True, bias=False)
    b.seed()
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[0, 5:] = True
    kpm[1, 2:4] = True
    case("cross_key_padding_mask", E, H, randn(B, L, E), randn(B, S, E), randn(B, S, E), batch_first=True,
         key_padding_mask=kpm)
    b.seed()
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)  # True = not allowed
    case("self_bool_attn_mask_causal", E, H, randn(B, L, E), batch_first=True, attn_mask=causal)
    b.seed()
    am = torch.rand(L, S) < 0.4
    am[:, 0] = False  # every query keeps key 0
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[1, 4:] = True
    case("cross_bool_attn_and_padding", E, H, randn(L, B, E), randn(S, B, E), randn(S, B, E), attn_mask=am,
         key_padding_mask=kpm)
    b.seed()
    am = torch.rand(L, S) < 0.5
    am[torch.arange(L), torch.arange(L) % S] = False  # every query keeps one key
    case("cross_bool_attn_mask", E, H, randn(B, L, E), randn(B, S, E), randn(B, S, E), batch_first=True,
         attn_mask=am)
    b.seed(); case("cross_float_attn_mask_2d", E, H, randn(L, B, E), randn(S, B, E), randn(S, B, E),
                   attn_mask=randn(L, S))
    b.seed()
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[0, 4:] = True
    case("cross_float_attn_mask_bool_padding", E, H, randn(B, L, E), randn(B, S, E), randn(B, S, E),
         batch_first=True, attn_mask=randn(L, S), key_padding_mask=kpm)
    # A float key_padding_mask is added to the scores. (Only alone: PyTorch 1.13 merges a float
    # key_padding_mask into an attn_mask as if it were boolean, unlike PyTorch 2 and qkv.)
    b.seed()
    kpm = randn(B, S)
    kpm[0, 4:] = -math.inf
    case("cross_float_padding", E, H, randn(B, L, E), randn(B, S, E), randn(B, S, E), batch_first=True,
         key_padding_mask=kpm)
    b.seed(); case("self_float_attn_mask", E, H, randn(B, L, E), batch_first=True, attn_mask=randn(L, L))
    b.seed(); case("cross_float_attn_mask_3d", E, H, randn(B, L, E), randn(B, S, E), randn(B, S, E),
                   batch_first=True, attn_mask=randn(B * H, L, S), average_attn_weights=False)
    b.seed()
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[0, 3:] = True
    case("self_padding_per_head_weights", E, 4, randn(B, L, E), batch_first=True, key_padding_mask=kpm,
         average_attn_weights=False)


def write(path, cases, generator="tests/golden/make_golden.py"):
    with open(path, "w") as f:
        header = {"generator": generator, "torch": torch.__version__}
        f.write(json.dumps(header)[:-1] + ', "cases": [\n')
        for i, c in enumerate(cases):
            f.write(json.dumps(c, separators=(",", ":"), allow_nan=False))
            f.write(",\n" if i + 1 < len(cases) else "\n")
        f.write("]}\n")
    print(f"{path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


def gen_sdpa_softcap(b):
    """Soft-capped scores (Gemma 2's attn_logit_softcapping; not in F.scaled_dot_product_attention, so
    against its composition): caps that bend scores of spread ~4, with grouped queries and causality, a
    boolean mask, a float mask's gradient (dM: the capped scores' gradient), a custom scale. Appended
    after the MultiheadAttention cases: the cases before keep their bytes."""
    def case(name, q, k, v, mask=None, is_causal=False, scale=None, enable_gqa=False, mask_grad=False, softcap=0.0):
        inputs = {"q": q, "k": k, "v": v}
        if mask is not None:
            inputs["attn_mask"] = mask
        grads = ["q", "k", "v"] + (["attn_mask"] if mask_grad else [])
        params = {"is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa, "mask_requires_grad": mask_grad,
                  "softcap": softcap}

        def fn(q, k, v, attn_mask=None):
            out, weights = sdpa_reference(q, k, v, attn_mask, is_causal, scale, enable_gqa, softcap)
            return {"out": out, "weights": weights}

        b.add(name, "sdpa", params, inputs, fn, grad_inputs=grads)

    B, H = 2, 2
    b.seed(); case("softcap_gqa_causal", randn(B, 4, 7, 8, scale=2.0), randn(B, 2, 7, 8, scale=2.0),
                   randn(B, 2, 7, 5), is_causal=True, enable_gqa=True, softcap=2.0)
    b.seed(); case("softcap_bool_mask", randn(B, H, 6, 4, scale=2.0), randn(B, H, 9, 4, scale=2.0), randn(B, H, 9, 4),
                   mask=torch.rand(6, 9) < 0.6, softcap=1.0)
    b.seed(); case("softcap_float_mask_grad", randn(B, H, 5, 4, scale=2.0), randn(B, H, 7, 4, scale=2.0),
                   randn(B, H, 7, 4), mask=randn(B, 1, 5, 7), mask_grad=True, softcap=1.5)
    b.seed(); case("softcap_scale", randn(1, H, 5, 16, scale=3.0), randn(1, H, 6, 16, scale=3.0), randn(1, H, 6, 3),
                   scale=0.2, softcap=5.0)


def main():
    torch.set_num_threads(1)
    write(os.path.join(HERE, "ops.json"), gen_ops())
    b = Builder()
    gen_sdpa(b)
    gen_mha(b)
    gen_sdpa_softcap(b)
    write(os.path.join(HERE, "attention.json"), b.cases)


if __name__ == "__main__":
    main()
