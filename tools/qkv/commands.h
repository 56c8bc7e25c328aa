// The qkv subcommands: each cmd_*.cpp adds one to the app and runs it when selected.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace qkv::cli {

void add_demo(CLI::App& app);
void add_bench(CLI::App& app);
void add_train(CLI::App& app);
void add_bench_gpt(CLI::App* bench);
void add_bench_seq2seq(CLI::App* bench);
void add_generate(CLI::App& app);
void add_translate(CLI::App& app);
void add_eval(CLI::App& app);
void add_attend(CLI::App& app);
void add_average(CLI::App& app);
void add_plot(CLI::App& app);

// Every subcommand registers its runner here; run_selected calls the one the user chose.
// A shipped model path (models/…) resolved from the working directory or the qkv checkout.
std::string find_model(const std::string& path);
// The default translation model shipped with qkv.
inline constexpr const char* kDefaultTranslator = "models/en-fr.safetensors";

void register_runner(CLI::App* sub, std::function<int()> run);
int run_selected(CLI::App& app);

}  // namespace qkv::cli
