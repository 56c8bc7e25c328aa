#include "qkv/io/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <cstdio>
#include <string>
#include <thread>

namespace qkv::io {
namespace {

size_t columns(const std::string& s) {  // code points
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
  return out;
}

// A bar that never prints to the test's stderr (its stream is a scratch file).
struct Quiet {
  std::FILE* f = std::tmpfile();
  ~Quiet() {
    if (f) std::fclose(f);
  }
};

TEST(Progress, RenderShowsPercentCountTimesRateAndPostfix) {
  Quiet q;
  ProgressBar pb("train", 2000);
  pb.set_stream_for_testing(q.f, false);
  pb.update(740);
  pb.set_postfix({{"loss", "1.942"}, {"lr", "9.1e-04"}, {"tok/s", "47k"}});
  const std::string s = pb.render(12.0, 100);
  EXPECT_EQ(s.rfind("train  37%|", 0), 0u) << s;
  // 740 in 12 s → 61.7 it/s; 1260 left → 20.4 s.
  EXPECT_NE(s.find("| 740/2000 [00:12<00:20, 61.7 it/s] loss=1.942 lr=9.1e-04 tok/s=47k"), std::string::npos) << s;
  EXPECT_EQ(columns(s), 100u) << s;
  EXPECT_NE(s.find("\u2588"), std::string::npos);  // some of the bar is full
  // Narrow width: the bar keeps a minimum of 10 cells.
  const std::string narrow = pb.render(12.0, 40);
  EXPECT_NE(narrow.find("|"), std::string::npos);
  EXPECT_EQ(pb.n(), 740);
}

TEST(Progress, BarFractionAndEnds) {
  Quiet q;
  ProgressBar pb("", 8);
  pb.set_stream_for_testing(q.f, false);
  std::string s = pb.render(0.0, 60);
  EXPECT_EQ(s.rfind("  0%|", 0), 0u) << s;
  EXPECT_NE(s.find("0/8 [00:00<?, ? it/s]"), std::string::npos) << s;  // no rate yet
  pb.update(8);
  s = pb.render(4.0, 60);
  EXPECT_EQ(s.rfind("100%|", 0), 0u) << s;
  EXPECT_NE(s.find("8/8 [00:04<00:00, 2.00 it/s]"), std::string::npos) << s;
  EXPECT_EQ(s.find(' ', 5), s.find("| 8/8") + 1) << "the bar has no blank cell: " << s;
  pb.update(3);  // past the end: capped at 100%
  EXPECT_EQ(pb.render(4.0, 60).rfind("100%|", 0), 0u);
}

TEST(Progress, PartialBlocks) {
  Quiet q;
  ProgressBar pb("x", 16);
  pb.set_stream_for_testing(q.f, false);
  pb.update(1);  // 1/16 of the bar
  const std::string s = pb.render(1.0, 0);  // width 0: minimum bar of 10 cells
  // 10 cells × 8 / 16 = 5 eighths → "▋"
  EXPECT_NE(s.find("|\u258B         |"), std::string::npos) << s;
}

TEST(Progress, UnknownTotal) {
  Quiet q;
  ProgressBar pb("train", 0);
  pb.set_stream_for_testing(q.f, false);
  pb.update(740);
  pb.set_postfix({{"loss", "2.5"}});
  EXPECT_EQ(pb.render(12.0), "train 740it [00:12, 61.7 it/s] loss=2.5");
}

TEST(Progress, ResumedRunCountsOnlyNewWorkForTheRate) {
  Quiet q;
  ProgressBar pb("train", 2000, 1000);
  pb.set_stream_for_testing(q.f, false);
  pb.update(500);
  const std::string s = pb.render(10.0);
  EXPECT_NE(s.find(" 75%|"), std::string::npos) << s;
  EXPECT_NE(s.find("1500/2000 [00:10<00:10, 50.0 it/s]"), std::string::npos) << s;
}

TEST(Progress, SlowRatesShowSecondsPerIteration) {
  Quiet q;
  ProgressBar pb("eval", 10);
  pb.set_stream_for_testing(q.f, false);
  pb.update(2);
  EXPECT_NE(pb.render(5.0).find("2/10 [00:05<00:20, 2.50 s/it]"), std::string::npos) << pb.render(5.0);
}

TEST(Progress, FormatDuration) {
  EXPECT_EQ(ProgressBar::format_duration(0), "00:00");
  EXPECT_EQ(ProgressBar::format_duration(12.9), "00:12");
  EXPECT_EQ(ProgressBar::format_duration(75), "01:15");
  EXPECT_EQ(ProgressBar::format_duration(3599), "59:59");
  EXPECT_EQ(ProgressBar::format_duration(3725), "1:02:05");
  EXPECT_EQ(ProgressBar::format_duration(100 * 3600 + 1), "100:00:01");
  EXPECT_EQ(ProgressBar::format_duration(-1), "?");
  EXPECT_EQ(ProgressBar::format_duration(std::nan("")), "?");
  EXPECT_EQ(ProgressBar::format_duration(INFINITY), "?");
}

TEST(Progress, FormatRate) {
  EXPECT_EQ(ProgressBar::format_rate(61.3), "61.3");
  EXPECT_EQ(ProgressBar::format_rate(47210), "47.2k");
  EXPECT_EQ(ProgressBar::format_rate(1.2e6), "1.20M");
  EXPECT_EQ(ProgressBar::format_rate(5), "5.00");
  EXPECT_EQ(ProgressBar::format_rate(123.4), "123");
  EXPECT_EQ(ProgressBar::format_rate(9.999), "10.0");
  EXPECT_EQ(ProgressBar::format_rate(99.96), "100");
  EXPECT_EQ(ProgressBar::format_rate(999.7), "1.00k");
  EXPECT_EQ(ProgressBar::format_rate(3.4e9), "3.40G");
  EXPECT_EQ(ProgressBar::format_rate(0), "0.00");
}

TEST(Progress, NonTtyWritesWholeLines) {
  Quiet q;
  {
    ProgressBar pb("train", 3);
    pb.set_stream_for_testing(q.f, false);
    pb.set_log_every_seconds(0);  // a line per update
    pb.update();
    pb.update();
    pb.write("step 2: val loss 1.71");
    pb.set_postfix({{"loss", "1.5"}});
    pb.update();
    pb.close();
    pb.close();  // idempotent
    pb.update();  // after close: counted, nothing printed
  }  // the destructor does not print again
  const std::string out = read_all(q.f);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 5u) << out;  // 3 updates + write + close
  EXPECT_NE(out.find("\nstep 2: val loss 1.71\n"), std::string::npos) << out;
  const std::string last = out.substr(out.rfind('\n', out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("train 100%|", 0), 0u) << last;
  EXPECT_NE(last.find("3/3"), std::string::npos) << last;
  EXPECT_NE(last.find("loss=1.5\n"), std::string::npos) << last;
}

TEST(Progress, NonTtyIsQuietBetweenIntervals) {
  Quiet q;
  {
    ProgressBar pb("train", 100);
    pb.set_stream_for_testing(q.f, false);  // default: a line every 10 s
    for (int i = 0; i < 100; ++i) pb.update();
  }
  const std::string out = read_all(q.f);
  size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 1u) << out;  // only the one at close
  EXPECT_NE(out.find("100/100"), std::string::npos);
}

TEST(Progress, TtyRedrawsOneLineAndClearsAtClose) {
  Quiet q;
  {
    ProgressBar pb("train", 10);
    pb.set_stream_for_testing(q.f, true);
    pb.update(3);
    pb.write("hello");  // clears the bar, prints the line, redraws the bar
    pb.update(2);
  }
  const std::string out = read_all(q.f);
  EXPECT_NE(out.find("hello\n\rtrain"), std::string::npos) << out;
  EXPECT_EQ(out.find("\n", out.find("hello\n") + 6), std::string::npos) << "the bar never ends a line";
  const std::string clear = "\r\x1b[K";
  ASSERT_GE(out.size(), clear.size());
  EXPECT_EQ(out.substr(out.size() - clear.size()), clear);
}

TEST(Progress, TtyLeaveKeepsTheFinalLine) {
  Quiet q;
  {
    ProgressBar pb("train", 10);
    pb.set_stream_for_testing(q.f, true);
    pb.set_leave(true);
    pb.update(10);
  }
  const std::string out = read_all(q.f);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_NE(out.rfind("\rtrain 100%|"), std::string::npos) << out;
}

// The trainer's step-0 evaluation (57 s) before step 1 (1 s): the ETA is the steps', not 57 s/it.
TEST(Progress, ExcludedTimeLeavesTheRateAndEta) {
  Quiet q;
  ProgressBar pb("train", 30);
  pb.set_stream_for_testing(q.f, false);
  pb.exclude(57.0);
  pb.update(1);
  const std::string s = pb.render(58.0);
  EXPECT_NE(s.find("1/30 [00:58<00:29, 1.00 it/s]"), std::string::npos) << s;  // elapsed: the wall time
  pb.exclude(-3);  // nothing
  EXPECT_EQ(pb.render(58.0), s);
}

TEST(Progress, DelayedBarIsNeverShownWhenQuick) {
  Quiet q;
  {
    ProgressBar pb("eval", 10, 0, /*delay_seconds=*/1000);
    pb.set_stream_for_testing(q.f, true);
    pb.update(3);
    pb.write("step 0: val_loss 1.5");  // lines still print
    pb.update(7);
  }
  EXPECT_EQ(read_all(q.f), "step 0: val_loss 1.5\n");
  Quiet q2;
  {
    ProgressBar pb("eval", 10, 0, /*delay_seconds=*/0);
    pb.set_stream_for_testing(q2.f, false);
    pb.update(10);
  }
  EXPECT_NE(read_all(q2.f).find("eval 100%|"), std::string::npos);
}

TEST(Progress, MuteAllSilencesBarsMadeMeanwhile) {
  const bool before = ProgressBar::mute_all(true);
  EXPECT_FALSE(before);
  ::testing::internal::CaptureStderr();
  {
    ProgressBar pb("eval", 2);
    pb.set_log_every_seconds(0);
    pb.update(2);
    pb.write("a line");
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(ProgressBar::mute_all(false));
  ::testing::internal::CaptureStderr();
  {
    ProgressBar pb("eval", 2);
    pb.update(2);
  }
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("eval 100%|"), std::string::npos);
}

TEST(Progress, MutedScopeRestoresTheSettingBeforeIt) {
  ASSERT_FALSE(ProgressBar::mute_all(false));
  try {
    const ProgressBar::MutedScope muted(true);
    ::testing::internal::CaptureStderr();
    {
      ProgressBar pb("eval", 2);
      pb.set_log_every_seconds(0);
      pb.update(2);
    }
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    throw std::runtime_error("out");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(ProgressBar::mute_all(false));  // unmuted again, after an exception
  {
    const ProgressBar::MutedScope outer(true);
    { const ProgressBar::MutedScope inner(false); }  // (muted before it: still muted after)
    EXPECT_TRUE(ProgressBar::mute_all(true));
  }
  EXPECT_FALSE(ProgressBar::mute_all(false));
}

// Work with no count: nothing while it is quick, then the description and the time so far — a
// line every interval in a log, one redrawn line on a terminal — and the total at the end.
TEST(Progress, StatusLineIsQuietWhenQuick) {
  Quiet q;
  {
    StatusLine s("tokenizer: training", /*delay_seconds=*/5);
    s.set_stream_for_testing(q.f, false);
  }
  EXPECT_EQ(read_all(q.f), "");
}

TEST(Progress, StatusLineLogsTheTimeSoFarThenTheTotal) {
  Quiet q;
  {
    StatusLine s("tokenizer: training", /*delay_seconds=*/0.3, /*log_every_seconds=*/0.2);
    s.set_stream_for_testing(q.f, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
  }
  const std::string out = read_all(q.f);
  EXPECT_EQ(out.rfind("tokenizer: training [00:00]\n", 0), 0u) << out;
  EXPECT_GE(std::count(out.begin(), out.end(), '\n'), 3) << out;  // ≥ 2 lines while it ran, then the total
  EXPECT_NE(out.find("tokenizer: training done in "), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(StatusLine("x").render(75), "x [01:15]");
}

TEST(Progress, StatusLineRedrawsOneTerminalLine) {
  Quiet q;
  {
    StatusLine s("loading", /*delay_seconds=*/0.2);
    s.set_stream_for_testing(q.f, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
  }
  const std::string out = read_all(q.f);
  EXPECT_GE(std::count(out.begin(), out.end(), '\r'), 2) << out;    // redrawn in place
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;    // one line left at the end
  EXPECT_NE(out.find("loading done in "), std::string::npos) << out;
}

}  // namespace
}  // namespace qkv::io
