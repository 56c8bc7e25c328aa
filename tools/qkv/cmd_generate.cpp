// qkv generate — samples text from a trained GPT (a model.safetensors written by `qkv train`),
// streaming each character as it is chosen, with a KV cache. Several samples of a GPT or a Llama
// run together (decode/batching_generator.h: one step computes a token of each): the first streams
// as it is made, the others are printed after it, in order, each the text it would be alone.
#include <algorithm>
#include <chrono>
#include <limits>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/decode/batching_generator.h"
#include "qkv/decode/generate.h"
#include "qkv/models/load.h"

namespace qkv::cli {

// A relative model path that does not exist here is also looked for next to the qkv checkout the
// binary was built in (build/qkv → models/…), so the shipped models work from any directory.
std::string find_model(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::exists(path) || fs::path(path).is_absolute()) return path;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      if (fs::exists(dir / path)) return (dir / path).string();
  return path;
}

void add_generate(CLI::App& app) {
  auto* sub = app.add_subcommand("generate", "Generate text with a trained GPT language model");
  struct Args {
    std::string model = "models/shakespeare-char.safetensors", prompt = "\n";
    int64_t max_new_tokens = 500, top_k = 0, num_samples = 1;
    double temperature = 0.8, top_p = 1.0, repetition_penalty = 1.0, frequency_penalty = 0.0, presence_penalty = 0.0;
    uint64_t seed = 1337;
    DecodeArgs decode;
    bool stats = false;
    std::string device = "cpu";
    bool chat = false, print_prompt = false;
    std::string system, chat_kwargs;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("-m,--model", a->model, "model file (model.safetensors from qkv train)")->capture_default_str();
  sub->add_option("-p,--prompt", a->prompt, "text to continue (default: a newline)");
  sub->add_option("-n,--max-new-tokens", a->max_new_tokens, "tokens to generate")
      ->capture_default_str()
      ->check(zero_or_more());
  sub->add_option("-t,--temperature", a->temperature, "softmax temperature; 0 (or below 1e-5) = greedy")
      ->capture_default_str()
      ->check(zero_or_more());
  sub->add_option("-k,--top-k", a->top_k, "keep only the k most likely tokens (0 = off)")
      ->capture_default_str()
      ->check(zero_or_more());
  sub->add_option("--top-p", a->top_p, "nucleus sampling: keep the most likely tokens up to this probability")
      ->capture_default_str()
      ->check(between(0.0, 1.0, true));
  sub->add_option("--repetition-penalty", a->repetition_penalty,
                  "a token of the prompt or the output: its positive logit divided by this, a negative one multiplied "
                  "(Hugging Face's; 1 = off)")
      ->capture_default_str()
      ->check(between(0.0, 10.0, true));
  sub->add_option("--frequency-penalty", a->frequency_penalty,
                  "subtracted from a token's logit once for each time the output holds it (OpenAI's; 0 = off)")
      ->capture_default_str()
      ->check(between(-2.0, 2.0));
  sub->add_option("--presence-penalty", a->presence_penalty,
                  "subtracted from the logit of a token the output holds (OpenAI's; 0 = off)")
      ->capture_default_str()
      ->check(between(-2.0, 2.0));
  sub->add_option("-s,--seed", a->seed, "random seed (the same seed gives the same text)")
      ->capture_default_str()
      ->check(unsigned_64());
  sub->add_option("--num-samples", a->num_samples, "samples to draw (seeds seed, seed+1, …)")
      ->capture_default_str()
      ->check(greater_than_zero());
  add_decode_options(sub, a->decode, kWeights | kNoCache | kThreads);
  sub->add_flag("--stats", a->stats, "print tokens/s and the peak resident memory to stderr");
  sub->add_flag("--chat", a->chat,
                "the prompt is a user's message: render it with the model's chat template (a converted instruct "
                "model's; as transformers' apply_chat_template with add_generation_prompt) and print the answer only");
  sub->add_option("--system", a->system, "with --chat: a system message before the user's");
  sub->add_option(
      "--chat-template-kwargs", a->chat_kwargs,
      "with --chat: more variables for the template, as a JSON object (e.g. '{\"enable_thinking\": false}')");
  sub->add_flag("--print-prompt", a->print_prompt, "with --chat: print the rendered prompt to stderr");
  add_device_option(sub, a->device, "generate (a GPU: the weights --dtype names, f32 or bf16)");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    QKV_CHECK(static_cast<uint64_t>(a->num_samples - 1) <= std::numeric_limits<uint64_t>::max() - a->seed,
              "generate: --seed ", a->seed, " with --num-samples ", a->num_samples,
              ": the samples' seeds (seed, seed + 1, …) would pass 2^64 − 1");
    const Device device = device_from(a->device, "generate");
    models::LoadOptions lo;
    lo.weights = a->decode.requested_weights();
    lo.device = device;
    models::LoadedLanguageModel g = models::load_language_model(find_model(a->model), lo);
    std::vector<int32_t> prompt;
    std::string echo = a->prompt;  // what is printed before the generated text
    if (a->chat) {
      // the prompt as the user's message (after --system's), in the model's chat template, encoded
      // without adding special tokens (the template writes them): apply_chat_template's prompt
      const text::ChatTemplate& t = chat_template_of(g.tokenizer, a->model, "generate --chat");
      text::ChatInputs in;
      if (!a->system.empty()) in.messages.push_back({{"role", "system"}, {"content", a->system}});
      in.messages.push_back({{"role", "user"}, {"content", a->prompt}});
      in.extra = chat_template_kwargs(a->chat_kwargs);
      const std::string text = t.apply(in);
      if (a->print_prompt) std::fprintf(stderr, "%s", text.c_str());
      prompt = g.tokenizer.encode_prompt(text);
      echo.clear();
    } else {
      QKV_CHECK(a->system.empty() && a->chat_kwargs.empty() && !a->print_prompt,
                "generate: --system, --chat-template-kwargs and --print-prompt go with --chat");
      try {
        prompt = g.tokenizer.encode(a->prompt);
      } catch (const Error& e) {
        QKV_CHECK(false, "--prompt: ", e.what());
      }
    }
    QKV_CHECK(!prompt.empty(), "--prompt is empty; give at least one character");
    auto options = [&](int64_t s) {
      decode::GenerateOptions o;
      o.max_new_tokens = a->max_new_tokens, o.use_cache = a->decode.use_cache(), o.stop_ids = g.stop_ids;
      o.sampling.temperature = a->temperature, o.sampling.top_k = a->top_k, o.sampling.top_p = a->top_p;
      o.sampling.repetition_penalty = a->repetition_penalty, o.sampling.frequency_penalty = a->frequency_penalty,
      o.sampling.presence_penalty = a->presence_penalty;
      o.sampling.seed = a->seed + static_cast<uint64_t>(s);
      return o;
    };
    if (a->num_samples > 1 && a->decode.use_cache() && g.model->paged()) {
      // the samples together: the first streams as it is made, each later one printed once those
      // before it end (its characters kept meanwhile by its own streamer: a character may span tokens)
      decode::BatchingGeneratorOptions bo;
      bo.max_batch = std::min<int64_t>(a->num_samples, 64);
      decode::BatchingGenerator batcher(*g.model, bo);
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(a->num_samples), prompt);
      std::vector<decode::GenerateOptions> opts;
      for (int64_t s = 0; s < a->num_samples; ++s) opts.push_back(options(s));
      text::TextStreamer streamer(g.tokenizer);
      size_t printing = 0;
      auto end_sample = [&] {
        const std::string rest = streamer.flush();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
        std::fputs("\n---------------\n", stdout);
        std::fflush(stdout);
      };
      auto print_up_to = [&](size_t i) {  // ends the samples before i (some may have made no token)
        for (; printing < i; ++printing) {
          end_sample();
          std::fputs(echo.c_str(), stdout);
        }
      };
      std::fputs(echo.c_str(), stdout);
      const auto outs = batcher.generate_all(prompts, opts, [&](size_t i, int32_t id) {
        print_up_to(i);
        const std::string c = streamer.push(id);
        std::fwrite(c.data(), 1, c.size(), stdout);
        std::fflush(stdout);
        return true;
      });
      print_up_to(outs.size() - 1);
      end_sample();
      int64_t tokens = 0;
      for (const auto& out : outs) tokens += static_cast<int64_t>(out.size());
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (a->stats)
        std::fprintf(stderr, "generated %lld tokens in %.3f s: %.1f tokens/s (KV cache, %lld samples batched); peak RSS %.0f MiB\n",
                     static_cast<long long>(tokens), dt, static_cast<double>(tokens) / dt,
                     static_cast<long long>(a->num_samples), peak_rss_mib());
      return 0;
    }
    for (int64_t s = 0; s < a->num_samples; ++s) {
      const decode::GenerateOptions o = options(s);
      std::fputs(echo.c_str(), stdout);
      const auto t0 = std::chrono::steady_clock::now();
      text::TextStreamer streamer(g.tokenizer);
      auto out = decode::generate(*g.model, prompt, o, [&](int32_t id) {
        const std::string c = streamer.push(id);
        std::fwrite(c.data(), 1, c.size(), stdout);
        std::fflush(stdout);
        return true;
      });
      const std::string rest = streamer.flush();
      std::fwrite(rest.data(), 1, rest.size(), stdout);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fputs("\n", stdout);
      if (a->num_samples > 1) std::fputs("---------------\n", stdout);
      std::fflush(stdout);
      if (a->stats)
        std::fprintf(stderr, "generated %zu tokens in %.3f s: %.1f tokens/s (%s); peak RSS %.0f MiB\n", out.size(), dt,
                     static_cast<double>(out.size()) / dt, a->decode.use_cache() ? "KV cache" : "no cache", peak_rss_mib());
    }
    return 0;
  });
}

}  // namespace qkv::cli
