"""Golden files for the Hugging Face importers (tests/models/hf_convert_test.cpp): tiny random models
built by `transformers`, saved with save_pretrained as a user's downloaded folder would be, and what
`transformers` computes with them.

    python3 tests/golden/make_hf_golden.py [gpt2|opt|gpt-neox|stablelm|phi|llama|qwen3|phi3|phi3-longrope|gemma3|gemma2|gemma3-multimodal|marian|bert|encoders …]   # pyenv python3: pip install torch transformers tokenizers (encoders: sentence-transformers)
    QKV_QA_PYTHON=/tmp/tf4venv/bin/python python3 tests/golden/make_hf_golden.py qa   # two interpreters

(qa: transformers 5 removed the question-answering pipeline, so its reference comes from transformers 4.57 in a
second interpreter, a venv over this one: `python3 -m venv --system-site-packages /tmp/tf4venv &&
/tmp/tf4venv/bin/python -m pip install transformers==4.57.6`; see qa_cases. Without QKV_QA_PYTHON, a run that
includes qa refuses before writing anything.)

Writes tests/golden/hf/<case>/ — config.json, model.safetensors (or shards and their index), and
reference.json: the input ids, the f32 logits of every position, and 64 greedily generated tokens —
each case under ~1 MB. Seeded: reruns give the same files on the same versions.
"""
import json
import os
import shutil
import sys

import torch
import transformers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf")
SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data")
torch.manual_seed(0)
PROMPT = "The cat didn't cross the street because it was"

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_tokenizer(style, vocab):
    """A byte-level BPE of at most `vocab` tokens trained on Shakespeare: GPT-2's form (its regex,
    <|endoftext|>) or Llama 3's (its split regex, <|begin_of_text|> prepended by the post-processor)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    with open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()[:20000]
    tok = Tokenizer(models.BPE())
    if style in ("gpt2", "opt"):
        special = ["<|endoftext|>"] if style == "gpt2" else ["<s>", "<pad>", "</s>", "<unk>"]
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        special = ["<|begin_of_text|>", "<|end_of_text|>"]
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    if style == "opt":  # (OPT's tokenizer starts every text with </s>)
        tok.post_processor = processors.TemplateProcessing(
            single="</s> $A", pair="</s> $A </s> $B", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    elif style != "gpt2":
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    if style == "gpt2":
        fast.bos_token = fast.eos_token = "<|endoftext|>"
    elif style == "opt":
        fast.bos_token = fast.eos_token = "</s>"
        fast.pad_token, fast.unk_token = "<pad>", "<unk>"
    else:
        fast.bos_token, fast.eos_token = "<|begin_of_text|>", "<|end_of_text|>"
    return fast


def randomize(model, std):
    """transformers' init leaves biases and LayerNorms at 0/1; random values exercise every mapping."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:  # Marian's sinusoids: a frozen parameter, computed, never saved
                continue
            is_norm = p.dim() == 1 and ("ln_" in name or "norm" in name) and name.endswith("weight")
            p.copy_(torch.randn_like(p) * (std if p.dim() >= 2 else 0.1) + (1.0 if is_norm else 0.0))


def randomize_encoder(model):
    """randomize(model, 0.5) for an encoder: randomize() knows "norm", not BERT's "LayerNorm" (nor
    RoBERTa's "layer_norm"), whose weights go about 1 too."""
    randomize(model, 0.5)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("LayerNorm.weight") or pname.endswith("layer_norm.weight"):
                p.add_(1.0)


def save_case(name, model, vocab, max_shard_size=None, dtype=None, tokenizer=None):
    out = os.path.join(HERE, name)
    shutil.rmtree(out, ignore_errors=True)
    model.eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (2, 12), generator=g)
    with torch.no_grad():
        logits = model(ids).logits.float()
        gen = model.generate(ids[:1, :5], max_new_tokens=64, do_sample=False, pad_token_id=0,
                             eos_token_id=None)
    kwargs = {"safe_serialization": True}
    if max_shard_size:
        kwargs["max_shard_size"] = max_shard_size
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(out, **kwargs)
    text = {}
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
        prompt_ids = tokenizer(PROMPT)["input_ids"]
        with torch.no_grad():
            # the model's own end of text (generation_config's eos_token_id), as a user's generate() stops
            # (an explicit attention mask: with pad_token_id 0, generate() would mask Llama 3's BOS, id 0)
            gen_ids = model.float().generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids),
                                             dtype=torch.long), max_new_tokens=20, do_sample=False,
                                             pad_token_id=vocab - 1)[0, len(prompt_ids):].tolist()
            eos = model.generation_config.eos_token_id
            if gen_ids and gen_ids[-1] in (eos if isinstance(eos, list) else [eos]):
                gen_ids = gen_ids[:-1]  # qkv returns the text without its end token
        text = {"text_prompt": PROMPT, "text_prompt_ids": prompt_ids, "text_greedy_ids": gen_ids,
                "text_greedy": tokenizer.decode(gen_ids)}
    ref = {**text, "transformers": transformers.__version__, "torch": torch.__version__,
           "input_ids": ids.tolist(), "logits_shape": list(logits.shape),
           "logits": [round(v, 7) for v in logits.flatten().tolist()],
           "prompt": ids[0, :5].tolist(), "greedy": gen[0, 5:].tolist(),
           "stored_dtype": str(dtype or torch.float32)}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"{name}: {size / 1024:.0f} KiB", file=sys.stderr)


def gpt2_cases():
    base = dict(vocab_size=512, n_positions=96, n_embd=48, n_layer=2, n_head=4)
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(**base))
    randomize(m, 0.5)
    save_case("gpt2", m, 512, tokenizer=train_tokenizer("gpt2", 512))
    # another activation, an explicit MLP width, a different epsilon; sharded and stored in f16
    c = transformers.GPT2Config(**base, activation_function="gelu", n_inner=80, layer_norm_epsilon=1e-6)
    m = transformers.GPT2LMHeadModel(c)
    randomize(m, 0.5)
    m = m.half().float()  # the reference computes with the f16-rounded weights the folder holds
    save_case("gpt2-sharded-f16", m, 512, max_shard_size="100KB", dtype=torch.float16)


def opt_cases():
    # OPT (opt-125m's form, smaller): separate q/k/v, ReLU, positions read two rows on
    c = transformers.OPTConfig(vocab_size=512, hidden_size=48, num_hidden_layers=2, ffn_dim=80, num_attention_heads=4,
                               max_position_embeddings=96, word_embed_proj_dim=48)
    m = transformers.OPTForCausalLM(c)
    randomize(m, 0.5)
    with torch.no_grad():  # (randomize leaves positions named embed_positions: Marian's sinusoids)
        m.model.decoder.embed_positions.weight.normal_(0, 0.5)
    save_case("opt", m, 512, tokenizer=train_tokenizer("opt", 512))


def gpt_neox_cases():
    # GPT-NeoX (Pythia's form, smaller): LayerNorms, parallel attention and MLP, RoPE on a quarter of each
    # head, query_key_value head by head, an untied head; and the sequential form with tanh GELU
    base = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                max_position_embeddings=96)
    m = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**base))
    randomize(m, 0.5)
    save_case("gpt-neox", m, 512, tokenizer=train_tokenizer("gpt2", 512))
    c = transformers.GPTNeoXConfig(**base, use_parallel_residual=False, hidden_act="gelu_new", rotary_pct=0.5,
                                   rotary_emb_base=500, layer_norm_eps=1e-6)
    m = transformers.GPTNeoXForCausalLM(c)
    randomize(m, 0.5)
    save_case("gpt-neox-sequential", m, 512)


def stablelm_cases():
    # StableLM 2's form, smaller: LayerNorms, q/k/v biases, grouped-query attention, a quarter of each head rotated
    c = transformers.StableLmConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=96, max_position_embeddings=96,
                                    use_qkv_bias=True)
    m = transformers.StableLmForCausalLM(c)
    randomize(m, 0.5)
    save_case("stablelm", m, 512, tokenizer=train_tokenizer("gpt2", 512))


def phi_cases():
    # Phi-2's form, smaller: one LayerNorm before the attention and the MLP side by side, half of each head
    # rotated, tanh GELU, an output head with a bias
    c = transformers.PhiConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=96, max_position_embeddings=96)
    m = transformers.PhiForCausalLM(c)
    randomize(m, 0.5)
    save_case("phi", m, 512, tokenizer=train_tokenizer("gpt2", 512))


