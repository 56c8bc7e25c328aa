// Attention views for showing (decode/inspect.h): the tokens, the weights, the head search.
#include "qkv/decode/inspect.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <tuple>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/replay.h"
#include "qkv/models/registry.h"
#include "qkv/nn/bert.h"
#include "qkv/nn/modern_bert.h"
#include "qkv/nn/gpt.h"
#include "qkv/nn/llama.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/mask.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/rms_norm.h"
#include "qkv/ops/rotary.h"

namespace qkv::decode {

namespace {

constexpr std::string_view kWordMark = "\xE2\x96\x81";  // SentencePiece's ▁ (U+2581)

// Leading whitespace of a token: spaces, tabs, newlines and ▁.
size_t leading_space(std::string_view p) {
  size_t i = 0;
  for (;;) {
    if (i < p.size() && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) ++i;
    else if (p.substr(i, kWordMark.size()) == kWordMark) i += kWordMark.size();
    else return i;
  }
}

bool ends_in_space(std::string_view p) {
  return !p.empty() && (p.back() == ' ' || p.back() == '\t' || p.back() == '\n' ||
                        (p.size() >= 3 && p.substr(p.size() - 3) == kWordMark));
}

// A word as the head search compares it: ASCII lower case, no punctuation around it.
std::string normalized(std::string_view w) {
  size_t b = 0, e = w.size();
  while (b < e && std::ispunct(static_cast<unsigned char>(w[b]))) ++b;
  while (e > b && std::ispunct(static_cast<unsigned char>(w[e - 1]))) --e;
  std::string s(w.substr(b, e - b));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s.empty() ? std::string(w) : s;  // "." stays findable as "."
}

// weights [1, H, Lq, Lk] → [H, Lq, Lk], contiguous f32
// WordPiece's tokens as they are ("##s" continues the word before it; [CLS], [SEP] are words of
// their own).
TokenAxis masked_language_model_axis(const text::HfTokenizer& tok, const std::vector<int32_t>& ids) {
  TokenAxis axis;
  bool after_special = true;
  for (int32_t id : ids) {
    const std::string t = tok.id_to_token(id);
    const bool special = tok.is_special(id), continues = !special && !after_special && t.starts_with("##");
    axis.tokens.push_back(t);
    if (!continues) axis.words.emplace_back();
    axis.words.back() += continues ? t.substr(2) : t;
    axis.word.push_back(static_cast<int>(axis.words.size()) - 1);
    after_special = special;
  }
  return axis;
}

std::vector<Tensor> squeezed(const std::vector<Tensor>& layers) {
  std::vector<Tensor> out;
  for (const Tensor& w : layers) {
    QKV_CHECK(w.dim() == 4 && w.size(0) == 1, "attention weights should be [1, H, Lq, Lk], got ", shape_str(w.shape()));
    out.push_back(w.select(0, 0).contiguous());
  }
  return out;
}

// A masked language model's tokenizer (its Hugging Face one) and the ids of `text` with the
// special tokens, checked to fit the model's positions.
const text::HfTokenizer& masked_language_model_tokenizer(const text::LMTokenizer& tokenizer) {
  QKV_CHECK(tokenizer.hf(), "a masked language model's attention needs its Hugging Face tokenizer");
  return *tokenizer.hf();
}
std::vector<int32_t> masked_language_model_ids(const models::MaskedLanguageModel& model,
                                               const text::HfTokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/true);
  QKV_CHECK(!ids.empty(), "the text is empty");
  QKV_CHECK(static_cast<int64_t>(ids.size()) <= model.max_positions(), "the text '", excerpt(text), "' has ",
            ids.size(), " tokens, more than the model's ", model.max_positions(), " positions");
  return ids;
}

}  // namespace

TokenAxis make_axis(const std::vector<std::string>& pieces) {
  TokenAxis a;
  bool new_word = true;
  for (const std::string& p : pieces) {
    const bool special = p == "<s>" || p == "</s>" || p == "<unk>" || p == "<pad>";
    const size_t lead = special ? 0 : leading_space(p);
    std::string body = p.substr(lead);
    // ▁ alone is shown as itself; any other piece without its leading ▁ ("▁cat" → "cat")
    const bool sp_marked = lead > 0 && std::string_view(p).substr(0, lead).find(kWordMark) != std::string_view::npos;
    a.tokens.push_back(sp_marked ? (body.empty() ? std::string(kWordMark) : body) : p);
    while (!body.empty() && (body.back() == ' ' || body.back() == '\t' || body.back() == '\n' || body.back() == '\r'))
      body.pop_back();
    if (body.empty()) {  // whitespace: no word; the next token starts one
      a.word.push_back(-1);
      new_word = true;
      continue;
    }
    if (special || lead > 0 || new_word || a.words.empty()) a.words.emplace_back();
    a.words.back() += body;
    a.word.push_back(static_cast<int>(a.words.size()) - 1);
    new_word = special || ends_in_space(p);
  }
  return a;
}

