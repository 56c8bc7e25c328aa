#!/usr/bin/env python3
"""qkv's GPT training and generation side by side with PyTorch, on this machine, in one run.

Workloads (those of ../shared/pytorch-reference/train_gpt.py and decode_gpt.py, same model code):
  train-small  nanoGPT shakespeare_char CPU recipe: 4 layers, 4 heads, 128 dims, block 64, batch 12
  train-big    6 layers, 6 heads, 384 dims, block 256, batch 16
               (forward + backward + clip_grad_norm_(1.0) + AdamW on random tokens, vocab 65)
  generate     greedy decoding, 6/6/384 model (block 512), batch 1, 500 tokens from one token,
               with a KV cache and without (recomputing the prefix every step)

qkv runs as `QKV bench gpt train|generate --json`; PyTorch as this script re-run as a worker under
each --torch-python, at its best settings here: OPENBLAS_CORETYPE=Cooperlake (on AVX-512 BF16 CPUs) OMP_WAIT_POLICY=PASSIVE
OMP_NUM_THREADS=T OPENBLAS_NUM_THREADS=T and torch.set_num_threads(T). --compile adds a
torch.compile'd PyTorch column for interpreters whose PyTorch is ≥ 2. Each measurement runs in a
fresh process, --runs times, alternating implementations; medians are reported with the ratio.

  bench/gpt_vs_pytorch.py --runs 3
  bench/gpt_vs_pytorch.py --torch-python /usr/bin/python3 --torch-python python3 --compile
  bench/gpt_vs_pytorch.py --what generate --no-naive
  bench/gpt_vs_pytorch.py --what train-big --dropout 0.2 --torch-python python3   # training with dropout
  bench/gpt_vs_pytorch.py --what train-small train-big --train-dtype f32 bf16   # + mixed precision:
      qkv --dtype bf16 against PyTorch's forward under torch.autocast("cpu", torch.bfloat16)
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import bench_progress  # noqa: E402  (a bar over the measurements, on stderr)

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "pytorch-reference"))
PRESETS = {"small": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch=12),
           "big": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=16)}


def torch_env(threads):
    env = dict(os.environ)
    # OpenBLAS (Debian's PyTorch 1.13) picks slow kernels on Zen 5 by itself; on a CPU with AVX-512
    # BF16 name its best ones. Elsewhere (Zen 3: AVX2) its own detection is right.
    with open("/proc/cpuinfo") as f:
        if "avx512_bf16" in f.read():
            env["OPENBLAS_CORETYPE"] = "Cooperlake"
    env.update(OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


# ---- the PyTorch worker -------------------------------------------------------------------------

def worker(args):
    import torch
    sys.path.insert(0, REF)
    from gpt_model import GPT, GPTConfig
    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    out = {"torch": torch.__version__, "compiled": args.compile}
    if args.worker.startswith("train-"):
        cfg = dict(PRESETS[args.worker[6:]])
        B = cfg.pop("batch")
        model = GPT(GPTConfig(vocab_size=65, dropout=args.dropout, bias=False, **cfg))
        model.train()
        opt = model.configure_optimizer(lr=1e-3)
        fwd = torch.compile(model) if args.compile else model
        T = cfg["block_size"]
        times = []
        for it in range(args.warmup + args.iters):
            x = torch.randint(0, 65, (B, T))
            y = torch.randint(0, 65, (B, T))
            t0 = time.perf_counter()
            with (torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast else contextlib.nullcontext()):
                _, loss = fwd(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if it >= args.warmup:
                times.append(time.perf_counter() - t0)
        mean = sum(times) / len(times)
        out.update(tokens_per_s=B * T / mean, mean_ms=mean * 1e3)
    else:
        model = GPT(GPTConfig(vocab_size=65, block_size=512, n_layer=6, n_head=6, n_embd=384)).eval()
        n = args.new_tokens

        @torch.no_grad()
        def naive(idx, n):
            for _ in range(n):
                logits, _ = model(idx)
                idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            return idx

        @torch.no_grad()
        def cached(idx, n):
            cache = [[] for _ in model.h]
            logits, _ = model(idx, cache=cache)
            outs = [idx]
            for step in range(n):
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                outs.append(nxt)
                if step == n - 1:
                    break
                logits, _ = model(nxt, cache=cache, pos0=idx.size(1) + step)
            return torch.cat(outs, dim=1)

        prompt = torch.zeros(1, 1, dtype=torch.long)
        for name, fn, reps in (("kv_cache", cached, args.repeats), ("naive", naive, 1)):
            if name == "naive" and args.no_naive:
                continue
            fn(prompt, 20)
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn(prompt, n)
                ts.append(time.perf_counter() - t0)
            out[name] = {"tokens_per_s": n / statistics.median(ts)}
    print(json.dumps(out), flush=True)


# ---- the driver ---------------------------------------------------------------------------------

def run_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def torch_version(py):
    r = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(HERE, "..", "build", "qkv"))
    ap.add_argument("--torch-python", action="append", help="interpreter(s) with PyTorch (default /usr/bin/python3)")
    ap.add_argument("--what", nargs="+", default=["train-small", "train-big", "generate"],
                    choices=["train-small", "train-big", "generate"])
    ap.add_argument("--compile", action="store_true", help="also torch.compile (PyTorch >= 2)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="training: the model's dropout on both sides (nanoGPT's GPU recipe: 0.2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=0, help="timed training iterations (default: 100 small, 10 big)")
    ap.add_argument("--new-tokens", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--qkv-dtype", nargs="+", default=["f32"], choices=["f32", "bf16"],
                    help="generation: qkv's decoding weights (bf16: half the memory traffic); one column each")
    ap.add_argument("--train-dtype", nargs="+", default=["f32"], choices=["f32", "bf16"],
                    help="training: f32 and/or bf16 mixed precision (qkv --dtype bf16; PyTorch under "
                         "torch.autocast(\"cpu\", torch.bfloat16)); one row each")
    ap.add_argument("--autocast", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-naive", action="store_true", help="generation: skip the no-cache runs")
    ap.add_argument("--json-out", help="write all figures here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    pys = args.torch_python or ["/usr/bin/python3"]
    peers = []
    for py in pys:
        v = torch_version(py)
        if v is None:
            print(f"skipping {py}: no PyTorch", file=sys.stderr)
            continue
        for dt in args.train_dtype:
            tag = " autocast bf16" if dt == "bf16" else ""
            peers.append((f"PyTorch {v} eager{tag}", py, False, dt == "bf16"))
            if args.compile and int(v.split(".")[0]) >= 2:
                peers.append((f"PyTorch {v} compile{tag}", py, True, dt == "bf16"))
    results = {}
    for what in args.what:
        iters = args.iters or (100 if what == "train-small" else 10)
        qkv_cmd = [args.qkv, "bench", "gpt"]
        if what.startswith("train-"):
            qkv_cmd += ["train", "--preset", what[6:], "--iters", str(iters), "--warmup", "3",
                        "--dropout", str(args.dropout)]
        else:
            qkv_cmd += ["generate", "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats)]
            if args.no_naive:
                qkv_cmd.append("--no-naive")
        qkv_cmd += ["--threads", str(args.threads), "--json"]
        qkv_runs = [(f"qkv {dt}", qkv_cmd + ["--dtype", dt]) for dt in args.train_dtype]
        run_peers = [p for p in peers if not p[3]] if not what.startswith("train-") else peers
        if not what.startswith("train-"):
            qkv_runs = [(f"qkv {dt}", qkv_cmd + ["--dtype", dt] + (["--no-naive"] if i else []))
                        for i, dt in enumerate(args.qkv_dtype)]
        figures = {name: [] for name, _ in qkv_runs}
        for name, py, comp, ac in run_peers:
            figures[name] = []
        bench_progress.start(args.runs * (len(qkv_runs) + len(run_peers)), f"gpt {what}")
        for r in range(args.runs):
            for name, cmd in qkv_runs:
                with bench_progress.measuring(name):
                    figures[name].append(run_json(cmd))
            for name, py, comp, ac in run_peers:
                cmd = [py, os.path.abspath(__file__), "--worker", what, "--threads", str(args.threads),
                       "--iters", str(iters), "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats),
                       "--dropout", str(args.dropout)]
                if comp:
                    cmd.append("--compile")
                if ac:
                    cmd.append("--autocast")
                if args.no_naive:
                    cmd.append("--no-naive")
                with bench_progress.measuring(name):
                    figures[name].append(run_json(cmd, torch_env(args.threads)))
        bench_progress.close()
        results[what] = figures
        keys = ["tokens_per_s"] if what.startswith("train-") else \
            (["kv_cache"] if args.no_naive else ["kv_cache", "naive"])
        for key in keys:
            def med(runs):
                vals = [x[key] if key == "tokens_per_s" else x[key]["tokens_per_s"] for x in runs]
                return statistics.median(vals)
            label = what if key == "tokens_per_s" else f"{what} ({key})"
            print(f"{label}, {args.threads} threads, median of {args.runs} runs (tokens/s):")
            for qname, _ in qkv_runs:
                if key == "naive" and qname != qkv_runs[0][0]:
                    continue  # the no-cache baseline once
                q = med(figures[qname])
                print(f"  {qname:28s} {q:12,.0f}")
                for name, py, comp, ac in run_peers:
                    t = med(figures[name])
                    print(f"  {name:28s} {t:12,.0f}    {qname} / this = {q / t:5.2f}x")
        sys.stdout.flush()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
