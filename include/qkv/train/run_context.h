// What a training run knows of where it runs: the processes training together (the communicator,
// null in one process), whether this one is the lead (rank 0: it alone writes, prints and calls
// on_metrics), and the output folder. It also owns Ctrl-C for the run's length: from construction
// on, SIGINT means "save and stop" (interrupted()), and the previous handler comes back with the
// destructor. Data-parallel jobs keep SIGINT and SIGTERM blocked, and the loop asks the
// communicator for them (distributed/communicator.h).
#pragma once

#include <cstdint>
#include <string>

#include "qkv/distributed/communicator.h"

namespace qkv::train {

class RunContext {
 public:
  // comm: the job (null or one process: this process alone); quiet: no progress bar or messages.
  RunContext(distributed::Communicator* comm, std::string out_dir, bool quiet);
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  distributed::Communicator* comm() const { return comm_; }  // null in one process
  bool lead() const { return lead_; }
  bool quiet() const { return quiet_; }                     // true on every rank but the lead
  const std::string& out_dir() const { return out_dir_; }
  std::string path(const std::string& name) const;           // out_dir/name

  // The lead creates the output folder and removes temporary files a killed run left there.
  void prepare_output_folder() const;
  // Ctrl-C since construction (this process).
  bool interrupted() const;
  // Whether any rank must stop after this step: `mine` (this rank's reason), Ctrl-C or a stop
  // signal here. Data-parallel: one collective sums that with the step's loss and tokens, which
  // become their sums over the ranks; in one process they stay as they are.
  bool any_rank_stops(bool mine, double& loss, int64_t& tokens) const;

 private:
  distributed::Communicator* comm_;
  bool lead_, quiet_;
  std::string out_dir_;
  void (*previous_sigint_)(int);
};

}  // namespace qkv::train