const AttentionKind* AttentionView::find(std::string_view name) const {
  for (const AttentionKind& k : kinds)
    if (k.name == name) return &k;
  return nullptr;
}

AttentionView translation_attention(const models::Seq2SeqModel& model, const text::SentencePiece& tokenizer,
                                    const std::string& sentence, const TranslateOptions& opt,
                                    const std::string& name) {
  const models::SpecialTokens c = model.special_tokens();
  Translator tr(model, tokenizer);
  std::vector<int32_t> src = tr.encode(sentence);
  QKV_CHECK(!src.empty(), "the sentence is empty");
  const Hypothesis h = translate_ids(model, {src}, opt)[0];

  AttentionView v;
  v.input = sentence;
  v.output = tr.decode(h.tokens);
  // once more with the weights kept (decode/replay.h)
  const Replay r = replay(model, std::move(src), h);
  const nn::AttentionMaps& maps = r.maps;
  auto pieces = [&](const std::vector<int32_t>& ids) {
    std::vector<std::string> p;
    for (int32_t id : ids) p.push_back(id == c.bos ? "<s>" : id == c.eos ? "</s>" : tokenizer.id_to_piece(id));
    return make_axis(p);
  };
  const TokenAxis source = pieces(r.ids.src), in = pieces(r.ids.tgt_in), out = pieces(r.ids.tgt_out);
  QKV_CHECK(!maps.cross.empty(), name.empty() ? std::string("the model") : name, ": its type, ", model.type(), " (",
            models::model_type(model.type()).description, "), has no cross-attention to show");
  if (!maps.encoder_self.empty()) v.kinds.push_back({"encoder_self", source, source, squeezed(maps.encoder_self)});
  if (!maps.decoder_self.empty()) v.kinds.push_back({"decoder_self", out, in, squeezed(maps.decoder_self)});
  v.kinds.push_back({"cross", out, source, squeezed(maps.cross)});
  return v;
}

AttentionView language_model_attention(const models::LanguageModel& model, const text::LMTokenizer& tokenizer,
                                       const std::string& text) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  QKV_CHECK(!ids.empty(), "the text is empty");
  QKV_CHECK(static_cast<int64_t>(ids.size()) <= model.block_size(), "the text has ", ids.size(),
            " tokens, more than the model's context of ", model.block_size());
  nn::AttentionMaps maps;
  {
    NoGradGuard no_grad;
    model.forward(Tensor::from_ints(ids, {1, static_cast<int64_t>(ids.size())}), &maps);
  }
  QKV_CHECK(!maps.decoder_self.empty(), "the model returned no attention weights");
  std::vector<std::string> p;
  for (int32_t id : ids) p.push_back(tokenizer.decode_one(id));
  const TokenAxis axis = make_axis(p);
  AttentionView v;
  v.input = text;
  v.kinds.push_back({"decoder_self", axis, axis, squeezed(maps.decoder_self)});
  return v;
}

AttentionView masked_language_model_attention(const models::MaskedLanguageModel& model,
                                              const text::LMTokenizer& tokenizer, const std::string& text) {
  const text::HfTokenizer& tok = masked_language_model_tokenizer(tokenizer);
  const std::vector<int32_t> ids = masked_language_model_ids(model, tok, text);
  nn::AttentionMaps maps;
  {
    NoGradGuard no_grad;
    model.encode(Tensor::from_ints(ids, {1, static_cast<int64_t>(ids.size())}), Tensor(), Tensor(), &maps);
  }
  QKV_CHECK(!maps.encoder_self.empty(), "the model returned no attention weights");
  const TokenAxis axis = masked_language_model_axis(tok, ids);
  AttentionView v;
  v.input = text;
  v.kinds.push_back({"encoder_self", axis, axis, squeezed(maps.encoder_self)});
  return v;
}

