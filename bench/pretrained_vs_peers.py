#!/usr/bin/env python3
"""Converted Hugging Face models (issue 46): qkv against CTranslate2 and transformers on the same
folder — generation tokens/s of a Llama-style model and translation tokens/s of a Marian-sized
translator, f32 and int8, at 1 and 2 threads, with each engine's peak RSS.

    pip install torch transformers tokenizers sentencepiece ctranslate2     # the peers (PyPI)
    python3 bench/pretrained_vs_peers.py [--threads 1 2] [--rounds 3] [--new-tokens 128]

The models are random (no hub here), built by transformers from a seed and saved with
save_pretrained into --out, once:
  llama   12 layers, d 768, 12 query / 4 key-value heads, MLP 2048, vocab 32,000 (~110 M
          parameters), with a byte-level BPE tokenizer of 32,000 tokens trained on Tatoeba
  qwen3   the same sizes as Qwen3ForCausalLM (q_norm / k_norm on every head): task generate-qwen3
  phi3    the same sizes as Phi3ForCausalLM (fused qkv_proj and gate_up_proj): task generate-phi3
  gemma3  the same sizes as Gemma3ForCausalLM (sandwich norms, GeGLU, 5 windowed layers of 512 keys to
          1 global): task generate-gemma3
  gemma2  the same sizes as Gemma2ForCausalLM (Gemma 3's layer without q/k norms, every other layer
          windowed to 512 keys, scores soft-capped at 50, logits at 30): task generate-gemma2
  neox    the same width in GPT-NeoX's form (Pythia-160M's shape: 12 layers, d 768, 12 heads, MLP 3072,
          LayerNorms, attention and MLP in parallel, a quarter of each head rotated): task generate-neox
  phi     the same in Phi-2's form (one LayerNorm before both branches, half of each head rotated, a head
          bias): task generate-phi
  stablelm the Llama's sizes in StableLM 2's form (LayerNorms, q/k/v biases, a quarter rotated): task
          generate-stablelm
  opt     OPT-125M's shape (12 layers, d 768, 12 heads, FFN 3072, ReLU, learned positions; its vocabulary
          the tokenizer's rounded up to a multiple of 8, as CTranslate2's OPT loader pads it): task generate-opt
(CTranslate2 4.8 converts neither transformers' own Phi, only its remote-code MixFormer, nor StableLM:
run generate-phi and generate-stablelm with --engines qkv-f32 qkv-int8 torch-f32.)
  marian  6 + 6 layers, d 512, 8 heads, FFN 2048, swish, SentencePiece source/target vocabularies
          trained on Tatoeba (the shape of an OPUS-MT model)
Each folder is converted by `qkv convert` and by `ct2-transformers-converter` (float32 and int8;
CTranslate2 4.8's GPT-NeoX and Phi loaders read transformers 4's configs: CT2_CONVERTER_PYTHONPATH gives
the converter a PYTHONPATH with transformers 4.57 and tokenizers 0.22, e.g. `pip install --target /tmp/tf4
--no-deps transformers==4.57.6 tokenizers==0.22.1 "huggingface_hub<1.0"`).

Workloads, each engine in a fresh process (so peak RSS is its own), rounds alternating engines,
medians reported:
  generate   a 16-token prompt, --new-tokens tokens greedily (batch 1): new tokens / s
  translate  --sentences Tatoeba lines, greedy, batches of 32: target tokens / s
Random models ramble to the length limit; every engine is held to the same number of new tokens
(the peers: min = max length; qkv: --max-length, where a random model writes no EOS), so the
tokens/s compare equal work. (Before 2026-12-05 qkv translated to |source| + 50 tokens, ~57 a
sentence against the peers' 32: longer KV caches, more work a token.)
"""
import argparse
import gzip
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QKV = os.path.join(ROOT, "build", "qkv")
DATA = os.path.join(ROOT, "..", "shared", "data", "tatoeba-en-fr", "fra.txt.gz")
PROMPT = "The cat didn't cross the street because it was too tired, and the dog"


def pairs(n=60000):
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(n), f)]


