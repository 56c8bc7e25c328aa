// Option groups the commands share, declared once: --threads, the decoding options of every command
// that translates or generates, and typed choices (a dtype, a backend) read through their
// enum_table (core/names.h), so the value a command gets is an enum, not a string.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "qkv/core/allocator.h"
#include "qkv/core/cuda.h"
#include "qkv/core/names.h"
#include "qkv/core/parallel.h"
#include "qkv/decode/translator.h"
#include "qkv/nn/module.h"
#include "qkv/text/lm_tokenizer.h"

namespace qkv::cli {

// --NAME VALUE, one of E's names (or of `allowed`): "must be f32 or bf16, got x" otherwise.
template <NamedEnum E>
CLI::Option* add_choice(CLI::App* app, const std::string& name, E& value, const std::string& help,
                        std::vector<E> allowed = {}) {
  if (allowed.empty())
    for (const auto& [v, n] : enum_table(E{}).names) allowed.push_back(v);
  std::string choices;
  for (size_t i = 0; i < allowed.size(); ++i)
    choices += (i ? (i + 1 == allowed.size() ? " or " : ", ") : "") + std::string(enum_name(allowed[i]));
  auto* opt = app->add_option_function<std::string>(name, [&value](const std::string& s) { value = parse_enum<E>(s); },
                                                    help + " (" + choices + ")");
  opt->check(CLI::Validator(
      [allowed, choices](std::string& in) -> std::string {
        E e{};
        const bool ok = try_parse_enum<E>(in, &e) && std::find(allowed.begin(), allowed.end(), e) != allowed.end();
        return ok ? "" : "must be " + choices + ", got " + in;
      },
      "CHOICE"));
  opt->default_str(std::string(enum_name(value)));
  return opt;
}

// --threads N: OpenMP threads for this command (default: OMP_NUM_THREADS, or all cores).
inline void add_threads_option(CLI::App* app, int& threads) {
  app->add_option("--threads", threads, "threads (default: all cores)")->check(greater_than_zero());
}
inline void use_threads(int threads) {
  if (threads == 0) return;  // not given
  check_thread_count(threads, "--threads");
  set_num_threads(threads);
}
// A command that decodes (translate, generate, serve …): its threads, and the allocator's cache
// bounded for decoding (a quarter of the peak; core/allocator.h) instead of training's 256 MiB.
inline void use_threads_for_decoding(int threads) {
  use_threads(threads);
  set_cache_limit(decoding_cache_limit());
}

// The decoding options of translate, eval, attend, probe, generate and the translation bench: the
// flags bind decode::TranslateOptions' fields themselves, so their defaults are its defaults and
// their ranges the ones decode::check_options enforces.
struct DecodeArgs {
  decode::TranslateOptions translate;
  nn::InferenceWeights weights = nn::InferenceWeights::f32;
  CLI::Option* weights_option = nullptr;  // --dtype, where the command has it
  int threads = 0;

