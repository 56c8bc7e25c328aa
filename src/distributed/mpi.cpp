// Communicator over MPI (Open MPI from Debian; any MPI-3 library will do). Built with -DQKV_MPI=ON.
//
// Threads: MPI_THREAD_SERIALIZED — the gradient reducer calls MPI from its own thread while the
// backward pass runs, and the training loop calls it from the main thread, never both at once
// (the loop waits for the reducer before its own collectives).
#ifdef QKV_HAVE_MPI
// the C API alone: the C++ bindings' inline functions would call (link) all of MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
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
#include "qkv/core/shared_library.h"
#include "mpi_world.h"

namespace qkv::distributed {

namespace {

// The MPI library, opened when a job starts (world() under mpirun) rather than linked: linked, it
// and its dependencies (hwloc, libevent, PMIx…) were loaded by every qkv process — a translation
// too — for ~1.5 MB of resident memory and their start-up. The functions called below, by their
// own declarations, and the predefined handles: constants in most MPIs, in Open MPI the addresses
// of its globals (mpi.h's OMPI_PREDEFINED_GLOBAL), looked up by name.
#define QKV_MPI_FUNCTIONS(X)                                                                           \
  X(MPI_Init_thread) X(MPI_Finalized) X(MPI_Finalize) X(MPI_Comm_set_errhandler) X(MPI_Comm_rank)           \
  X(MPI_Comm_size) X(MPI_Comm_split_type) X(MPI_Comm_free) X(MPI_Get_library_version) X(MPI_Error_string)    \
  X(MPI_Abort) X(MPI_Allreduce) X(MPI_Iallreduce) X(MPI_Test) X(MPI_Bcast) X(MPI_Barrier)
#define QKV_MPI_HANDLES(X)                                                                             \
  X(MPI_Comm, comm_world, MPI_COMM_WORLD, ompi_mpi_comm_world) X(MPI_Datatype, float_type, MPI_FLOAT, ompi_mpi_float) \
  X(MPI_Datatype, double_type, MPI_DOUBLE, ompi_mpi_double) X(MPI_Datatype, byte_type, MPI_BYTE, ompi_mpi_byte)     \
  X(MPI_Op, sum, MPI_SUM, ompi_mpi_op_sum) X(MPI_Info, info_null, MPI_INFO_NULL, ompi_mpi_info_null)               \
  X(MPI_Errhandler, errors_return, MPI_ERRORS_RETURN, ompi_mpi_errors_return)
struct MpiLibrary {
#define QKV_DECLARE(f) decltype(&::f) f;
  QKV_MPI_FUNCTIONS(QKV_DECLARE)
#undef QKV_DECLARE
#define QKV_DECLARE(type, name, macro, global) type name;
  QKV_MPI_HANDLES(QKV_DECLARE)
#undef QKV_DECLARE
};

const MpiLibrary& mpi() {
  static const MpiLibrary lib = [] {
    // global: Open MPI's components (plugins it opens itself) resolve its symbols
    static const SharedLibrary so("MPI", {QKV_MPI_SONAME, QKV_MPI_PATH},
                                  "mpirun starts qkv; install Open MPI (apt-get install openmpi-bin)", true);
    MpiLibrary l{};
#define QKV_BIND(f) so.bind(l.f, #f);
    QKV_MPI_FUNCTIONS(QKV_BIND)
#undef QKV_BIND
#ifdef OPEN_MPI
#define QKV_HANDLE(type, name, macro, global) l.name = static_cast<type>(so.symbol(#global));
#else
#define QKV_HANDLE(type, name, macro, global) l.name = macro;
#endif
    QKV_MPI_HANDLES(QKV_HANDLE)
#undef QKV_HANDLE
    return l;
  }();
  return lib;
}

// A failed call almost always means another process of the job has died, and after that MPI's
// state is not to be trusted ("may hang or crash", Open MPI says — and buffers of an unfinished
// collective may still be written). So no exception to unwind through: the message, then the whole
// job ends at once (MPI_Abort; mpirun also names the process that died). Checkpoints on disk are
// whole, being written atomically.
void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  mpi().MPI_Error_string(rc, msg, &len);
  int rank = -1, size = 0;
  mpi().MPI_Comm_rank(mpi().comm_world, &rank);
  mpi().MPI_Comm_size(mpi().comm_world, &size);
  std::fprintf(stderr, "qkv: error (rank %d of %d): %s failed: %.*s — another process of the job has probably stopped; "
               "ending the job\n", rank, size, call, len, msg);
  std::fflush(stderr);
  mpi().MPI_Abort(mpi().comm_world, 1);
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
    check(mpi().MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    QKV_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI: this MPI library gives thread level ", provided,
              "; qkv's gradient reducer needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED, ")");
    // errors come back as return codes (named by check()) instead of aborting inside MPI
    mpi().MPI_Comm_set_errhandler(mpi().comm_world, mpi().errors_return);
    mpi().MPI_Comm_rank(mpi().comm_world, &rank_);
    mpi().MPI_Comm_size(mpi().comm_world, &size_);
    MPI_Comm local;
    check(mpi().MPI_Comm_split_type(mpi().comm_world, MPI_COMM_TYPE_SHARED, rank_, mpi().info_null, &local),
          "MPI_Comm_split_type");
    mpi().MPI_Comm_size(local, &local_size_);
    mpi().MPI_Comm_free(&local);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    mpi().MPI_Get_library_version(version, &len);
    library_.assign(version, static_cast<size_t>(len));
    library_ = library_.substr(0, library_.find_first_of(",\n"));
  }
  ~Mpi() override {
    int finalized = 0;
    mpi().MPI_Finalized(&finalized);
    if (!finalized) mpi().MPI_Finalize();
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
        check(mpi().MPI_Allreduce(MPI_IN_PLACE, data + off, c, mpi().float_type, mpi().sum, mpi().comm_world), "MPI_Allreduce");
        return;
      }
      MPI_Request req;
      check(mpi().MPI_Iallreduce(MPI_IN_PLACE, data + off, c, mpi().float_type, mpi().sum, mpi().comm_world, &req), "MPI_Iallreduce");
      for (int done = 0;;) {
        check(mpi().MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) break;
        if (yield->load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  void all_reduce_sum(double* data, int64_t n) override {
    in_chunks(n, [&](int64_t off, int c) {
      check(mpi().MPI_Allreduce(MPI_IN_PLACE, data + off, c, mpi().double_type, mpi().sum, mpi().comm_world), "MPI_Allreduce");
    });
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    in_chunks(bytes, [&](int64_t off, int c) { check(mpi().MPI_Bcast(p + off, c, mpi().byte_type, root, mpi().comm_world), "MPI_Bcast"); });
  }
  void barrier() override { check(mpi().MPI_Barrier(mpi().comm_world), "MPI_Barrier"); }
  [[noreturn]] void abort(int code) override {
    mpi().MPI_Abort(mpi().comm_world, code);
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
