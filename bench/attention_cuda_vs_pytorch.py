#!/usr/bin/env python3
"""qkv's attention on a GPU side by side with PyTorch's F.scaled_dot_product_attention (issue 29).

Run it on a lent GPU machine (docs/CUDA.md), after `bash scripts/gpu_pack.sh` here:

    python3 bench/attention_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" [--lens 512 1024 … 16384]
        [--dims 64 128] [--dtypes bf16 [f16 f32]] [--kernels wgmma mma wmma]

For each (L, d, causal) of FlashAttention's own benchmark grid (batch·L = 16k tokens, heads·d =
2048, so B = 16384 / L and H = 2048 / d):
  * qkv:     `QKV bench attention --device cuda --json -B B --heads H -L L -d d [--causal] --dtype f32|bf16|f16`
             in a fresh process: bf16 / f16 forward and backward on the tensor cores (f32 in memory,
             rounded to the 16-bit format: the mma.sync pair by a pre-pass, the WMMA pair as its tiles
             load), each tensor-core kernel of --kernels (wgmma: Hopper's warpgroup products, the default
             forward there; wgmma-ws: its warp-specialized kernel — a TMA producer warpgroup, two
             consumers in pingpong, persistent; wgmma-backward: with the two-warpgroup wgmma backward;
             wgmma-ws-backward: the warp-specialized forward and backward (TMA producer, two consumers);
             wgmma-ws-blocks: the same, the forward a block an item (not persistent); mma-backward: with the
             mma.sync backward; wgmma-backward-rows64, wgmma-ws-backward-rows64: the wgmma backwards in
             steps of 64 query rows at head dim 64, where 128 is their default; mma: the mma.sync pair, with the
             products' accumulators in registers; wmma:
             QKV_CUDA_ATTENTION=wmma, the first), and with --dtypes f32 each f32 pair of --f32-kernels
             (simt: the CUDA cores; tf32x3: the tensor cores at f32's accuracy, three TF32 products a
             term, the default — QKV_CUDA_ATTENTION_F32);
  * PyTorch: this process, bf16 / f16 inputs, each SDPA backend PyTorch has on this GPU (flash,
             cuDNN, efficient) picked with torch.nn.attention.sdpa_kernel, and f32 through the default.
With --softcap C (Gemma 2's soft-capped scores, C·tanh(s/C) before the mask: 50 in Gemma 2) qkv runs
`bench attention --softcap C` and PyTorch, whose SDPA has no cap, its FlexAttention with the cap as
score_mod, compiled (torch.compile(flex_attention): what transformers' Gemma 2 runs as
attn_implementation="flex_attention"; its eager form materializes the scores).
Times are medians of CUDA-event-timed calls after warm-up, forward under no-grad and
forward+backward with q, k, v requiring grad. TFLOP/s counts the useful work as FlashAttention's
benchmark does: forward 4·B·H·L²·d (halved when causal), backward 2.5× that. The fraction of the
GPU's dense bf16 peak (--peak, TFLOP/s; 989 for an H100 SXM) is printed beside each figure.
"""
import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys

import cuda_events  # a call's GPU time: CUDA events, the median


def flops(B, H, L, d, causal):
    f = 4.0 * B * H * L * L * d
    return f / 2 if causal else f


def torch_rows(B, H, L, d, causal, reps, dtypes):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    torch_dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    for dtype_name in dtypes:
        dtype = torch_dtypes[dtype_name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, L, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))
        dout = torch.randn(B, H, L, d, device="cuda", dtype=dtype, generator=g)
        for name, backend in backends if dtype_name != "f32" else [("default", None)]:
            try:
                ctx = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
                with ctx:
                    with torch.no_grad():
                        fwd = cuda_events.time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps)
                    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

                    def fb():
                        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                        o.backward(dout)

                    fwdbwd = cuda_events.time_ms(fb, reps)
                rows.append((f"torch {name} {dtype_name}", fwd, fwdbwd))
            except RuntimeError as e:  # a backend this GPU or shape does not have
                rows.append((f"torch {name} {dtype_name}: {str(e).splitlines()[0][:60]}", float("nan"), float("nan")))
    return rows