  // --dtype as given; unset (not given): each model file's own (models::decoding_weights).
  std::optional<nn::InferenceWeights> requested_weights() const {
    if (weights_option && weights_option->count() > 0) return weights;
    return std::nullopt;
  }
  int64_t beam() const { return translate.beam_size; }
  bool use_cache() const { return translate.use_cache; }
};

// --device: cpu (default), cuda or cuda:N, as PyTorch spells them; a GPU needs a build with the CUDA
// backend (scripts/build.sh builds it where the CUDA toolkit is; docs/CUDA.md). device_from refuses one this build or machine lacks.
inline void add_device_option(CLI::App* app, std::string& device, const std::string& what) {
  app->add_option("--device", device, "where to " + what + ": cpu, cuda or cuda:N (a build with the CUDA backend)")
      ->capture_default_str();
}
inline Device device_from(const std::string& name, const char* command) {
  const Device d = Device::parse(name);
  QKV_CHECK(device_available(d), command, " --device ", name, ": ",
            cuda::is_built() ? "this machine shows no such CUDA GPU"
                             : "this build of qkv has no CUDA backend (scripts/build.sh builds one where the CUDA toolkit is)");
  return d;
}

enum DecodeOption : unsigned {
  kBeam = 1u << 0,
  kAlpha = 1u << 1,
  kMaxExtra = 1u << 2,
  kBatchSize = 1u << 3,
  kWeights = 1u << 4,
  kNoCache = 1u << 5,
  kThreads = 1u << 6,
  kAllDecodeOptions = (1u << 7) - 1,
};

inline void add_decode_options(CLI::App* app, DecodeArgs& a, unsigned which = kAllDecodeOptions) {
  decode::TranslateOptions& t = a.translate;
  if (which & kBeam)
    app->add_option("-b,--beam", t.beam_size, "beam size (1 = greedy search)")
        ->capture_default_str()
        ->check(between(1, decode::kMaxBeamSize));
  if (which & kAlpha) {
    app->add_option("--alpha", t.length_penalty, "length penalty α: hypotheses ranked by log p / ((5+|Y|)/6)^α")
        ->capture_default_str()
        ->check(between(0.0, decode::kMaxLengthPenalty));
    app->add_option_function<std::string>(
           "--beam-rule", [&t](const std::string& rule) { t.transformers_beam = rule == "transformers"; },
                    "qkv: rank by log p / ((5+|Y|)/6)^α and stop when settled; transformers: rank by log p / |Y|^α "
                    "and stop as Hugging Face's generate(num_beams=…) does, EOS forced at the limit (a converted "
                    "model's translations equal transformers' with --alpha 1)")
        ->check(CLI::IsMember({"qkv", "transformers"}))
        ->default_str("qkv");
  }
  if (which & kMaxExtra) {  // the lengths: of an output, and of a source
    app->add_option("--max-extra", t.max_extra, "an output has at most |source| + this many tokens")
        ->capture_default_str()
        ->check(between(1, decode::kMaxExtraTokens));
    app->add_option("--max-length", t.max_length,
                    "an output has at most this many tokens, its EOS included (transformers' max_new_tokens, "
                    "CTranslate2's max_decoding_length; 0: no limit but --max-extra's)")
        ->capture_default_str()
        ->check(between(0, decode::kMaxDecodingLength));
    app->add_option("--max-input-length", t.max_input_length,
                    "truncate longer sources to this many tokens, with a warning naming the line (0: the model's "
                    "longest; -1: an over-long line is an error)")
        ->capture_default_str()
        ->check(between(-1, 1000000));
  }
  if (which & kBatchSize)
    app->add_option("--batch-size", t.batch_size, "sentences per batch")->capture_default_str()->check(between(1, 4096));
  if (which & kWeights) {
    a.weights_option = add_choice(
        app, "--dtype", a.weights,
        "weights the decoding steps read: f32, bf16 copies (half the memory traffic) or int8 rows with a scale "
        "each (a quarter; activations quantized per row; the CPU only); on a GPU, bf16 runs the linears on the "
        "tensor cores (cuBLAS). Default: int8 for a file qkv quantize wrote, f32 otherwise");
    a.weights_option->default_str("");  // (the file's own, not f32 always)
  }
  if (which & kNoCache)
    app->add_flag_callback("--no-cache", [&t] { t.use_cache = false; },
                           "recompute the decoder over the whole prefix every step (slow; for comparison)");
  if (which & kThreads) add_threads_option(app, a.threads);
}

// The chat template of `path`'s tokenizer for `command` (generate --chat, qkv chat): refused by name
// where the model has none or it does not compile here.
inline const text::ChatTemplate& chat_template_of(const text::LMTokenizer& t, const std::string& path,
                                                  const char* command) {
  QKV_CHECK(t.chat_template_error().empty(), command, ": ", t.chat_template_error());
  QKV_CHECK(t.chat_template(), command, ": '", path, "' has no chat template (a base model, or one converted without ",
            "chat_template.jinja / tokenizer_config.json's \"chat_template\"); `qkv generate -p` continues a text");
  return *t.chat_template();
}

// --chat-template-kwargs: a JSON object of more variables for the template ("" → none).
inline nlohmann::ordered_json chat_template_kwargs(const std::string& text) {
  if (text.empty()) return nlohmann::ordered_json::object();
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    QKV_CHECK(false, "--chat-template-kwargs: not JSON: ", e.what());
  }
  QKV_CHECK(j.is_object(), "--chat-template-kwargs: expected a JSON object, e.g. '{\"enable_thinking\": false}'");
  return j;
}

}  // namespace qkv::cli
