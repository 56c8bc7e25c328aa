// Hugging Face folders → qkv model files (models/hf_convert.h), against what `transformers` computes
// with the same tiny random models: tests/golden/hf/<case>/ written by tests/golden/make_hf_golden.py
// (logits of every position ≤ 1e-4 relative, 64 greedy tokens identical); and hostile folders.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>

#include "qkv/decode/fill_mask.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "hf_golden.h"
#include "testing.h"

namespace qkv::models {
namespace {

namespace fs = std::filesystem;
using hf_golden::int_matrix, hf_golden::kGolden, hf_golden::reference;

// The converted file, loaded as a language model.
// (from `folder`: the golden case's own when empty)
std::unique_ptr<LanguageModel> convert_and_load(const std::string& name, const fs::path& dir, fs::path folder = {}) {
  const std::string out = (dir / (name + ".safetensors")).string();
  convert_hf((folder.empty() ? kGolden / name : folder).string(), out);
  ModelFile f = load_model_file(out);
  auto m = model_type(f.meta["model_type"].get<std::string>()).build(f.meta["model"], nullptr);
  load_parameters(m->module(), f);
  m->module().eval();
  return std::unique_ptr<LanguageModel>(dynamic_cast<LanguageModel*>(m.release()));
}

void check_against_transformers(const std::string& name, const fs::path& folder = {}) {
  SCOPED_TRACE(name);
  testing::TempDir dir("hf");
  auto model = convert_and_load(name, dir.path, folder);
  ASSERT_TRUE(model);
  const nlohmann::json ref = reference(name);
  const auto ids = ref["input_ids"].get<std::vector<std::vector<int32_t>>>();
  std::vector<int32_t> flat;
  for (auto& row : ids) flat.insert(flat.end(), row.begin(), row.end());
  Tensor idx = Tensor::from_ints(flat, {static_cast<int64_t>(ids.size()), static_cast<int64_t>(ids[0].size())});
  Tensor logits = model->forward(idx);
  EXPECT_EQ(logits.shape(), ref["logits_shape"].get<Shape>());
  EXPECT_LE(testing::rel_error(logits.to_vector(), ref["logits"].get<std::vector<float>>()), 1e-4);

  decode::GenerateOptions opt;
  opt.max_new_tokens = 64;
  opt.sampling.temperature = 0;  // greedy, as generate(do_sample=False)
  EXPECT_EQ(decode::generate(*model, ref["prompt"].get<std::vector<int32_t>>(), opt),
            ref["greedy"].get<std::vector<int32_t>>());
}

// The tokenizer inside the converted file, and text generation as a user runs it: the prompt's ids
// equal transformers' tokenizer(prompt), the greedy continuation equals generate()'s, decoded.
void check_text(const std::string& name) {
  SCOPED_TRACE(name);
  testing::TempDir dir("hf-text");
  const std::string out = (dir.path / (name + ".safetensors")).string();
  convert_hf((kGolden / name).string(), out);
  LoadedLanguageModel m = load_language_model(out);
  const nlohmann::json ref = reference(name);
  const std::vector<int32_t> prompt = m.tokenizer.encode(ref["text_prompt"].get<std::string>());
  EXPECT_EQ(prompt, ref["text_prompt_ids"].get<std::vector<int32_t>>());
  decode::GenerateOptions opt;
  opt.max_new_tokens = 20;
  opt.sampling.temperature = 0;
  opt.stop_ids = m.stop_ids;
  std::string streamed;
  text::TextStreamer streamer(m.tokenizer);
  const auto ids = decode::generate(*m.model, prompt, opt, [&](int32_t id) {
    streamed += streamer.push(id);
    return true;
  });
  streamed += streamer.flush();
  EXPECT_EQ(ids, ref["text_greedy_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(m.tokenizer.decode(ids), ref["text_greedy"].get<std::string>());
  EXPECT_EQ(streamed, m.tokenizer.decode(ids));  // streaming writes the same text
}

TEST(HfConvert, Gpt2EqualsTransformers) {
  check_against_transformers("gpt2");
  check_text("gpt2");
}
TEST(HfConvert, Gpt2ShardedF16EqualsTransformers) { check_against_transformers("gpt2-sharded-f16"); }
TEST(HfConvert, GptNeoxEqualsTransformers) {  // (Pythia: LayerNorms, parallel residual, a quarter rotated)
  check_against_transformers("gpt-neox");
  check_text("gpt-neox");
}
TEST(HfConvert, GptNeoxSequentialEqualsTransformers) { check_against_transformers("gpt-neox-sequential"); }
TEST(HfConvert, StableLmEqualsTransformers) {  // (LayerNorms under Llama's names, a quarter rotated)
  check_against_transformers("stablelm");
  check_text("stablelm");
}
TEST(HfConvert, PhiEqualsTransformers) {  // (one LayerNorm before both branches, a head bias)
  check_against_transformers("phi");
  check_text("phi");
}
TEST(HfConvert, OptEqualsTransformers) {  // (q/k/v apart, ReLU, positions two rows on)
  check_against_transformers("opt");
  check_text("opt");
}
TEST(HfConvert, LlamaGqaEqualsTransformers) {
  check_against_transformers("llama-gqa");
  check_text("llama-gqa");
}
// transformers 4's rope_theta + rope_scaling fields (the folder's config.json is in that form)
TEST(HfConvert, Llama3RopeMqaTiedBiasEqualsTransformers) { check_against_transformers("llama3-mqa-tied-bias"); }
TEST(HfConvert, LlamaLinearRopeHeadDimEqualsTransformers) { check_against_transformers("llama-linear-headdim"); }
TEST(HfConvert, Qwen2EqualsTransformers) {
  check_against_transformers("qwen2");
  check_text("qwen2");
}
// Phi-3: the fused qkv_proj and gate_up_proj split by rows, RoPE on 3/4 of each head, a window of 6
TEST(HfConvert, Phi3EqualsTransformers) {
  check_against_transformers("phi3");
  check_text("phi3");
}
// Qwen3: each query and key head RMS-normalized before RoPE (q_norm, k_norm), head_dim 24 ≠ 64 / 4
// Phi-3 with longrope (Phi-3.5, Phi-4-mini): short factors within the original 16 tokens, the long
// ones past them, where generation feeds the whole sequence again (as transformers' Phi-3 generate())
TEST(HfConvert, Phi3LongropeEqualsTransformers) {
  check_against_transformers("phi3-longrope");
  check_text("phi3-longrope");
}
TEST(HfConvert, Qwen3EqualsTransformers) {
  check_against_transformers("qwen3");
  check_text("qwen3");
}
TEST(HfConvert, MistralSlidingWindowEqualsTransformers) {
  check_against_transformers("mistral-window");
  check_text("mistral-window");
}

// Marian (OPUS-MT's form): the logits of teacher-forced targets; the same log-probabilities step by
// step through the decoder's KV caches; greedy translations of the token ids.
TEST(HfConvert, MarianEqualsTransformers) {
  testing::TempDir dir("hf-marian");
  const std::string out = (dir.path / "marian.safetensors").string();
  convert_hf((kGolden / "marian").string(), out);
  ModelFile f = load_model_file(out);
  auto built = model_type(f.meta["model_type"].get<std::string>()).build(f.meta["model"], nullptr);
  load_parameters(built->module(), f);
  built->module().eval();
  auto* model = dynamic_cast<Seq2SeqModel*>(built.get());
  ASSERT_TRUE(model);
  const nlohmann::json ref = reference("marian");
  auto matrix = [](const nlohmann::json& j) {
    const auto rows = j.get<std::vector<std::vector<int32_t>>>();
    std::vector<int32_t> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return Tensor::from_ints(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
  };
  const Tensor src = matrix(ref["src"]), tgt_in = matrix(ref["tgt_in"]);
  const auto want = ref["logits"].get<std::vector<float>>();
  Tensor logits = model->forward(src, tgt_in);
  EXPECT_EQ(logits.shape(), ref["logits_shape"].get<Shape>());
  EXPECT_LE(testing::rel_error(logits.to_vector(), want), 1e-4);

  // Decoding with the caches: step t's log-probabilities are log_softmax of the logits at t.
  const int64_t B = tgt_in.size(0), T = tgt_in.size(1), V = model->vocab_size();
  const std::vector<float> want_logp = log_softmax(Tensor::from_vector(want, {B, T, V}), -1).to_vector();
  auto state = model->start_decoding(src);
  const std::vector<int32_t> tin = tgt_in.to_ints();
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> tokens;
    for (int64_t b = 0; b < B; ++b) tokens.push_back(tin[static_cast<size_t>(b * T + t)]);
    const std::vector<float> got = model->step(tokens, *state).to_vector();
    std::vector<float> expect;
    for (int64_t b = 0; b < B; ++b)
      expect.insert(expect.end(), want_logp.begin() + (b * T + t) * V, want_logp.begin() + (b * T + t + 1) * V);
    EXPECT_LE(testing::rel_error(got, expect), 1e-4) << "step " << t;
  }

  // Beam 4 under transformers' rule (log p / n, its stopping heuristic, EOS forced at the limit):
  // the same tokens as generate(num_beams=4, max_new_tokens=30).
  const auto sources = ref["sources"].get<std::vector<std::vector<int32_t>>>();
  const auto beam4 = ref["beam4"].get<std::vector<std::vector<int32_t>>>();
  for (size_t i = 0; i < sources.size(); ++i) {
    decode::TranslateOptions bo;
    bo.beam_size = 4, bo.length_penalty = 1.0f, bo.transformers_beam = true;
    bo.max_length = 30;  // max_new_tokens=30: at most 30 tokens, EOS included
    EXPECT_EQ(decode::translate_ids(*model, {sources[i]}, bo)[0].tokens, beam4[i]) << "source " << i;
  }

  decode::TranslateOptions opt;
  opt.beam_size = 1;
  opt.max_extra = 30;
  const auto hyps = decode::translate_ids(*model, sources, opt);
  const auto greedy = ref["greedy"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(hyps.size(), greedy.size());
  for (size_t i = 0; i < hyps.size(); ++i) {
    const size_t n = std::min(hyps[i].tokens.size(), greedy[i].size());
    EXPECT_GE(n, 20u);
    EXPECT_EQ(std::vector<int32_t>(hyps[i].tokens.begin(), hyps[i].tokens.begin() + static_cast<int64_t>(n)),
              std::vector<int32_t>(greedy[i].begin(), greedy[i].begin() + static_cast<int64_t>(n)));
  }
}

// Marian's tokenizer (source.spm, target.spm, vocab.json) comes into the model file: sentences encode
// to MarianTokenizer's ids, and the text translations equal transformers' greedy ones.
TEST(HfConvert, MarianTranslatesTextAsTransformers) {
  testing::TempDir dir("hf-marian-text");
  const std::string out = (dir.path / "marian.safetensors").string();
  convert_hf((kGolden / "marian").string(), out);
  LoadedSeq2Seq m = load_seq2seq(out);
  ASSERT_TRUE(m.tokenizer->is_marian());
  const nlohmann::json ref = reference("marian");
  const auto sentences = ref["sentences"].get<std::vector<std::string>>();
  const auto ids = ref["sentence_ids"].get<std::vector<std::vector<int32_t>>>();
  decode::Translator tr(*m.model, *m.tokenizer);
  for (size_t i = 0; i < sentences.size(); ++i) {
    std::vector<int32_t> want = ids[i];
    want.pop_back();  // MarianTokenizer appends </s>; qkv's translators append it to the ids
    EXPECT_EQ(tr.encode(sentences[i]), want) << sentences[i];
  }
  decode::TranslateOptions opt;
  opt.beam_size = 1;
  opt.max_length = 30;  // transformers' max_new_tokens=30
  opt.on_warning = [](const std::string&) {};
  const auto got = tr.translate(sentences, opt);
  const auto want = ref["translations"].get<std::vector<std::string>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // The same 30 steps; where no EOS came, transformers forces one at the 30th (the config's
    // forced_eos_token_id) and qkv's greedy search writes a 30th token: that token apart, the same text
    EXPECT_GE(want[i].size(), 10u);
    EXPECT_EQ(got[i].substr(0, want[i].size()), want[i]) << sentences[i];
  }
}

// ---- BERT -------------------------------------------------------------------------------------------

// The logits of every position (BertModel: the last hidden states) of a batch whose first row is a
// sentence pair (token types 0 then 1) and whose second row is padded (attention_mask 0).
void check_bert(const std::string& name) {
  SCOPED_TRACE(name);
  testing::TempDir dir("hf-bert");
  const std::string out = (dir.path / (name + ".safetensors")).string();
  convert_hf((kGolden / name).string(), out);
  EXPECT_EQ(model_file_kind(out), Kind::masked_language_model);
  LoadedMaskedLanguageModel m = load_masked_language_model(out);
  const nlohmann::json ref = reference(name);
  const Tensor ids = int_matrix(ref["input_ids"]), types = int_matrix(ref["token_type_ids"]),
               mask = int_matrix(ref["attention_mask"]);
  const bool logits = ref["output"] == "logits";
  EXPECT_EQ(m.model->has_mlm_head(), logits);
  Tensor got = logits ? m.model->forward(ids, types, mask) : m.model->encode(ids, types, mask);
  EXPECT_EQ(got.shape(), ref["logits_shape"].get<Shape>());
  EXPECT_LE(testing::rel_error(got.to_vector(), ref["logits"].get<std::vector<float>>()), 1e-4);
  // the token types matter: all-zero types give other outputs
  Tensor zero_types = logits ? m.model->forward(ids, Tensor(), mask) : m.model->encode(ids, Tensor(), mask);
  EXPECT_GT(testing::rel_error(zero_types.to_vector(), ref["logits"].get<std::vector<float>>()), 1e-3);
}

TEST(HfConvert, BertUncasedEqualsTransformers) { check_bert("bert-uncased"); }
TEST(HfConvert, BertCasedGeluTanhEqualsTransformers) { check_bert("bert-cased"); }
TEST(HfConvert, BertModelHiddenStatesEqualTransformers) { check_bert("bert-model"); }

// fill-mask as pipeline("fill-mask", top_k=5): the text's ids equal the tokenizer's, and for each
// [MASK] the same five tokens in the same order, their probabilities (≤ 1e-4 relative), texts and
// filled-in sequences; a sentence pair's ids and token types equal tokenizer(text, text_pair)'s.
TEST(HfConvert, BertFillMaskEqualsThePipeline) {
  for (const std::string name : {"bert-uncased", "bert-cased"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-bert-fill");
    const std::string out = (dir.path / "bert.safetensors").string();
    convert_hf((kGolden / name).string(), out);
    LoadedMaskedLanguageModel m = load_masked_language_model(out);
    ASSERT_NE(m.tokenizer.hf(), nullptr);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    const nlohmann::json ref = reference(name);
    for (const auto& fm : ref["fill_mask"]) {
      const std::string text = fm["text"].get<std::string>();
      SCOPED_TRACE(text);
      EXPECT_EQ(tok.encode(text), fm["ids"].get<std::vector<int32_t>>());
      const auto got = decode::fill_mask(*m.model, tok, text, {.top_k = 5, .text_pair = {}});
      ASSERT_EQ(got.size(), fm["masks"].size());
      for (size_t i = 0; i < got.size(); ++i) {
        const auto& want = fm["masks"][i];
        ASSERT_EQ(got[i].size(), want.size());
        for (size_t j = 0; j < got[i].size(); ++j) {
          EXPECT_EQ(got[i][j].token, want[j]["token"].get<int32_t>()) << "mask " << i << ", rank " << j;
          EXPECT_NEAR(got[i][j].score, want[j]["score"].get<double>(), 1e-4 * want[j]["score"].get<double>());
          EXPECT_EQ(got[i][j].token_str, want[j]["token_str"].get<std::string>());
          EXPECT_EQ(got[i][j].sequence, want[j]["sequence"].get<std::string>());
        }
      }
    }
    const auto& pair = ref["pair"];
    const text::HfEncoding e = tok.encode_pair(pair["text"].get<std::string>(), pair["text_pair"].get<std::string>());
    EXPECT_EQ(e.ids, pair["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(e.token_type_ids, pair["token_type_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(decode::fill_mask(*m.model, tok, pair["text"].get<std::string>(),
                                {.top_k = 3, .text_pair = pair["text_pair"].get<std::string>()})[0].size(), 3u);
  }
}

// An older BERT folder: vocab.txt and tokenizer_config.json, no tokenizer.json — built as
// BertTokenizerFast builds it (lower-casing by default), the same ids.
TEST(HfConvert, BertFolderWithVocabTxtOnly) {
  testing::TempDir dir("hf-bert-vocab");
  const fs::path f = dir.path / "bert";
  fs::create_directories(f);
  for (const char* name : {"config.json", "model.safetensors", "tokenizer_config.json"})
    fs::copy(kGolden / "bert-uncased" / name, f / name);
  const auto tj = nlohmann::json::parse(io::read_file((kGolden / "bert-uncased" / "tokenizer.json").string()));
  std::vector<std::string> vocab(tj["model"]["vocab"].size());
  for (auto& [piece, id] : tj["model"]["vocab"].items()) vocab.at(id.get<size_t>()) = piece;
  std::string text;
  for (const auto& v : vocab) text += v + "\n";
  std::ofstream(f / "vocab.txt", std::ios::binary) << text;
  const std::string out = (dir.path / "bert.safetensors").string();
  convert_hf(f.string(), out);
  LoadedMaskedLanguageModel m = load_masked_language_model(out);
  const nlohmann::json ref = reference("bert-uncased");
  for (const auto& fm : ref["fill_mask"])
    EXPECT_EQ(m.tokenizer.hf()->encode(fm["text"].get<std::string>()), fm["ids"].get<std::vector<int32_t>>());
}

// Hostile input: no mask, a text longer than the positions, a model without the head.
TEST(HfConvert, BertFillMaskRefusesHostileInput) {
  testing::TempDir dir("hf-bert-hostile-input");
  const std::string out = (dir.path / "bert.safetensors").string();
  convert_hf((kGolden / "bert-uncased").string(), out);
  LoadedMaskedLanguageModel m = load_masked_language_model(out);
  const text::HfTokenizer& tok = *m.tokenizer.hf();
  std::string e = testing::error_of([&] { decode::fill_mask(*m.model, tok, "The cat sat on the mat."); });
  EXPECT_NE(e.find("'The cat sat on the mat.' has no [MASK] token"), std::string::npos) << e;
  std::string longer = "[MASK]";
  for (int i = 0; i < 50; ++i) longer += " the cat";
  e = testing::error_of([&] { decode::fill_mask(*m.model, tok, longer); });
  EXPECT_NE(e.find("more than the model's 40 positions"), std::string::npos) << e;
  EXPECT_NE(e.find("'[MASK] the cat"), std::string::npos) << e;
  const std::string plain = (dir.path / "plain.safetensors").string();
  convert_hf((kGolden / "bert-model").string(), plain);
  LoadedMaskedLanguageModel p = load_masked_language_model(plain);
  e = testing::error_of([&] { decode::fill_mask(*p.model, *p.tokenizer.hf(), "The [MASK] sat."); });
  EXPECT_NE(e.find("no masked-language-model head"), std::string::npos) << e;
  // a masked language model is not a language model, nor the reverse
  e = testing::error_of([&] { load_language_model(out); });
  EXPECT_NE(e.find("\"bert\" model (masked language)"), std::string::npos) << e;
}

// ---- hostile folders: a clear message naming the file and the field or tensor ---------------------

// A copy of a golden folder to spoil.
fs::path copy_case(const std::string& name, const fs::path& dir) {
  const fs::path to = dir / name;
  fs::create_directories(dir);
  fs::copy(kGolden / name, to, fs::copy_options::recursive);
  return to;
}
void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(io::read_file(p.string())); }
std::string convert_error(const fs::path& folder, const fs::path& dir) {
  const fs::path out = dir / "out.safetensors";
  std::string e = testing::error_of([&] { convert_hf(folder.string(), out.string()); });
  EXPECT_FALSE(fs::exists(out)) << "a failed conversion wrote " << out;
  return e;
}

TEST(HfConvert, HostileFolders) {
  testing::TempDir dir("hf-hostile");
  EXPECT_NE(convert_error(dir.path / "nowhere", dir.path).find("does not exist"), std::string::npos);
  {  // no config.json
    fs::path f = copy_case("gpt2", dir.path / "a");
    fs::remove(f / "config.json");
    EXPECT_NE(convert_error(f, dir.path).find("has no config.json"), std::string::npos);
  }
  {  // weights only as a pickle: how to re-save them
    fs::path f = copy_case("gpt2", dir.path / "b");
    fs::rename(f / "model.safetensors", f / "pytorch_model.bin");
    const std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find("pytorch_model.bin"), std::string::npos) << e;
    EXPECT_NE(e.find("safe_serialization=True"), std::string::npos) << e;
  }
  {  // an unknown architecture
    fs::path f = copy_case("gpt2", dir.path / "c");
    auto c = read_json(f / "config.json");
    c["architectures"] = {"FancyNewModel"};
    write(f / "config.json", c.dump());
    const std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find("'FancyNewModel' is not supported"), std::string::npos) << e;
    EXPECT_NE(e.find("GPT2LMHeadModel"), std::string::npos) << e;
  }
  {  // a field qkv does not support is refused by name; a known field with an unsupported value too
    fs::path f = copy_case("gpt2", dir.path / "d");
    auto c = read_json(f / "config.json");
    c["rotary_pct"] = 0.25;
    write(f / "config.json", c.dump());
    std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
    EXPECT_NE(e.find("'rotary_pct'"), std::string::npos) << e;
    c.erase("rotary_pct");
    c["scale_attn_by_inverse_layer_idx"] = true;
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("scale_attn_by_inverse_layer_idx"), std::string::npos) << e;
    c["scale_attn_by_inverse_layer_idx"] = false;
    c["activation_function"] = "swish";
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("activation_function 'swish'"), std::string::npos) << e;
  }
  {  // a config that lies: one layer fewer than the weights hold; a wider model than they are
    fs::path f = copy_case("gpt2", dir.path / "e");
    auto c = read_json(f / "config.json");
    c["n_layer"] = 1;
    write(f / "config.json", c.dump());
    std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("h.1."), std::string::npos) << e;
    c["n_layer"] = 3;
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("no tensor of the checkpoint fills the parameter h.2."), std::string::npos) << e;
    c["n_layer"] = 2;
    c["n_embd"] = 64;
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("but config.json makes it"), std::string::npos) << e;
    c["n_embd"] = "48";
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("'n_embd'"), std::string::npos) << e;
    // a number that is not an integer, or one past int64 (converting it was undefined: config_fuzz)
    for (const nlohmann::json& bad :
         {nlohmann::json(48.5), nlohmann::json(7.9e103), nlohmann::json(18446744073709551615ull)}) {
      c["n_embd"] = bad;
      write(f / "config.json", c.dump());
      e = convert_error(f, dir.path);
      EXPECT_NE(e.find("the field 'n_embd' (= " + bad.dump() + ") has the wrong type: expected an integer"),
                std::string::npos)
          << e;
    }
    c["n_embd"] = 48;
    c["tie_word_embeddings"] = 1;
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("the field 'tie_word_embeddings' (= 1) has the wrong type: expected true or false"),
              std::string::npos)
        << e;
  }
  {  // an index that names a shard outside the folder, or one that is missing
    fs::path f = copy_case("gpt2-sharded-f16", dir.path / "g");
    auto idx = read_json(f / "model.safetensors.index.json");
    auto& map = idx["weight_map"];
    map[map.begin().key()] = "../../etc/passwd";
    write(f / "model.safetensors.index.json", idx.dump());
    std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find("not a file name inside the folder"), std::string::npos) << e;
    fs::remove(f / "model-00002-of-00002.safetensors");
    idx = read_json(kGolden / "gpt2-sharded-f16" / "model.safetensors.index.json");
    write(f / "model.safetensors.index.json", idx.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("model-00002-of-00002.safetensors"), std::string::npos) << e;
  }
  {  // a truncated weights file
    fs::path f = copy_case("gpt2", dir.path / "h");
    fs::resize_file(f / "model.safetensors", fs::file_size(f / "model.safetensors") / 2);
    EXPECT_NE(convert_error(f, dir.path).find("model.safetensors"), std::string::npos);
  }
  {  // Marian tokenizer files that are incomplete, or a vocab.json that lies
    fs::path f = copy_case("marian", dir.path / "j");
    fs::remove(f / "target.spm");
    std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find("not target.spm"), std::string::npos) << e;
    fs::copy(kGolden / "marian" / "target.spm", f / "target.spm");
    auto v = read_json(f / "vocab.json");
    v["</s>"] = 5;  // two pieces with id 5
    write(f / "vocab.json", v.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("vocab.json: the id 5 is given to two pieces"), std::string::npos) << e;
    v = read_json(kGolden / "marian" / "vocab.json");
    v["extra-piece"] = v.size();
    write(f / "vocab.json", v.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("but config.json's vocab_size is"), std::string::npos) << e;
    write(f / "source.spm", "not a model");
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("source.spm"), std::string::npos) << e;
  }
  {  // BERT: an unknown field, an unsupported position embedding, a shape that differs, no tokenizer
    fs::path f = copy_case("bert-uncased", dir.path / "k");
    auto c = read_json(f / "config.json");
    c["use_rotary"] = true;
    write(f / "config.json", c.dump());
    std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
    EXPECT_NE(e.find("'use_rotary'"), std::string::npos) << e;
    EXPECT_NE(e.find("BertForMaskedLM"), std::string::npos) << e;
    c.erase("use_rotary");
    c["position_embedding_type"] = "relative_key";
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("position_embedding_type 'relative_key'"), std::string::npos) << e;
    c.erase("position_embedding_type");
    c["type_vocab_size"] = 3;
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("model.safetensors': the tensor 'bert.embeddings.token_type_embeddings.weight' is [2,48] but "
                     "config.json makes it [3,48]"), std::string::npos) << e;
    c["type_vocab_size"] = 2;
    c["num_hidden_layers"] = 1;
    write(f / "config.json", c.dump());
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("'bert.encoder.layer.1."), std::string::npos) << e;
    c["num_hidden_layers"] = 2;
    write(f / "config.json", c.dump());
    fs::remove(f / "tokenizer.json");
    e = convert_error(f, dir.path);
    EXPECT_NE(e.find("has no tokenizer"), std::string::npos) << e;
  }
  {  // config.json that is not JSON, or not an object
    fs::path f = copy_case("gpt2", dir.path / "i");
    write(f / "config.json", "{\"architectures\": [\"GPT2LMHeadModel\"],");
    EXPECT_NE(convert_error(f, dir.path).find("config.json"), std::string::npos);
    write(f / "config.json", "[1, 2]");
    EXPECT_NE(convert_error(f, dir.path).find("not a JSON object"), std::string::npos);
  }
}

}  // namespace
}  // namespace qkv::models

namespace qkv::models {
namespace {

// Gemma 3 (text): the golden folder as transformers 5 writes it (layer_types, rope_parameters per
// layer type) and as transformers 4 wrote it (sliding_window_pattern, rope_theta / rope_scaling /
// rope_local_base_freq) — the same model, the same logits and greedy tokens.
// The case converted again from a copy whose config.json `edit` rewrote: another form of the same model.
void check_edited_config(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  testing::TempDir dir("hf-" + name + "-edited");
  const fs::path f = copy_case(name, dir.path / "edited");
  auto c = read_json(f / "config.json");
  edit(c);
  write(f / "config.json", c.dump());
  check_against_transformers(name, f);
}

TEST(HfConvert, Gemma3EqualsTransformers) {
  check_against_transformers("gemma3");
  check_text("gemma3");
  check_edited_config("gemma3", [](nlohmann::json& c) {
    const nlohmann::json rope = c["rope_parameters"];
    c.erase("rope_parameters"), c.erase("layer_types"), c.erase("_sliding_window_pattern");
    c["sliding_window_pattern"] = 2;
    c["rope_theta"] = rope["full_attention"]["rope_theta"];
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope["full_attention"]["factor"]}};
    c["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"];
    c["cache_implementation"] = "hybrid";
  });
}

