// A language model's tokenizer as Hugging Face's `tokenizers` would hold it (text/lm_tokenizer.h's
// LMTokenizer::to_hf): what a model qkv trained takes to a Hugging Face folder.
//
//   characters     model BPE {vocab: character → id, merges: []}: with no pre-tokenizer the text is one
//                  "word", cut into its characters and never merged; decoder Fuse (the tokens joined)
//   SentencePiece  added_tokens  <unk>, <s>, </s>, <pad> (special) and "\n" (a user-defined piece: cut out
//                                before the rest, as qkv cuts the text into lines)
//                  pre_tokenizer Metaspace{"▁", prepend_scheme never, split}: spaces become "▁" and the
//                                text is split before each (SentencePiece's split_by_whitespace: no
//                                piece holds a "▁" but first, so each split is cut as the line would be)
//                  model         Unigram {vocab: [[piece, score], …], unk_id} — the same lattice and
//                                scores, the same best path; or BPE {vocab, merges}: every pair of pieces
//                                whose concatenation is a piece, ranked by that piece's id (a SentencePiece
//                                BPE model's ids go down its scores: it merges the pair of highest score);
//                                a char model: BPE with no merges
//                  decoder       Metaspace: "▁" back to spaces, none stripped
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/text/lm_tokenizer.h"
#include "sentencepiece_model_check.h"

namespace qkv::text {

namespace {

using json = nlohmann::json;

json bpe_model(json vocab, json merges, const json& unk_token, bool fuse_unk) {
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", unk_token},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", fuse_unk},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

json tokenizer_file(json added_tokens, json pre_tokenizer, json model, json decoder) {
  return {{"version", "1.0"},          {"truncation", nullptr},
          {"padding", nullptr},        {"added_tokens", std::move(added_tokens)},
          {"normalizer", nullptr},     {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor", nullptr}, {"decoder", std::move(decoder)},
          {"model", std::move(model)}};
}

// The merges of a SentencePiece BPE model: (l, r) for every normal piece l + r that two normal pieces
// l and r make, ranked by the id of l + r, then of l (SentencePiece merges the neighbours whose
// concatenation scores highest, and its BPE pieces are numbered by score).
json sentencepiece_merges(const std::vector<spm::ModelSpec::Piece>& pieces) {
  std::unordered_map<std::string, int> id;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].type == spm::ModelSpec::kNormal) id.emplace(pieces[i].piece, static_cast<int>(i));
  std::vector<std::tuple<int, int, int>> merges;  // (id of l + r, id of l, id of r)
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].type != spm::ModelSpec::kNormal) continue;
    const std::string& p = pieces[i].piece;
    for (size_t at = 1; at < p.size(); ++at) {
      if ((static_cast<unsigned char>(p[at]) & 0xC0) == 0x80) continue;  // (inside a character)
      const auto l = id.find(p.substr(0, at)), r = id.find(p.substr(at));
      if (l != id.end() && r != id.end()) merges.emplace_back(static_cast<int>(i), l->second, r->second);
    }
  }
  std::sort(merges.begin(), merges.end());
  json out = json::array();
  for (const auto& [m, l, r] : merges)
    out.push_back({pieces[static_cast<size_t>(l)].piece, pieces[static_cast<size_t>(r)].piece});
  return out;
}

}  // namespace

LMTokenizer::HfForm LMTokenizer::to_hf(int64_t model_max_length) const {
  QKV_CHECK(!hf_, "LM tokenizer: a converted model's tokenizer is its own tokenizer.json already");
  HfForm out;
  out.tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                          {"model_max_length", model_max_length},
                          {"clean_up_tokenization_spaces", false}};
  if (!sp_) {
    json vocab = json::object();
    for (int64_t i = 0; i < chars_.vocab_size(); ++i) vocab[chars_.decode_one(static_cast<int32_t>(i))] = i;
    out.tokenizer_json = tokenizer_file(json::array(), nullptr,
                                        bpe_model(std::move(vocab), json::array(), nullptr, false), {{"type", "Fuse"}});
    return out;
  }

  QKV_CHECK(!sp_->is_marian(), "LM tokenizer: a Marian vocabulary is no language model's");
  const std::string what = "LM tokenizer: the SentencePiece model";
  const spm::ModelSpec spec = spm::read_spec(sp_->serialized(), what);
  auto refuse_unless = [&](bool ok, const char* option) {
    QKV_CHECK(ok, what, " was trained with ", option,
              ", which qkv's language-model tokenizers are not and no tokenizer.json qkv writes reproduces");
  };
  refuse_unless(spec.normalization == "identity", ("normalization \"" + spec.normalization + "\"").c_str());
  refuse_unless(!spec.add_dummy_prefix, "add_dummy_prefix");
  refuse_unless(!spec.remove_extra_whitespaces, "remove_extra_whitespaces");
  refuse_unless(spec.escape_whitespaces, "escape_whitespaces = false");
  refuse_unless(!spec.treat_whitespace_as_suffix, "treat_whitespace_as_suffix");
  refuse_unless(!spec.split_digits, "split_digits");
  refuse_unless(!spec.byte_fallback, "byte_fallback");
  refuse_unless(spec.model_type == 1 || spec.model_type == 2 || spec.model_type == 4, "model_type word");
  QKV_CHECK(static_cast<int64_t>(spec.pieces.size()) == sp_->vocab_size(), what, " lists ", spec.pieces.size(),
            " pieces, not its ", sp_->vocab_size());

  json added = json::array();
  const json unk = sp_->unk_id() >= 0 ? json(spec.pieces[static_cast<size_t>(sp_->unk_id())].piece) : json(nullptr);
  for (size_t i = 0; i < spec.pieces.size(); ++i) {
    const int type = spec.pieces[i].type;
    using T = spm::ModelSpec;
    if (type != T::kUnknown && type != T::kControl && type != T::kUserDefined) continue;
    added.push_back({{"id", i},
                     {"content", spec.pieces[i].piece},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != T::kUserDefined}});
  }
  const json metaspace = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}, {"split", spec.split_by_whitespace}};
  json model;
  if (spec.model_type == 1) {
    json vocab = json::array();
    for (const auto& p : spec.pieces) vocab.push_back({p.piece, p.score});
    model = {{"type", "Unigram"},
             {"unk_id", sp_->unk_id() >= 0 ? json(sp_->unk_id()) : json(nullptr)},
             {"vocab", std::move(vocab)},
             {"byte_fallback", false}};
  } else {
    json vocab = json::object();
    for (size_t i = 0; i < spec.pieces.size(); ++i) vocab[spec.pieces[i].piece] = i;
    model = bpe_model(std::move(vocab), spec.model_type == 2 ? sentencepiece_merges(spec.pieces) : json::array(), unk,
                      /*fuse_unk=*/true);
  }
  out.tokenizer_json = tokenizer_file(std::move(added), metaspace, std::move(model), metaspace);
  // a special token's piece in tokenizer_config.json, and its id (-1: the model has none)
  auto special = [&](int id, const char* key) -> int32_t {
    if (id < 0 || id >= static_cast<int>(spec.pieces.size())) return -1;
    out.tokenizer_config[key] = spec.pieces[static_cast<size_t>(id)].piece;
    return id;
  };
  special(sp_->unk_id(), "unk_token");
  out.bos_id = special(sp_->bos_id(), "bos_token");
  out.eos_id = special(sp_->eos_id(), "eos_token");
  out.pad_id = special(sp_->pad_id(), "pad_token");
  return out;
}

}  // namespace qkv::text
