// qkv — the command line.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include "commands.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/core/parallel.h"

// OpenMP threads that wait spin for a while before sleeping. libgomp's default spin (300k
// iterations) is fastest on an idle machine, but when another busy process shares the cores the
// spinning threads take the time the working ones need: generation measured 500× slower next to a
// training run. A bounded spin (GOMP_SPINCOUNT=30000) costs nothing measurable when idle and keeps
// qkv usable on a busy machine. libgomp reads the setting when it loads, so qkv sets it and
// re-executes itself once, unless the user chose a policy.
//
// With OMP_PROC_BIND set, libgomp pins this initial thread to the first place when it loads,
// before main runs, and execv passes that one-CPU mask on: the new process saw one CPU and ran
// on one thread. So the mask goes back to the union of all OpenMP places before the exec.
static void bound_openmp_spinning(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("GOMP_SPINCOUNT", "30000", 1);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int place = 0; place < omp_get_num_places(); ++place) {
    std::vector<int> ids(static_cast<size_t>(omp_get_place_num_procs(place)));
    omp_get_place_proc_ids(place, ids.data());
    for (int id : ids)
      if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &cpus);
  }
  if (CPU_COUNT(&cpus) > 0) sched_setaffinity(0, sizeof cpus, &cpus);
  execv("/proc/self/exe", argv);  // returns only on failure: then run with the default
}

// What went to stdout must have arrived: a full disk or /dev/full is an error, not exit 0 — after a
// command and after --help alike. `rc` is returned when it did (or when it is already a failure).
static int stdout_arrived(int rc) {
  errno = 0;
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
    std::cerr << "qkv: error: cannot write the output: " << std::strerror(errno ? errno : EIO) << "\n";
    return rc ? rc : 1;
  }
  return rc;
}

namespace qkv::cli {
// (declared here rather than in commands.h, which every command includes: tools/qkv/cmd_probe.cpp)
void add_probe(CLI::App& app);
}  // namespace qkv::cli

int main(int argc, char** argv) {
  bound_openmp_spinning(argv);
  // OMP_NUM_THREADS past the bound is refused before any parallel region starts its threads.
  try {
    qkv::check_omp_num_threads();
  } catch (const qkv::Error& e) {
    std::cerr << "qkv: error: " << e.what() << "\n";
    return 1;
  }
  CLI::App app{"qkv: the attention mechanism and the Transformer, in C++"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qkv 0.1.0");
  qkv::cli::add_demo(app);
  qkv::cli::add_train(app);
  qkv::cli::add_generate(app);
  qkv::cli::add_chat(app);
  qkv::cli::add_translate(app);
  qkv::cli::add_eval(app);
  qkv::cli::add_attend(app);
  qkv::cli::add_probe(app);
  qkv::cli::add_classify(app);
  qkv::cli::add_average(app);
  qkv::cli::add_quantize(app);
  qkv::cli::add_convert(app);
  qkv::cli::add_fill_mask(app);
  qkv::cli::add_classify_text(app);
  qkv::cli::add_embed(app);
  qkv::cli::add_rerank(app);
  qkv::cli::add_answer(app);
  qkv::cli::add_choose(app);
  qkv::cli::add_plot(app);
  qkv::cli::add_scenes(app);
  qkv::cli::add_caption(app);
  qkv::cli::add_serve(app);
  qkv::cli::add_export(app);
  qkv::cli::add_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return stdout_arrived(app.exit(e));  // --help, --version: printed to stdout
    // A bad flag is a usage error: one line naming the command and the flag (CLI11's message names
    // it: "--beam: Value 0 not in range [1 - 64]"), exit 2 as getopt's and argparse's tools do —
    // not CLI11's own codes (105, 106, …) and its second "Run with --help" line.
    std::string command = "qkv";
    for (const CLI::App* sub = &app; sub;) {
      const auto parsed = sub->get_subcommands();
      sub = parsed.empty() ? nullptr : parsed.front();
      if (sub) command += " " + sub->get_name();
    }
    // A file argument that is missing or a folder (CLI::ExistingFile/ExistingPath's "File does not
    // exist: X", "File is actually a directory: X") is bad input rather than bad usage: exit 1.
    const std::string what = e.what();
    const bool bad_file = dynamic_cast<const CLI::ValidationError*>(&e) &&
                          (what.find("File does not exist") != std::string::npos ||
                           what.find("File is actually a directory") != std::string::npos ||
                           what.find("Path does not exist") != std::string::npos);
    std::cerr << command << ": error: " << qkv::excerpt(what, 300) << " (" << command << " --help)\n";
    return bad_file ? 1 : 2;
  }
  int rc = 1;
  try {
    rc = qkv::cli::run_selected(app);
  } catch (const qkv::Error& e) {
    std::cerr << "qkv: error: " << qkv::plain_message(e.what()) << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << "qkv: error: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "qkv: error: " << qkv::plain_message(e.what()) << "\n";
  }
  return stdout_arrived(rc);
}
