// qkv fill-mask — a masked language model's (BERT's) guesses for each [MASK] of a text, as
// transformers' pipeline("fill-mask") gives them: the top-k tokens with their probabilities and the
// text with each filled in.
//
//   qkv fill-mask bert.safetensors "The cat [MASK] on the mat." --top-k 5 [--json]
//   qkv fill-mask -m bert.safetensors "first text" "second text"
#include <cstdio>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/decode/fill_mask.h"
#include "qkv/models/load.h"

namespace qkv::cli {

void add_fill_mask(CLI::App& app) {
  auto* sub = app.add_subcommand("fill-mask", "Fill each [MASK] of a text with a masked language model (BERT): "
                                              "the top-k tokens and their probabilities");
  struct Args {
    std::string model, pair;
    std::vector<std::string> inputs;
    int64_t top_k = 5;
    bool json = false;
    DecodeArgs decode;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("inputs", a->inputs, "MODEL then the text(s) with [MASK] tokens (or only the texts, with -m)")
      ->required();
  sub->add_option("-m,--model", a->model, "model file (a converted BertForMaskedLM)");
  sub->add_option("-k,--top-k", a->top_k, "candidates per mask")->capture_default_str()->check(greater_than_zero());
  sub->add_option("--pair", a->pair, "a second segment after the text (token type 1), as tokenizer(text, text_pair)");
  sub->add_flag("--json", a->json, "one JSON object per text: {\"text\", \"masks\": [[{\"score\", \"token\", "
                                   "\"token_str\", \"sequence\"}, …] per mask]}");
  add_decode_options(sub, a->decode, kThreads);
  sub->footer("Example: qkv convert --from hf bert-base-uncased -o bert.safetensors\n"
              "         qkv fill-mask bert.safetensors \"The cat [MASK] on the mat.\"");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    std::vector<std::string> texts = a->inputs;
    std::string model = a->model;
    if (model.empty()) {
      QKV_CHECK(texts.size() >= 2, "qkv fill-mask: give the model file and a text with [MASK] (or -m MODEL and the "
                                   "text), got ", texts.size(), " argument");
      model = texts.front();
      texts.erase(texts.begin());
    }
    models::LoadedMaskedLanguageModel m = models::load_masked_language_model(find_model(model));
    decode::FillMaskOptions opt;
    opt.top_k = a->top_k, opt.text_pair = a->pair;
    for (const std::string& text : texts) {
      const auto masks = decode::fill_mask(*m.model, *m.tokenizer.hf(), text, opt);
      if (a->json) {
        nlohmann::json j = {{"text", text}, {"masks", nlohmann::json::array()}};
        for (const auto& cands : masks) {
          nlohmann::json list = nlohmann::json::array();
          for (const auto& c : cands)
            list.push_back({{"score", c.score}, {"token", c.token}, {"token_str", c.token_str}, {"sequence", c.sequence}});
          j["masks"].push_back(list);
        }
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        continue;
      }
      std::printf("%s\n", text.c_str());
      for (size_t i = 0; i < masks.size(); ++i) {
        if (masks.size() > 1) std::printf("  mask %zu of %zu:\n", i + 1, masks.size());
        for (const auto& c : masks[i])
          std::printf("  %8.4f  %-16s %s\n", c.score, c.token_str.c_str(), c.sequence.c_str());
      }
    }
    return 0;
  });
}

}  // namespace qkv::cli