def llama_cases():
    T = transformers
    small = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, max_position_embeddings=128)
    cases = [
        # grouped-query attention 4/2, untied head
        ("llama-gqa", T.LlamaForCausalLM, T.LlamaConfig(**small, num_key_value_heads=2)),
        # multi-query, tied head, every bias, llama3 rope scaling that bites within 76 positions
        ("llama3-mqa-tied-bias", T.LlamaForCausalLM,
         T.LlamaConfig(**small, num_key_value_heads=1, tie_word_embeddings=True, attention_bias=True,
                       mlp_bias=True, rope_theta=500000.0,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
        # linear rope scaling, a head_dim other than hidden/heads
        ("llama-linear-headdim", T.LlamaForCausalLM,
         T.LlamaConfig(**small, num_key_value_heads=4, head_dim=24, rope_scaling={"rope_type": "linear", "factor": 2.0})),
        # Qwen2: q/k/v biases, tied head
        ("qwen2", T.Qwen2ForCausalLM, T.Qwen2Config(**small, num_key_value_heads=2, tie_word_embeddings=True)),
        # Mistral: a sliding window of 8 keys, shorter than the inputs and the generation
        ("mistral-window", T.MistralForCausalLM, T.MistralConfig(**small, num_key_value_heads=2, sliding_window=8)),
    ]
    tokenizer = train_tokenizer("llama3", 512)
    for name, cls, config in cases:
        m = cls(config)
        randomize(m, 0.5)
        save_case(name, m, 512, tokenizer=tokenizer)
    # transformers 4's way of writing rope: rope_theta and rope_scaling beside the other fields (what
    # most downloaded folders hold), for the same model
    path = os.path.join(HERE, "llama3-mqa-tied-bias", "config.json")
    with open(path) as f:
        c = json.load(f)
    rope = c.pop("rope_parameters")
    c["rope_theta"] = rope.pop("rope_theta")
    c["rope_scaling"] = rope
    with open(path, "w") as f:
        json.dump(c, f, indent=2)


def qwen3_cases():
    """Qwen3: each query and key head RMS-normalized (q_norm, k_norm) before RoPE, a head_dim other than
    hidden/heads, grouped-query attention, a tied head. Appended with a seed of its own: the cases above
    keep their bytes."""
    torch.manual_seed(47)
    config = transformers.Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                                      max_position_embeddings=128, tie_word_embeddings=True)
    m = transformers.Qwen3ForCausalLM(config)
    randomize(m, 0.5)
    save_case("qwen3", m, 512, tokenizer=train_tokenizer("llama3", 512))


def gemma3_cases():
    """Gemma3ForCausalLM (text): embeddings scaled by √E, four (1 + w) RMSNorms a layer, q/k norms, a
    tanh-GELU gate, and local layers (a window of 4 keys, RoPE base 10⁴) around a global one (base 10⁶,
    linear scaling ×2) — the 12-token inputs and 64 generated tokens run past the window. Appended with a
    seed of its own: the cases above keep their bytes."""
    torch.manual_seed(48)
    T = transformers
    config = T.Gemma3TextConfig(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                                max_position_embeddings=128, sliding_window=4, tie_word_embeddings=False,
                                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                 "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                    "rope_theta": 1000000.0}})
    config.architectures = ["Gemma3ForCausalLM"]
    m = T.Gemma3ForCausalLM(config)
    randomize(m, 1.0)
    with torch.no_grad():  # Gemma's norms scale by 1 + w: w about 0, as a trained model's
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.randn_like(p) * 0.1)
        # the embedding small beside the branches' unit-RMS outputs (×√E = 8 in the stream)
        m.model.embed_tokens.weight.copy_(torch.randn_like(m.model.embed_tokens.weight) * 0.1)
    save_case("gemma3", m, 512, tokenizer=train_tokenizer("llama3", 512))


def phi3_cases():
    """Phi3ForCausalLM: q, k, v in one fused qkv_proj and the gate and up projections in one gate_up_proj
    (qkv splits them by rows), grouped-query attention, RoPE on the first 3/4 of each head
    (partial_rotary_factor, Phi-4-mini's), a window of 6 keys. Appended with a seed of its own."""
    torch.manual_seed(49)
    config = transformers.Phi3Config(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                     sliding_window=6, pad_token_id=0, bos_token_id=0, eos_token_id=1,
                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.75})
    config.architectures = ["Phi3ForCausalLM"]
    m = transformers.Phi3ForCausalLM(config)
    randomize(m, 0.5)
    save_case("phi3", m, 512, tokenizer=train_tokenizer("llama3", 512))


def gemma_norms_small(m, embed):
    """Gemma's norms scale by 1 + w: w about 0, as a trained model's; the embedding small beside the
    branches' unit-RMS outputs (×√E in the stream)."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.randn_like(p) * 0.1)
        embed.weight.copy_(torch.randn_like(embed.weight) * 0.1)


def gemma2_cases():
    """Gemma2ForCausalLM: Gemma 3's layer without q/k norms, every other layer windowed (4 keys), the
    attention scores and the logits soft-capped — at 5, which bends these random weights' scores, and at
    Gemma 2's own 30, which bends their logits (up to ~24) without flattening the top ones into ties —,
    and the scores scaled by 1/√24 for a head_dim of 16 (query_pre_attn_scalar). Appended with a seed of
    its own: the cases above keep their bytes."""
    torch.manual_seed(50)
    T = transformers
    config = T.Gemma2Config(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
                            max_position_embeddings=128, sliding_window=4, tie_word_embeddings=False,
                            attn_logit_softcapping=5.0, final_logit_softcapping=30.0)
    config.architectures = ["Gemma2ForCausalLM"]
    m = T.Gemma2ForCausalLM(config)
    randomize(m, 1.0)
    gemma_norms_small(m, m.model.embed_tokens)
    save_case("gemma2", m, 512, tokenizer=train_tokenizer("llama3", 512))


def gemma3_multimodal_cases():
    """Gemma3ForConditionalGeneration (Gemma 3's 4B and up): its text model, with a scale other than
    1/√head_dim (the 27B's query_pre_attn_scalar), a tied head, beside a tiny SigLIP vision tower and
    projector that the conversion leaves out. save_pretrained writes the Hub checkpoints' names
    (language_model.model.…, vision_tower.…; the names transformers 5 holds in memory, model.language_model.…,
    are tested by renaming them in hf_convert_test.cpp). Appended with a seed of its own."""
    torch.manual_seed(51)
    T = transformers
    text = T.Gemma3TextConfig(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
                              max_position_embeddings=128, sliding_window=4,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    vision = T.SiglipVisionConfig(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
                                  image_size=28, patch_size=14)
    config = T.Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                            image_token_index=511, boi_token_index=509, eoi_token_index=510)
    config.architectures = ["Gemma3ForConditionalGeneration"]
    m = T.Gemma3ForConditionalGeneration(config)
    randomize(m, 1.0)
    gemma_norms_small(m, m.model.language_model.embed_tokens)
    tokenizer = train_tokenizer("llama3", 512)
    save_case("gemma3-multimodal", m, 500, tokenizer=tokenizer)


def phi3_longrope_cases():
    """Phi3ForCausalLM with longrope (Phi-3.5, Phi-4-mini): random short and long factors over RoPE on
    3/4 of each head, an original context of 16 within 128 — the 12-token inputs take the short
    factors, the generation of 64 tokens runs past 16, where generate() feeds the whole sequence again
    with the long ones, and the cos/sin scaled by √(1 + ln 8 / ln 16). Appended with a seed of its own."""
    torch.manual_seed(52)
    rot_half = 16 * 3 // 4 // 2
    config = transformers.Phi3Config(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                     original_max_position_embeddings=16, pad_token_id=0, bos_token_id=0,
                                     eos_token_id=1,
                                     rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.75,
                                                      "short_factor": (1 + torch.rand(rot_half)).tolist(),
                                                      "long_factor": (4 + 8 * torch.rand(rot_half)).tolist()})
    config.architectures = ["Phi3ForCausalLM"]
    m = transformers.Phi3ForCausalLM(config)
    randomize(m, 0.5)
    save_case("phi3-longrope", m, 512, tokenizer=train_tokenizer("llama3", 512))


def marian_tokenizer(out):
    """OPUS-MT's tokenizer files: source.spm (English) and target.spm (French) trained on Tatoeba,
    vocab.json numbering both models' pieces (</s> 0, <unk> 1, …, <pad> last), as MarianTokenizer
    reads them; returns the tokenizer."""
    import gzip
    import tempfile

    import sentencepiece as spm
    with gzip.open(os.path.join(SHARED, "tatoeba-en-fr", "fra.txt.gz"), "rt", encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(20000), f)]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for side, name in ((0, "source"), (1, "target")):
            text = os.path.join(tmp, name + ".txt")
            with open(text, "w", encoding="utf-8") as f:
                f.write("\n".join(p[side] for p in pairs) + "\n")
            spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(tmp, name), vocab_size=150,
                                           character_coverage=1.0, model_type="unigram", bos_id=-1, eos_id=0,
                                           unk_id=1, pad_id=-1, minloglevel=2, num_threads=1)
            shutil.copy(os.path.join(tmp, name + ".model"), os.path.join(out, name + ".spm"))
    pieces = ["</s>", "<unk>"]
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=os.path.join(out, name + ".spm"))
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.id_to_piece(i) not in pieces]
    pieces.append("<pad>")
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(pieces)}, f, ensure_ascii=False)
    tok = transformers.MarianTokenizer(os.path.join(out, "source.spm"), os.path.join(out, "target.spm"),
                                       os.path.join(out, "vocab.json"))
    tok.save_pretrained(out)
    return tok


SENTENCES = ["The cat didn't cross the street because it was too tired.", "I like tea.",
             "Tom is reading a book, isn't he?"]


def marian_cases():
    """OPUS-MT's form: swish, scaled embeddings, pad = the last id = decoder start, EOS 0."""
    out = os.path.join(HERE, "marian")
    shutil.rmtree(out, ignore_errors=True)
    tokenizer = marian_tokenizer(out)
    V = len(tokenizer.get_vocab())
    c = transformers.MarianConfig(vocab_size=V, decoder_vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96,
                                  decoder_ffn_dim=96, max_position_embeddings=128, activation_function="swish",
                                  scale_embedding=True, pad_token_id=V - 1, decoder_start_token_id=V - 1,
                                  eos_token_id=0, forced_eos_token_id=0, architectures=["MarianMTModel"])
    m = transformers.MarianMTModel(c)
    randomize(m, 0.8)
    with torch.no_grad():  # a buffer, not a parameter: randomize() leaves it at 0
        m.final_logits_bias.copy_(torch.randn_like(m.final_logits_bias) * 0.5)
    m.eval()
    g = torch.Generator().manual_seed(2)
    lengths = [9, 6]
    src = torch.full((2, 10), V - 1)
    for r, n in enumerate(lengths):
        src[r, :n] = torch.randint(1, V - 1, (n,), generator=g)
        src[r, n] = 0  # EOS
    mask = (src != V - 1).long()
    tgt_in = torch.randint(1, V - 1, (2, 8), generator=g)
    tgt_in[:, 0] = V - 1  # the decoder starts from the pad token
    with torch.no_grad():
        logits = m(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in).logits.float()
        greedy = m.generate(input_ids=src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=30,
                            bad_words_ids=[[V - 1]])
        beam = m.generate(input_ids=src, attention_mask=mask, num_beams=4, do_sample=False, max_new_tokens=30,
                          bad_words_ids=[[V - 1]])
        batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
        text_out = m.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=30, bad_words_ids=[[V - 1]])
    m.save_pretrained(out, safe_serialization=True)

    def strip(seq):  # without the start token, up to (not including) EOS and padding
        seq = seq[1:].tolist()
        return seq[:seq.index(0)] if 0 in seq else seq
    ref = {"transformers": transformers.__version__, "torch": torch.__version__,
           "sources": [src[r, :n].tolist() for r, n in enumerate(lengths)], "src": src.tolist(),
           "tgt_in": tgt_in.tolist(), "logits_shape": list(logits.shape),
           "logits": [round(v, 7) for v in logits.flatten().tolist()],
           "greedy": [strip(x) for x in greedy], "beam4": [strip(x) for x in beam], "max_new_tokens": 30,
           "sentences": SENTENCES, "sentence_ids": [tokenizer(x)["input_ids"] for x in SENTENCES],
           "translations": tokenizer.batch_decode(text_out, skip_special_tokens=True)}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)
    print("marian:", ref["greedy"], ref["beam4"], file=sys.stderr)


FILL_MASK = ["The cat [MASK] on the mat.", "To be, or not to [MASK], that is the [MASK].",
             "My LORD, the King [MASK] come!"]


def wordpiece_tokenizer(lowercase, vocab):
    """BERT's tokenizer made with `tokenizers`: a WordPiece vocabulary of `vocab` entries from
    Shakespeare (the special tokens, every character alone and as a "##" continuation, then the most
    frequent words, ties in alphabetical order — chosen here, not by WordPieceTrainer, whose ties fall
    differently from run to run), BertNormalizer with lower-casing as asked, BertPreTokenizer,
    [CLS] $A [SEP] with token types; wrapped as transformers wraps a tokenizer.json."""
    import collections
    import re

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    with open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()[:20000]
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = collections.Counter(w for line in lines for w in re.findall(r"\w+|[^\w\s]", line.lower() if lowercase
                                                                         else line))
    chars = sorted({c for w in words for c in w})
    pieces = special + chars + ["##" + c for c in chars]
    pieces += [w for w, _ in sorted(words.items(), key=lambda x: (-x[1], x[0])) if len(w) > 1][:vocab - len(pieces)]
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(pieces)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None if lowercase else False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                                model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def bert_cases():
    """BertForMaskedLM (token types, type_vocab_size 2, padding) with a lower-casing and a cased
    WordPiece tokenizer, and a BertModel (no MLM head, a pooler). Appended with a seed of their own:
    the cases above keep their bytes."""
    torch.manual_seed(46)
    cases = [("bert-uncased", True, transformers.BertForMaskedLM, dict(hidden_act="gelu")),
             ("bert-cased", False, transformers.BertForMaskedLM, dict(hidden_act="gelu_new", layer_norm_eps=1e-7)),
             ("bert-model", True, transformers.BertModel, dict(hidden_act="gelu"))]
    for name, lowercase, cls, extra in cases:
        tokenizer = wordpiece_tokenizer(lowercase, 400)
        V = len(tokenizer)
        c = transformers.BertConfig(vocab_size=V, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=80, max_position_embeddings=40, type_vocab_size=2,
                                    pad_token_id=tokenizer.pad_token_id, **extra)
        m = cls(c)
        randomize_encoder(m)
        m.eval()
        out = os.path.join(HERE, name)
        shutil.rmtree(out, ignore_errors=True)
        g = torch.Generator().manual_seed(3)
        ids = torch.randint(5, V, (2, 12), generator=g)
        types = torch.zeros(2, 12, dtype=torch.long)
        types[0, 6:] = 1  # a sentence pair: the second sentence's token type is 1
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, 8:] = 0  # row 1 is padded after 8 tokens
        ids[1, 8:] = tokenizer.pad_token_id
        with torch.no_grad():
            o = m(input_ids=ids, token_type_ids=types, attention_mask=mask)
            out_t = (o.logits if cls is transformers.BertForMaskedLM else o.last_hidden_state).float()
        m.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        ref = {"transformers": transformers.__version__, "torch": torch.__version__, "input_ids": ids.tolist(),
               "token_type_ids": types.tolist(), "attention_mask": mask.tolist(),
               "output": "logits" if cls is transformers.BertForMaskedLM else "last_hidden_state",
               "logits_shape": list(out_t.shape), "logits": [round(v, 7) for v in out_t.flatten().tolist()]}
        if cls is transformers.BertForMaskedLM:
            fill = transformers.pipeline("fill-mask", model=m, tokenizer=tokenizer, top_k=5)
            ref["fill_mask"] = []
            for text in FILL_MASK:
                r = fill(text)
                if isinstance(r[0], dict):
                    r = [r]
                ref["fill_mask"].append({"text": text, "ids": tokenizer(text)["input_ids"], "masks": [
                    [{"token": x["token"], "token_str": x["token_str"], "score": x["score"],
                      "sequence": x["sequence"]} for x in per_mask] for per_mask in r]})
            pair = tokenizer("The cat sat.", "It was [MASK].")
            ref["pair"] = {"text": "The cat sat.", "text_pair": "It was [MASK].", "ids": pair["input_ids"],
                           "token_type_ids": pair["token_type_ids"]}
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump(ref, f)
        size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
        print(f"{name}: {size / 1024:.0f} KiB", ref.get("fill_mask", [{}])[0], file=sys.stderr)


def bpe_roberta_tokenizer(vocab):
    """RoBERTa's tokenizer made with `tokenizers`: a byte-level BPE trained on Shakespeare (add_prefix_space
    false, as roberta-base's tokenizer.json), <s> … </s> from RobertaProcessing, <mask> with lstrip as
    RobertaTokenizerFast adds it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    with open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()[:20000]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                unk_token="<unk>", sep_token="</s>", cls_token="<s>",
                                                pad_token="<pad>", mask_token="<mask>")


CLASSIFY = ["The cat sat on the mat.", "I love thee, my lord!", "Come hither, good Romeo; what news?",
            "no", "To be, or not to be: that is the question."]
NER = ["Romeo and Juliet went to Verona.", "My lord Hamlet is in Denmark, said Horatio.", "yes"]


def spm_xlmr_tokenizer(vocab):
    """XLM-RoBERTa's tokenizer as transformers 5 converts a checkpoint's sentencepiece.bpe.model: a
    SentencePiece Unigram trained on Shakespeare, with a few normalization rules (its charsmap a
    kilobyte, where nmt_nfkc's is 240: tests/golden/tokenizers/xlmr has that one)."""
    import tempfile
    import sentencepiece as spm
    with open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        lines = [l for l in f.read().splitlines()[:20000] if l.strip()]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "train.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        with open(os.path.join(d, "rules.tsv"), "w") as f:
            f.write("41\t61\nFB01\t66 69\n2026\t2E 2E 2E\nA0\t20\n9\t20\n")
        spm.SentencePieceTrainer.train(input=os.path.join(d, "train.txt"), model_prefix=os.path.join(d, "sp"),
                                       model_type="unigram", vocab_size=vocab, minloglevel=2,
                                       normalization_rule_tsv=os.path.join(d, "rules.tsv"))
        os.rename(os.path.join(d, "sp.model"), os.path.join(d, "sentencepiece.bpe.model"))
        return transformers.XLMRobertaTokenizer.from_pretrained(d)


def mpnet_tokenizer(vocab):
    """MPNet's tokenizer (all-mpnet-base-v2's form: a lower-casing WordPiece, <s> $A </s> from
    RobertaProcessing, [UNK], <mask> with lstrip) as transformers 5's MPNetTokenizer builds it from a
    vocabulary: wordpiece_tokenizer's pieces, MPNet's special tokens first and <mask> last."""
    bert = wordpiece_tokenizer(True, vocab)
    pieces = [p for p, _ in sorted(bert.get_vocab().items(), key=lambda x: x[1]) if p not in
              ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]"] + pieces + ["<mask>"]
    return transformers.MPNetTokenizer(vocab={p: i for i, p in enumerate(pieces)})


def spm_unigram(vocab, tokenizer_class, model_name, **pieces):
    """A SentencePiece Unigram of `vocab` pieces trained on Shakespeare with the special `pieces` (pad_id,
    pad_piece, …), saved as `model_name` and loaded by `tokenizer_class` as transformers 5 converts it."""
    import tempfile
    import sentencepiece as spm
    with open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        lines = [l for l in f.read().splitlines()[:20000] if l.strip()]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "train.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        spm.SentencePieceTrainer.train(input=os.path.join(d, "train.txt"), model_prefix=os.path.join(d, model_name),
                                       model_type="unigram", vocab_size=vocab, minloglevel=2, **pieces)
        os.remove(os.path.join(d, "train.txt"))
        return tokenizer_class.from_pretrained(d)