def build_llama(out, arch="llama"):
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    torch.manual_seed(0)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [x for p in pairs() for x in p]
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                                eos_token="<|endoftext|>")
    sizes = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=4, max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=0,
                 eos_token_id=0)
    if arch == "qwen3":  # the same sizes, each query and key head RMS-normalized (q_norm, k_norm)
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**sizes, head_dim=64))
    elif arch == "phi3":  # the same sizes with q/k/v and gate/up each one fused projection
        config = transformers.Phi3Config(**{**sizes, "pad_token_id": 0})
        config.architectures = ["Phi3ForCausalLM"]
        model = transformers.Phi3ForCausalLM(config)
    elif arch == "gemma3":  # the same sizes in Gemma 3's form: 5 local layers (window 512) to 1 global
        config = transformers.Gemma3TextConfig(**sizes, head_dim=64, query_pre_attn_scalar=64, sliding_window=512)
        config.architectures = ["Gemma3ForCausalLM"]
        model = transformers.Gemma3ForCausalLM(config)
    elif arch == "gemma2":  # Gemma 2's form: every other layer windowed, the scores and logits soft-capped
        config = transformers.Gemma2Config(**sizes, head_dim=64, query_pre_attn_scalar=64, sliding_window=512)
        config.architectures = ["Gemma2ForCausalLM"]
        model = transformers.Gemma2ForCausalLM(config)
    elif arch == "neox":
        config = transformers.GPTNeoXConfig(vocab_size=32000, hidden_size=768, intermediate_size=3072,
                                            num_hidden_layers=12, num_attention_heads=12, max_position_embeddings=2048,
                                            bos_token_id=0, eos_token_id=0)
        model = transformers.GPTNeoXForCausalLM(config)
    elif arch == "phi":
        config = transformers.PhiConfig(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                        num_attention_heads=12, max_position_embeddings=2048, bos_token_id=0,
                                        eos_token_id=0)
        model = transformers.PhiForCausalLM(config)
    elif arch == "stablelm":
        model = transformers.StableLmForCausalLM(transformers.StableLmConfig(**sizes, use_qkv_bias=True))
    elif arch == "opt":
        config = transformers.OPTConfig(vocab_size=-(-len(fast) // 8) * 8, hidden_size=768, ffn_dim=3072, num_hidden_layers=12,
                                        num_attention_heads=12, max_position_embeddings=2048, word_embed_proj_dim=768,
                                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
        model = transformers.OPTForCausalLM(config)
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**sizes))
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    with open(os.path.join(out, "tokenizer_config.json")) as f:  # (a class transformers 4 knows too)
        tokenizer_config = json.load(f)
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f, indent=2)
    # (CTranslate2 4.8's loaders read transformers 4's RoPE fields, which transformers 5 folds into
    # rope_parameters: written beside them, as the Hub's Pythia and Phi configs have them)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    rope = config.get("rope_parameters") or {}
    if arch == "neox":
        config.update(rotary_pct=rope.get("partial_rotary_factor", 0.25), rotary_emb_base=rope.get("rope_theta", 1e4))
    if arch in ("phi", "stablelm"):
        config.update(partial_rotary_factor=rope.get("partial_rotary_factor"), rope_theta=rope.get("rope_theta", 1e4))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def build_marian(out):
    import sentencepiece as spm
    import torch
    import transformers
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    ps = pairs()
    with tempfile.TemporaryDirectory() as tmp:
        for side, name in ((0, "source"), (1, "target")):
            path = os.path.join(tmp, name + ".txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(p[side] for p in ps) + "\n")
            spm.SentencePieceTrainer.train(input=path, model_prefix=os.path.join(tmp, name), vocab_size=8000, hard_vocab_limit=False,
                                           bos_id=-1, eos_id=0, unk_id=1, pad_id=-1, minloglevel=2)
            os.replace(os.path.join(tmp, name + ".model"), os.path.join(out, name + ".spm"))
    pieces = ["</s>", "<unk>"]
    seen = set(pieces)
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=os.path.join(out, name + ".spm"))
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if p not in seen:
                seen.add(p)
                pieces.append(p)
    pieces.append("<pad>")
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(pieces)}, f, ensure_ascii=False)
    tok = transformers.MarianTokenizer(os.path.join(out, "source.spm"), os.path.join(out, "target.spm"),
                                       os.path.join(out, "vocab.json"))
    V = len(pieces)
    config = transformers.MarianConfig(vocab_size=V, decoder_vocab_size=V, d_model=512, encoder_layers=6,
                                       decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
                                       encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512,
                                       activation_function="swish", scale_embedding=True, pad_token_id=V - 1,
                                       decoder_start_token_id=V - 1, eos_token_id=0, forced_eos_token_id=0,
                                       architectures=["MarianMTModel"])
    transformers.MarianMTModel(config).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def timed(cmd, env=None):
    """Runs cmd under /usr/bin/time (peak RSS); returns (stdout, stderr, rss MiB)."""
    with tempfile.NamedTemporaryFile(suffix=".rss", delete=False) as f:
        rss_file = f.name
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd, capture_output=True, text=True,
                       env=env or dict(os.environ), cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    with open(rss_file) as f:
        rss = int(f.read().strip().splitlines()[-1]) / 1024
    os.unlink(rss_file)
    return p.stdout, p.stderr, rss