def torch_flex_rows(B, H, L, d, causal, reps, dtypes, softcap):
    """PyTorch's soft-capped attention: FlexAttention, compiled, the cap as its score_mod"""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention)

    def cap(score, b, h, q_idx, kv_idx):  # C·tanh(s/C), before the mask as Gemma 2's
        return softcap * torch.tanh(score / softcap)

    block_mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, L, L) if causal else None
    torch_dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    rows = []
    for dtype_name in dtypes:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, dout = (torch.randn(B, H, L, d, device="cuda", dtype=torch_dtypes[dtype_name], generator=g)
                         for _ in range(4))
        try:
            with torch.no_grad():
                fwd = cuda_events.time_ms(lambda: flex(q, k, v, score_mod=cap, block_mask=block_mask), reps)
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

            def fb():
                flex(qg, kg, vg, score_mod=cap, block_mask=block_mask).backward(dout)

            rows.append((f"torch flex compiled {dtype_name}", fwd, cuda_events.time_ms(fb, reps)))
        except Exception as e:  # (a shape or dtype the compiled kernel does not take)
            rows.append((f"torch flex {dtype_name}: {str(e).splitlines()[0][:60]}", float("nan"), float("nan")))
    return rows


def qkv_row(qkv, B, H, L, d, causal, reps, dtype, kernel="wgmma", softcap=0.0):
    """kernel: the tensor-core pair for bf16/f16 (QKV_CUDA_ATTENTION), simt or tf32x3 for f32"""
    cmd = shlex.split(qkv) + ["bench", "attention", "--device", "cuda", "--json", "-B", str(B), "--heads", str(H),
                              "-L", str(L), "-d", str(d), "--repeats", str(reps), "--dtype", dtype]
    cmd += ["--causal"] if causal else []
    cmd += ["--softcap", str(softcap)] if softcap else []
    env = dict(os.environ)
    if kernel.endswith("-rows64"):  # the wgmma backwards in steps of 64 query rows at head dim 64 (128 the default)
        kernel = kernel[:-len("-rows64")]
        env["QKV_CUDA_ATTENTION_BACKWARD_ROWS"] = "64"
    if dtype == "f32":
        name = "qkv f32 (CUDA cores)" if kernel == "simt" else "qkv f32 (3xTF32 tensor cores)"
        if kernel in ("tf32x3-rows32", "tf32x3-rows64"):  # the backward's query rows a step (default: 64 at
            rows = kernel[-2:]                                 # head dim 64, 32 at 128)
            kernel, name = "tf32x3", name + f", {rows}-row steps"
            env["QKV_CUDA_ATTENTION_TF32_ROWS"] = rows
        env["QKV_CUDA_ATTENTION_F32"] = kernel
    elif kernel == "wgmma-backward":  # the wgmma forward and the wgmma backward (bf16)
        name = f"qkv {dtype} (wgmma tiles, wgmma backward)"
        env["QKV_CUDA_ATTENTION"] = "wgmma"
        env["QKV_CUDA_ATTENTION_BACKWARD"] = "wgmma"
    elif kernel == "wgmma-ws-backward":  # the warp-specialized forward and backward (TMA producers)
        name = f"qkv {dtype} (wgmma-ws tiles, wgmma-ws backward)"
        env["QKV_CUDA_ATTENTION"] = "wgmma-ws"
        env["QKV_CUDA_ATTENTION_BACKWARD"] = "wgmma-ws"
    elif kernel == "wgmma-ws-blocks":  # the warp-specialized forward a block an item, not persistent
        name = f"qkv {dtype} (wgmma-ws a block an item, wgmma-ws backward)"
        env["QKV_CUDA_ATTENTION"] = "wgmma-ws"
        env["QKV_CUDA_ATTENTION_BACKWARD"] = "wgmma-ws"
        env["QKV_CUDA_ATTENTION_PERSISTENT"] = "0"
    elif kernel == "mma-backward":  # the wgmma forward and the mma.sync backward (the default before 2026-12-04)
        name = f"qkv {dtype} (wgmma tiles, mma backward)"
        env["QKV_CUDA_ATTENTION"] = "wgmma"
        env["QKV_CUDA_ATTENTION_BACKWARD"] = "mma"
    else:
        name = f"qkv {dtype} ({kernel} tiles)"
        env["QKV_CUDA_ATTENTION"] = kernel
        if kernel.startswith("mma"):  # the mma.sync pair whole
            env["QKV_CUDA_ATTENTION_BACKWARD"] = "mma"
    if env.get("QKV_CUDA_ATTENTION_BACKWARD_ROWS"):
        name += ", 64-row steps"
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return (name + ": " + (out.stderr.strip().splitlines() or ["failed"])[-1][:60], float("nan"), float("nan"))
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return (name, j["forward_ms"], j["forward_backward_ms"] or float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default="build-cuda/qkv", help="how to run the qkv command")
    ap.add_argument("--lens", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--dtypes", nargs="+", default=["bf16"], choices=["bf16", "f16", "f32"])
    ap.add_argument("--kernels", nargs="+", default=["wgmma"],
                    choices=["wgmma", "wgmma64", "wgmma128", "wgmma-overlap", "wgmma-ws", "wgmma-backward", "wgmma-ws-backward",
                             "wgmma-ws-blocks", "mma-backward", "wgmma-backward-rows64", "wgmma-ws-backward-rows64", "mma",
                             "mma1", "mma2", "wmma"],
                    help="qkv's tensor-core kernels to time (wgmma: the forward on Hopper's wgmma, the default on "
                         "an H100/H200, with the backward measured fastest there (QKV_CUDA_ATTENTION_BACKWARD "
                         "unset); wgmma64, wgmma128: its one-tile-at-a-time "
                         "kernels with key tiles of 64 and 128; wgmma-overlap: its overlapped kernel; wgmma-ws: its warp-specialized kernel (TMA copies "
                         "by a producer warpgroup, two consumers in pingpong); wgmma-backward: the wgmma forward and the wgmma "
                         "backward, QKV_CUDA_ATTENTION_BACKWARD=wgmma; wgmma-ws-backward: the warp-specialized forward (persistent: a block an SM) and "
                         "backward; wgmma-ws-blocks: the same with the forward a block an item "
                         "(QKV_CUDA_ATTENTION_PERSISTENT=0); mma-backward: the wgmma forward and the mma.sync backward; "
                         "wgmma-backward-rows64, wgmma-ws-backward-rows64: those backwards in steps of 64 query rows at "
                         "head dim 64 (QKV_CUDA_ATTENTION_BACKWARD_ROWS=64; 128 the default; timed at head dim 64 "
                         "alone); mma: the mma.sync pair, the "
                         "default elsewhere; "
                         "mma1, mma2: its forward with one or two m-tiles of query rows a warp; wmma: the first "
                         "pair; QKV_CUDA_ATTENTION)")
    ap.add_argument("--f32-kernels", nargs="+", default=["simt", "tf32x3"],
                    choices=["simt", "tf32x3", "tf32x3-rows32", "tf32x3-rows64"],
                    help="qkv's f32 pairs to time with --dtypes f32 (QKV_CUDA_ATTENTION_F32; tf32x3-rows32, "
                         "tf32x3-rows64: the 3xTF32 backward in steps of 32 or 64 query rows, "
                         "QKV_CUDA_ATTENTION_TF32_ROWS, each timed where it is not the default: 32 at head dim 64, "
                         "64 at 128)")
    ap.add_argument("--softcap", type=float, default=0.0,
                    help="soft-cap the scores, C·tanh(s/C) (Gemma 2: 50); PyTorch's peer is then FlexAttention")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--peak", type=float, default=989.0, help="the GPU's dense bf16 peak, TFLOP/s")
    ap.add_argument("--json-out", help="write every row here")
    a = ap.parse_args()
    import torch
    print(f"# {torch.cuda.get_device_name()}, PyTorch {torch.__version__}", flush=True)
    results = []
    for d in a.dims:
        for causal in (False, True):
            for L in a.lens:
                B, H = max(1, 16384 // L), 2048 // d
                f = flops(B, H, L, d, causal)
                rows = [qkv_row(a.qkv, B, H, L, d, causal, a.reps, t, kernel, a.softcap)
                        for t in a.dtypes for kernel in (a.kernels if t != "f32" else a.f32_kernels)
                        if not kernel.endswith(("-rows32", "-rows64"))
                        or d == (64 if t != "f32" or kernel.endswith("-rows32") else 128)]
                # (a -rowsN kernel is the same as without elsewhere)
                rows += (torch_flex_rows(B, H, L, d, causal, a.reps, a.dtypes, a.softcap) if a.softcap
                         else torch_rows(B, H, L, d, causal, a.reps, a.dtypes))
                capped = f", softcap {a.softcap:g}" if a.softcap else ""
                print(f"\nL={L} d={d} {'causal' if causal else 'full'} (B={B}, H={H}{capped})", flush=True)
                for name, fwd, fb in rows:
                    tf = f / fwd / 1e9 if fwd == fwd else float("nan")
                    tfb = 3.5 * f / fb / 1e9 if fb == fb else float("nan")
                    print(f"  {name:34s} fwd {fwd:9.3f} ms {tf:7.1f} TFLOP/s ({100 * tf / a.peak:4.1f}%)"
                          f"   fwd+bwd {fb:9.3f} ms {tfb:7.1f} TFLOP/s ({100 * tfb / a.peak:4.1f}%)", flush=True)
                    results.append({"L": L, "d": d, "causal": causal, "softcap": a.softcap, "B": B, "H": H, "impl": name,
                                    "forward_ms": fwd, "forward_backward_ms": fb, "forward_tflops": tf,
                                    "forward_backward_tflops": tfb})
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
