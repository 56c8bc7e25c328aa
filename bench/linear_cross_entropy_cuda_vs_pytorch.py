#!/usr/bin/env python3
"""A language model's output layer and its loss on a GPU, forward and backward, in qkv and in PyTorch
side by side (issue 51, "fused cross-entropy"): time and memory.

Run it on a lent GPU machine (docs/CUDA.md), after `bash scripts/gpu_pack.sh` here:

    python3 bench/linear_cross_entropy_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" [--dtypes bf16 f32]
        [--chunk-rows 0 2048 8192] [--no-compile]

  * qkv:     `QKV bench linear-cross-entropy --device cuda --json -N N -d d -V V --dtype DT --chunk-rows R…`
             in a fresh process: cross_entropy(linear(x, W), y) — the [N, V] logits written whole, then
             their gradient — and linear_cross_entropy(x, W, y) (ops/loss.h: a chunk of rows at a time,
             never the logits whole) for each chunk size (0: the op's own choice);
  * PyTorch: this process, F.cross_entropy(F.linear(x, W), y) eager and under torch.compile (Inductor
             fuses the loss's element-wise work but keeps the logits), bf16 through torch.autocast.
x and W f32 requiring grad (a training step's parameters and activations), mean over the targets.
Shapes (N tokens, d, V): GPT-2 small's head on 8,192 tokens, Llama 3 8B's on 4,096 (V = 128,256), the
character GPT's (V = 65, where the logits are small and chunks have nothing to save).
Times: medians after warm-up (PyTorch: CUDA events; qkv: its own medians, each run waited for).
Memory: the most bytes allocated at once during a step past the inputs (qkv: its tensors';
PyTorch: torch.cuda.max_memory_allocated), the inputs' gradients included.
"""
import argparse
import json
import shlex
import subprocess
import sys

import cuda_events  # a call's GPU time: CUDA events, the median

SHAPES = [(8192, 768, 50257), (4096, 4096, 128256), (16384, 384, 65)]


def torch_rows(N, d, V, dtype, reps, compile_too):
    import torch
    import torch.nn.functional as F

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, d, device="cuda", generator=g).requires_grad_()
    w = (torch.randn(V, d, device="cuda", generator=g) * 0.02).requires_grad_()
    y = (torch.arange(N, device="cuda") * 7919) % V

    def loss_of(x, w, y):
        return F.cross_entropy(F.linear(x, w), y)

    forms = [("torch eager", loss_of)]
    if compile_too:
        forms.append(("torch.compile", torch.compile(loss_of)))
    rows = []
    for name, f in forms:
        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                loss = f(x, w, y)
            loss.backward()
            x.grad = w.grad = None
        try:
            ms = cuda_events.time_ms(step, reps)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            rows.append((f"{name} {dtype}", ms, peak))
        except Exception as e:  # noqa: BLE001 — a form this GPU or PyTorch cannot run: said in its row
            rows.append((f"{name} {dtype}: {str(e).splitlines()[0][:60]}", float("nan"), float("nan")))
    del x, w, y
    torch.cuda.empty_cache()
    return rows


def qkv_rows(qkv, N, d, V, dtype, reps, chunk_rows):
    cmd = shlex.split(qkv) + ["bench", "linear-cross-entropy", "--device", "cuda", "--json", "-N", str(N), "-d", str(d),
                              "-V", str(V), "--dtype", dtype, "--repeats", str(reps), "--chunk-rows"]
    cmd += [str(r) for r in chunk_rows]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return [(f"qkv {dtype}: " + (out.stderr.strip().splitlines() or ["failed"])[-1][:70], float("nan"), float("nan"))]
    j = json.loads(out.stdout.strip().splitlines()[-1])
    rows = []
    for f in j["forms"]:
        name = "qkv unfused" if f["form"] == "unfused" else (
            "qkv fused" + (f" ({f['chunk_rows']} rows)" if f["chunk_rows"] else " (chosen chunks)"))
        rows.append((f"{name} {dtype}", f["ms"], f["peak_mb"]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default="build/qkv", help="how to run the qkv command")
    ap.add_argument("--dtypes", nargs="+", default=["bf16"], choices=["bf16", "f32"])
    ap.add_argument("--chunk-rows", type=int, nargs="+", default=[0, 2048, 8192],
                    help="the fused form's rows a chunk, a run each (0: the op's choice)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out (its compile takes a while)")
    ap.add_argument("--json-out", help="write every row here as JSON")
    args = ap.parse_args()

    try:
        import torch
    except ImportError:
        sys.exit("linear_cross_entropy_cuda_vs_pytorch: no PyTorch in this Python (" + sys.executable + ")")
    if not torch.cuda.is_available():
        sys.exit("linear_cross_entropy_cuda_vs_pytorch: PyTorch sees no GPU here (run it on a lent GPU machine)")
    print(f"GPU: {torch.cuda.get_device_name()}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}")
    results = []
    for N, d, V in SHAPES:
        for dtype in args.dtypes:
            print(f"\nN = {N} tokens, d = {d}, V = {V}, {dtype}: forward + backward (x, W)", flush=True)
            rows = qkv_rows(args.qkv, N, d, V, dtype, args.reps, args.chunk_rows)
            rows += torch_rows(N, d, V, dtype, args.reps, not args.no_compile)
            eager = next((ms for name, ms, _ in rows if name.startswith("torch eager")), float("nan"))
            for name, ms, peak in rows:
                ratio = eager / ms if ms == ms and ms > 0 else float("nan")
                print(f"  {name:38s} {ms:9.3f} ms  {peak:9.1f} MB peak  {ratio:5.2f}× torch eager", flush=True)
                results.append({"tokens": N, "dim": d, "vocab": V, "dtype": dtype, "form": name, "ms": ms,
                                "peak_mb": peak})
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
