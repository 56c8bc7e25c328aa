// Model files and data files must be regular files: a FIFO (nobody at the other end) given as one is
// refused at once, naming it, before any open that would block (issue 43: `-m <fifo>` hung).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>

#include "qkv/io/data_file.h"
#include "qkv/io/file.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/model_file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

// A FIFO in a fresh folder, removed at the end.
struct Fifo {
  fs::path dir, path;
  Fifo() {
    dir = fs::path(::testing::TempDir()) / detail::concat("qkv_fifo_", ::getpid(), "_",
                                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    path = dir / "model.safetensors";
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
  }
  ~Fifo() { fs::remove_all(dir); }
};

// The error `f` throws, within 5 seconds; if it blocks, a writer is opened and closed to release it
// and the test fails.
std::string error_within_5s(const std::string& fifo, std::function<void()> f) {
  auto done = std::async(std::launch::async, [f] { return testing::error_of(f); });
  if (done.wait_for(std::chrono::seconds(5)) == std::future_status::ready) return done.get();
  ADD_FAILURE() << "blocked on the FIFO " << fifo;
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
  return done.get();
}

TEST(SpecialFiles, AFifoGivenAsAModelFileIsRefusedAtOnceNamingIt) {
  Fifo fifo;
  const std::string p = fifo.path.string();
  const std::string want = "'" + p + "' is a FIFO, not a model file";
  EXPECT_NE(error_within_5s(p, [&] { io::load_safetensors(p); }).find(want), std::string::npos);
  EXPECT_NE(error_within_5s(p, [&] { io::load_safetensors_metadata(p); }).find(want), std::string::npos);
  EXPECT_NE(error_within_5s(p, [&] { models::load_model_file(p); }).find(want), std::string::npos);
  EXPECT_NE(error_within_5s(p, [&] { models::load_model_metadata(p); }).find(want), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO is still a FIFO";
}

TEST(SpecialFiles, AFifoGivenAsADataFileIsRefusedAtOnceNamingIt) {
  Fifo fifo;
  const std::string p = fifo.path.string();
  const std::string e = error_within_5s(p, [&] { io::read_data_file(p, "lm task: data.path"); });
  EXPECT_NE(e.find("lm task: data.path '" + p + "' is a FIFO, not a regular file"), std::string::npos) << e;
}

TEST(SpecialFiles, AMissingModelFileIsNamed) {
  const std::string e = testing::error_of([] { io::load_safetensors("/no/such/model.safetensors"); });
  EXPECT_NE(e.find("load_safetensors: cannot open '/no/such/model.safetensors': No such file"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv
