#include <cstdlib>
#include <string>

#include "qkv/core/error.h"
#include "qkv/distributed/communicator.h"
#include "mpi_world.h"

namespace qkv::distributed {

namespace {

// One process: every collective is the identity.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  void all_reduce_sum(float*, int64_t, const std::atomic<bool>*) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  std::string describe() const override { return "one process"; }
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

}  // namespace

bool launched_as_job() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS"})
    if (env_int(name) > 1) return true;
  return false;
}

Communicator& world() {
#ifdef QKV_HAVE_MPI
  if (launched_as_job()) return mpi_world();
#else
  QKV_CHECK(!launched_as_job(), "this qkv was built without MPI, but a launcher (mpirun) started it as one of ",
            "several processes: rebuild with -DQKV_MPI=ON (scripts/build.sh does) to train data-parallel");
#endif
  static SingleProcess one;
  return one;
}

void broadcast_string(Communicator& comm, std::string& s, int root) {
  int64_t n = static_cast<int64_t>(s.size());
  comm.broadcast(&n, sizeof n, root);
  s.resize(static_cast<size_t>(n));
  if (n > 0) comm.broadcast(s.data(), n, root);
}

}  // namespace qkv::distributed