def spm_deberta_tokenizer(vocab):
    """DeBERTa-v3's tokenizer as transformers 5 converts a checkpoint's spm.model: a SentencePiece
    Unigram (Metaspace, the nmt_nfkc charsmap, trailing spaces stripped and runs of spaces made one),
    [CLS] $A [SEP] $B [SEP] with token types 0 and 1, trained here on Shakespeare with DeBERTa's
    special pieces first."""
    return spm_unigram(vocab, transformers.DebertaV2Tokenizer, "spm", pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                       pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]",
                       user_defined_symbols=["[MASK]"])


NER_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
ZERO_SHOT_LABELS = ["sports", "politics", "love", "the sea"]
# (text, how many of the labels, multi_label, hypothesis_template): the last text is cut ("only_first")
# where the tokenizer's model_max_length is short
ZERO_SHOT = [(CLASSIFY[0], 4, False, None), (CLASSIFY[1], 4, True, None), (CLASSIFY[2], 1, False, None),
             (CLASSIFY[4], 3, False, "Ce texte parle de {}, {{vraiment}}."),
             (" ".join(CLASSIFY * 3), 4, False, None)]


def encoder_cases():
    """The encoders' other heads (transformers' text-classification and token-classification pipelines),
    DistilBERT and RoBERTa (fill-mask), and a sentence-transformers folder (its embeddings). Appended with
    a seed of their own: the cases above keep their bytes."""
    T = transformers
    wp = lambda: wordpiece_tokenizer(True, 400)
    ner_labels = NER_LABELS
    run_encoder_cases(47, [
        ("bert-seqcls", wp, T.BertForSequenceClassification, T.BertConfig,
         dict(id2label={0: "NEGATIVE", 1: "NEUTRAL", 2: "POSITIVE"})),
        ("bert-tokcls", wp, T.BertForTokenClassification, T.BertConfig, dict(id2label=ner_labels)),
        ("distilbert-seqcls", wp, T.DistilBertForSequenceClassification, T.DistilBertConfig,
         dict(id2label={0: "joy", 1: "anger", 2: "fear", 3: "love"}, problem_type="multi_label_classification")),
        ("distilbert-mlm", wp, T.DistilBertForMaskedLM, T.DistilBertConfig, dict(activation="gelu")),
        ("roberta-seqcls", lambda: bpe_roberta_tokenizer(400), T.RobertaForSequenceClassification, T.RobertaConfig,
         dict(num_labels=1)),
        ("roberta-tokcls", lambda: bpe_roberta_tokenizer(400), T.RobertaForTokenClassification, T.RobertaConfig,
         dict(id2label=ner_labels)),
        ("roberta-mlm", lambda: bpe_roberta_tokenizer(400), T.RobertaForMaskedLM, T.RobertaConfig, {}),
        ("st-bert", wp, T.BertModel, T.BertConfig, {}),
    ])


def xlmr_cases():
    """XLM-RoBERTa (multilingual NER, fill-mask, paraphrase-multilingual's mean-pooled embeddings), with
    SentencePiece Unigram tokenizers. A seed of their own: the cases above keep their bytes."""
    T = transformers
    tok = lambda: spm_xlmr_tokenizer(500)
    run_encoder_cases(48, [
        ("xlmr-tokcls", tok, T.XLMRobertaForTokenClassification, T.XLMRobertaConfig, dict(id2label=NER_LABELS)),
        ("xlmr-mlm", tok, T.XLMRobertaForMaskedLM, T.XLMRobertaConfig, {}),
        ("st-xlmr", tok, T.XLMRobertaModel, T.XLMRobertaConfig, {}),
    ])


def mpnet_cases():
    """MPNet (all-mpnet-base-v2's network: RoBERTa's with a relative position bias) with its fill-mask
    head, a sequence classifier and a sentence-transformers folder, on inputs of 70 tokens so that
    every bucket of the bias is reached (relative distances ≥ 16, 32 and 64 included). A seed of their
    own: the cases above keep their bytes."""
    T = transformers
    tok = lambda: mpnet_tokenizer(400)
    run_encoder_cases(49, [
        ("mpnet-mlm", tok, T.MPNetForMaskedLM, T.MPNetConfig, {}),
        ("mpnet-seqcls", tok, T.MPNetForSequenceClassification, T.MPNetConfig,
         dict(id2label={0: "contradiction", 1: "entailment", 2: "neutral"})),
        ("st-mpnet", tok, T.MPNetModel, T.MPNetConfig, {}),
    ], length=70, positions=80)


# deberta-v3's form (its buckets and their reach set by each case)
DEBERTA_V3 = dict(relative_attention=True, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True,
                  position_biased_input=False, type_vocab_size=0)


def with_max_length(tokenizer, n):
    """The tokenizer with model_max_length n (saved in its tokenizer_config.json)."""
    tokenizer.model_max_length = n
    return tokenizer


def deberta_cases():
    """DeBERTa v3's network (disentangled attention over log-bucketed relative positions shared by the
    layers, no absolute positions, no token types) with its fill-mask head, an NLI classifier and a token
    classifier; and v2's form (absolute positions and token types, c2p alone, positions clamped without
    buckets, embeddings narrower than the layers). 70-token inputs with 16 buckets reaching 64: every log
    bucket and the clamp at its ends are reached. transformers masks a padded query's whole row (its
    output differs from qkv's there, and goes nowhere): those positions are not compared. A seed of their
    own: the cases above keep their bytes."""
    T = transformers
    tok = lambda: spm_deberta_tokenizer(400)
    v3 = dict(DEBERTA_V3, position_buckets=16, max_relative_positions=64)
    v2 = dict(relative_attention=True, max_relative_positions=24, pos_att_type=["c2p"], share_att_key=True,
              position_biased_input=True, type_vocab_size=2, embedding_size=32)
    run_encoder_cases(50, [
        ("deberta-mlm", tok, T.DebertaV2ForMaskedLM, T.DebertaV2Config, v3),
        ("deberta-seqcls", lambda: with_max_length(tok(), 40), T.DebertaV2ForSequenceClassification, T.DebertaV2Config,
         dict(v3, id2label={0: "entailment", 1: "neutral", 2: "contradiction"})),
        ("deberta-tokcls", tok, T.DebertaV2ForTokenClassification, T.DebertaV2Config, dict(v3, id2label=NER_LABELS)),
        ("deberta-v2-seqcls", tok, T.DebertaV2ForSequenceClassification, T.DebertaV2Config,
         dict(v2, num_labels=1)),
    ], length=70, positions=80)


def electra_cases():
    """ELECTRA (a discriminator's sequence and token classifiers, the generator's fill-mask head): BERT's
    layers under embeddings narrower than them (LayerNorm'd, then projected up), and the token
    classifier's of the layers' own width (no projection). A seed of their own: the cases above keep
    their bytes."""
    T = transformers
    wp = lambda: wordpiece_tokenizer(True, 400)
    run_encoder_cases(51, [
        ("electra-seqcls", wp, T.ElectraForSequenceClassification, T.ElectraConfig,
         dict(embedding_size=32, id2label={0: "NEGATIVE", 1: "POSITIVE"})),
        ("electra-tokcls", wp, T.ElectraForTokenClassification, T.ElectraConfig,
         dict(embedding_size=48, id2label=NER_LABELS)),
        ("electra-mlm", wp, T.ElectraForMaskedLM, T.ElectraConfig, dict(embedding_size=32)),
    ])