# A peer's run in a fresh Python process: prints {"seconds", "tokens"}.
PEER = r'''
import json, sys, time
engine, folder, ct2_dir, dtype, threads, task, n, inp = sys.argv[1:9]
threads, n = int(threads), int(n)
lines = open(inp, encoding="utf-8").read().splitlines()
if engine == "ct2":
    import ctranslate2, transformers
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    if task == "generate":
        g = ctranslate2.Generator(ct2_dir, device="cpu", compute_type=dtype, intra_threads=threads)
        start = tok.convert_ids_to_tokens(tok(lines[0])["input_ids"])
        g.generate_batch([start], max_length=n, min_length=n, sampling_topk=1, include_prompt_in_result=False)
        t0 = time.perf_counter()
        r = g.generate_batch([start], max_length=n, min_length=n, sampling_topk=1, include_prompt_in_result=False)
        dt, tokens = time.perf_counter() - t0, len(r[0].sequences_ids[0])
    else:
        tr = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=dtype, intra_threads=threads)
        src = [tok.convert_ids_to_tokens(tok(l)["input_ids"]) for l in lines]
        t0 = time.perf_counter()
        r = tr.translate_batch(src, max_batch_size=32, beam_size=1, max_decoding_length=n, min_decoding_length=n)
        dt, tokens = time.perf_counter() - t0, sum(len(x.hypotheses[0]) for x in r)
else:
    import torch, transformers
    torch.set_num_threads(threads)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        if task == "generate":
            m = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
            ids = tok(lines[0], return_tensors="pt")
            m.generate(**ids, max_new_tokens=4, do_sample=False)
            t0 = time.perf_counter()
            out = m.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
            dt, tokens = time.perf_counter() - t0, out.shape[1] - ids["input_ids"].shape[1]
        else:
            m = transformers.MarianMTModel.from_pretrained(folder).eval()
            t0, tokens = time.perf_counter(), 0
            for i in range(0, len(lines), 32):
                b = tok(lines[i:i + 32], return_tensors="pt", padding=True)
                out = m.generate(**b, num_beams=1, do_sample=False, max_new_tokens=n, min_new_tokens=n)
                tokens += (out[:, 1:] != m.config.pad_token_id).sum().item()
            dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "tokens": tokens}))
'''


def qkv_run(model, dtype, threads, task, n, inp, activation_bits=None):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if activation_bits:  # int8 products with 7-bit activations: what a CPU without VNNI runs
        env["QKV_INT8_ACTIVATION_BITS"] = activation_bits
    if task == "generate":
        prompt = open(inp, encoding="utf-8").read().splitlines()[0]
        _, err, rss = timed([QKV, "generate", "-m", model, "-p", prompt, "-n", str(n), "-t", "0", "--dtype", dtype,
                             "--threads", str(threads), "--stats"], env)
        m = re.search(r"generated (\d+) tokens in ([\d.]+) s", err)
        return float(m.group(2)), int(m.group(1)), rss
    outp = inp + ".qkv.out"
    _, err, rss = timed([QKV, "translate", "-m", model, "-i", inp, "-o", outp, "--beam", "1", "--batch-size", "32",
                         "--max-length", str(n), "--dtype", dtype, "--threads", str(threads), "--stats"], env)
    seconds = float(re.search(r"in ([\d.]+) s:", err).group(1))
    tokens = int(re.search(r"([\d,]+) target tokens", err).group(1).replace(",", "")) if "target tokens" in err else 0
    return seconds, tokens, rss


