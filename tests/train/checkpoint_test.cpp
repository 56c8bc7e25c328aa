// The trainer's parts: the typed training state a checkpoint carries (and the older forms of it
// that run folders on disk still hold), and the task registry behind a config's "task".
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/train/from_config.h"
#include "qkv/train/task_registry.h"
#include "qkv/train/train_state.h"
#include "testing.h"

namespace qkv::train {
namespace {

using nlohmann::json;

TEST(TrainState, RoundTripsThroughJson) {
  TrainState s;
  s.step = 500, s.optimizer_steps = 499, s.rng = ~uint64_t{0} - 7, s.elapsed_s = 81.25, s.tokens = 1234567;
  s.metrics = std::vector<json>{{{"step", 0}, {"loss", 4.5}}, {{"step", 10}, {"val_loss", 3.25}}};
  const TrainState r = TrainState::from_json(json::parse(s.to_json().dump()), "here");
  EXPECT_EQ(r.step, 500);
  EXPECT_EQ(r.optimizer_steps, 499);
  EXPECT_EQ(r.rng, s.rng);
  EXPECT_EQ(r.elapsed_s, 81.25);
  EXPECT_EQ(r.tokens, 1234567);
  ASSERT_TRUE(r.metrics.has_value());
  EXPECT_EQ(json(*r.metrics), json(*s.metrics));
  // the keys on disk, as every qkv version wrote them
  EXPECT_EQ(s.to_json(), json::parse(R"({"step": 500, "optimizer_steps": 499, "rng": 18446744073709551608,
                                         "elapsed_s": 81.25, "tokens": 1234567,
                                         "metrics": [{"step": 0, "loss": 4.5}, {"step": 10, "val_loss": 3.25}]})"));
}

TEST(TrainState, ReadsOlderCheckpointsWithoutTimeTokensOrMetrics) {
  // a checkpoint from before elapsed_s, tokens and the metrics rows travelled with it
  const TrainState r = TrainState::from_json(json::parse(R"({"step": 20, "optimizer_steps": 20, "rng": 7})"), "old");
  EXPECT_EQ(r.step, 20);
  EXPECT_EQ(r.rng, 7u);
  EXPECT_EQ(r.elapsed_s, 0);
  EXPECT_EQ(r.tokens, 0);
  EXPECT_FALSE(r.metrics.has_value());  // the rows then come from metrics.jsonl
}

TEST(TrainState, ADamagedStateIsAnErrorNamingTheFile) {
  for (const char* bad : {R"({"optimizer_steps": 1, "rng": 7})", R"({"step": -1, "optimizer_steps": 1, "rng": 7})",
                          R"({"step": 1, "optimizer_steps": 1, "rng": -7})", R"({"step": 1, "optimizer_steps": 1})",
                          R"([1, 2])"}) {
    const std::string e = testing::error_of([&] { TrainState::from_json(json::parse(bad), "ckpt.safetensors"); });
    EXPECT_NE(e.find("ckpt.safetensors"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("damaged training state"), std::string::npos) << bad << ": " << e;
  }
}

TEST(TaskRegistry, EveryTaskOnceWithItsRateUnit) {
  std::vector<std::string> names;
  for (const TaskType& t : task_types()) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"lm", "translation", "image_classification", "captioning", "text_classification",
                                      "token_classification", "question_answering", "masked_lm", "multiple_choice"}));
  EXPECT_STREQ(rate_unit(json{{"task", "lm"}}), "tokens");
  EXPECT_STREQ(rate_unit(json{{"task", "translation"}}), "tokens");
  EXPECT_STREQ(rate_unit(json{{"task", "image_classification"}}), "images");
  EXPECT_STREQ(rate_unit(json{{"task", "captioning"}}), "images");
  EXPECT_STREQ(rate_unit(json{{"task", "text_classification"}}), "examples");
  EXPECT_STREQ(rate_unit(json{{"task", "token_classification"}}), "examples");
  EXPECT_STREQ(rate_unit(json{{"task", "question_answering"}}), "windows");
  EXPECT_STREQ(rate_unit(json{{"task", "masked_lm"}}), "tokens");
  EXPECT_STREQ(rate_unit(json{{"task", "multiple_choice"}}), "examples");
  EXPECT_STREQ(rate_unit(json::object()), "tokens");
  EXPECT_EQ(&task_type("multiple_choice", "c.json"), &task_types().back());
}

TEST(TaskRegistry, AnUnknownTaskNamesTheConfigAndTheKnownOnes) {
  const std::string e = testing::error_of([] { task_type("summarization", "configs/x.json"); });
  EXPECT_NE(e.find("config 'configs/x.json': unknown \"task\" \"summarization\" (expected \"lm\", \"translation\", "
                   "\"image_classification\", \"captioning\", \"text_classification\", \"token_classification\", "
                   "\"question_answering\", \"masked_lm\" or \"multiple_choice\")"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace qkv::train
