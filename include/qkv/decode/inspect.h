// What a model attends to for one input, ready to show (qkv attend, qkv serve's /v1/attention and
// its viewer): the tokens on each axis and every layer's and head's weights, per kind of attention.
//
//   translation:     encoder_self  source → source          (queries: source tokens)
//                    decoder_self  output → output so far   (rows: the token written there;
//                                                             columns: the decoder's inputs, <s> …)
//                    cross         output → source
//   language model:  decoder_self  text → text before it    (causal)
//   masked language model (BERT):  encoder_self  text → the whole text, [CLS] and [SEP] included
//                                  (bidirectional; WordPiece's "##" pieces continue a word)
//
// A translation is decoded first (beam search as TranslateOptions say), then the model runs once
// more over (source + EOS, BOS + translation) with the weights kept — teacher forcing on its own
// output gives exactly the weights it used while decoding.
//
// Head search (seed 000: does "it" attend to "cat"?): every layer and head of every kind is scored
// by how much a query word attends to a key word — the mean over the query word's tokens of the
// summed weight on the key word's tokens (a word split into pieces counts as one) — at the
// occurrence pair where that is largest, and the heads are ranked by it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "qkv/decode/translator.h"
#include "qkv/models/model.h"
#include "qkv/text/lm_tokenizer.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::decode {

// The tokens along one side of a map, and the words they make.
struct TokenAxis {
  std::vector<std::string> tokens;  // each token's text ("cat", "</s>"; SentencePiece's ▁ dropped)
  std::vector<int> word;            // the word each token belongs to (−1: whitespace, no word)
  std::vector<std::string> words;   // each word's text (its tokens joined)
};

struct AttentionKind {
  std::string name;           // "encoder_self", "decoder_self" or "cross"
  TokenAxis queries, keys;
  std::vector<Tensor> layers; // per layer: f32 [H, queries, keys], every row sums to 1
};

struct AttentionView {
  std::string input, output;  // the text given, and (translation) the translation
  std::vector<AttentionKind> kinds;
  const AttentionKind* find(std::string_view name) const;
};

// Translates `sentence` (opt: beam size, length penalty, max_extra) and returns its attention. A
// model with no cross-attention (an rnn-encdec: its decoder reads one context vector) is a
// qkv::Error "<name>: its type, rnn-encdec (…), has no cross-attention to show" — `name`
// says which model to the user (its file), "the model" when empty.
AttentionView translation_attention(const models::Seq2SeqModel& model, const text::SentencePiece& tokenizer,
                                    const std::string& sentence, const TranslateOptions& opt = {},
                                    const std::string& name = {});
// The language model's causal self-attention over `text` (at most block_size tokens: longer is an error).
AttentionView language_model_attention(const models::LanguageModel& model, const text::LMTokenizer& tokenizer,
                                       const std::string& text);

// The masked language model's bidirectional self-attention over `text` (with its tokenizer's
// special tokens; at most max_positions tokens: longer is an error naming the text).
AttentionView masked_language_model_attention(const models::MaskedLanguageModel& model,
                                              const text::LMTokenizer& tokenizer, const std::string& text);

// Token texts → axis: a token starting with a space or ▁ (or one after a whitespace token) starts
// a new word; whitespace-only tokens belong to no word; "<s>"/"</s>" are words of their own.
TokenAxis make_axis(const std::vector<std::string>& pieces);

// Attention rollout (Abnar & Zuidema 2020), for a self-attention kind (square maps, queries and
// keys the same tokens): per layer the heads' mean with the residual counted as they do,
//   Â_l = 0.5 · mean_h A_l[h] + 0.5 · I,   rows renormalised to sum to 1,
// and rollout = Â_L · … · Â_1 (row i: how much of token i's last-layer representation comes from
// each input token). A causal map stays causal (a product of lower-triangular matrices). Computed
// in double; f32 [T, T], every row sums to 1. Not square, or layers of unequal shape: qkv::Error.
Tensor attention_rollout(const std::vector<Tensor>& layers);

// One layer's Â as rollout and flow count it (T×T, row-major, in double): the heads' mean with the
// residual, 0.5 · mean_h A[h] + 0.5 · I, rows renormalised. Not [heads, T, T]: a qkv::Error naming `who`.
std::vector<double> residual_attention(const Tensor& layer, int64_t T, const char* who);

// Attention flow (Abnar & Zuidema 2020), beside rollout, for the same kinds: the layers as a flow
// network — nodes (l, t) for l = 0 … L, edges (l, i) → (l−1, j) of capacity Â_l[i][j] — and
//   F[i][j] = maxflow((L, i) → (0, j)) / Σ_j' maxflow((L, i) → (0, j'))
// (exact max-flows, Dinic's; rows renormalised as their code does). f32 [T, T], rows summing to 1.
// T² max-flows on an L·T²-edge graph: more than kMaxFlowTokens tokens is a qkv::Error naming it.
inline constexpr int64_t kMaxFlowTokens = 128;
Tensor attention_flow(const std::vector<Tensor>& layers);