namespace {

using Rows = std::vector<std::vector<float>>;

// [1, T, n·d] (or [T, n·d]) → head `head`'s d columns of each of the T rows
Rows head_rows(const Tensor& projected, int64_t head, int64_t d) {
  const int64_t T = projected.size(-2), width = projected.size(-1);
  const std::vector<float> all = projected.contiguous().to_vector();
  Rows out(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    out[static_cast<size_t>(t)].assign(all.begin() + t * width + head * d, all.begin() + t * width + (head + 1) * d);
  return out;
}

// A MultiheadAttention's query (block 0) or key (block 1) projection of `in` [1, T, E], head `head`'s
// columns: the rows block·E … of the fused in_proj (or q_proj_weight / k_proj_weight when separate).
Rows mha_rows(const nn::MultiheadAttention& a, int block, const Tensor& in, int64_t head) {
  const int64_t E = a.embed_dim;
  const Tensor w = a.in_proj_weight.defined() ? a.in_proj_weight.slice(0, block * E, (block + 1) * E).contiguous()
                                              : (block == 0 ? a.q_proj_weight : a.k_proj_weight);
  const Tensor b = a.in_proj_bias.defined() ? a.in_proj_bias.slice(0, block * E, (block + 1) * E).contiguous() : Tensor();
  return head_rows(linear(in, w, b), head, a.head_dim);
}

void check_head(int64_t head, int64_t heads) {
  QKV_CHECK(head >= 0 && head < heads, "head ", head, " is out of range: the model has heads 0 … ", heads - 1);
}
void check_query(int64_t query, int64_t T) {
  QKV_CHECK(query >= 0 && query < T, "query ", query, " is out of range: the text has tokens 0 … ", T - 1);
}

// The arithmetic of row `query` in double, from every token's q and k in the head: the query sees
// keys first … last (the rest: −inf, weight 0); s_j = q · k_j · scale (0: 1/√d), soft-capped by
// softcap > 0 (Gemma 2: softcap · tanh(s / softcap)).
NeuronView neuron_arithmetic(Rows queries, Rows keys, int64_t layer, int64_t head, int64_t query, int64_t first,
                             int64_t last, double scale = 0, double softcap = 0) {
  NeuronView v;
  const int64_t Tk = static_cast<int64_t>(keys.size()), d = static_cast<int64_t>(queries.front().size());
  v.layer = layer, v.head = head, v.kv_head = head, v.query = query, v.head_dim = d;
  v.queries = std::move(queries), v.keys = std::move(keys);
  const std::vector<float>& q = v.queries[static_cast<size_t>(query)];
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(d));
  v.products.resize(static_cast<size_t>(Tk));
  v.scores.assign(static_cast<size_t>(Tk), -std::numeric_limits<double>::infinity());
  v.weights.assign(static_cast<size_t>(Tk), 0.0);
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t j = first; j <= last; ++j) {
    const std::vector<float>& k = v.keys[static_cast<size_t>(j)];
    std::vector<float>& p = v.products[static_cast<size_t>(j)];
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      p.push_back(q[static_cast<size_t>(c)] * k[static_cast<size_t>(c)]);
      dot += static_cast<double>(q[static_cast<size_t>(c)]) * k[static_cast<size_t>(c)];
    }
    const double s = softcap > 0 ? softcap * std::tanh(dot * scale / softcap) : dot * scale;
    v.scores[static_cast<size_t>(j)] = s;
    top = std::max(top, s);
  }
  double sum = 0;
  for (int64_t j = first; j <= last; ++j) sum += v.weights[static_cast<size_t>(j)] = std::exp(v.scores[static_cast<size_t>(j)] - top);
  for (double& w : v.weights) w /= sum;
  return v;
}

// The neuron view of a Transformer encoder layer's (or a GPT block's) self-attention from its input
// x [1, T, E] (the output of the layers below it): the attention's input (LN(x) in a pre-LN layer),
// projected by the query and key rows of in_proj, the head's columns read out.
NeuronView neuron_of(const nn::TransformerEncoderLayer& L, const Tensor& x, bool causal, int64_t layer, int64_t head,
                     int64_t query) {
  const nn::MultiheadAttention& a = *L.self_attn;
  const int64_t T = x.size(1);
  check_head(head, a.num_heads);
  check_query(query, T);
  const Tensor in = L.opt.norm_first ? L.norm1->forward(x) : x;
  return neuron_arithmetic(mha_rows(a, 0, in, head), mha_rows(a, 1, in, head), layer, head, query, 0,
                           causal ? query : T - 1);
}

void check_layer(int64_t layer, size_t layers) {
  QKV_CHECK(layer >= 0 && layer < static_cast<int64_t>(layers), "layer ", layer,
            " is out of range: the model has layers 0 … ", static_cast<int64_t>(layers) - 1);
}