// Gemma 2: the scores scaled by 1/√24 for a head_dim of 16 and soft-capped at 5, the logits at 30,
// every other layer windowed — as transformers 5 writes the folder, and as transformers 4 did (no
// layer_types: every other layer; rope_theta beside the other fields).
TEST(HfConvert, Gemma2EqualsTransformers) {
  check_against_transformers("gemma2");
  check_text("gemma2");
  check_edited_config("gemma2", [](nlohmann::json& c) {
    c["rope_theta"] = c["rope_parameters"]["rope_theta"];
    c.erase("rope_parameters"), c.erase("layer_types"), c.erase("use_bidirectional_attention");
    c["cache_implementation"] = "hybrid";
  });
}

// Gemma 3's multimodal checkpoints (4B and up): the text model of Gemma3ForConditionalGeneration, its
// vision tower and projector left out, its scores scaled by 1/√24 (the 27B's query_pre_attn_scalar
// against head_dim) — from the Hub's tensor names (language_model.model.…, what save_pretrained
// writes) and from the names transformers 5 holds in memory (model.language_model.…).
TEST(HfConvert, Gemma3MultimodalTextEqualsTransformers) {
  check_against_transformers("gemma3-multimodal");
  check_text("gemma3-multimodal");
  testing::TempDir dir("hf-gemma3-mm");
  const fs::path f = copy_case("gemma3-multimodal", dir.path / "v5");
  const io::SafetensorsFile st = io::load_safetensors((f / "model.safetensors").string());
  std::vector<std::pair<std::string, TensorBase>> renamed;
  for (const auto& [name, t] : st.tensors) {
    std::string to = name;
    for (const auto& [from, into] :
         std::vector<std::pair<std::string, std::string>>{{"language_model.model.", "model.language_model."},
                                                          {"language_model.lm_head.", "lm_head."},
                                                          {"vision_tower.", "model.vision_tower."},
                                                          {"multi_modal_projector.", "model.multi_modal_projector."}})
      if (name.starts_with(from)) {
        to = into + name.substr(from.size());
        break;
      }
    renamed.emplace_back(to, t);
  }
  ASSERT_GT(renamed.size(), 40u);
  io::save_safetensors((f / "model.safetensors").string(), renamed, st.metadata);
  check_against_transformers("gemma3-multimodal", f);
  // a tensor of neither the text model nor the image side is refused by name
  renamed.emplace_back("model.audio_tower.weight", renamed.front().second);
  io::save_safetensors((f / "model.safetensors").string(), renamed, st.metadata);
  const std::string e = convert_error(f, dir.path);
  EXPECT_NE(e.find("model.audio_tower.weight"), std::string::npos) << e;
}

