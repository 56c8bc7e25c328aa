#!/usr/bin/env python3
"""qkv's ConvNet (src/nn/convnet.cpp) and conv2d side by side with PyTorch, on this machine, in one
run: the training step in images/s, and one convolution forward and forward+backward in GFLOP/s.

The twin is the model of configs/fashion-mnist*.json written as a PyTorch user writes it
(torchvision's BasicBlock): a 3×3 stem, stages of basic blocks (conv-BN-ReLU-conv-BN plus a 1×1
conv-BN shortcut where the shape changes), a non-local block (embedded Gaussian: 1×1 θ, φ, g, W,
BN, residual; softmax(θᵀφ) g as F.scaled_dot_product_attention with scale 1) after the stages the
config lists, global average pooling, dropout and a linear classifier. Same parameter count
(checked), random 28×28 images, batch 128, AdamW, label smoothing 0.1.

PyTorch runs at its best settings here (bench/gpt_vs_pytorch.py's torch_env: OMP_WAIT_POLICY=PASSIVE,
threads = T, torch.set_num_threads(T)); PyTorch's CPU convolutions are oneDNN's (mkldnn) too. Each
measurement is a fresh process, --runs times, alternating qkv and each PyTorch; medians and ratios.

  bench/convnet_vs_pytorch.py --runs 3 --torch-python /usr/bin/python3 --torch-python python3
  bench/convnet_vs_pytorch.py --config configs/fashion-mnist-nonlocal.json
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_vs_pytorch import run_json, torch_env  # noqa: E402  (PyTorch at its best settings here)
import bench_progress  # noqa: E402  (a bar over the measurements, on stderr)

CONV_SHAPES = [(32, 32, 28), (64, 64, 14), (128, 128, 7)]  # (in, out, size): the stages' 3×3 convolutions


def basic_block(torch):
    """torchvision's BasicBlock: conv-BN-ReLU-conv-BN plus a 1×1 conv-BN shortcut where the shape changes."""
    nn, F = torch.nn, torch.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
            return F.relu(y + (self.down(x) if self.down is not None else x))

    return BasicBlock


def make_model(torch, m):
    nn, F = torch.nn, torch.nn.functional
    BasicBlock = basic_block(torch)

    class NonLocal(nn.Module):
        def __init__(self, c, heads, sub):
            super().__init__()
            ci = max(1, c // 2)
            self.theta, self.phi, self.g = nn.Conv2d(c, ci, 1), nn.Conv2d(c, ci, 1), nn.Conv2d(c, ci, 1)
            self.W, self.bn = nn.Conv2d(ci, c, 1), nn.BatchNorm2d(c)
            nn.init.zeros_(self.bn.weight)
            self.heads, self.sub, self.ci = heads, sub, ci

        def forward(self, x):
            N, C, H, W = x.shape
            k, v = self.phi(x), self.g(x)
            if self.sub:
                k, v = F.max_pool2d(k, 2), F.max_pool2d(v, 2)
            d = self.ci // self.heads

            def pos(t):
                return t.reshape(N, self.heads, d, -1).transpose(2, 3)
            y = F.scaled_dot_product_attention(pos(self.theta(x)), pos(k), pos(v), scale=1.0) \
                if hasattr(F, "scaled_dot_product_attention") else \
                torch.softmax(pos(self.theta(x)) @ pos(k).transpose(2, 3), -1) @ pos(v)
            y = y.transpose(2, 3).reshape(N, self.ci, H, W)
            return self.bn(self.W(y)) + x

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            ch, bl = m["channels"], m["blocks"]
            self.stem = nn.Sequential(nn.Conv2d(1, ch[0], 3, 1, 1, bias=False), nn.BatchNorm2d(ch[0]), nn.ReLU())
            layers, cin = [], ch[0]
            for s, (c, b) in enumerate(zip(ch, bl)):
                for i in range(b):
                    layers.append(BasicBlock(cin, c, 2 if s > 0 and i == 0 else 1))
                    cin = c
                if s in m.get("non_local", []):
                    layers.append(NonLocal(c, m.get("non_local_heads", 1), m.get("non_local_sub_sample", False)))
            self.layers = nn.Sequential(*layers)
            self.drop = nn.Dropout(m.get("dropout", 0.0))
            self.fc = nn.Linear(cin, 10)

        def forward(self, x):
            x = self.layers(self.stem((x - 0.286) / 0.353))
            return self.fc(self.drop(F.adaptive_avg_pool2d(x, 1).flatten(1)))

    return ConvNet()


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    out = {"torch": torch.__version__}
    if args.what == "train":
        m = json.load(open(args.config))["model"]
        model = make_model(torch, m).train()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": other, "weight_decay": 0.0}],
                                lr=1e-3)
        lossf = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
        B = args.batch
        times = []
        for it in range(args.warmup + args.iters):
            x = torch.rand(B, 1, 28, 28)
            y = torch.randint(0, 10, (B,))
            t0 = time.perf_counter()
            loss = lossf(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if it >= args.warmup:
                times.append(time.perf_counter() - t0)
        out.update({"params": sum(p.numel() for p in model.parameters()),
                    "images_per_s": B / (sum(times) / len(times))})
    else:
        F = torch.nn.functional
        for cin, cout, size in CONV_SHAPES:
            x = torch.randn(args.batch, cin, size, size)
            w = (torch.randn(cout, cin, 3, 3) * 0.1)
            flop = 2.0 * args.batch * cout * size * size * cin * 9
            fwd, both = [], []
            for it in range(args.warmup + args.iters):
                t0 = time.perf_counter()
                with torch.no_grad():
                    F.conv2d(x, w, padding=1)
                f = time.perf_counter() - t0
                xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
                t0 = time.perf_counter()
                y = F.conv2d(xg, wg, padding=1)
                y.backward(torch.ones_like(y))
                b = time.perf_counter() - t0
                if it >= args.warmup:
                    fwd.append(f), both.append(b)
            out[f"{cin}x{size}"] = {"gflops": flop / statistics.median(fwd) * 1e-9,
                                    "gflops_backward": 3 * flop / statistics.median(both) * 1e-9}
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(HERE, "..", "build", "qkv"))
    ap.add_argument("--torch-python", action="append", help="interpreter(s) with PyTorch (default /usr/bin/python3)")
    ap.add_argument("--config", default=os.path.join(HERE, "..", "configs", "fashion-mnist.json"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--skip-conv", action="store_true", help="the training step only")
    ap.add_argument("--worker", choices=["train", "conv"], dest="what", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.what:
        return worker(args)
    pythons = args.torch_python or ["/usr/bin/python3"]
    env = torch_env(args.threads)
    T = str(args.threads)
    common = ["--threads", T, "--iters", str(args.iters), "--warmup", str(args.warmup), "--batch", str(args.batch)]
    whats = ["train"] + ([] if args.skip_conv else ["conv"])
    res = {w: {"qkv": []} for w in whats}
    info = {}
    bench_progress.start(args.runs * sum((1 if w == "train" else len(CONV_SHAPES)) + len(pythons) for w in whats),
                         "convnet")
    for _ in range(args.runs):
        for w in whats:
            if w == "train":
                with bench_progress.measuring("qkv train"):
                    j = run_json([args.qkv, "bench", "convnet", "train", "--json", "--config", args.config] + common)
                res[w]["qkv"].append(j["images_per_s"])
                info["qkv"] = j
            else:
                conv = {}
                for cin, cout, size in CONV_SHAPES:
                    with bench_progress.measuring(f"qkv conv {cin}x{size}"):
                        j = run_json([args.qkv, "bench", "conv2d", "--json", "--in", str(cin), "--out", str(cout),
                                      "--size", str(size), "--threads", T, "--iters", str(args.iters),
                                      "--batch", str(args.batch)])
                    conv[f"{cin}x{size}"] = j
                res[w]["qkv"].append(conv)
            for p in pythons:
                with bench_progress.measuring(f"torch {w} ({p})"):
                    out = run_json([p, __file__, "--worker", w, "--config", args.config] + common, env=env)
                res[w].setdefault(p, []).append(out)
                info[p] = out["torch"]
    bench_progress.close()
    q = statistics.median(res["train"]["qkv"])
    print(f"ConvNet training step ({info['qkv']['model']}; {info['qkv']['params'] / 1e6:.2f}M parameters), "
          f"batch {args.batch}, {T} threads (median of {args.runs}):")
    print(f"  qkv                   {q:8,.0f} images/s")
    for p in pythons:
        runs = res["train"][p]
        t = statistics.median(r["images_per_s"] for r in runs)
        same = "" if runs[0]["params"] == info["qkv"]["params"] else f"  (params {runs[0]['params']:,} != qkv's!)"
        print(f"  PyTorch {info[p]:13s} {t:8,.0f} images/s   qkv {q / t:.2f}x{same}")
    if "conv" in res:
        print(f"conv2d 3×3, batch {args.batch} (GFLOP/s, forward | forward+backward):")
        for cin, cout, size in CONV_SHAPES:
            k = f"{cin}x{size}"
            qf = statistics.median(r[k]["gflops"] for r in res["conv"]["qkv"])
            qb = statistics.median(r[k]["gflops_backward"] for r in res["conv"]["qkv"])
            line = f"  {cin}→{cout} {size}×{size}: qkv {qf:6.1f} | {qb:6.1f}"
            for p in pythons:
                tf = statistics.median(r[k]["gflops"] for r in res["conv"][p])
                tb = statistics.median(r[k]["gflops_backward"] for r in res["conv"][p])
                line += f"   PyTorch {info[p]}: {tf:6.1f} | {tb:6.1f} (qkv {qf / tf:.2f}x | {qb / tb:.2f}x)"
            print(line)


if __name__ == "__main__":
    main()
