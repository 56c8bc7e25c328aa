// qkv — the command line.
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.h"
#include "qkv/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"qkv: the attention mechanism and the Transformer, in C++"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qkv 0.1.0");
  qkv::cli::add_demo(app);
  qkv::cli::add_train(app);
  qkv::cli::add_generate(app);
  qkv::cli::add_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return qkv::cli::run_selected(app);
  } catch (const qkv::Error& e) {
    std::cerr << "qkv: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "qkv: error: " << e.what() << "\n";
    return 1;
  }
}
