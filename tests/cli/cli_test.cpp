// The qkv command as a user runs it.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct CliRun {
  int code;
  std::string out;
};

CliRun run(const std::string& args) {
  std::string cmd = std::string(QKV_CLI_PATH) + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

TEST(Cli, HelpListsCommands) {
  CliRun r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("demo"), std::string::npos);
  EXPECT_NE(r.out.find("bench"), std::string::npos);
  EXPECT_EQ(run("bench attention --help").code, 0);
  EXPECT_EQ(run("demo --help").code, 0);
}

TEST(Cli, DemoPrintsTheSeedsTrueNumbers) {
  CliRun r = run("demo");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("56.46%"), std::string::npos) << r.out;            // seed 000, position 0
  EXPECT_NE(r.out.find("[1.339029, 1.439029]"), std::string::npos) << r.out;  // seed 002, "quick"
}

TEST(Cli, BenchAttentionJson) {
  CliRun r = run("bench attention --seq-len 64 --heads 2 --head-dim 16 --causal --json --repeats 1");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"forward_ms\"", "\"forward_backward_ms\"", "\"gflops\"", "\"peak_extra_mib\""})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
}

TEST(Cli, BadArgumentsGiveAClearErrorAndNonZeroExit) {
  CliRun r = run("bench attention --seq-len -3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("seq-len"), std::string::npos) << r.out;
  r = run("bench attention --seq-len 8 --heads 3 --kv-heads 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
  EXPECT_NE(run("no-such-command").code, 0);
}

}  // namespace