// A Llama's layer `layer` over ids: n = RMSNorm₁(x), q = RoPE(q_proj(n)) of the head, k = RoPE(k_proj(n))
// of the key/value head it reads (head / (H / Hkv)), each head normalized first under qk_norm (Qwen3);
// causal, within the sliding window if any; scaled and soft-capped as the layer's scores (Gemma).
NeuronView llama_neuron(const nn::Llama& m, const std::vector<int32_t>& ids, int64_t layer, int64_t head, int64_t query) {
  const nn::LlamaConfig& c = m.config;
  check_layer(layer, m.layers.size());
  const int64_t T = static_cast<int64_t>(ids.size()), H = c.num_attention_heads, Hkv = c.kv_heads(), D = c.head_size();
  check_head(head, H);
  check_query(query, T);
  // Llama::forward's stream through the layers below `layer`, then that layer's rotary tables and window
  const Tensor x = m.body(Tensor::from_ints(ids, {1, T}), nullptr, layer).sum();
  // (named, not a structured binding: the lambda below captures them, which clang 14 refuses)
  const auto tables = m.rotary(layer, T).tables(0, T, x.device());
  const Tensor& cos = tables.first;
  const Tensor& sin = tables.second;
  const int64_t W = c.window(layer);
  const nn::LlamaDecoderLayer& L = *m.layers[static_cast<size_t>(layer)];
  const Tensor n = L.input_norm(x);
  const int64_t kv = head / (H / Hkv);
  // [1, T, n, D] → [1, n, T, D], rotated, → head's [T, D]
  auto rotated = [&](const Tensor& heads, int64_t h) {
    const Tensor r = apply_rotary_pos_emb(heads.transpose(1, 2), cos, sin);
    return head_rows(r.select(0, 0).select(0, h), 0, D);
  };
  NeuronView v = neuron_arithmetic(rotated(L.query_heads(n, false), head), rotated(L.key_heads(n, false), kv), layer,
                                   head, query, W > 0 ? std::max<int64_t>(0, query - W + 1) : 0, query,
                                   c.query_pre_attn_scalar > 0 ? 1.0 / std::sqrt(c.query_pre_attn_scalar) : 0,
                                   c.attn_logit_softcapping);
  v.kv_head = kv;
  return v;
}

// A ModernBERT's layer `layer` over ids: n = LN_a(x) (x itself in layer 0), q and k the head's columns of
// Wqkv(n)'s first two thirds, rotated on the layer's base; every key of a global layer, those within
// local_attention / 2 of the query in a local one.
NeuronView modernbert_neuron(const nn::ModernBert& m, const std::vector<int32_t>& ids, int64_t layer, int64_t head,
                             int64_t query) {
  const nn::ModernBertConfig& c = m.config;
  check_layer(layer, m.layers.size());
  const int64_t T = static_cast<int64_t>(ids.size()), H = c.num_attention_heads, E = c.hidden_size, D = E / H;
  check_head(head, H);
  check_query(query, T);
  const Tensor x = m.hidden_before(Tensor::from_ints(ids, {1, T}), layer);  // [1, T, E]
  const nn::ModernBertLayer& L = *m.layers[static_cast<size_t>(layer)];
  const Tensor n = L.attn_norm ? L.attn_norm->forward(x) : x;
  const Tensor qkv = L.Wqkv->forward(n).view({1, T, 3, H, D});
  const auto tables = m.rotary(layer).tables(0, T, x.device());
  auto rotated = [&](int block) {  // [1, T, H, D] → [1, H, T, D], rotated → the head's [T, D]
    const Tensor r = apply_rotary_pos_emb(qkv.select(2, block).transpose(1, 2), tables.first, tables.second);
    return head_rows(r.select(0, 0).select(0, head), 0, D);
  };
  const int64_t w = c.global(layer) ? T : c.local_attention / 2;
  return neuron_arithmetic(rotated(0), rotated(1), layer, head, query, std::max<int64_t>(0, query - w),
                           std::min(T - 1, query + w));
}

}  // namespace

