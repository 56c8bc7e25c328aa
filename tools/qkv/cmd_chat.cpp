// qkv chat — a conversation with a converted instruct model, turn by turn: each line read is the
// user's message, the whole history is rendered with the model's chat template (as transformers'
// apply_chat_template, add_generation_prompt) and the answer streamed, then kept in the history.
// A model with a paged KV cache (GPT, the Llama family) reuses the cached pages of the turns before
// (the batching generator's prefix cache), so a turn computes only its new tokens.
//
//   qkv chat qwen-instruct.safetensors --system "Be brief." -t 0
//   printf 'Hi\nAnd in French?\n' | qkv chat -m qwen-instruct.safetensors      (a turn a line)
//
// "/reset" starts the conversation again (the system message kept); "/exit" or the end of the input ends.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/decode/batching_generator.h"
#include "qkv/decode/generate.h"
#include "qkv/models/load.h"
#include "qkv/text/lm_tokenizer.h"

namespace qkv::cli {

void add_chat(CLI::App& app) {
  auto* sub = app.add_subcommand("chat", "Chat with a converted instruct model: a turn a line, rendered with its chat template");
  struct Args {
    std::string model, model_flag, system, chat_kwargs;
    int64_t max_new_tokens = 512, top_k = 0;
    double temperature = 0.7, top_p = 1.0, repetition_penalty = 1.0;
    uint64_t seed = 1337;
    bool print_prompt = false;
    DecodeArgs decode;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("model", a->model, "model file (qkv convert of an instruct model with a chat template)");
  sub->add_option("-m,--model", a->model_flag, "model file (instead of the positional one)");
  sub->add_option("--system", a->system, "a system message before the conversation");
  sub->add_option("-n,--max-new-tokens", a->max_new_tokens, "the most tokens an answer has")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("-t,--temperature", a->temperature, "softmax temperature; 0 (or below 1e-5) = greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("-k,--top-k", a->top_k, "keep only the k most likely tokens (0 = off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", a->top_p, "nucleus sampling: keep the most likely tokens up to this probability")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1.0));
  sub->add_option("--repetition-penalty", a->repetition_penalty,
                  "Hugging Face's: a token seen before has its positive logit divided by this (1 = off)")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e3));
  sub->add_option("-s,--seed", a->seed, "random seed (each turn draws from seed + its number)")
      ->capture_default_str()
      ->check(unsigned_64());
  sub->add_option("--chat-template-kwargs", a->chat_kwargs,
                  "more variables for the template, as a JSON object (e.g. '{\"enable_thinking\": false}')");
  sub->add_flag("--print-prompt", a->print_prompt, "print each turn's rendered prompt to stderr");
  add_decode_options(sub, a->decode, kWeights | kThreads);
  register_runner(sub, [a] {
    QKV_CHECK(a->model.empty() != a->model_flag.empty(), "chat: give the model file once, as MODEL or -m");
    const std::string path = a->model.empty() ? a->model_flag : a->model;
    use_threads_for_decoding(a->decode.threads);
    models::LoadOptions lo;
    lo.weights = a->decode.requested_weights();
    models::LoadedLanguageModel g = models::load_language_model(path, lo);
    const text::ChatTemplate& t = chat_template_of(g.tokenizer, path, "chat");
    text::ChatInputs in;
    in.extra = chat_template_kwargs(a->chat_kwargs);
    auto restart = [&] {
      in.messages = nlohmann::ordered_json::array();
      if (!a->system.empty()) in.messages.push_back({{"role", "system"}, {"content", a->system}});
    };
    restart();
    std::unique_ptr<decode::BatchingGenerator> batcher;  // (the prefix cache: earlier turns' pages)
    if (g.model->paged()) batcher = std::make_unique<decode::BatchingGenerator>(*g.model);
    const bool interactive = ::isatty(STDIN_FILENO);
    std::string line;
    for (uint64_t turn = 0;; ++turn) {
      if (interactive) {
        std::fputs("> ", stdout);
        std::fflush(stdout);
      }
      if (!std::getline(std::cin, line)) break;
      if (line == "/exit") break;
      if (line == "/reset") {
        restart();
        continue;
      }
      if (line.empty()) continue;
      in.messages.push_back({{"role", "user"}, {"content", line}});
      std::string prompt_text;
      try {
        prompt_text = t.apply(in);
      } catch (const Error& e) {  // (the template's refusal ends this turn, not the conversation)
        in.messages.erase(in.messages.end() - 1);
        std::fprintf(stderr, "qkv: %s\n", e.what());
        continue;
      }
      if (a->print_prompt) std::fputs(prompt_text.c_str(), stderr);
      const std::vector<int32_t> prompt = g.tokenizer.encode_prompt(prompt_text);
      decode::GenerateOptions o;
      o.max_new_tokens = a->max_new_tokens, o.stop_ids = g.stop_ids;
      o.sampling.temperature = a->temperature, o.sampling.top_k = a->top_k, o.sampling.top_p = a->top_p;
      o.sampling.repetition_penalty = a->repetition_penalty, o.sampling.seed = a->seed + turn;
      text::TextStreamer streamer(g.tokenizer);
      auto show = [&](int32_t id) {
        const std::string c = streamer.push(id);
        std::fwrite(c.data(), 1, c.size(), stdout);
        std::fflush(stdout);
        return true;
      };
      const std::vector<int32_t> out = batcher ? batcher->generate(prompt, o, show) : decode::generate(*g.model, prompt, o, show);
      const std::string rest = streamer.flush();
      std::fwrite(rest.data(), 1, rest.size(), stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
      in.messages.push_back({{"role", "assistant"}, {"content", g.tokenizer.decode(out)}});
    }
    if (interactive) std::fputs("\n", stdout);
    return 0;
  });
}

}  // namespace qkv::cli
