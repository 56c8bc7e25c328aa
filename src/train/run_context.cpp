#include "qkv/train/run_context.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "qkv/core/error.h"
#include "qkv/io/file.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C kills at once
}

}  // namespace

RunContext::RunContext(distributed::Communicator* comm, std::string out_dir, bool quiet)
    : comm_(comm && comm->size() > 1 ? comm : nullptr),
      lead_(!comm_ || comm_->rank() == 0),
      quiet_(quiet || !lead_),
      out_dir_(std::move(out_dir)) {
  QKV_CHECK(!out_dir_.empty(), "train: no output directory");
  g_interrupted = false;
  previous_sigint_ = std::signal(SIGINT, on_sigint);
}

RunContext::~RunContext() { std::signal(SIGINT, previous_sigint_); }

std::string RunContext::path(const std::string& name) const { return (fs::path(out_dir_) / name).string(); }

void RunContext::prepare_output_folder() const {
  if (!lead_) return;
  std::error_code ec;
  fs::create_directories(out_dir_, ec);
  QKV_CHECK(!ec, "train: cannot create output directory '", out_dir_, "': ", ec.message());
  if (const int n = io::remove_stale_temporaries(out_dir_); n > 0 && !quiet_)
    std::fprintf(stderr, "train: removed %d temporary file%s left by a killed run in %s\n", n, n > 1 ? "s" : "",
                 out_dir_.c_str());
}

bool RunContext::interrupted() const { return g_interrupted; }

bool RunContext::any_rank_stops(bool mine, double& loss, int64_t& tokens) const {
  bool stop = interrupted() || mine;
  if (!comm_) return stop;
  // Ctrl-C, or mpirun stopping the job (SIGTERM to every rank): the ranks agree, through the sum
  // below, to stop after this step, and rank 0 saves — if mpirun waits that long; either way the
  // last checkpoint on disk is whole.
  stop = comm_->stop_signal_received() || stop;
  double sums[3] = {loss, static_cast<double>(tokens), stop ? 1.0 : 0.0};
  comm_->all_reduce_sum(sums, 3);
  loss = sums[0], tokens = static_cast<int64_t>(sums[1]);
  return sums[2] > 0;
}

}  // namespace qkv::train