// A Phi-3 folder whose config.json does not describe its fused projections: the tensor, its shape and
// config.json's named; a longrope without its factors refused by name; nothing written.
TEST(HfConvert, Phi3FusedProjectionsAreCheckedAgainstTheConfig) {
  testing::TempDir dir("hf-phi3-hostile");
  const fs::path f = copy_case("phi3", dir.path / "p");
  const auto base = read_json(f / "config.json");
  auto c = base;
  c["num_key_value_heads"] = 4;  // qkv_proj would be [(4 + 8)·16, 64]: it is [(4 + 4)·16, 64]
  write(f / "config.json", c.dump());
  std::string e = convert_error(f, dir.path);
  EXPECT_NE(e.find("self_attn.qkv_proj.weight' is [128,64] but config.json makes it [192,64]"), std::string::npos)
      << e;
  c = base;
  c["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}};
  write(f / "config.json", c.dump());
  e = convert_error(f, dir.path);
  EXPECT_NE(e.find("longrope"), std::string::npos) << e;
}

// What qkv's Gemma cannot compute is refused by name: layers not every N-th full, a scale or a soft cap
// that is no positive number, another activation, a local layer's rope scaling, Gemma 3's fields in a
// Gemma 2 folder.
TEST(HfConvert, Gemma3RefusesWhatItCannotComputeByName) {
  testing::TempDir dir("hf-gemma3-hostile");
  const fs::path f = copy_case("gemma3", dir.path / "g");
  const auto base = read_json(f / "config.json");
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& c) {
         c["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
       },
       "layer_types"},
      {[](nlohmann::json& c) {
         c["layer_types"] = {"sliding_attention", "full_attention"};
       },
       "layer_types"},
      {[](nlohmann::json& c) { c["query_pre_attn_scalar"] = 0; }, "query_pre_attn_scalar"},
      {[](nlohmann::json& c) { c["query_pre_attn_scalar"] = -16; }, "query_pre_attn_scalar"},
      {[](nlohmann::json& c) { c["final_logit_softcapping"] = -30.0; }, "final_logit_softcapping"},
      {[](nlohmann::json& c) { c["attn_logit_softcapping"] = 0.0; }, "attn_logit_softcapping"},
      {[](nlohmann::json& c) { c["attn_logit_softcapping"] = "50"; }, "attn_logit_softcapping"},
      // (a subnormal cap: 1/cap would be ∞ in f32)
      {[](nlohmann::json& c) { c["attn_logit_softcapping"] = 1e-40; }, "attn_logit_softcapping 1e-40 must be 0"},
      {[](nlohmann::json& c) { c["hidden_activation"] = "gelu"; }, "hidden_activation"},
      {[](nlohmann::json& c) { c["use_bidirectional_attention"] = true; }, "use_bidirectional_attention"},
      {[](nlohmann::json& c) { c["rope_parameters"]["sliding_attention"]["rope_type"] = "linear"; },
       "sliding_attention"},
      {[](nlohmann::json& c) { c["rope_parameters"]["chunked_attention"] = c["rope_parameters"]["full_attention"]; },
       "chunked_attention"},
  };
  for (const Case& k : cases) {
    auto c = base;
    k.edit(c);
    write(f / "config.json", c.dump());
    const std::string e = convert_error(f, dir.path);
    EXPECT_NE(e.find(k.says), std::string::npos) << k.says << ": " << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }
  // Gemma 2: Gemma 3's own fields are not Gemma 2's
  const fs::path f2 = copy_case("gemma2", dir.path / "g2");
  const auto base2 = read_json(f2 / "config.json");
  for (const char* key : {"rope_local_base_freq", "sliding_window_pattern"}) {
    auto c = base2;
    c[key] = 6;
    write(f2 / "config.json", c.dump());
    const std::string e = convert_error(f2, dir.path);
    EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
  }
  // the multimodal folder: text_config's errors named as its
  const fs::path f3 = copy_case("gemma3-multimodal", dir.path / "mm");
  auto c = read_json(f3 / "config.json");
  c["text_config"]["query_pre_attn_scalar"] = -1;
  write(f3 / "config.json", c.dump());
  std::string e = convert_error(f3, dir.path);
  EXPECT_NE(e.find("text_config: query_pre_attn_scalar"), std::string::npos) << e;
  c = read_json(f3 / "config.json");
  c["text_config"] = "gemma";
  write(f3 / "config.json", c.dump());
  e = convert_error(f3, dir.path);
  EXPECT_NE(e.find("text_config must be an object"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv::models