// The neuron view (bertviz's third view; seed 002's steps 3–4): how one query token's weights in
// one head of one layer come about. Its query vector q and every key vector k_j (the head's slice
// of the attention's input projections, biases included, before any scaling; a Llama's after the
// rotary positions), their element-wise products q ⊙ k_j, the scaled dot products
// s_j = Σ(q ⊙ k_j) / √d and the softmax w_j = exp(s_j) / Σ exp(s) — which is that head's row of the
// attention map. A causal model's query sees the keys up to itself only (a sliding window's, the
// last `window` of them): s_j for a key it does not see is −inf and w_j is 0. Computed in double
// from the layer's input (the model runs up to that layer, no further).
struct NeuronView {
  std::string kind;                   // "encoder_self" (BERT, a translator's encoder), "decoder_self"
                                      // (a GPT, a Llama, a translator's decoder) or "cross"
  TokenAxis axis;                     // the query tokens (the rows of the kind's map)
  TokenAxis key_axis;                 // the key tokens (its columns; self-attention: the same tokens,
                                      // a translator's decoder: <s> and the translation before them)
  int64_t layer = 0, head = 0, query = 0;  // from 0
  int64_t kv_head = 0;                // the key/value head `head` reads (grouped-query attention:
                                      // head / (heads / key-value heads); else = head)
  int64_t head_dim = 0;               // d
  std::vector<std::vector<float>> queries, keys;  // every token's q and k in this head: [Tq][d], [Tk][d]
  std::vector<std::vector<float>> products;       // q_query ⊙ k_j: [Tk][d] (keys not seen: empty)
  std::vector<double> scores;         // s_j = q_query · k_j / √d, or as Gemma's (keys not seen: −inf)
  std::vector<double> weights;        // softmax(s): [Tk], sums to 1
};
// For a masked language model (BERT), a language model built on qkv's GPT (GPT-2 converted, or
// trained by qkv) or on Llama (Llama, Qwen2, Mistral converted: q and k rotated by position; heads
// sharing a key/value head read its keys), or a Transformer translator (qkv's, Marian); any other
// (a recurrent translator): qkv::Error naming its type.
// A layer, head or query out of range: qkv::Error naming it and the range.
NeuronView masked_language_model_neuron(const models::MaskedLanguageModel& model, const text::LMTokenizer& tokenizer,
                                        const std::string& text, int64_t layer, int64_t head, int64_t query);
NeuronView language_model_neuron(const models::LanguageModel& model, const text::LMTokenizer& tokenizer,
                                 const std::string& text, int64_t layer, int64_t head, int64_t query);
// A Transformer translator, one kind of its attention as translation_attention shows it:
//   "encoder_self": the source and EOS (no translation is made);
//   "decoder_self": the sentence is translated first (opt, as translation_attention), then the
//                   queries are the translation and EOS, the keys <s> and the translation (causal);
//   "cross":        the same queries; the keys are the source and EOS, from the encoder's output.
// Another kind: qkv::Error naming the three.
NeuronView translation_neuron(const models::Seq2SeqModel& model, const text::SentencePiece& tokenizer,
                              const std::string& sentence, int64_t layer, int64_t head, int64_t query,
                              const std::string& kind = "encoder_self", const TranslateOptions& opt = {});

struct HeadScore {
  std::string kind;
  int64_t layer = 0, head = 0;  // from 0
  int query_word = 0, key_word = 0;  // the occurrence pair scored (indices into the axes' words)
  float weight = 0;
};
// Every (kind, layer, head) whose query axis has `query` and key axis has `key` (words compared
// ignoring ASCII case and leading/trailing punctuation), best first; empty if a word is absent.
std::vector<HeadScore> rank_heads(const AttentionView& view, std::string_view query, std::string_view key);

// The coreference probe (issue 50; Winograd-style pairs, Levesque et al. 2012): which heads resolve
// pronouns. An item is a sentence, its pronoun, the antecedent the pronoun refers to and the other
// candidate ("The trophy doesn't fit in the suitcase because it is too big." it → trophy, not
// suitcase); the built-in set comes in pairs that differ in one word and swap the answer ("… too
// small." it → suitcase), so a head that always looks at the first noun scores 50%, chance.
struct CoreferenceItem {
  std::string text, pronoun, antecedent, other;
};
const std::vector<CoreferenceItem>& winograd_pairs();  // 28 items: 14 pairs
// Tab-separated lines "text<TAB>pronoun<TAB>antecedent<TAB>other" ('#' lines and blank lines skipped);
// another field count: qkv::Error naming the line.
std::vector<CoreferenceItem> parse_coreference_items(std::string_view tsv);

// A head's score over the items whose three words its kind's axes have (rank_heads' word weight:
// the pronoun's tokens' mean of the summed weight on a candidate's tokens).
struct CoreferenceScore {
  std::string kind;
  int64_t layer = 0, head = 0;  // from 0
  int items = 0, right = 0;     // items scored; those where the antecedent got more than the other
  double antecedent = 0, other = 0;  // the mean weight on the antecedent and on the other candidate
  double accuracy() const { return items ? static_cast<double>(right) / items : 0.0; }
};
// views[i] is items[i]'s attention view. Every (kind, layer, head) scored on at least one item, best
// first: accuracy, then the mean margin (antecedent − other), then kind, layer, head order.
std::vector<CoreferenceScore> coreference_probe(const std::vector<CoreferenceItem>& items,
                                                const std::vector<AttentionView>& views);

}  // namespace qkv::decode
