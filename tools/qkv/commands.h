// The qkv subcommands: each cmd_*.cpp adds one to the app and runs it when selected.
#pragma once

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace qkv::cli {

void add_demo(CLI::App& app);
void add_bench(CLI::App& app);
void add_train(CLI::App& app);
void add_bench_gpt(CLI::App* bench);
void add_bench_seq2seq(CLI::App* bench);
void add_bench_vision(CLI::App* bench);
void add_bench_caption(CLI::App* bench);
void add_bench_paged(CLI::App* bench);
void add_bench_loss(CLI::App* bench);
void add_bench_tokenizer(CLI::App* bench);
void add_generate(CLI::App& app);
void add_chat(CLI::App& app);
void add_translate(CLI::App& app);
void add_eval(CLI::App& app);
void add_attend(CLI::App& app);
void add_classify(CLI::App& app);
void add_average(CLI::App& app);
void add_quantize(CLI::App& app);
void add_convert(CLI::App& app);
void add_fill_mask(CLI::App& app);
void add_classify_text(CLI::App& app);
void add_embed(CLI::App& app);
void add_rerank(CLI::App& app);
void add_answer(CLI::App& app);
void add_choose(CLI::App& app);
void add_plot(CLI::App& app);
void add_scenes(CLI::App& app);
void add_caption(CLI::App& app);
void add_serve(CLI::App& app);
void add_export(CLI::App& app);

// "train.max_iters=100": sets config["train"]["max_iters"] = 100 (the value parsed as JSON, else a
// string) — what `--set` does (cmd_train.cpp).
void apply_override(nlohmann::json& config, const std::string& kv);
// A JSON config file with --set overrides applied; not JSON, or not an object: a qkv::Error naming it.
nlohmann::json load_config(const std::string& path, const std::vector<std::string>& overrides);

// A shipped model path (models/…) resolved from the working directory or the qkv checkout.
std::string find_model(const std::string& path);
// The process's peak resident memory so far (getrusage's ru_maxrss), in MiB: what --stats reports.
inline double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}
// The default translation model shipped with qkv.
inline constexpr const char* kDefaultTranslator = "models/en-fr.safetensors";

// Checks for numeric options, with plain messages ("--iters: must be a number greater than 0,
// got 0"): CLI11 2.1's PositiveNumber and NonNegativeNumber check against a double range and print
// its bounds in full ("not in range 0.000000 to 179769313486231570814527…"), even for integers.
inline CLI::Validator number_check(std::function<bool(double)> ok, std::string want, std::string name) {
  return CLI::Validator(
      [ok = std::move(ok), want = std::move(want)](std::string& in) -> std::string {
        double v = 0;
        return CLI::detail::lexical_cast(in, v) && ok(v) ? "" : "must be " + want + ", got " + in;
      },
      std::move(name));
}
inline CLI::Validator greater_than_zero() {
  return number_check([](double v) { return v > 0; }, "a number greater than 0", "POSITIVE");
}
inline CLI::Validator zero_or_more() {
  return number_check([](double v) { return v >= 0; }, "a number ≥ 0", "NONNEGATIVE");
}
// lo ≤ v ≤ hi (lo < v ≤ hi when lo_open)
inline CLI::Validator between(double lo, double hi, bool lo_open = false) {
  std::ostringstream want;
  want << "in " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
  return number_check([=](double v) { return (lo_open ? v > lo : v >= lo) && v <= hi; }, want.str(), want.str());
}
// A decimal integer 0 … 2^64 − 1, read exactly (a double cannot tell 2^64 − 1 from 2^64, and
// CLI11 took "-1" and 18446744073709551616 for a uint64_t and wrapped them): a seed.
inline CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        uint64_t v = 0;
        const char* end = in.data() + in.size();
        const auto [ptr, ec] = std::from_chars(in.data(), end, v);
        const bool ok = !in.empty() && in[0] >= '0' && in[0] <= '9' && ec == std::errc() && ptr == end;
        return ok ? "" : "must be an integer from 0 to 18446744073709551615, got " + in;
      },
      "UINT64");
}

// Every subcommand registers its runner here; run_selected calls the one the user chose.
void register_runner(CLI::App* sub, std::function<int()> run);
int run_selected(CLI::App& app);

}  // namespace qkv::cli
