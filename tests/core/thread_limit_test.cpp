// Issue 43, item 4: a thread count past 4 × the machine's hardware threads — from --threads,
// OMP_NUM_THREADS or set_num_threads — is a clear error naming where it came from (before: libgomp
// tried to start a million threads and crashed).
#include <cstdlib>

#include "qkv/core/machine.h"
#include "qkv/core/parallel.h"
#include "testing.h"

namespace qkv {
namespace {

TEST(ThreadLimit, SetNumThreadsRefusesPastTheBound) {
  const int before = num_threads();
  EXPECT_EQ(max_threads(), 4 * hardware_threads());
  std::string e = testing::error_of([] { set_num_threads(1000000); });
  EXPECT_NE(e.find("set_num_threads: 1000000 threads asked for; qkv runs 1 to "), std::string::npos) << e;
  e = testing::error_of([] { set_num_threads(0); });
  EXPECT_NE(e.find("set_num_threads: 0 threads"), std::string::npos) << e;
  EXPECT_EQ(num_threads(), before);  // unchanged by the refusals
  set_num_threads(max_threads());
  EXPECT_EQ(num_threads(), max_threads());
  set_num_threads(before);
}

TEST(ThreadLimit, OmpNumThreadsChecked) {
  const char* old = std::getenv("OMP_NUM_THREADS");
  const std::string saved = old ? old : "";
  setenv("OMP_NUM_THREADS", "1000000", 1);
  std::string e = testing::error_of([] { check_omp_num_threads(); });
  EXPECT_NE(e.find("OMP_NUM_THREADS=1000000: 1000000 threads asked for"), std::string::npos) << e;
  setenv("OMP_NUM_THREADS", "2,1000000", 1);
  EXPECT_NE(testing::error_of([] { check_omp_num_threads(); }).find("OMP_NUM_THREADS=2,1000000"), std::string::npos);
  setenv("OMP_NUM_THREADS", "lots", 1);
  EXPECT_NE(testing::error_of([] { check_omp_num_threads(); }).find("not a thread count"), std::string::npos);
  setenv("OMP_NUM_THREADS", "1", 1);
  EXPECT_EQ(testing::error_of([] { check_omp_num_threads(); }), "");
  if (old) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("OMP_NUM_THREADS");
}

TEST(ThreadLimit, CommandLineRefusesHugeThreadCounts) {
  const std::string qkv = QKV_CLI_PATH, cfg = std::string(QKV_SOURCE_DIR) + "/configs/shakespeare-char.json";
  testing::ShellResult r = testing::run_shell(qkv + " train " + cfg + " --threads 1000000 -o /nonexistent/x");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("qkv: error: --threads: 1000000 threads asked for"), std::string::npos) << r.out;
  r = testing::run_shell("OMP_NUM_THREADS=1000000 " + qkv + " generate -n 3");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("qkv: error: OMP_NUM_THREADS=1000000: 1000000 threads asked for"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qkv