NeuronView masked_language_model_neuron(const models::MaskedLanguageModel& model, const text::LMTokenizer& tokenizer,
                                        const std::string& text, int64_t layer, int64_t head, int64_t query) {
  const text::HfTokenizer& tok = masked_language_model_tokenizer(tokenizer);
  if (const auto* modern = dynamic_cast<const nn::ModernBert*>(&model.module())) {
    const std::vector<int32_t> ids = masked_language_model_ids(model, tok, text);
    NoGradGuard no_grad;
    NeuronView v = modernbert_neuron(*modern, ids, layer, head, query);
    v.kind = "encoder_self";
    v.axis = v.key_axis = masked_language_model_axis(tok, ids);
    return v;
  }
  const auto* bert = dynamic_cast<const nn::Bert*>(&model.module());
  QKV_CHECK(bert, "the neuron view needs a BERT or a ModernBERT; the model's type is ", model.type());
  check_layer(layer, bert->layers.size());
  const std::vector<int32_t> ids = masked_language_model_ids(model, tok, text);
  const int64_t T = static_cast<int64_t>(ids.size());
  // The view's arithmetic is q·k/√D: a model whose scores add more (MPNet's bias, DeBERTa's positions) has no such view
  QKV_CHECK(!bert->relative_attention_bias && !bert->rel_embeddings,
            "the neuron view shows q·k/√D, and this model's attention scores add ",
            bert->rel_embeddings ? "DeBERTa's relative position terms" : "MPNet's relative position bias",
            "; the head and model views show its attention weights");
  NoGradGuard no_grad;
  // Bert::encode's embeddings (no padding, token type 0) and the layers below `layer`
  Tensor x = bert->embed(Tensor::from_ints(ids, {1, T}));
  for (int64_t l = 0; l < layer; ++l) x = bert->layers[static_cast<size_t>(l)]->forward_masked(x, Tensor());
  NeuronView v = neuron_of(*bert->layers[static_cast<size_t>(layer)], x, /*causal=*/false, layer, head, query);
  v.kind = "encoder_self";
  v.axis = v.key_axis = masked_language_model_axis(tok, ids);
  return v;
}

NeuronView language_model_neuron(const models::LanguageModel& model, const text::LMTokenizer& tokenizer,
                                 const std::string& text, int64_t layer, int64_t head, int64_t query) {
  const auto* gpt = dynamic_cast<const nn::GPT*>(&model.module());
  const auto* llama = dynamic_cast<const nn::Llama*>(&model.module());
  QKV_CHECK(gpt || llama, "the neuron view needs a GPT (qkv's or GPT-2) or a Llama; the model's type is ", model.type());
  if (gpt) check_layer(layer, gpt->h.size());
  const std::vector<int32_t> ids = tokenizer.encode(text);
  QKV_CHECK(!ids.empty(), "the text is empty");
  QKV_CHECK(static_cast<int64_t>(ids.size()) <= model.block_size(), "the text has ", ids.size(),
            " tokens, more than the model's context of ", model.block_size());
  const int64_t T = static_cast<int64_t>(ids.size());
  NoGradGuard no_grad;
  NeuronView v;
  if (llama) {
    v = llama_neuron(*llama, ids, layer, head, query);
  } else {
    // GPT::forward's embedding (no dropout: inference) and the blocks below `layer`
    Tensor x = gpt->wte->forward(Tensor::from_ints(ids, {1, T})) + gpt->position_table().slice(0, 0, T);
    for (int64_t l = 0; l < layer; ++l)
      x = gpt->h[static_cast<size_t>(l)]->forward(x, Tensor(), Tensor(), /*is_causal=*/true);
    v = neuron_of(*gpt->h[static_cast<size_t>(layer)], x, /*causal=*/true, layer, head, query);
  }
  v.kind = "decoder_self";
  std::vector<std::string> p;
  for (int32_t id : ids) p.push_back(tokenizer.decode_one(id));
  v.axis = v.key_axis = make_axis(p);
  return v;
}