def modernbert_tokenizer(vocab):
    """ModernBERT's tokenizer (answerdotai/ModernBERT-base's form: NFC, a byte-level BPE, [CLS] $A [SEP] and
    [CLS] $A [SEP] $B [SEP], [MASK] with lstrip, no token types handed to the model) made with `tokenizers`:
    the BPE trained on Shakespeare with ModernBERT's special tokens first."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    with open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()[:20000]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, special=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                                model_input_names=["input_ids", "attention_mask"])


def spm_albert_tokenizer(vocab):
    """ALBERT's tokenizer as transformers 5 converts a checkpoint's spiece.model: a SentencePiece Unigram
    (Metaspace; `` and '' made ", NFKD, accents stripped, lower-cased, the model's charsmap), [CLS] $A [SEP]
    $B [SEP] with token types 0 and 1, [MASK] with lstrip; trained here on Shakespeare with ALBERT's special
    pieces first (<pad>, <unk>, [CLS], [SEP], [MASK])."""
    return spm_unigram(vocab, transformers.AlbertTokenizer, "spiece", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                       pad_piece="<pad>", unk_piece="<unk>", bos_piece="[CLS]", eos_piece="[SEP]",
                       user_defined_symbols=["[MASK]"])


def albert_cases():
    """ALBERT (albert-base-v2's form: one layer's parameters run by every layer, embeddings of 32 projected up
    to 48, gelu_new) with its fill-mask head, a sequence classifier (its pooler) and a token classifier. A seed of
    their own: the cases above keep their bytes (its question-answering head: qa_cases)."""
    T = transformers
    tok = lambda: spm_albert_tokenizer(400)
    albert = dict(embedding_size=32, num_hidden_layers=3, hidden_act="gelu_new")
    run_encoder_cases(55, [
        ("albert-mlm", tok, T.AlbertForMaskedLM, T.AlbertConfig, albert),
        ("albert-seqcls", tok, T.AlbertForSequenceClassification, T.AlbertConfig,
         dict(albert, id2label={0: "NEGATIVE", 1: "POSITIVE"})),
        ("albert-tokcls", tok, T.AlbertForTokenClassification, T.AlbertConfig, dict(albert, id2label=NER_LABELS)),
    ])


# ModernBERT's layers, small: 3 of them, layers 0 and 2 global, layer 1 local within 4 tokens either way (the
# 70-token inputs reach far past it)
MODERNBERT = dict(num_hidden_layers=3, global_attn_every_n_layers=2, local_attention=8)


def modernbert_cases():
    """ModernBERT (pre-LN, rotary positions of two bases, GeGLU, local and global layers, the prediction head)
    with its fill-mask head, an NLI classifier pooled by the mean (with every bias ModernBERT may have), a token
    classifier (the backward too) and a sentence-transformers folder (CLS pooling, as gte-modernbert), on 70-token
    inputs (its question-answering head: qa_cases). A seed of their own: the cases above keep their bytes."""
    T = transformers
    tok = lambda: modernbert_tokenizer(400)
    biases = dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True)
    run_encoder_cases(54, [
        ("modernbert-mlm", tok, T.ModernBertForMaskedLM, T.ModernBertConfig, MODERNBERT),
        ("modernbert-seqcls", tok, T.ModernBertForSequenceClassification, T.ModernBertConfig,
         dict(MODERNBERT, **biases, classifier_pooling="mean",
              id2label={0: "entailment", 1: "neutral", 2: "contradiction"})),
        ("modernbert-tokcls", tok, T.ModernBertForTokenClassification, T.ModernBertConfig,
         dict(MODERNBERT, id2label=NER_LABELS, hidden_activation="gelu_pytorch_tanh", classifier_activation="silu")),
        ("st-modernbert", tok, T.ModernBertModel, T.ModernBertConfig, MODERNBERT),
    ], length=70, positions=80)


def untyped(tokenizer):
    """The same tokenizer.json as transformers wraps it by default (model_input_names without token_type_ids)."""
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, unk_token="[UNK]",
                                                pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                                                mask_token="[MASK]")


QUERIES = ["what did the cat do", "where is Verona"]
DOCUMENTS = ["The cat sat on the mat.", "Romeo and Juliet went to Verona, a fair city of Italy, where they met, and "
             "loved, and died, as the play tells it in five long acts.", "no", "I love thee, my lord!",
             "Now is the winter of our discontent made glorious summer by this sun of York; and all the clouds that "
             "lour'd upon our house in the deep bosom of the ocean buried."]


def cross_encoder_cases():
    """Cross-encoders (rerankers: a sequence classifier of one label scoring a (query, document) pair)
    as sentence-transformers' CrossEncoder ranks with them, and a bi-encoder saved by
    sentence-transformers 6 (its new module names, "pooling_mode", the length in the tokenizer's
    config). A seed of their own: the cases above keep their bytes."""
    from sentence_transformers import CrossEncoder, SentenceTransformer
    torch.manual_seed(50)
    T = transformers
    for name, make_tok, cls, config_cls, form in [
            ("ce-bert", lambda: wordpiece_tokenizer(True, 400), T.BertForSequenceClassification, T.BertConfig, "st6"),
            ("ce-roberta", lambda: bpe_roberta_tokenizer(400), T.RobertaForSequenceClassification, T.RobertaConfig,
             "identity-in-config"),
            # a BERT whose tokenizer (a plain TokenizersBackend: its model_input_names have no token_type_ids)
            # hands the model no token types: every pair's second text is read as type 0
            ("ce-bert-no-types", lambda: untyped(wordpiece_tokenizer(True, 400)), T.BertForSequenceClassification,
             T.BertConfig, "st6"),
            # mxbai-rerank-v1's form: DeBERTa v3 (its tokenizer hands token types the model has none of)
            ("ce-deberta", lambda: spm_deberta_tokenizer(400), T.DebertaV2ForSequenceClassification,
             T.DebertaV2Config, "st6")]:
        tokenizer = make_tok()
        sizes = dict(vocab_size=len(tokenizer), hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=80, max_position_embeddings=40, pad_token_id=tokenizer.pad_token_id,
                     type_vocab_size=1 if config_cls is T.RobertaConfig else 2, num_labels=1)
        if config_cls is T.DebertaV2Config:
            sizes.update(DEBERTA_V3, position_buckets=8, max_relative_positions=32)
        c = config_cls(**sizes)
        m = cls(c)
        randomize_encoder(m)
        m.eval()
        out = os.path.join(HERE, name)
        shutil.rmtree(out, ignore_errors=True)
        raw = out + "-raw"
        m.save_pretrained(raw, safe_serialization=True)
        tokenizer.save_pretrained(raw)
        if form == "st6":  # the folder CrossEncoder.save_pretrained writes (max_length 24: pairs are cut)
            CrossEncoder(raw, max_length=24, device="cpu").save_pretrained(out)
            shutil.rmtree(raw)
        else:  # transformers' folder, the activation in config.json as older sentence-transformers wrote it
            os.rename(raw, out)
            with open(os.path.join(out, "config.json")) as f:
                cfg = json.load(f)
            cfg["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity", "version": "4.1.0"}
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
            tc_path = os.path.join(out, "tokenizer_config.json")
            with open(tc_path) as f:
                tc = json.load(f)
            tc["model_max_length"] = 28
            with open(tc_path, "w") as f:
                json.dump(tc, f, indent=2)
        for f in ("README.md",):
            if os.path.exists(os.path.join(out, f)):
                os.remove(os.path.join(out, f))
        ce = CrossEncoder(out, device="cpu")
        ref = {"sentence_transformers": __import__("sentence_transformers").__version__, "cases": []}
        for q in QUERIES:
            pairs = [[q, d] for d in DOCUMENTS]
            ref["cases"].append({
                "query": q, "documents": DOCUMENTS,
                "ids": [ce.tokenizer(q, d, truncation=True)["input_ids"] for d in DOCUMENTS],
                "scores": [float(x) for x in ce.predict(pairs)],
                "rank": [{"corpus_id": int(r["corpus_id"]), "score": float(r["score"])} for r in ce.rank(q, DOCUMENTS)],
                "rank_top2": [{"corpus_id": int(r["corpus_id"]), "score": float(r["score"])}
                              for r in ce.rank(q, DOCUMENTS, top_k=2)]})
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        print(f"{name}: {ref['cases'][0]['rank'][:2]}", file=sys.stderr)
    # st-bert as sentence-transformers 6 saves it
    out = os.path.join(HERE, "st6-bert")
    shutil.rmtree(out, ignore_errors=True)
    st = SentenceTransformer(os.path.join(HERE, "st-bert"), device="cpu")
    st.save_pretrained(out)
    os.remove(os.path.join(out, "README.md"))
    texts = CLASSIFY + [DOCUMENTS[4]]
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"sentence_transformers": __import__("sentence_transformers").__version__, "texts": texts,
                   "embeddings": [[round(float(v), 7) for v in e] for e in
                                  SentenceTransformer(out, device="cpu").encode(texts)]}, f)


# Extractive question answering (qa_cases): what transformers 4.57's question-answering pipeline is asked
QA_SHORT = ("Where did the cat sit?", "The cat sat on the mat in the garden.")
QA_LONG = ("Who wrote the play?",
           "Romeo and Juliet is a tragedy written by William Shakespeare early in his career about two young lovers "
           "whose deaths ultimately reconcile their feuding families. It was among the most popular plays of his "
           "lifetime and, along with Hamlet, is one of his most frequently performed plays. The play is set in "
           "Verona, a city in the north of Italy, over four or five days in the summer. Its plot is based on an "
           "Italian tale translated into verse as The Tragical History of Romeus and Juliet by Arthur Brooke in "
           "1562, and retold in prose in Palace of Pleasure by William Painter in 1567. The first printed edition "
           "appeared in 1597, and a better text followed two years later, in 1599.")
QA_ODD = ("Where is the café?",
          "Zoë visited Zürich  in 2019.\tThe café «Über» is near the lake.\nIt opened in 1890.")
QA_BATCH = (["Who is reading?", "When did it open?"],
            ["Tom is reading a book in the kitchen.", "The old theatre opened in 1890 and closed in 1956."])
QA_CASES = [  # (question, context, the pipeline call's keyword arguments)
    (*QA_SHORT, {}), (*QA_SHORT, {"top_k": 3}),
    (*QA_LONG, {}), (*QA_LONG, {"top_k": 4}),
    (*QA_LONG, {"max_seq_len": 24, "doc_stride": 6, "top_k": 2}),
    (*QA_SHORT, {"handle_impossible_answer": True}), (*QA_LONG, {"handle_impossible_answer": True}),
    (*QA_SHORT, {"handle_impossible_answer": True, "top_k": 30}),  # (where the empty answer makes the list)
    (*QA_LONG, {"max_answer_len": 2}),
    (*QA_ODD, {}), (*QA_ODD, {"top_k": 5}), (*QA_ODD, {"align_to_words": False, "top_k": 5}),
    (*QA_BATCH, {}),
]
# the fast tokenizer's own windows of QA_SHORT and QA_ODD (qa_features)
QA_FEATURES = dict(truncation="only_second", max_length=40, stride=8)
QA_SCALE = 2.0  # qa_outputs.weight ×2: start and end logits of std 1.4 to 10 (0.7 to 5 unscaled), few near ties
QA_HELP = """qa: transformers 5 has no question-answering pipeline (removed in 5.0); the reference comes from
transformers 4.57 in a second interpreter, named by QKV_QA_PYTHON. Make one and run:

    python3 -m venv --system-site-packages /tmp/tf4venv
    /tmp/tf4venv/bin/python -m pip install transformers==4.57.6   # (it brings tokenizers 0.22, huggingface_hub 0.36)
    QKV_QA_PYTHON=/tmp/tf4venv/bin/python python3 tests/golden/make_hf_golden.py qa"""


def qa_python():
    """The interpreter (QKV_QA_PYTHON) whose transformers 4.x runs the question-answering pipeline; refuses
    without one."""
    import subprocess
    py = os.environ.get("QKV_QA_PYTHON")
    if not py:
        sys.exit(QA_HELP)
    v = subprocess.run([py, "-c", "import transformers; print(transformers.__version__)"], capture_output=True,
                       text=True)
    if v.returncode or not v.stdout.strip().startswith("4."):
        sys.exit(f"qa: {py} has no transformers 4 ({v.stdout.strip() or v.stderr.strip()[-300:]})\n\n{QA_HELP}")
    return py


# the class transformers 4 saves the tokenizer with, for the class transformers 5 loads it as
QA_TOKENIZER_4 = {"TokenizersBackend": "PreTrainedTokenizerFast", "XLMRobertaTokenizer": "XLMRobertaTokenizerFast",
                  "DebertaV2Tokenizer": "DebertaV2TokenizerFast", "AlbertTokenizer": "AlbertTokenizerFast"}


def qa_reference_4x(spec_path, result_path):
    """Run by QKV_QA_PYTHON's transformers 4.57 (`make_hf_golden.py --qa-reference SPEC RESULT`, from
    qa_cases): saves the folder's tokenizer as transformers 4 writes it — 4.57 reads neither the class
    "TokenizersBackend" nor a list of "extra_special_tokens" in transformers 5's tokenizer_config.json; the
    tokenizer.json stays the same pipeline — then writes to RESULT the question-answering pipeline's answers
    for QA_CASES, what its fast tokenizer makes of QA_SHORT and QA_ODD (QA_FEATURES), the logits of a direct
    call on the reference inputs, and every window the pipeline gave the model with the logits it got back."""
    T = transformers
    torch.set_num_threads(1)  # (hundreds of tiny windows: threads only wait on each other)
    with open(spec_path) as f:
        spec = json.load(f)
    out = spec["folder"]
    tok = getattr(T, spec["tokenizer_class"])(tokenizer_file=os.path.join(out, "tokenizer.json"),
                                              **spec["tokenizer_kwargs"])
    tok.save_pretrained(out)
    tok = T.AutoTokenizer.from_pretrained(out)
    assert tok.is_fast and type(tok).__name__ == spec["tokenizer_class"], type(tok)
    model = T.AutoModelForQuestionAnswering.from_pretrained(out).eval()
    with torch.no_grad():
        o = model(**{k: torch.tensor(v) for k, v in spec["inputs"].items()})
        direct = torch.stack([o.start_logits, o.end_logits], -1).float()
    windows = []

    def hook(module, args, kwargs, output):  # each window the pipeline runs (one a call)
        windows.append({**{k: kwargs[k][0].tolist() for k in ("input_ids", "attention_mask", "token_type_ids")
                           if kwargs.get(k) is not None},
                        "start": output.start_logits[0].tolist(), "end": output.end_logits[0].tolist()})
    model.register_forward_hook(hook, with_kwargs=True)
    pipe = T.pipeline("question-answering", model=model, tokenizer=tok)
    answers = []
    for question, context, args in QA_CASES:
        n = len(windows)
        result = pipe(question=question, context=context, **args)
        answers.append({"question": question, "context": context, "args": args, "result": result,
                        "windows": len(windows) - n})
    features = []
    for question, context in (QA_SHORT, QA_ODD):
        enc = tok(question, context, return_overflowing_tokens=True, return_offsets_mapping=True, **QA_FEATURES)
        n = len(enc["input_ids"])
        features.append({"question": question, "context": context, "args": QA_FEATURES,
                         "input_ids": enc["input_ids"], "token_type_ids": enc.get("token_type_ids"),
                         "offset_mapping": [[list(x) for x in w] for w in enc["offset_mapping"]],
                         "sequence_ids": [enc.sequence_ids(i) for i in range(n)],
                         "word_ids": [enc.word_ids(i) for i in range(n)]})
    import tokenizers
    with open(result_path, "w") as f:
        json.dump({"versions": {"transformers": T.__version__, "tokenizers": tokenizers.__version__,
                                "torch": torch.__version__, "numpy": __import__("numpy").__version__},
                   "tokenizer_class": type(tok).__name__, "answers": answers, "features": features,
                   "direct": direct.tolist(), "windows": windows}, f)


def qa_cases():
    """Extractive question answering: BERT, DistilBERT, RoBERTa, XLM-RoBERTa, DeBERTa v3, ELECTRA and ModernBERT
    …ForQuestionAnswering (qa_outputs, or ModernBERT's head and classifier: a linear of 2 outputs, the start and
    end logits), with the tokenizers
    of those architectures' other cases cut at model_max_length 40, so that the long context runs through many
    windows. reference.json holds run_encoder_cases' fields (the logits: qa_outputs' output, [2, 40, 2]),
    then transformers 4.57's question-answering pipeline (removed from transformers 5) on QA_CASES and its
    fast tokenizer's windows (qa_features). Two interpreters: this one (transformers 5) builds and saves the
    folders; QKV_QA_PYTHON's (transformers 4.57) saves the tokenizer again as 4.57 writes it and runs the
    pipeline (qa_reference_4x):

        python3 -m venv --system-site-packages /tmp/tf4venv
        /tmp/tf4venv/bin/python -m pip install transformers==4.57.6
        QKV_QA_PYTHON=/tmp/tf4venv/bin/python python3 tests/golden/make_hf_golden.py qa

    Checks that transformers 5 loads each folder (AutoModelForQuestionAnswering, AutoTokenizer) to the same
    logits and the same windows, and that 4.57's logits (a direct call, and each window in the pipeline) are
    5's. A seed of their own: the cases above keep their bytes."""
    import subprocess
    import tempfile
    python4 = qa_python()
    T = transformers
    wp = lambda: with_max_length(wordpiece_tokenizer(True, 400), 40)
    cases = [
        ("qa-bert", wp, T.BertForQuestionAnswering, T.BertConfig, {}),
        # DistilBERT takes no token types: its tokenizer hands none (as DistilBertTokenizer's model_input_names)
        ("qa-distilbert", lambda: with_max_length(untyped(wordpiece_tokenizer(True, 400)), 40),
         T.DistilBertForQuestionAnswering, T.DistilBertConfig, {}),
        ("qa-roberta", lambda: with_max_length(bpe_roberta_tokenizer(400), 40), T.RobertaForQuestionAnswering,
         T.RobertaConfig, {}),
        ("qa-xlmr", lambda: with_max_length(spm_xlmr_tokenizer(500), 40), T.XLMRobertaForQuestionAnswering,
         T.XLMRobertaConfig, {}),
        ("qa-deberta", lambda: with_max_length(spm_deberta_tokenizer(400), 40), T.DebertaV2ForQuestionAnswering,
         T.DebertaV2Config, dict(DEBERTA_V3, position_buckets=16, max_relative_positions=64)),
        ("qa-electra", wp, T.ElectraForQuestionAnswering, T.ElectraConfig, dict(embedding_size=32)),
        # (its head is ModernBertPredictionHead, then a classifier of 2 outputs, not qa_outputs)
        ("qa-modernbert", lambda: with_max_length(modernbert_tokenizer(400), 40), T.ModernBertForQuestionAnswering,
         T.ModernBertConfig, MODERNBERT),
        ("qa-albert", lambda: with_max_length(spm_albert_tokenizer(400), 40), T.AlbertForQuestionAnswering,
         T.AlbertConfig, dict(embedding_size=32, hidden_act="gelu_new")),
    ]
    run_encoder_cases(53, cases, length=40, positions=64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (the checks' hundreds of tiny windows: threads only wait on each other)
    for name, *_ in cases:
        out = os.path.join(HERE, name)
        ref_path = os.path.join(out, "reference.json")
        with open(ref_path) as f:
            ref = json.load(f)
        tok5 = T.AutoTokenizer.from_pretrained(out)  # as transformers 5 saved it
        inputs = {"input_ids": ref["input_ids"], "attention_mask": ref["attention_mask"]}
        if any(any(row) for row in ref["token_type_ids"]):  # (as run_encoder_cases gave them)
            inputs["token_type_ids"] = ref["token_type_ids"]
        specials = {k: getattr(tok5, k) for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                                  "cls_token", "mask_token") if getattr(tok5, k, None) is not None}
        spec = {"folder": out, "inputs": inputs, "tokenizer_class": QA_TOKENIZER_4[type(tok5).__name__],
                "tokenizer_kwargs": {**specials, "model_max_length": tok5.model_max_length,
                                     "model_input_names": list(tok5.model_input_names)}}
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "spec.json"), "w") as f:
                json.dump(spec, f)
            subprocess.run([python4, os.path.abspath(__file__), "--qa-reference", os.path.join(d, "spec.json"),
                            os.path.join(d, "result.json")], check=True)
            with open(os.path.join(d, "result.json")) as f:
                res = json.load(f)
        ref["qa_versions"] = res["versions"]
        ref["question_answering"] = res["answers"]
        ref["qa_features"] = res["features"]
        with open(ref_path, "w") as f:
            json.dump(ref, f)
        # transformers 5 on the folder as it now is: the same tokens, the same logits as 4.57's
        with torch.random.fork_rng():
            tok = T.AutoTokenizer.from_pretrained(out)
            m = T.AutoModelForQuestionAnswering.from_pretrained(out).eval()
        assert tok.model_max_length == 40 and list(tok.model_input_names) == list(tok5.model_input_names)
        for question, context, _ in QA_CASES:
            for q, c in zip(*((question, context) if isinstance(question, list) else ([question], [context]))):
                for a, b in ((tok, tok5), (tok, None)):
                    kw = dict(truncation="only_second", max_length=40, stride=20, return_overflowing_tokens=True,
                              return_offsets_mapping=True, return_token_type_ids=True)
                    x = a(q, c, **kw)
                    if b is not None:
                        y = b(q, c, **kw)
                        assert x["input_ids"] == y["input_ids"] and x["offset_mapping"] == y["offset_mapping"] and \
                            x["token_type_ids"] == y["token_type_ids"], (name, q)
        for feat in res["features"]:
            enc = tok(feat["question"], feat["context"], return_overflowing_tokens=True, return_offsets_mapping=True,
                      **QA_FEATURES)
            n = len(enc["input_ids"])
            assert enc["input_ids"] == feat["input_ids"] and enc.get("token_type_ids") == feat["token_type_ids"], name
            assert [[list(x) for x in w] for w in enc["offset_mapping"]] == feat["offset_mapping"], name
            assert [enc.sequence_ids(i) for i in range(n)] == feat["sequence_ids"], name
            assert [enc.word_ids(i) for i in range(n)] == feat["word_ids"], name
        with torch.no_grad():
            o = m(**{k: torch.tensor(v) for k, v in inputs.items()})
            logits5 = torch.stack([o.start_logits, o.end_logits], -1).float()
            keep = torch.tensor(ref["attention_mask"]).bool()  # (DeBERTa's padded rows: see deberta_cases)
            recorded = torch.tensor(ref["logits"]).reshape(ref["logits_shape"])
            d_saved = (logits5 - recorded)[keep].abs().max().item()
            d_direct = (logits5 - torch.tensor(res["direct"]))[keep].abs().max().item()
            d_windows = 0.0
            for w in res["windows"]:
                o = m(**{k: torch.tensor([w[k]]) for k in ("input_ids", "attention_mask", "token_type_ids") if k in w})
                d_windows = max(d_windows, (o.start_logits[0] - torch.tensor(w["start"])).abs().max().item(),
                                (o.end_logits[0] - torch.tensor(w["end"])).abs().max().item())
        # (4.57's ELECTRA attends eagerly, 5's through sdpa: their sums round apart, by ~1e-4)
        assert d_saved < 1e-6 and d_direct < 1e-3 and d_windows < 1e-3, (name, d_saved, d_direct, d_windows)
        size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
        print(f"{name}: {size / 1024:.0f} KiB, tokenizer saved by transformers {res['versions']['transformers']} as "
              f"{res['tokenizer_class']}; 5 vs recorded {d_saved:.2g}, vs 4.57 direct {d_direct:.2g}, vs 4.57's "
              f"{len(res['windows'])} pipeline windows {d_windows:.2g}; {res['answers'][0]['result']}", file=sys.stderr)
    torch.set_num_threads(threads)


