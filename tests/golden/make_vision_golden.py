#!/usr/bin/python3
"""Golden file for qkv's image ops — conv2d, max/avg/adaptive-avg pooling, batch_norm and
group_norm — computed with PyTorch's torch.nn.functional over a grid of shapes (odd sizes, strides,
padding, dilation, groups, ceil_mode, count_include_pad, training and evaluation).

Run with Debian's interpreter, which has PyTorch 1.13 (CPU):

    /usr/bin/python3 tests/golden/make_vision_golden.py

It writes tests/golden/vision.json, with make_golden.py's case format and method (float32 inputs,
float64 reference computation, results rounded to float32; each case seeds torch.manual_seed(1000 +
its index)). batch_norm cases also output the running statistics after the call.
"""

import os

import torch
import torch.nn.functional as F

from make_golden import HERE, Builder, randn, rand_pos, write


def gen_vision():
    b = Builder()

    # -- conv2d: name, x shape, w shape, bias, stride, padding, dilation, groups
    convs = [
        ("conv_3x3_pad1", (2, 3, 7, 6), (4, 3, 3, 3), True, 1, 1, 1, 1),
        ("conv_stride2_odd", (2, 3, 9, 7), (5, 3, 3, 3), True, 2, 1, 1, 1),
        ("conv_1x1_nobias", (1, 8, 5, 5), (6, 8, 1, 1), False, 1, 0, 1, 1),
        ("conv_groups2_rectpad", (2, 4, 6, 6), (6, 2, 3, 3), True, 1, (1, 2), 1, 2),
        ("conv_dilation2", (1, 3, 9, 9), (2, 3, 3, 3), True, 1, 2, 2, 1),
        ("conv_depthwise", (2, 4, 5, 5), (4, 1, 3, 3), True, 1, 1, 1, 4),
        ("conv_rect_kernel_stride", (2, 2, 7, 8), (3, 2, 2, 3), True, (2, 1), (0, 1), 1, 1),
        ("conv_5x5_stride3_dil", (1, 2, 13, 11), (3, 2, 5, 5), False, 3, 2, (1, 2), 1),
        ("conv_unbatched", (3, 5, 5), (2, 3, 3, 3), True, 1, 1, 1, 1),
        ("conv_wide", (2, 16, 8, 8), (24, 16, 3, 3), True, 1, 1, 1, 1),
    ]
    for name, xs, ws, bias, s, p, d, g in convs:
        b.seed()
        inputs = {"x": randn(*xs), "weight": randn(*ws, scale=0.3)}
        if bias:
            inputs["bias"] = randn(ws[0])
        params = {"stride": list(s) if isinstance(s, tuple) else [s, s],
                  "padding": list(p) if isinstance(p, tuple) else [p, p],
                  "dilation": list(d) if isinstance(d, tuple) else [d, d], "groups": g}
        b.add(name, "conv2d", params, inputs,
              lambda x, weight, bias=None, s=s, p=p, d=d, g=g: F.conv2d(x, weight, bias, s, p, d, g))

    # -- max_pool2d: name, x shape, kernel, stride, padding, dilation, ceil_mode
    pools = [
        ("max_2x2", (2, 3, 6, 8), 2, None, 0, 1, False),
        ("max_3s2p1_odd", (2, 2, 7, 9), 3, 2, 1, 1, False),
        ("max_ceil_mode", (1, 2, 7, 7), 2, 2, 0, 1, True),
        ("max_ceil_pad", (1, 2, 8, 6), 3, 2, 1, 1, True),
        ("max_dilation2", (1, 2, 9, 9), 3, 1, 1, 2, False),
        ("max_rect", (2, 2, 6, 9), (2, 3), (1, 2), (1, 0), 1, False),
        ("max_unbatched", (3, 5, 5), 2, 1, 0, 1, False),
    ]
    for name, xs, k, s, p, d, cm in pools:
        b.seed()
        params = {"kernel_size": list(k) if isinstance(k, tuple) else [k, k],
                  "stride": None if s is None else (list(s) if isinstance(s, tuple) else [s, s]),
                  "padding": list(p) if isinstance(p, tuple) else [p, p],
                  "dilation": [d, d], "ceil_mode": cm}
        b.add(name, "max_pool2d", params, {"x": randn(*xs)},
              lambda x, k=k, s=s, p=p, d=d, cm=cm: F.max_pool2d(x, k, s, p, d, cm))

    # -- avg_pool2d: name, x shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    avgs = [
        ("avg_2x2", (2, 3, 6, 8), 2, None, 0, False, True, None),
        ("avg_3s2p1_include_pad", (2, 2, 7, 9), 3, 2, 1, False, True, None),
        ("avg_3s2p1_exclude_pad", (2, 2, 7, 9), 3, 2, 1, False, False, None),
        ("avg_ceil_mode", (1, 2, 8, 7), 3, 2, 1, True, True, None),
        ("avg_ceil_exclude", (1, 2, 8, 7), 3, 2, 1, True, False, None),
        ("avg_divisor", (1, 3, 6, 6), 2, 2, 0, False, True, 3),
        ("avg_rect", (2, 2, 7, 6), (3, 2), (2, 1), (1, 1), False, True, None),
    ]
    for name, xs, k, s, p, cm, cip, div in avgs:
        b.seed()
        params = {"kernel_size": list(k) if isinstance(k, tuple) else [k, k],
                  "stride": None if s is None else (list(s) if isinstance(s, tuple) else [s, s]),
                  "padding": list(p) if isinstance(p, tuple) else [p, p],
                  "ceil_mode": cm, "count_include_pad": cip, "divisor_override": div}
        b.add(name, "avg_pool2d", params, {"x": randn(*xs)},
              lambda x, k=k, s=s, p=p, cm=cm, cip=cip, div=div: F.avg_pool2d(x, k, s, p, cm, cip, div))

    # -- adaptive_avg_pool2d
    for name, xs, out in [("adaptive_7x5_to_3x2", (2, 3, 7, 5), (3, 2)), ("adaptive_global", (2, 4, 6, 6), (1, 1)),
                          ("adaptive_upsample_overlap", (1, 2, 5, 7), (4, 4)), ("adaptive_unbatched", (3, 9, 9), (2, 3))]:
        b.seed()
        b.add(name, "adaptive_avg_pool2d", {"output_size": list(out)}, {"x": randn(*xs)},
              lambda x, out=out: F.adaptive_avg_pool2d(x, out))

    # -- batch_norm: name, x shape, affine, training, momentum, eps
    bns = [
        ("bn_train_2d", (4, 3, 5, 6), True, True, 0.1, 1e-5),
        ("bn_train_noaffine", (3, 4, 3, 3), False, True, 0.3, 1e-3),
        ("bn_eval_2d", (2, 3, 4, 5), True, False, 0.1, 1e-5),
        ("bn_train_1d", (8, 5), True, True, 0.1, 1e-5),
        ("bn_train_seq", (3, 4, 7), True, True, 0.1, 1e-5),
    ]
    for name, xs, affine, training, m, eps in bns:
        b.seed()
        C = xs[1]
        inputs = {"x": randn(*xs, scale=2.0) + 0.5, "running_mean": randn(C, scale=0.5),
                  "running_var": rand_pos(C, low=0.5, high=2.0)}
        if affine:
            inputs["weight"] = rand_pos(C, low=0.5, high=1.5)
            inputs["bias"] = randn(C)

        def fn(x, running_mean, running_var, weight=None, bias=None, training=training, m=m, eps=eps):
            rm, rv = running_mean.detach().clone(), running_var.detach().clone()
            out = F.batch_norm(x, rm, rv, weight, bias, training, m, eps)
            return {"out": out, "running_mean": rm, "running_var": rv}
        grads = ["x"] + (["weight", "bias"] if affine else [])
        b.add(name, "batch_norm", {"training": training, "momentum": m, "eps": eps}, inputs, fn, grad_inputs=grads)

    # -- group_norm: name, x shape, groups, affine
    for name, xs, g, affine in [("gn_2groups", (2, 6, 4, 5), 2, True), ("gn_1group_noaffine", (3, 4, 3, 3), 1, False),
                                ("gn_instance", (2, 4, 5, 5), 4, True), ("gn_seq", (2, 6, 7), 3, True)]:
        b.seed()
        C = xs[1]
        inputs = {"x": randn(*xs, scale=2.0) - 0.3}
        if affine:
            inputs["weight"] = rand_pos(C, low=0.5, high=1.5)
            inputs["bias"] = randn(C)
        b.add(name, "group_norm", {"num_groups": g, "eps": 1e-5}, inputs,
              lambda x, weight=None, bias=None, g=g: F.group_norm(x, g, weight, bias, 1e-5))
    # -- the non-local block (embedded Gaussian), its formula written out: 1×1 convolutions, softmax
    # attention over the positions (unscaled θᵀφ), W_z, batch norm in training mode, the residual
    for name, xs, ci, heads, sub in [("nonlocal_1head", (2, 6, 5, 4), 3, 1, False),
                                     ("nonlocal_2heads_subsample", (2, 4, 6, 6), 4, 2, True)]:
        b.seed()
        N, C, H, W = xs
        inputs = {"x": randn(*xs)}
        for conv, (o, i) in {"theta": (ci, C), "phi": (ci, C), "g": (ci, C), "W": (C, ci)}.items():
            inputs[conv + ".weight"] = randn(o, i, 1, 1, scale=0.5)
            inputs[conv + ".bias"] = randn(o, scale=0.3)
        inputs["bn.weight"] = rand_pos(C, low=0.5, high=1.5)
        inputs["bn.bias"] = randn(C)

        def nonlocal_fn(heads=heads, sub=sub, ci=ci, **t):
            x = t["x"]
            N, C, H, W = x.shape
            th = F.conv2d(x, t["theta.weight"], t["theta.bias"])
            ph = F.conv2d(x, t["phi.weight"], t["phi.bias"])
            g = F.conv2d(x, t["g.weight"], t["g.bias"])
            if sub:
                ph, g = F.max_pool2d(ph, 2), F.max_pool2d(g, 2)
            d = ci // heads

            def pos(u):
                return u.reshape(N, heads, d, u.shape[2] * u.shape[3]).transpose(2, 3)
            w = torch.softmax(pos(th) @ pos(ph).transpose(2, 3), -1)
            y = (w @ pos(g)).transpose(2, 3).reshape(N, ci, H, W)
            z = F.conv2d(y, t["W.weight"], t["W.bias"])
            z = F.batch_norm(z, None, None, t["bn.weight"], t["bn.bias"], True)
            return {"out": z + x, "weights": w}
        # φ's bias shifts each row of θᵀφ by a constant (softmax ignores it); g's and W_z's biases
        # move every z by the same vector (batch norm in training mode removes it): their gradients
        # are exactly zero, float32 rounding all that remains, so they are left out of the comparison.
        b.add(name, "non_local", {"inter_channels": ci, "heads": heads, "sub_sample": sub}, inputs, nonlocal_fn,
              grad_inputs=[k for k in inputs if k not in ("phi.bias", "g.bias", "W.bias")])
    return b.cases


def main():
    torch.set_num_threads(1)
    write(os.path.join(HERE, "vision.json"), gen_vision(), generator="tests/golden/make_vision_golden.py")


if __name__ == "__main__":
    main()