NeuronView translation_neuron(const models::Seq2SeqModel& model, const text::SentencePiece& tokenizer,
                              const std::string& sentence, int64_t layer, int64_t head, int64_t query,
                              const std::string& kind, const TranslateOptions& opt) {
  QKV_CHECK(kind == "encoder_self" || kind == "decoder_self" || kind == "cross", "the neuron view's kind '", kind,
            "' is none of a translator's: encoder_self, decoder_self or cross");
  const auto* seq = dynamic_cast<const nn::Seq2SeqTransformer*>(&model.module());
  QKV_CHECK(seq, "the neuron view needs a Transformer translator (its attention's queries and keys); the model's type is ",
            model.type(), " (", models::model_type(model.type()).description,
            "), whose one attention, the decoder's over the source, is shown as the \"cross\" kind's 1 layer × 1 head");
  const models::SpecialTokens c = model.special_tokens();
  const auto& encoder = seq->transformer->encoder->layers;
  const auto& decoder = seq->transformer->decoder->layers;
  check_layer(layer, kind == "encoder_self" ? encoder.size() : decoder.size());
  // the source as translation_attention shows it: its pieces and EOS
  Translator tr(model, tokenizer);
  std::vector<int32_t> src = tr.encode(sentence);
  QKV_CHECK(!src.empty(), "the sentence is empty");
  const int64_t S = static_cast<int64_t>(src.size()) + 1;
  QKV_CHECK(S <= model.max_len(), "the sentence has ", S - 1, " tokens, more than the model's longest source of ",
            model.max_len() - 1);
  auto axis = [&](const std::vector<int32_t>& ids) {
    std::vector<std::string> p;
    for (int32_t id : ids) p.push_back(id == c.bos ? "<s>" : id == c.eos ? "</s>" : tokenizer.id_to_piece(id));
    return make_axis(p);
  };
  if (kind == "encoder_self") {
    src.push_back(c.eos);
    NoGradGuard no_grad;
    Tensor x = seq->embed(Tensor::from_ints(src, {1, S}), 0);  // Seq2SeqTransformer::encode's, no padding
    for (int64_t l = 0; l < layer; ++l) x = encoder[static_cast<size_t>(l)]->forward_masked(x, Tensor());
    NeuronView v = neuron_of(*encoder[static_cast<size_t>(layer)], x, /*causal=*/false, layer, head, query);
    v.kind = kind;
    v.axis = v.key_axis = axis(src);
    return v;
  }
  // the decoder's: translated first, then teacher-forced on its own output (translation_attention's
  // tgt_in and tgt_out)
  const Hypothesis h = translate_ids(model, {src}, opt)[0];
  TeacherForced t = teacher_forced(c, std::move(src), h);  // (named, not a structured binding: lambdas below)
  src = std::move(t.src);
  const std::vector<int32_t> tgt_in = std::move(t.tgt_in), tgt_out = std::move(t.tgt_out);
  const int64_t T = static_cast<int64_t>(tgt_in.size());
  const nn::TransformerDecoderLayer& L = *decoder[static_cast<size_t>(layer)];
  const nn::MultiheadAttention& a = kind == "cross" ? *L.multihead_attn : *L.self_attn;
  check_head(head, a.num_heads);
  check_query(query, T);
  NoGradGuard no_grad;
  const nn::Seq2SeqTransformer::Encoded e = seq->encode(Tensor::from_ints(src, {1, S}));
  Tensor x = seq->embed(Tensor::from_ints(tgt_in, {1, T}), 0);  // TransformerDecoder::forward_masked's layers below
  for (int64_t l = 0; l < layer; ++l)
    x = decoder[static_cast<size_t>(l)]->forward_masked(x, e.memory, Tensor(), e.mask, /*tgt_is_causal=*/true);
  // self-attention's input: LN₁(x) (pre-LN) or x; cross-attention's: the sublayer after it
  const Tensor self_in = L.opt.norm_first ? L.norm1->forward(x) : x;
  NeuronView v;
  if (kind == "decoder_self") {
    v = neuron_arithmetic(mha_rows(a, 0, self_in, head), mha_rows(a, 1, self_in, head), layer, head, query, 0, query);
  } else {
    const Tensor sa = L.self_attn->forward_masked(self_in, self_in, self_in, Tensor(), false, true, /*is_causal=*/true).output;
    const Tensor cross_in = L.opt.norm_first ? L.norm2->forward(x, sa) : L.norm1->forward(x, sa);
    v = neuron_arithmetic(mha_rows(a, 0, cross_in, head), mha_rows(a, 1, e.memory, head), layer, head, query, 0, S - 1);
  }
  v.kind = kind;
  v.axis = axis(tgt_out);
  v.key_axis = kind == "cross" ? axis(src) : axis(tgt_in);
  return v;
}

std::vector<double> residual_attention(const Tensor& w, int64_t T, const char* who) {
  QKV_CHECK(w.dim() == 3 && w.size(1) == T && w.size(2) == T, who, ": each layer must be [heads, ", T, ", ", T,
            "] (self-attention), got ", w.size(0), "×", w.size(1), "×", w.size(2));
  const int64_t H = w.size(0);
  const float* p = w.data<float>();
  std::vector<double> a(static_cast<size_t>(T * T));
  // Â = 0.5 · mean over heads + 0.5 · I, rows renormalised
  for (int64_t i = 0; i < T; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) {
      double m = 0;
      for (int64_t h = 0; h < H; ++h) m += p[(h * T + i) * T + j];
      const double v = 0.5 * m / static_cast<double>(H) + (i == j ? 0.5 : 0.0);
      a[static_cast<size_t>(i * T + j)] = v, sum += v;
    }
    for (int64_t j = 0; j < T; ++j) a[static_cast<size_t>(i * T + j)] /= sum;
  }
  return a;
}