# The token classifiers whose backward the goldens hold, and the parameters whose gradients they keep: DeBERTa's
# relative embeddings, their norm, and the projections c2p and p2c read; ModernBERT's every kind of parameter
# (a local layer's Wqkv, where the window and the local rotary base act), the embedding included.
BACKWARD = {
    "deberta-tokcls": ("deberta.encoder.rel_embeddings.weight", "deberta.encoder.LayerNorm.weight",
                       "deberta.encoder.layer.0.attention.self.key_proj.weight",
                       "deberta.encoder.layer.0.attention.self.query_proj.bias",
                       "deberta.encoder.layer.1.attention.self.value_proj.weight", "classifier.weight"),
    "modernbert-tokcls": ("model.embeddings.tok_embeddings.weight", "model.embeddings.norm.weight",
                          "model.layers.0.attn.Wqkv.weight", "model.layers.1.attn.Wqkv.weight",
                          "model.layers.1.attn_norm.weight", "model.layers.2.mlp.Wi.weight",
                          "model.layers.2.mlp.Wo.weight", "model.final_norm.weight", "head.dense.weight",
                          "head.norm.weight", "classifier.weight"),
}


def run_encoder_cases(seed, cases, length=12, positions=40):
    torch.manual_seed(seed)
    T = transformers
    roberta = (T.RobertaConfig, T.XLMRobertaConfig, T.MPNetConfig)
    for name, make_tok, cls, config_cls, extra in cases:
        tokenizer = make_tok()
        V = len(tokenizer)
        if config_cls is T.ModernBertConfig:
            ids_of = {k: tokenizer.convert_tokens_to_ids(v) for k, v in (("bos_token_id", "[CLS]"),
                      ("cls_token_id", "[CLS]"), ("eos_token_id", "[SEP]"), ("sep_token_id", "[SEP]"))}
            c = config_cls(vocab_size=V, hidden_size=48, num_attention_heads=4, intermediate_size=80,
                           max_position_embeddings=positions, pad_token_id=tokenizer.pad_token_id, **ids_of, **extra)
        elif config_cls is T.DistilBertConfig:
            c = config_cls(vocab_size=V, dim=48, n_layers=2, n_heads=4, hidden_dim=80,
                           max_position_embeddings=positions, pad_token_id=tokenizer.pad_token_id, **extra)
        else:
            sizes = dict(vocab_size=V, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=80, max_position_embeddings=positions, pad_token_id=tokenizer.pad_token_id,
                         hidden_act="relu" if config_cls in roberta else "gelu")
            if config_cls is not T.MPNetConfig:  # (MPNet has no token types)
                sizes["type_vocab_size"] = 1 if config_cls in roberta else 2
            c = config_cls(**{**sizes, **extra})  # (RoBERTa's MLM head: exact GELU whatever hidden_act says)
        m = cls(c)
        randomize_encoder(m)
        with torch.no_grad():
            for pname, p in m.named_parameters():
                qa_head = pname.endswith("qa_outputs.weight") or (
                    cls is T.ModernBertForQuestionAnswering and pname == "classifier.weight")
                if "classifier" in pname and not qa_head:  # scores short of 0 and 1, so that each is checked
                    p.mul_(0.15)
                if qa_head:  # (question answering) start and end logits' spread
                    p.mul_(QA_SCALE)
                if config_cls is T.AlbertConfig and "albert_layers" in pname and p.dim() == 2:
                    p.mul_(0.35)  # (one layer run 3 times at std 0.5: f32 rounding reached 1e-4 of the logits)
            if name == "xlmr-tokcls":  # "O" less likely, so that there are entities to group
                m.classifier.bias[0] -= 0.6
        m.eval()
        out = os.path.join(HERE, name)
        shutil.rmtree(out, ignore_errors=True)
        g = torch.Generator().manual_seed(3)
        ids = torch.randint(5, V, (2, length), generator=g)
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length * 2 // 3:] = 0  # row 1 is padded after two thirds of its tokens
        ids[1, length * 2 // 3:] = tokenizer.pad_token_id
        kwargs = {"input_ids": ids, "attention_mask": mask}
        types = torch.zeros(2, length, dtype=torch.long)
        if config_cls in (T.BertConfig, T.ElectraConfig, T.AlbertConfig) or (
                config_cls is T.DebertaV2Config and c.type_vocab_size > 0):
            types[0, 6:] = 1
            kwargs["token_type_ids"] = types
        with torch.no_grad():
            o = m(**kwargs)
            if name.startswith("st-"):
                out_t = o.last_hidden_state.float()
            elif hasattr(o, "start_logits"):  # qa_outputs' own output: [..., 0] the start, [..., 1] the end
                out_t = torch.stack([o.start_logits, o.end_logits], -1).float()
            else:
                out_t = o.logits.float()
        m.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        ref = {"transformers": T.__version__, "torch": torch.__version__, "input_ids": ids.tolist(),
               "token_type_ids": types.tolist(), "attention_mask": mask.tolist(),
               "output": "last_hidden_state" if name.startswith("st-") else "logits",
               "logits_shape": list(out_t.shape), "logits": [round(v, 7) for v in out_t.flatten().tolist()]}
        if config_cls is T.DebertaV2Config:
            ref["padded_positions_differ"] = True
        if name in BACKWARD:
            # the backward: L = Σ over the tokens (padding left out) of logits · w, and the gradients of
            # the parameters BACKWARD names
            w = torch.tensor([(c + 1) * (-1.0) ** c for c in range(m.config.num_labels)])
            m.zero_grad()
            logits = m(**kwargs).logits
            loss = (logits * w * mask.unsqueeze(-1)).sum()
            loss.backward()
            params = dict(m.named_parameters())
            ref["backward"] = {"weights": w.tolist(), "loss": loss.item(), "grads": {
                k: [round(v, 9) for v in params[k].grad.flatten().tolist()] for k in BACKWARD[name]}}
        if name.endswith("seqcls"):
            pipe = T.pipeline("text-classification", model=m, tokenizer=tokenizer)
            ref["text_classification"] = [
                {"text": t, "ids": tokenizer(t)["input_ids"], "top1": pipe(t), "all": pipe(t, top_k=None)}
                for t in CLASSIFY]
            ref["text_classification_pair"] = {"text": CLASSIFY[0], "text_pair": CLASSIFY[1],
                                               "all": pipe({"text": CLASSIFY[0], "text_pair": CLASSIFY[1]}, top_k=None)}
            ref["softmax"] = pipe(CLASSIFY[2], top_k=None, function_to_apply="softmax")
            if any(l.lower().startswith("entail") for l in m.config.id2label.values()):  # an NLI model
                m.config.label2id = {l: i for i, l in m.config.id2label.items()}  # (the pipeline reads it)
                with torch.random.fork_rng():  # (the cases after keep their bytes)
                    zs = T.pipeline("zero-shot-classification", model=m, tokenizer=tokenizer)
                    ref["zero_shot"] = [
                        dict(text=t, labels=ZERO_SHOT_LABELS[:n], multi_label=multi, template=template,
                             result=zs(t, candidate_labels=ZERO_SHOT_LABELS[:n], multi_label=multi,
                                       **({"hypothesis_template": template} if template else {})))
                        for t, n, multi, template in ZERO_SHOT
                        if len(t) < 100 or tokenizer.model_max_length < positions]  # (the long text: cut)
        if name.endswith("tokcls"):
            ref["token_classification"] = []
            for t in NER:
                none = T.pipeline("token-classification", model=m, tokenizer=tokenizer)(t)
                simple = T.pipeline("token-classification", model=m, tokenizer=tokenizer,
                                    aggregation_strategy="simple")(t)
                every = T.pipeline("token-classification", model=m, tokenizer=tokenizer, ignore_labels=[])(t)
                f = lambda xs: [{k: (float(v) if k == "score" else int(v) if k in ("index", "start", "end") else v)
                                 for k, v in x.items()} for x in xs]
                case = {"text": t, "ids": tokenizer(t)["input_ids"], "none": f(none), "simple": f(simple),
                        "all": f(every)}
                with torch.random.fork_rng():  # the word strategies (the cases after keep their bytes)
                    for strategy in ("first", "average", "max"):
                        case[strategy] = f(T.pipeline("token-classification", model=m, tokenizer=tokenizer,
                                                      aggregation_strategy=strategy)(t))
                ref["token_classification"].append(case)
        if name.endswith("mlm"):
            fill = T.pipeline("fill-mask", model=m, tokenizer=tokenizer, top_k=5)
            ref["fill_mask"] = []
            for text in ["The cat [MASK] on the mat.", "I love thee, my [MASK]!"]:
                text = text.replace("[MASK]", tokenizer.mask_token)
                r = fill(text)
                ref["fill_mask"].append({"text": text, "ids": tokenizer(text)["input_ids"], "masks": [
                    [{"token": x["token"], "token_str": x["token_str"], "score": x["score"],
                      "sequence": x["sequence"]} for x in r]]})
        if name.startswith("st-"):
            # A sentence-transformers folder: the model's files, then modules.json, the Pooling and
            # (st-bert) Normalize modules, and sentence_bert_config.json's max_seq_length (inputs cut to it).
            normalize = name in ("st-bert", "st-mpnet", "st-modernbert")
            cls_pooling = name == "st-modernbert"
            with open(os.path.join(out, "modules.json"), "w") as f:
                json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
                          + ([{"idx": 2, "name": "2", "path": "2_Normalize",
                               "type": "sentence_transformers.models.Normalize"}] if normalize else []), f, indent=2)
            with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
                json.dump({"max_seq_length": 16, "do_lower_case": False}, f)
            os.makedirs(os.path.join(out, "1_Pooling"))
            with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
                json.dump({"word_embedding_dimension": 48, "pooling_mode_cls_token": cls_pooling,
                           "pooling_mode_mean_tokens": not cls_pooling, "pooling_mode_max_tokens": False,
                           "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
                           "pooling_mode_lasttoken": False, "include_prompt": True}, f, indent=2)
            if normalize:
                os.makedirs(os.path.join(out, "2_Normalize"))
            from sentence_transformers import SentenceTransformer
            st = SentenceTransformer(out, device="cpu")
            texts = CLASSIFY + ["Now is the winter of our discontent made glorious summer by this sun of York."]
            emb = st.encode(texts, convert_to_numpy=True)
            ref["sentence_embeddings"] = {"texts": texts, "embeddings": [[round(float(v), 7) for v in e] for e in emb],
                                          "sentence_transformers": __import__("sentence_transformers").__version__}
            # the same model's mean and CLS pooling without normalizing, and its whole-length inputs
            hidden = []
            for t in texts:
                enc = tokenizer(t, return_tensors="pt", truncation=True, max_length=16)
                with torch.no_grad():
                    h = m(**enc).last_hidden_state[0]
                hidden.append({"cls": [round(float(v), 7) for v in h[0]],
                               "mean": [round(float(v), 7) for v in h.mean(0)],
                               "max": [round(float(v), 7) for v in h.max(0).values]})
            ref["pooled_truncated_16"] = hidden
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump(ref, f)
        size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out) if os.path.isfile(os.path.join(out, x)))
        print(f"{name}: {size / 1024:.0f} KiB", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--qa-reference"]:  # (transformers 4.57's side of qa_cases)
        qa_reference_4x(*sys.argv[2:4])
        sys.exit()
    os.makedirs(HERE, exist_ok=True)
    only = sys.argv[1:]  # e.g. "bert": those cases alone
    if not only or "qa" in only:
        qa_python()  # (refuses before anything is written where there is no transformers 4 to run)
    if not only or "gpt2" in only:
        gpt2_cases()
    if not only or "opt" in only:
        opt_cases()
    if not only or "gpt-neox" in only:
        gpt_neox_cases()
    if not only or "stablelm" in only:
        stablelm_cases()
    if not only or "phi" in only:
        phi_cases()
    if not only or "llama" in only:
        llama_cases()
    if not only or "qwen3" in only:
        qwen3_cases()
    if not only or "phi3" in only:
        phi3_cases()
    if not only or "gemma3" in only:
        gemma3_cases()
    if not only or "gemma2" in only:
        gemma2_cases()
    if not only or "gemma3-multimodal" in only:
        gemma3_multimodal_cases()
    if not only or "phi3-longrope" in only:
        phi3_longrope_cases()
    if not only or "marian" in only:
        marian_cases()
    if not only or "bert" in only:
        bert_cases()
    if not only or "encoders" in only:
        encoder_cases()
    if not only or "xlmr" in only:
        xlmr_cases()
    if not only or "mpnet" in only:
        mpnet_cases()
    if not only or "cross-encoders" in only:
        cross_encoder_cases()
    if not only or "deberta" in only:
        deberta_cases()
    if not only or "electra" in only:
        electra_cases()
    if not only or "qa" in only:
        qa_cases()
    if not only or "modernbert" in only:
        modernbert_cases()
    if not only or "albert" in only:
        albert_cases()
