"""qkv from Python: attention and the models built on it, computed by qkv's C++ library.

    import numpy as np, qkv
    q = qkv.from_numpy(np.random.rand(2, 4, 5, 8).astype(np.float32))   # no copy
    out = qkv.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    out.numpy()                                                         # no copy

PyTorch's names where a PyTorch user looks for them: qkv.tensor / as_tensor / from_numpy /
from_dlpack, Tensor.shape / dtype / requires_grad / grad / backward(), qkv.nn.functional,
qkv.autograd.grad, qkv.no_grad / enable_grad / set_grad_enabled, qkv.autocast (bf16 mixed
precision); qkv.torch.scaled_dot_product_attention is a drop-in for PyTorch's on CPU.
Model files: qkv.Translator(path).translate_batch(…), qkv.LanguageModel(path).generate(…),
qkv.ImageClassifier, qkv.ImageCaptioner, or qkv.load(path) for any of them; qkv.train(config).
Hugging Face folders (GPT-2, Llama, Qwen2, Qwen3, Mistral, Phi-3, Gemma 2 and 3, Marian, BERT, DistilBERT, RoBERTa,
XLM-RoBERTa, MPNet, ELECTRA, DeBERTa v2/v3):
qkv.convert(folder, out) or qkv.load(folder) (an encoder: qkv.MaskedLanguageModel, with fill_mask(text, top_k),
text_classification(texts, top_k), token_classification(texts, aggregation_strategy),
zero_shot_classification(sequences, candidate_labels), question_answering(question, context) as transformers'
pipelines, encode(sentences) as
SentenceTransformer.encode, a cross-encoder's rank(query, documents) as CrossEncoder.rank, and a multiple-choice
model's multiple_choice(context, endings) as run_swag.py scores them). qkv.train fine-tunes them ("task":
"text_classification", "token_classification", "question_answering", "multiple_choice") or continues their
pre-training ("masked_lm"); qkv.export_hf(model, folder) writes the result back as a Hugging Face folder that
transformers' from_pretrained loads — and a language model qkv trained from scratch as GPT-2 or a Llama.
qkv.evaluate_translations(hyps, [refs], sources, group, bucket_width) scores as `qkv eval` does.
Memory: qkv.set_cache_limit(0, 0.25, miss_evicts=True) bounds the host allocator's cache as `qkv translate` does
(training's default keeps more), qkv.empty_cache() and qkv.cached_bytes() as torch.cuda's.
"""
from ._qkv import (Error, ImageCaptioner, ImageClassifier, LanguageModel, MaskedLanguageModel, Tensor,
                   TranslationResult, Translator, as_tensor, cached_bytes, convert, empty_cache, evaluate_translations,
                   export_hf, from_dlpack, from_numpy, get_num_threads, load, manual_seed, ones, randn, set_cache_limit,
                   set_num_threads, tensor, train, zeros)
from . import autograd, nn
from ._qkv import _cuda_device_count, _cuda_is_available
from .modes import autocast, enable_grad, is_autocast_enabled, is_grad_enabled, no_grad, set_grad_enabled


class cuda:  # noqa: N801 — torch.cuda's name
    """qkv.cuda.is_available() / device_count(), as torch.cuda's: a GPU needs a build with the CUDA
    backend (docs/CUDA.md); tensors go there with t.to("cuda") or t.cuda()."""
    is_available = staticmethod(_cuda_is_available)
    device_count = staticmethod(_cuda_device_count)


__version__ = "0.1.0"
__all__ = ["Error", "ImageCaptioner", "ImageClassifier", "LanguageModel", "MaskedLanguageModel", "TranslationResult",
           "Translator", "load",
           "convert", "export_hf", "evaluate_translations",
           "train", "Tensor", "as_tensor", "from_dlpack", "from_numpy", "get_num_threads", "manual_seed", "ones",
           "randn", "set_num_threads", "set_cache_limit", "empty_cache", "cached_bytes", "tensor", "zeros", "autograd", "nn", "cuda", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "autocast", "is_autocast_enabled"]