Tensor attention_rollout(const std::vector<Tensor>& layers) {
  QKV_CHECK(!layers.empty(), "attention_rollout: no layers");
  const int64_t T = layers.front().size(1);
  std::vector<double> roll(static_cast<size_t>(T * T), 0.0), next(roll.size());
  for (int64_t i = 0; i < T; ++i) roll[static_cast<size_t>(i * T + i)] = 1.0;  // rollout of no layers: I
  for (const Tensor& w : layers) {
    const std::vector<double> a = residual_attention(w, T, "attention_rollout");
    // rollout ← Â_l · rollout (the later layer on the left)
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t k = 0; k < T; ++k) {
        const double aik = a[static_cast<size_t>(i * T + k)];
        if (aik == 0.0) continue;  // (a causal map's upper triangle)
        const double* r = roll.data() + k * T;
        double* o = next.data() + i * T;
        for (int64_t j = 0; j < T; ++j) o[j] += aik * r[j];
      }
    roll.swap(next);
  }
  Tensor out = Tensor::zeros({T, T});
  for (size_t i = 0; i < roll.size(); ++i) out.data<float>()[i] = static_cast<float>(roll[i]);
  return out;
}

std::vector<HeadScore> rank_heads(const AttentionView& view, std::string_view query, std::string_view key) {
  const std::string q = normalized(query), k = normalized(key);
  auto occurrences = [](const TokenAxis& a, const std::string& w) {
    std::vector<int> o;
    for (size_t i = 0; i < a.words.size(); ++i)
      if (normalized(a.words[i]) == w) o.push_back(static_cast<int>(i));
    return o;
  };
  std::vector<HeadScore> out;
  for (const AttentionKind& kind : view.kinds) {
    const std::vector<int> qs = occurrences(kind.queries, q), ks = occurrences(kind.keys, k);
    if (qs.empty() || ks.empty()) continue;
    for (size_t l = 0; l < kind.layers.size(); ++l) {
      const Tensor& w = kind.layers[l];
      const int64_t H = w.size(0), Lq = w.size(1), Lk = w.size(2);
      for (int64_t h = 0; h < H; ++h) {
        HeadScore best{kind.name, static_cast<int64_t>(l), h, 0, 0, -1.f};
        for (int qw : qs)
          for (int kw : ks) {
            // mean over the query word's tokens of the weight summed over the key word's tokens
            double sum = 0;
            int n = 0;
            for (int64_t i = 0; i < Lq; ++i) {
              if (kind.queries.word[static_cast<size_t>(i)] != qw) continue;
              ++n;
              const float* row = w.data<float>() + (h * Lq + i) * Lk;
              for (int64_t j = 0; j < Lk; ++j)
                if (kind.keys.word[static_cast<size_t>(j)] == kw) sum += row[j];
            }
            const float s = static_cast<float>(sum / n);
            if (s > best.weight) best.query_word = qw, best.key_word = kw, best.weight = s;
          }
        out.push_back(best);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const HeadScore& a, const HeadScore& b) { return a.weight > b.weight; });
  return out;
}

const std::vector<CoreferenceItem>& winograd_pairs() {
  // Winograd schemas (Levesque et al. 2012's collection, a few adapted so each candidate is one word
  // that occurs once): each pair's second sentence changes one word and swaps the answer.
  static const std::vector<CoreferenceItem> items = {
      {"The trophy doesn't fit in the suitcase because it is too big.", "it", "trophy", "suitcase"},
      {"The trophy doesn't fit in the suitcase because it is too small.", "it", "suitcase", "trophy"},
      {"The cat didn't cross the street because it was too tired.", "it", "cat", "street"},
      {"The cat didn't cross the street because it was too wide.", "it", "street", "cat"},
      {"The councilmen refused the demonstrators a permit because they feared violence.", "they", "councilmen", "demonstrators"},
      {"The councilmen refused the demonstrators a permit because they advocated violence.", "they", "demonstrators", "councilmen"},
      {"The ball broke the table because it was made of steel.", "it", "ball", "table"},
      {"The ball broke the table because it was made of glass.", "it", "table", "ball"},
      {"Joan made sure to thank Susan for all the help she had given.", "she", "Susan", "Joan"},
      {"Joan made sure to thank Susan for all the help she had received.", "she", "Joan", "Susan"},
      {"The fish ate the worm because it was hungry.", "it", "fish", "worm"},
      {"The fish ate the worm because it was tasty.", "it", "worm", "fish"},
      {"The man couldn't lift his son because he was so weak.", "he", "man", "son"},
      {"The man couldn't lift his son because he was so heavy.", "he", "son", "man"},
      {"The bottle did not fit in the box because it was too large.", "it", "bottle", "box"},
      {"The bottle did not fit in the box because it was too small.", "it", "box", "bottle"},
      {"The sculpture rolled off the shelf because it wasn't anchored.", "it", "sculpture", "shelf"},
      {"The sculpture rolled off the shelf because it wasn't level.", "it", "shelf", "sculpture"},
      {"Paul tried to call George on the phone, but he wasn't successful.", "he", "Paul", "George"},
      {"Paul tried to call George on the phone, but he wasn't available.", "he", "George", "Paul"},
      {"The lawyer asked the witness a question, but he was reluctant to repeat it.", "he", "lawyer", "witness"},
      {"The lawyer asked the witness a question, but he was reluctant to answer it.", "he", "witness", "lawyer"},
      {"The truck zoomed by the bus because it was going so fast.", "it", "truck", "bus"},
      {"The truck zoomed by the bus because it was going so slow.", "it", "bus", "truck"},
      {"The firemen arrived after the police because they were coming from so far away.", "they", "firemen", "police"},
      {"The firemen arrived before the police because they were coming from so far away.", "they", "police", "firemen"},
      {"The dog chased the cat, which ran up a tree. It waited at the top.", "it", "cat", "dog"},
      {"The dog chased the cat, which ran up a tree. It waited at the bottom.", "it", "dog", "cat"},
  };
  return items;
}

std::vector<CoreferenceItem> parse_coreference_items(std::string_view tsv) {
  std::vector<CoreferenceItem> out;
  size_t at = 0;
  for (int line = 1; at < tsv.size(); ++line) {
    size_t end = tsv.find('\n', at);
    if (end == std::string_view::npos) end = tsv.size();
    std::string_view l = tsv.substr(at, end - at);
    at = end + 1;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty() || l.front() == '#') continue;
    std::vector<std::string> f;
    size_t b = 0;
    for (size_t t; (t = l.find('\t', b)) != std::string_view::npos; b = t + 1) f.emplace_back(l.substr(b, t - b));
    f.emplace_back(l.substr(b));
    QKV_CHECK(f.size() == 4, "coreference items: line ", line, " has ", f.size(),
              " tab-separated fields; want text, pronoun, antecedent, other");
    out.push_back({f[0], f[1], f[2], f[3]});
  }
  return out;
}

