// The models floor: the registry builds each model type from its hyper-parameters, refuses unknown
// types and the wrong kind, and the adapters hand out decoder states that only their model takes.
// A model built by the registry computes what its nn module computes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/models/network.h"
#include "qkv/models/registry.h"
#include "qkv/nn/gpt.h"
#include "qkv/nn/transformer.h"
#include "testing.h"

namespace qkv::models {
namespace {

using nlohmann::json;
using testing::error_of;

json tiny_transformer() {
  return {{"preset", "tiny"}, {"d_model", 16}, {"nhead", 2}, {"dim_feedforward", 32}, {"vocab_size", 20},
          {"max_len", 16}, {"dropout", 0.0}};
}

TEST(Registry, ListsTheModelTypes) {
  std::vector<std::string> names;
  for (const ModelType& t : model_types()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"transformer", "rnn-encdec", "rnn-attention", "captioner", "gpt", "llama", "convnet", "bert", "modernbert"}));
  EXPECT_EQ(model_type("transformer").kind, Kind::seq2seq);
  EXPECT_EQ(model_type("gpt").kind, Kind::language_model);
  EXPECT_EQ(model_type("llama").kind, Kind::language_model);
  EXPECT_EQ(model_type("convnet").kind, Kind::image_classifier);
  EXPECT_EQ(model_type("captioner").kind, Kind::image_to_text);  // images in, token ids out
  EXPECT_EQ(model_type("bert").kind, Kind::masked_language_model);
  // a ConvNet of 0 classes is a captioner's trunk, not an image classifier
  EXPECT_NE(error_of([] { build_image_classifier("convnet", {{"num_classes", 0}}); }).find("\"num_classes\" ≥ 2, got 0"),
            std::string::npos);
  const std::string e = error_of([] { model_type("lstm"); });
  EXPECT_NE(e.find("unknown model type \"lstm\" (known: transformer, rnn-encdec, rnn-attention, captioner, gpt, llama, convnet, bert, modernbert)"),
            std::string::npos)
      << e;
}

TEST(Registry, BuildsTypedModelsAndRefusesTheWrongKind) {
  Generator g(1);
  auto t = build_seq2seq("transformer", tiny_transformer(), &g);
  EXPECT_EQ(t->type(), "transformer");
  EXPECT_EQ(t->kind(), Kind::seq2seq);
  EXPECT_EQ(t->vocab_size(), 20);
  EXPECT_EQ(t->width(), 16);
  EXPECT_EQ(t->max_len(), 16);
  EXPECT_EQ(t->special_tokens().eos, 3);
  EXPECT_EQ(t->describe(), "Transformer 2+2 layers, d_model 16, 2 heads, d_ff 32, vocab 20");
  EXPECT_EQ(nn::Seq2SeqConfig::from_json(t->config_json()).d_model, 16);
  auto lm = build_language_model("gpt", json{{"vocab_size", 11}, {"n_embd", 8}, {"n_head", 2}, {"n_layer", 1}}, &g);
  EXPECT_EQ(lm->block_size(), 64);
  EXPECT_EQ(lm->width(), 8) << "a GPT's width is n_embd";
  EXPECT_NE(error_of([&] { build_language_model("transformer", tiny_transformer()); }).find("not a language model"),
            std::string::npos);
  EXPECT_NE(error_of([] { build_seq2seq("gpt", json::object()); }).find("not a sequence-to-sequence model"),
            std::string::npos);
  EXPECT_NE(error_of([] { build_seq2seq("transformer", json{{"d_modle", 8}}); }).find("unknown key \"d_modle\""),
            std::string::npos);
}

// The adapter adds no arithmetic: the registry's model and the nn module built from the same
// generator give the same logits and the same decoding steps.
TEST(Registry, TheAdapterIsTheModule) {
  Generator g1(5), g2(5);
  auto model = build_seq2seq("transformer", tiny_transformer(), &g1);
  nn::Seq2SeqTransformer net(nn::Seq2SeqConfig::from_json(tiny_transformer()), &g2);
  model->module().eval();
  net.eval();
  Tensor src = Tensor::from_ints({5, 6, 7, 3, 8, 9, 3, 0}, {2, 4}), tin = Tensor::from_ints({2, 10, 11, 2, 12, 13}, {2, 3});
  EXPECT_TENSOR_NEAR(model->forward(src, tin), net.forward(src, tin), 0.0);
  auto state = model->start_decoding(src);
  auto own = net.start_decoding(src);
  EXPECT_EQ(state->rows(), 2);
  Tensor a = model->step({2, 2}, *state), b = net.step({2, 2}, own);  // (the macro reads its arguments twice)
  EXPECT_TENSOR_NEAR(a, b, 0.0);
  EXPECT_EQ(state->length(), 1);
  state->reorder({1, 1}, true);
  own.reorder({1, 1}, true);
  a = model->step({4, 5}, *state), b = net.step({4, 5}, own);
  EXPECT_TENSOR_NEAR(a, b, 0.0);
  // a decoder state from another model is refused
  Generator g3(1);
  auto lm = build_language_model("gpt", json{{"vocab_size", 20}, {"n_embd", 8}, {"n_head", 2}, {"n_layer", 1}}, &g3);
  auto lm_state = lm->start_decoding();
  const std::string e = error_of([&] { model->step({1, 1}, *lm_state); });
  EXPECT_NE(e.find("decoder state of another model"), std::string::npos) << e;
}

// The contract an architecture must meet, checked at compile time.
static_assert(Seq2SeqNetwork<nn::Seq2SeqTransformer>);
static_assert(LanguageModelNetwork<nn::GPT>);
static_assert(!Seq2SeqNetwork<nn::GPT>);
static_assert(!LanguageModelNetwork<nn::Seq2SeqTransformer>);

}  // namespace
}  // namespace qkv::models
