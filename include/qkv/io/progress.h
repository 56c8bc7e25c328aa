// A tqdm-like progress bar on stderr:
//   train  37%|█████▉          | 740/2000 [00:12<00:20, 61.3 it/s] loss=1.942 lr=9.1e-04 tok/s=47k
//
// On a terminal (isatty(stderr)) it redraws one line with '\r' at most ~10 times a second and clears
// it at close (set_leave(true) keeps the final line instead). When stderr is not a terminal (a log
// file, CI) it prints a whole line every `log_every_seconds` (default 10) and one at close. The rate
// used for the ETA is an exponential moving average of the rate between redraws/samples (the plain
// average until there is one). total = 0 means unknown: no percentage, bar or ETA, just count and
// rate ("train 740it [00:12, 61.3 it/s] …").
//
// delay_seconds (tqdm's `delay`): nothing is printed until the bar is that old, so a phase that may be
// quick (an evaluation of a few batches) shows a bar only when it runs long. exclude(s) leaves s
// seconds out of the rate and ETA (the trainer's evaluations between steps: the ETA is the steps').
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace qkv::io {

class ProgressBar {
 public:
  // initial: for a resumed run; delay_seconds: print nothing before then
  ProgressBar(std::string desc, int64_t total, int64_t initial = 0, double delay_seconds = 0);
  ~ProgressBar();                                                     // calls close()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t n = 1);
  void set_postfix(std::vector<std::pair<std::string, std::string>> kv);  // shown after the bar
  // Print a line above the bar (e.g. "step 500: val loss 1.71") without garbling it.
  void write(const std::string& line);
  void close();  // idempotent; later update()/write() calls only count / print plain lines

  // Non-tty mode: seconds between printed lines (default 10).
  void set_log_every_seconds(double seconds);
  // Terminal mode: keep the final bar on screen at close instead of clearing it (default false).
  void set_leave(bool leave);
  // Prints nothing from now on (counting goes on): --quiet, or a data-parallel rank other than 0.
  void mute() { set_stream_for_testing(nullptr, false); }
  int64_t n() const;
  // Leaves `seconds` of the time so far out of the rate and ETA (work between updates that is not
  // the bar's: the trainer's evaluations). The elapsed time shown stays the wall time.
  void exclude(double seconds);
  // Process-wide: bars constructed while muted print nothing (a data-parallel rank other than 0,
  // --quiet: the evaluation bars inside a training task). Returns the previous setting.
  static bool mute_all(bool muted);
  // mute_all for a scope: bars made in its lifetime print nothing where `mute` (also where they were
  // muted before it); the setting before it comes back after, an exception or not.
  class MutedScope {
   public:
    explicit MutedScope(bool mute) : before_(mute_all(false)) { mute_all(before_ || mute); }
    ~MutedScope() { mute_all(before_); }
    MutedScope(const MutedScope&) = delete;
    MutedScope& operator=(const MutedScope&) = delete;

   private:
    bool before_;
  };

  // For tests: the line that would be printed at `elapsed_seconds`, `width` columns wide,
  // without touching the stream.
  std::string render(double elapsed_seconds, int width = 100) const;
  void set_stream_for_testing(std::FILE* f, bool is_tty);

  static std::string format_duration(double seconds);  // 75 → "01:15", 3725 → "1:02:05"; <0/NaN → "?"
  static std::string format_rate(double per_second);   // 61.3 → "61.3", 47210 → "47.2k", 1.2e6 → "1.20M"

 private:
  using Clock = std::chrono::steady_clock;
  double now() const;                         // seconds since construction
  void print_locked(bool final);              // draw (tty) or log a line (non-tty)
  void sample_rate_locked(double t);          // fold the rate since the last sample into the EMA
  std::string render_locked(double elapsed, int width) const;
  int terminal_width() const;

  mutable std::mutex mu_;
  std::string desc_;
  int64_t total_ = 0;
  int64_t initial_ = 0;
  int64_t n_ = 0;
  std::vector<std::pair<std::string, std::string>> postfix_;
  Clock::time_point start_;
  std::FILE* out_ = nullptr;
  bool tty_ = false;
  bool closed_ = false;
  bool leave_ = false;
  bool drawn_ = false;  // tty: a bar is on the current line
  double log_every_ = 10.0;
  double delay_ = 0.0;     // print nothing before this age
  double excluded_ = 0.0;  // seconds left out of the rate (exclude())
  double last_print_ = 0.0;
  // rate EMA
  double ema_rate_ = 0.0;  // 0: no sample yet
  double sample_t_ = 0.0;
  int64_t sample_n_ = 0;
};

// A status line for work that cannot be counted — a library call that reports no progress
// (SentencePiece's training) — so that it is not silence: the description and the time so far,
//   tokenizer: training SentencePiece (unigram, 8000 pieces) on 309620 lines … [00:07]
// kept current by a thread of its own (a terminal: redrawn ~5 times a second; a log: a line every
// log_every_seconds). Like a delayed bar it shows nothing for the first delay_seconds, so quick
// work stays quiet; once shown, close() ends it with the total ("… done in 12.3 s"). Muted as
// ProgressBar is (mute_all: --quiet, a data-parallel rank other than 0).
class StatusLine {
 public:
  explicit StatusLine(std::string desc, double delay_seconds = 2, double log_every_seconds = 10);
  ~StatusLine();  // calls close()
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;
  void close();   // idempotent; stops the thread

  // For tests: write to f (is_tty: redraw one line) — call before the delay runs out.
  void set_stream_for_testing(std::FILE* f, bool is_tty);
  std::string render(double elapsed_seconds) const;  // "desc [00:07]"

 private:
  using Clock = std::chrono::steady_clock;
  void run();                          // the thread: sleep, draw, until close()
  void draw_locked(double t, bool final);

  std::string desc_;
  double delay_, log_every_;
  Clock::time_point start_;
  std::FILE* out_;
  bool tty_;
  bool shown_ = false, drawn_ = false, closed_ = false;
  double last_print_ = 0;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::thread thread_;  // last: started once the members above are set
};

}  // namespace qkv::io