std::vector<CoreferenceScore> coreference_probe(const std::vector<CoreferenceItem>& items,
                                                const std::vector<AttentionView>& views) {
  QKV_CHECK(items.size() == views.size(), "coreference_probe: ", items.size(), " items but ", views.size(), " views");
  std::vector<CoreferenceScore> scores;
  auto find = [&](const HeadScore& h) -> CoreferenceScore& {
    for (CoreferenceScore& s : scores)
      if (s.kind == h.kind && s.layer == h.layer && s.head == h.head) return s;
    scores.push_back({h.kind, h.layer, h.head});
    return scores.back();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const CoreferenceItem& it = items[i];
    std::vector<HeadScore> right = rank_heads(views[i], it.pronoun, it.antecedent),
                           wrong = rank_heads(views[i], it.pronoun, it.other);
    auto key = [](const HeadScore& h) { return std::make_tuple(h.kind, h.layer, h.head); };
    for (const HeadScore& r : right)
      for (const HeadScore& w : wrong)
        if (key(r) == key(w)) {
          CoreferenceScore& s = find(r);
          ++s.items;
          s.right += r.weight > w.weight;
          s.antecedent += r.weight, s.other += w.weight;
        }
  }
  for (CoreferenceScore& s : scores) s.antecedent /= s.items, s.other /= s.items;
  std::stable_sort(scores.begin(), scores.end(), [](const CoreferenceScore& a, const CoreferenceScore& b) {
    if (a.accuracy() != b.accuracy()) return a.accuracy() > b.accuracy();
    return a.antecedent - a.other > b.antecedent - b.other;
  });
  return scores;
}

}  // namespace qkv::decode
