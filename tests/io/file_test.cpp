// io::write_file_atomic, the one writer of qkv's output files: what it does with what the path
// already names (a file, a link, a device, a FIFO, a descriptor) and with a link planted at its
// temporary name.
#include "qkv/io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

struct stat stat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st;
}

TEST(WriteFile, LinkPlantedAtTheTemporaryNameIsNeverWrittenThrough) {
  TempDir dir("write-file");
  const fs::path victim = dir.path / "victim.txt", out = dir.path / "out.safetensors";
  io::write_file_atomic(victim.string(), "precious");
  const fs::path planted = out.string() + ".tmp-" + std::to_string(::getpid());
  fs::create_symlink(victim, planted);
  io::write_file_atomic(out.string(), "new bytes");
  EXPECT_EQ(io::read_file(victim.string()), "precious");
  EXPECT_EQ(io::read_file(out.string()), "new bytes");
  EXPECT_TRUE(fs::is_symlink(planted));  // left as it was: not ours to remove
  EXPECT_EQ(fs::read_symlink(planted), victim);
  for (const auto& e : fs::directory_iterator(dir.path))  // our own temporary is gone
    EXPECT_TRUE(e.path() == victim || e.path() == out || e.path() == planted) << e.path();
}

TEST(WriteFile, DevicesAndFifosAreWrittenInPlaceNeverReplaced) {
  TempDir dir("write-file");
  // A link to a character device (/dev/null): written through, link and device kept.
  const fs::path null_link = dir.path / "null";
  fs::create_symlink("/dev/null", null_link);
  io::write_file_atomic(null_link.string(), "discarded");
  EXPECT_TRUE(fs::is_symlink(null_link));
  EXPECT_TRUE(S_ISCHR(stat_of("/dev/null").st_mode));
  // A device node of our own where we may make one (root): /dev/full refuses with ENOSPC.
  const fs::path full = dir.path / "n";
  if (::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0) {
    const std::string msg = error_of([&] { io::write_file_atomic(full.string(), "x"); });
    EXPECT_NE(msg.find(full.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("No space left"), std::string::npos) << msg;
    EXPECT_TRUE(S_ISCHR(stat_of(full).st_mode));
  }
  // A FIFO: its reader gets the bytes, and it stays a FIFO.
  const fs::path fifo = dir.path / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = io::read_file(fifo.string()); });
  io::write_file_atomic(fifo.string(), "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(S_ISFIFO(stat_of(fifo).st_mode));
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(WriteFile, DescriptorNamesWriteIntoTheDescriptorAtItsOffset) {
  TempDir dir("write-file");
  const fs::path file = dir.path / "stdout.txt";
  // as the shell's `>`: no O_APPEND, so what follows must start where qkv's bytes ended
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "before ", 7), 7);
  const ino_t inode = stat_of(file).st_ino;
  io::write_file_atomic("/dev/fd/" + std::to_string(fd), "after");
  io::write_file_atomic("/proc/self/fd/" + std::to_string(fd), " again");
  ASSERT_EQ(::write(fd, " more", 5), 5);
  ::close(fd);
  EXPECT_EQ(io::read_file(file.string()), "before after again more");
  EXPECT_EQ(stat_of(file).st_ino, inode);  // the same file, not a new one renamed over it
}

TEST(WriteFile, LinkToARegularFileKeepsTheLinkAndReplacesItsTarget) {
  TempDir dir("write-file");
  fs::create_directory(dir.path / "real");
  const fs::path target = dir.path / "real" / "model.safetensors", link = dir.path / "link";
  io::write_file_atomic(target.string(), "old");
  ::chmod(target.c_str(), 0640);
  fs::create_symlink(target, link);
  io::write_file_atomic(link.string(), "new");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(io::read_file(target.string()), "new");
  EXPECT_EQ(stat_of(target).st_mode & 0777, 0640u);  // the replaced file keeps its permissions
}

TEST(WriteFile, DirectoriesAndDanglingLinksAreRefusedByName) {
  TempDir dir("write-file");
  const fs::path sub = dir.path / "sub", dangling = dir.path / "dangling";
  fs::create_directory(sub);
  std::string msg = error_of([&] { io::write_file_atomic(sub.string(), "x"); });
  EXPECT_EQ(msg, "cannot write '" + sub.string() + "': it is a directory");
  fs::create_symlink(dir.path / "nowhere", dangling);
  msg = error_of([&] { io::write_file_atomic(dangling.string(), "x"); });
  EXPECT_NE(msg.find(dangling.string()), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir.path / "nowhere"));
}

TEST(WriteFile, StaleTemporariesOfEitherNameAreRemoved) {
  TempDir dir("write-file");
  // pid 999999999 is above the kernel's pid_max: no process has it
  for (const char* name : {"a.tmp-999999999", "a.tmp-999999999-3"})
    io::write_file_atomic((dir.path / name).string(), "x");
  io::write_file_atomic((dir.path / "a.tmp-12x").string(), "kept: not ours");
  EXPECT_EQ(io::remove_stale_temporaries(dir.path.string()), 2);
  EXPECT_TRUE(fs::exists(dir.path / "a.tmp-12x"));
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

// read_file with a limit (configs): /dev/zero is refused once past the limit, not read until the
// memory runs out (issue 43); a file at the limit is read whole.
TEST(ReadFile, ALimitStopsTheReadAndNamesTheFile) {
  const std::string e = testing::error_of([] { io::read_file("/dev/zero", int64_t{4} << 20, "config"); });
  EXPECT_NE(e.find("config '/dev/zero' is larger than the limit of 4 MiB"), std::string::npos) << e;
  testing::TempDir dir("read-file");
  const std::string path = (dir.path / "c.json").string();
  io::write_file_atomic(path, std::string(100, 'x'));
  EXPECT_EQ(io::read_file(path, 100, "config").size(), 100u);
  EXPECT_NE(testing::error_of([&] { io::read_file(path, 99, "config"); }).find("limit of 99 bytes"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { io::read_file((dir.path / "none").string(), 10, "config"); }).find("cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
