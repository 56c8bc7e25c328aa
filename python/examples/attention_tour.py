#!/usr/bin/env python3
"""A short tour of qkv from Python, notebook-style: run it top to bottom, or a cell at a time.

  1. Seed 002's five tokens: attention for "quick" by hand with NumPy, then by qkv — the same numbers.
  2. A translation with the shipped En→Fr Transformer, and where each French word looked (matplotlib).
  3. The same sentence through the shipped recurrent model: Bahdanau's alignment.

    pip install .                                   # from the repository root
    python3 python/examples/attention_tour.py -o tour/
"""
import argparse
import os

import numpy as np

import qkv

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "models")

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("-o", "--out", default="tour", help="folder for the pictures")
ap.add_argument("--sentence", default="The cat sat on the mat because it was tired.")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)

# %% 1. Seed 002: "The quick brown fox jumps", Q, K, V of two dimensions each
tokens = ["The", "quick", "brown", "fox", "jumps"]
Q = np.array([[0.1, 0.2], [0.5, 0.6], [0.9, 1.0], [1.3, 1.4], [1.7, 1.8]], dtype=np.float32)
K = np.array([[0.2, 0.1], [0.6, 0.5], [1.0, 0.9], [1.4, 1.3], [1.8, 1.7]], dtype=np.float32)
V = np.array([[0.3, 0.4], [0.7, 0.8], [1.1, 1.2], [1.5, 1.6], [1.9, 2.0]], dtype=np.float32)

# by hand: scores of "quick" against every key, scaled by 1/√d, softmax, weighted sum of the values
scores = Q[1] @ K.T / np.sqrt(Q.shape[1])
weights = np.exp(scores - scores.max())
weights /= weights.sum()
by_hand = weights @ V

# by qkv: every token at once (NumPy arrays go in without a copy)
out, w = qkv.nn.functional.scaled_dot_product_attention_with_weights(Q, K, V)
print('1. attention of "quick" (seed 002):')
for t, p in zip(tokens, w.numpy()[1]):
    print(f"   {t:>6}: {p:.4f}")
print(f"   output by hand {by_hand.round(4)}, by qkv {out.numpy()[1].round(4)}")
assert np.allclose(w.numpy()[1], weights, atol=1e-6) and np.allclose(out.numpy()[1], by_hand, atol=1e-6)

# %% 2. Translate, and look at the cross-attention (last layer, mean over heads)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(result, title, path):
    a = result.attention  # [target tokens, source tokens], rows sum to 1
    fig, ax = plt.subplots(figsize=(0.55 * a.shape[1] + 2, 0.45 * a.shape[0] + 1.5))
    ax.imshow(a, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(a.shape[1]), [t.replace("\u2581", "") for t in result.source_tokens], rotation=60)
    ax.set_yticks(range(a.shape[0]), [t.replace("\u2581", "") for t in result.target_tokens])
    ax.set_xlabel("source (English)")
    ax.set_ylabel("writing (French)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"   wrote {path}")


transformer = qkv.Translator(os.path.join(MODELS, "en-fr.safetensors"))
(r,) = transformer.translate_batch([args.sentence], beam_size=4, return_attention=True)
print(f"2. {args.sentence} → {r.hypotheses[0]}")
for word, row in zip(r.target_tokens, r.attention):
    print(f"   {word:>12} looks at {r.source_tokens[int(row.argmax())]} ({row.max():.0%})")
plot(r, "Transformer: cross-attention, last layer, mean over heads", os.path.join(args.out, "transformer.png"))

# %% 3. The recurrent model's alignment (Bahdanau et al.'s picture)
gru = qkv.load(os.path.join(MODELS, "en-fr-gru.safetensors"))
(g,) = gru.translate_batch([args.sentence], beam_size=4, return_attention=True)
print(f"3. rnn-attention: {g.hypotheses[0]}")
plot(g, "rnn-attention: the alignment", os.path.join(args.out, "rnn-attention.png"))
