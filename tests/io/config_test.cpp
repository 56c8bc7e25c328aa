// Typed configuration: one field table per config reads JSON with checked values, writes it back,
// and names every known key when it meets an unknown one; enums are parsed by name only.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/io/config.h"
#include "qkv/nn/gpt.h"
#include "qkv/nn/transformer.h"
#include "qkv/train/trainer.h"
#include "testing.h"

namespace qkv {
namespace {

using nlohmann::json;
using testing::error_of;

enum class Colour : uint8_t { red, green };
constexpr EnumTable<Colour, 2> enum_table(Colour) { return {"colour", {{{Colour::red, "red"}, {Colour::green, "green"}}}}; }

struct Sample {
  int64_t n = 3;
  double rate = 0.5;
  bool on = false;
  std::string name = "x";
  Colour colour = Colour::red;
  uint64_t seed = 1;
  static const io::Fields<Sample>& fields() {
    using F = io::Fields<Sample>;
    static const F f("sample config", {
                                          F::integer("n", &Sample::n, 1, 10),
                                          F::number("rate", &Sample::rate, 0, 1, /*hi_open=*/true),
                                          F::boolean("on", &Sample::on),
                                          F::text("name", &Sample::name),
                                          F::choice("colour", &Sample::colour),
                                          F::unsigned_integer("seed", &Sample::seed),
                                      });
    return f;
  }
};

TEST(Config, ReadsChecksAndWritesEveryField) {
  const Sample s = Sample::fields().from_json(
      json{{"n", 7}, {"rate", 0.25}, {"on", true}, {"name", "y"}, {"colour", "green"}, {"seed", 9}});
  EXPECT_EQ(s.n, 7);
  EXPECT_EQ(s.rate, 0.25);
  EXPECT_TRUE(s.on);
  EXPECT_EQ(s.name, "y");
  EXPECT_EQ(s.colour, Colour::green);
  EXPECT_EQ(s.seed, 9u);
  const json back = Sample::fields().to_json(s);
  EXPECT_EQ(back["colour"], "green");
  EXPECT_EQ(Sample::fields().from_json(back).n, 7) << "to_json → from_json round-trips";
  // absent keys keep the start values
  EXPECT_EQ(Sample::fields().from_json(json::object()).n, 3);
}

TEST(Config, BadValuesAndUnknownKeysAreClearErrors) {
  auto err = [](const json& j) { return error_of([&] { Sample::fields().from_json(j); }); };
  EXPECT_NE(err({{"n", 11}}).find("\"n\" must be an integer in [1, 10], got 11"), std::string::npos) << err({{"n", 11}});
  EXPECT_NE(err({{"n", 2.5}}).find("must be an integer"), std::string::npos);
  EXPECT_NE(err({{"rate", 1.0}}).find("[0, 1)"), std::string::npos) << err({{"rate", 1.0}});
  EXPECT_NE(err({{"on", 1}}).find("true or false"), std::string::npos);
  EXPECT_NE(err({{"colour", "blue"}}).find("must be red or green, got \"blue\""), std::string::npos)
      << err({{"colour", "blue"}});
  EXPECT_NE(err({{"seed", -1}}).find("non-negative"), std::string::npos);
  const std::string unknown = err({{"nn", 1}});
  EXPECT_NE(unknown.find("sample config: unknown key \"nn\" (known: n, rate, on, name, colour, seed)"),
            std::string::npos)
      << unknown;
  EXPECT_NE(err(json::array()).find("expected a JSON object"), std::string::npos);
}

TEST(Config, EnumsByName) {
  EXPECT_EQ(parse_enum<Colour>("green"), Colour::green);
  EXPECT_EQ(enum_name(Colour::red), "red");
  EXPECT_EQ(enum_choices<Colour>(), "red or green");
  EXPECT_NE(error_of([] { parse_enum<Colour>("Red", "--colour"); }).find("--colour: \"Red\" is not a colour"),
            std::string::npos);
  EXPECT_EQ(parse_enum<nn::Activation>("gelu_tanh"), nn::Activation::gelu_tanh);
  EXPECT_EQ(parse_enum<train::Schedule>("inverse_sqrt"), train::Schedule::inverse_sqrt);
  EXPECT_EQ(parse_enum<nn::InferenceWeights>("bf16"), nn::InferenceWeights::bf16);
  EXPECT_EQ(parse_enum<AttentionCompute>("bf16"), AttentionCompute::bf16);
  EXPECT_EQ(parse_enum<io::StoreAs>("f16"), io::StoreAs::kF16);
}

// The shipped configs' sections read into typed values, and what a model file stores reads back
// to the same config.
TEST(Config, ModelAndTrainingConfigsRoundTrip) {
  const nn::Seq2SeqConfig small = nn::Seq2SeqConfig::from_json(json{{"preset", "small"}, {"activation", "gelu"}});
  EXPECT_EQ(small.d_model, 256);
  EXPECT_EQ(small.activation, nn::Activation::gelu);
  EXPECT_EQ(nn::Seq2SeqConfig::from_json(small.to_json()).to_json(), small.to_json());
  EXPECT_FALSE(small.to_json().contains("preset")) << "a model file stores the sizes, not the preset's name";
  EXPECT_NE(error_of([] { nn::Seq2SeqConfig::from_json(json{{"positions", "rotary"}}); })
                .find("\"positions\" must be sinusoidal, learned or sinusoidal_split"),
            std::string::npos);
  EXPECT_NE(error_of([] { nn::Seq2SeqConfig::from_json(json{{"preset", "huge"}}); }).find("unknown preset"),
            std::string::npos);
  const nn::GPTConfig g = nn::GPTConfig::from_json(json{{"n_embd", 64}, {"n_head", 4}});
  EXPECT_EQ(g.width(), 64);
  EXPECT_EQ(nn::GPTConfig::from_json(g.to_json()).to_json(), g.to_json());
  const train::TrainConfig t = train::TrainConfig::from_json(
      json{{"optimizer", "adam"}, {"schedule", "constant"}, {"dtype", "bf16"}, {"model_dtype", "f16"}});
  EXPECT_EQ(t.optimizer, train::Optimizer::adam);
  EXPECT_EQ(t.autocast, AutocastDType::bf16);
  EXPECT_EQ(t.model_dtype, io::StoreAs::kF16);
  EXPECT_EQ(t.to_json()["dtype"], "bf16");
  EXPECT_NE(error_of([] { train::TrainConfig::from_json(json{{"model_dtype", "keep"}}); })
                .find("must be f32, f16 or bf16"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
