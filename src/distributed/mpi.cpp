// Communicator over MPI (Open MPI from Debian; any MPI-3 library will do). Built with -DQKV_MPI=ON.
//
// Threads: MPI_THREAD_SERIALIZED — the gradient reducer calls MPI from its own thread while the
// backward pass runs, and the training loop calls it from the main thread, never both at once
// (the loop waits for the reducer before its own collectives).
#ifdef QKV_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <chrono>
#include <string>
#include <thread>

#include "qkv/core/error.h"
#include "mpi_world.h"

namespace qkv::distributed {

namespace {

// A failed call almost always means another process of the job has died, and after that MPI's
// state is not to be trusted ("may hang or crash", Open MPI says — and buffers of an unfinished
// collective may still be written). So no exception to unwind through: the message, then the whole
// job ends at once (MPI_Abort; mpirun also names the process that died). Checkpoints on disk are
// whole, being written atomically.
void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::fprintf(stderr, "qkv: error (rank %d of %d): %s failed: %.*s — another process of the job has probably stopped; "
               "ending the job\n", rank, size, call, len, msg);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

// SIGINT and SIGTERM: Ctrl-C, and mpirun's way of stopping a job.
sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

// MPI counts are ints: larger buffers go in pieces of at most INT_MAX elements.
template <class F>
void in_chunks(int64_t n, F f) {
  for (int64_t off = 0; off < n; off += INT_MAX) f(off, static_cast<int>(std::min<int64_t>(INT_MAX, n - off)));
}

class Mpi final : public Communicator {
  static constexpr int kPoliteFrom = 1 << 16;  // floats (256 KB)

 public:
  Mpi() {
    // SIGINT and SIGTERM (mpirun's way of stopping a job) are blocked here, before MPI and OpenMP
    // start their threads, so every thread inherits the mask: a handler that interrupts MPI's
    // progress loop or malloc at a random instant was seen to corrupt the heap. The training loop
    // takes them with sigtimedwait instead (stop_signal_received()).
    const sigset_t stop = stop_signals();
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    QKV_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI: this MPI library gives thread level ", provided,
              "; qkv's gradient reducer needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED, ")");
    // errors come back as return codes (named by check()) instead of aborting inside MPI
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    library_.assign(version, static_cast<size_t>(len));
    library_ = library_.substr(0, library_.find_first_of(",\n"));
  }
  ~Mpi() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  // A blocking MPI_Allreduce spins in its progress loop: beside a backward pass that needs every
  // core, that spinning takes one from it. So while `*yield` holds, a large sum is a nonblocking
  // one tested every ~50 µs, the core free in between; then (backward done, nothing else to run)
  // it is tested without pause.
  void all_reduce_sum(float* data, int64_t n, const std::atomic<bool>* yield) override {
    in_chunks(n, [&](int64_t off, int c) {
      if (!yield || c < kPoliteFrom) {
        check(MPI_Allreduce(MPI_IN_PLACE, data + off, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        return;
      }
      MPI_Request req;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + off, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
      for (int done = 0;;) {
        check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) break;
        if (yield->load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  void all_reduce_sum(double* data, int64_t n) override {
    in_chunks(n, [&](int64_t off, int c) {
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    });
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    in_chunks(bytes, [&](int64_t off, int c) { check(MPI_Bcast(p + off, c, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast"); });
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  bool stop_signal_received() override {
    const sigset_t stop = stop_signals();
    const timespec now{0, 0};
    bool got = false;
    while (sigtimedwait(&stop, nullptr, &now) > 0) got = true;  // take every pending one
    return got;
  }
  std::string describe() const override {
    return library_ + ", " + std::to_string(size_) + " processes";
  }

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1;
  std::string library_;
};

}  // namespace

Communicator& mpi_world() {
  static Mpi mpi;
  return mpi;
}

}  // namespace qkv::distributed
#endif  // QKV_HAVE_MPI
