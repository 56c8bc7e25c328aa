#include <map>

#include "commands.h"

namespace qkv::cli {

static std::map<CLI::App*, std::function<int()>>& runners() {
  static std::map<CLI::App*, std::function<int()>> r;
  return r;
}

void register_runner(CLI::App* sub, std::function<int()> run) { runners()[sub] = std::move(run); }

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : runners())
    if (sub->parsed()) return run();
  return 1;
}

}  // namespace qkv::cli