def peer_run(engine, folder, ct2_dir, dtype, threads, task, n, inp):
    env = dict(os.environ)
    if engine == "torch":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    out, _, rss = timed([sys.executable, "-c", PEER, engine, folder, ct2_dir, dtype, str(threads), task, str(n), inp],
                        env)
    r = json.loads(out.strip().splitlines()[-1])
    return r["seconds"], r["tokens"], rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--tasks", nargs="+", default=["generate", "translate"], help="generate, generate-qwen3, generate-phi3, generate-gemma3, generate-gemma2, generate-neox, "
                         "generate-phi, generate-stablelm, generate-opt, translate")
    ap.add_argument("--engines", nargs="+", default=["qkv-f32", "qkv-int8", "ct2-float32", "ct2-int8", "torch-f32"],
                    help="qkv-f32, qkv-int8 (the converted f32 file with --dtype int8), qkv-int8file (the file "
                         "`qkv quantize` writes from it), qkv-int8-a7 (int8 with 7-bit activations, as on a CPU "
                         "without VNNI), ct2-float32, ct2-int8, torch-f32")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "pretrained-bench"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    folders = {"generate": os.path.join(a.out, "llama"), "generate-qwen3": os.path.join(a.out, "qwen3"),
               "generate-phi3": os.path.join(a.out, "phi3"), "generate-gemma3": os.path.join(a.out, "gemma3"),
               "generate-gemma2": os.path.join(a.out, "gemma2"), "generate-neox": os.path.join(a.out, "neox"),
               "generate-phi": os.path.join(a.out, "phi"), "generate-stablelm": os.path.join(a.out, "stablelm"),
               "generate-opt": os.path.join(a.out, "opt"),
               "translate": os.path.join(a.out, "marian")}
    for task in a.tasks:
        folder = folders[task]
        if not os.path.exists(os.path.join(folder, "config.json")):
            if task == "translate":
                build_marian(folder)
            else:
                build_llama(folder, task.split("-")[1] if "-" in task else "llama")
        if not os.path.exists(folder + ".safetensors"):
            subprocess.run([QKV, "convert", "--from", "hf", folder, "-o", folder + ".safetensors"], check=True)
        if task == "translate" and "qkv-int8file" in a.engines:  # (written again: it follows qkv's quantizer)
            subprocess.run([QKV, "quantize", folder + ".safetensors", "-o", folder + ".int8.safetensors"], check=True,
                           capture_output=True)
        for q in ("float32", "int8"):
            if f"ct2-{q}" not in a.engines:
                continue
            d = f"{folder}-ct2-{q}"
            if not os.path.exists(os.path.join(d, "model.bin")):
                env = dict(os.environ)  # (CTranslate2 4.8 converts GPT-NeoX and Phi with transformers 4 only)
                if os.environ.get("CT2_CONVERTER_PYTHONPATH"):
                    env["PYTHONPATH"] = os.environ["CT2_CONVERTER_PYTHONPATH"]
                subprocess.run(["ct2-transformers-converter", "--model", folder, "--output_dir", d, "--quantization", q,
                                "--force"], check=True, capture_output=True, env=env)
                # (CT2 4.8's Gemma 3 loader writes "unk_token": null for a tokenizer without one, which its
                # runtime cannot read: "" as its Llama loader writes)
                with open(os.path.join(d, "config.json")) as f:
                    ct2_config = json.load(f)
                if ct2_config.get("unk_token", "") is None:
                    ct2_config["unk_token"] = ""
                    with open(os.path.join(d, "config.json"), "w") as f:
                        json.dump(ct2_config, f, indent=2)
    rng = random.Random(2027)
    english = sorted({p[0] for p in pairs()})
    inputs = {"generate": os.path.join(a.out, "prompt.txt"), "translate": os.path.join(a.out, "src.en")}
    with open(inputs["generate"], "w", encoding="utf-8") as f:
        f.write(PROMPT + "\n")
    with open(inputs["translate"], "w", encoding="utf-8") as f:
        f.write("\n".join(rng.sample(english, a.sentences)) + "\n")
    lengths = {"generate": a.new_tokens, "translate": 32}
    results = {}
    for task in a.tasks:
        for threads in a.threads:
            for r in range(a.rounds):
                for engine in a.engines:
                    kind, dtype = engine.split("-", 1)
                    if dtype == "int8file" and task != "translate":
                        continue  # qkv quantize writes translation models only
                    work = "translate" if task == "translate" else "generate"  # (generate-qwen3 …: generate)
                    folder, n = folders[task], lengths[work]
                    if kind == "qkv":
                        model = folder + (".int8.safetensors" if dtype == "int8file" else ".safetensors")
                        sec, tok, rss = qkv_run(model, "int8" if dtype.startswith("int8") else dtype, threads, work, n,
                                                inputs[work], "7" if dtype == "int8-a7" else None)
                    else:
                        ct2_dir = f"{folder}-ct2-{dtype}" if kind == "ct2" else ""
                        sec, tok, rss = peer_run(kind, folder, ct2_dir, dtype, threads, work, n, inputs[work])
                    results.setdefault((task, threads, engine), []).append((tok / sec if sec else 0, rss))
                    print(f"{task} t{threads} round {r} {engine}: {tok / sec:.1f} tokens/s, {rss:.0f} MiB",
                          file=sys.stderr)
    print("| task | threads | engine | tokens/s (median) | peak RSS MiB | vs ct2 same dtype | vs transformers |")
    print("|---|---|---|---|---|---|---|")
    for (task, threads, engine), vals in sorted(results.items()):
        med = statistics.median(v[0] for v in vals)
        rss = max(v[1] for v in vals)
        peer = "ct2-int8" if engine.startswith("qkv-int8") else {"qkv-f32": "ct2-float32"}.get(engine)
        vs_ct2 = vs_torch = ""
        if peer and (task, threads, peer) in results:
            vs_ct2 = f"{med / statistics.median(v[0] for v in results[(task, threads, peer)]):.2f}x"
        if engine.startswith("qkv") and (task, threads, "torch-f32") in results:
            vs_torch = f"{med / statistics.median(v[0] for v in results[(task, threads, 'torch-f32')]):.2f}x"
        print(f"| {task} | {threads} | {engine} | {med:.1f} | {rss:.0f} | {vs_ct2} | {vs_torch} |")


if __name__ == "__main__":
    main()
