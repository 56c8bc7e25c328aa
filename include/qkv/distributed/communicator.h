// The communicator seam: what data-parallel training asks of the processes it runs on — sum a
// buffer over all of them, send one process's bytes to all, wait for all. MPI implements it
// (src/distributed/mpi.cpp, built with -DQKV_MPI=ON); one process implements it trivially. NCCL can sit
// behind the same seam when the CUDA backend exists.
//
// This floor knows buffers, not tensors: it sits beside core, and train/ (the gradient reducer of
// train/data_parallel.h) is its only user.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace qkv::distributed {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;        // 0 … size() − 1
  virtual int size() const = 0;        // processes in the job
  virtual int local_size() const = 0;  // processes of the job on this machine (to share its cores)
  // data[i] ← Σ over ranks of data[i], on every rank (MPI_Allreduce, MPI_SUM). Blocks. While
  // `*yield` is true (the caller's backward pass is computing beside it) a large sum waits without
  // spinning, leaving the cores to the computation; otherwise it waits as fast as it can.
  virtual void all_reduce_sum(float* data, int64_t n, const std::atomic<bool>* yield = nullptr) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  // data ← root's data, on every rank (MPI_Bcast). Blocks.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every process of the job at once (MPI_Abort): what a rank does after an error, so the
  // others do not wait forever for it.
  [[noreturn]] virtual void abort(int code) = 0;
  virtual std::string describe() const = 0;  // "Open MPI v4.1.4, 2 processes"
  // Whether a stop signal (SIGINT, SIGTERM: Ctrl-C, or mpirun ending the job) has arrived since the
  // last call. A job's processes keep those signals blocked — an asynchronous handler interrupting
  // MPI was seen to corrupt the heap — and the training loop asks here once per step.
  virtual bool stop_signal_received() { return false; }
};

// The job this program runs in: MPI's world when started by mpirun (or srun) and built with MPI,
// otherwise one process. Initialized on first use; a program started by mpirun in a build without
// MPI gets an error that says so rather than N independent runs.
Communicator& world();

// True when the environment says a launcher started N > 1 processes (OMPI_COMM_WORLD_SIZE,
// PMI_SIZE, PMIX_… or SLURM's), whether or not this build has MPI.
bool launched_as_job();

// A string from root to every rank (its length first, then its bytes).
void broadcast_string(Communicator& comm, std::string& s, int root);

}  // namespace qkv::distributed
