#include "qkv/io/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>

#include "qkv/core/utf8.h"

namespace qkv::io {

namespace {

constexpr double kTtyInterval = 0.1;     // at most ~10 redraws a second
constexpr double kEmaAlpha = 0.3;        // weight of the newest rate sample
std::atomic<bool> g_muted{false};        // ProgressBar::mute_all

size_t display_width(const std::string& s) { return utf8::length(s); }  // code points; enough for the block glyphs

std::string rate_part(double rate) {
  if (!(rate > 0) || !std::isfinite(rate)) return "? it/s";
  if (rate < 1) return ProgressBar::format_rate(1 / rate) + " s/it";
  return ProgressBar::format_rate(rate) + " it/s";
}

}  // namespace

bool ProgressBar::mute_all(bool muted) { return g_muted.exchange(muted); }

ProgressBar::ProgressBar(std::string desc, int64_t total, int64_t initial, double delay_seconds)
    : desc_(std::move(desc)),
      total_(std::max<int64_t>(total, 0)),
      initial_(initial),
      n_(initial),
      start_(Clock::now()),
      out_(g_muted.load() ? nullptr : stderr),
      tty_(out_ != nullptr && isatty(fileno(stderr)) != 0),
      delay_(std::max(0.0, delay_seconds)),
      sample_n_(initial) {
  if (tty_ && delay_ <= 0) {
    std::lock_guard<std::mutex> lock(mu_);
    print_locked(false);
  }
}

ProgressBar::~ProgressBar() {
  try {
    close();
  } catch (...) {
  }
}

double ProgressBar::now() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void ProgressBar::set_stream_for_testing(std::FILE* f, bool is_tty) {
  std::lock_guard<std::mutex> lock(mu_);
  out_ = f;
  tty_ = is_tty;
  drawn_ = false;
}

void ProgressBar::set_log_every_seconds(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  log_every_ = std::max(0.0, seconds);
}

void ProgressBar::set_leave(bool leave) {
  std::lock_guard<std::mutex> lock(mu_);
  leave_ = leave;
}

int64_t ProgressBar::n() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_;
}

void ProgressBar::set_postfix(std::vector<std::pair<std::string, std::string>> kv) {
  std::lock_guard<std::mutex> lock(mu_);
  postfix_ = std::move(kv);
}

void ProgressBar::exclude(double seconds) {
  if (!(seconds > 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  excluded_ += seconds;
  sample_t_ += seconds;  // the excluded time came after the last rate sample
}

void ProgressBar::sample_rate_locked(double t) {
  const double dt = t - sample_t_;
  if (dt <= 0) return;
  const double inst = static_cast<double>(n_ - sample_n_) / dt;
  ema_rate_ = ema_rate_ > 0 ? kEmaAlpha * inst + (1 - kEmaAlpha) * ema_rate_ : inst;
  if (!(ema_rate_ > 0)) ema_rate_ = 0;  // stalled: fall back to the average
  sample_t_ = t;
  sample_n_ = n_;
}

void ProgressBar::update(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  n_ += n;
  if (closed_ || out_ == nullptr) return;
  const double t = now();
  if (t < delay_) return;
  if (t - last_print_ >= (tty_ ? kTtyInterval : log_every_)) {
    sample_rate_locked(t);  // the EMA is fed once per printed line, as tqdm does
    print_locked(false);
  }
}

void ProgressBar::write(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (out_ == nullptr) return;
  if (tty_ && drawn_) {
    std::fputs("\r\x1b[K", out_);
    drawn_ = false;
  }
  std::fputs(line.c_str(), out_);
  std::fputc('\n', out_);
  if (tty_ && !closed_ && now() >= delay_) print_locked(false);
  std::fflush(out_);
}

void ProgressBar::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  if (out_ == nullptr) return;
  if (now() < delay_ && !drawn_) return;  // over before the delay: never shown
  print_locked(true);
}

void ProgressBar::print_locked(bool final) {
  const double t = now();
  last_print_ = t;
  if (tty_) {
    if (final && !leave_) {
      if (drawn_) std::fputs("\r\x1b[K", out_);
      drawn_ = false;
    } else {
      const std::string line = render_locked(t, terminal_width() - 1);
      std::fputs("\r", out_);
      std::fputs(line.c_str(), out_);
      std::fputs("\x1b[K", out_);
      drawn_ = true;
      if (final) {
        std::fputc('\n', out_);
        drawn_ = false;
      }
    }
  } else {
    const std::string line = render_locked(t, 100);
    std::fputs(line.c_str(), out_);
    std::fputc('\n', out_);
  }
  std::fflush(out_);
}

int ProgressBar::terminal_width() const {
  struct winsize ws {};
  if (out_ != nullptr && ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* cols = std::getenv("COLUMNS")) {
    const int c = std::atoi(cols);
    if (c > 0) return c;
  }
  return 100;
}

std::string ProgressBar::render(double elapsed_seconds, int width) const {
  std::lock_guard<std::mutex> lock(mu_);
  return render_locked(elapsed_seconds, width);
}

std::string ProgressBar::render_locked(double elapsed, int width) const {
  const int64_t done = n_ - initial_;  // the work of this run (a resumed run starts at `initial`)
  double rate = ema_rate_;
  const double active = elapsed - excluded_;  // the bar's own work time
  if (!(rate > 0) && active > 0) rate = static_cast<double>(done) / active;

  std::string post;
  for (const auto& [k, v] : postfix_) {
    post += ' ';
    post += k;
    post += '=';
    post += v;
  }

  std::string desc = desc_;
  if (total_ <= 0) {
    // "train 740it [00:12, 61.3 it/s] loss=1.942"
    std::string line = desc;
    if (!line.empty()) line += ' ';
    line += std::to_string(n_) + "it [" + format_duration(elapsed) + ", " + rate_part(rate) + "]";
    return line + post;
  }

  const double frac = std::clamp(static_cast<double>(n_) / static_cast<double>(total_), 0.0, 1.0);
  char pct[8];
  std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(std::floor(frac * 100 + 1e-9)));
  std::string eta = "?";
  if (n_ >= total_) eta = format_duration(0);
  else if (rate > 0) eta = format_duration(static_cast<double>(total_ - n_) / rate);
  const std::string left = desc.empty() ? std::string(pct) : desc + ' ' + pct;
  std::string right = " ";
  right += std::to_string(n_);
  right += '/';
  right += std::to_string(total_);
  right += " [" + format_duration(elapsed);
  right += '<';
  right += eta;
  right += ", " + rate_part(rate);
  right += ']';
  right += post;

  const int fixed = static_cast<int>(display_width(left) + display_width(right)) + 2;  // the two '|'
  const int bar_w = std::max(10, width - fixed);
  static const char* kPartial[8] = {"", "\u258F", "\u258E", "\u258D", "\u258C", "\u258B", "\u258A", "\u2589"};
  const int64_t eighths = static_cast<int64_t>(std::floor(frac * bar_w * 8 + 1e-9));
  const int full = static_cast<int>(eighths / 8), part = static_cast<int>(eighths % 8);
  std::string bar;
  for (int i = 0; i < full; ++i) bar += "\u2588";
  int used = full;
  if (full < bar_w && part > 0) {
    bar += kPartial[part];
    ++used;
  }
  bar.append(static_cast<size_t>(std::max(0, bar_w - used)), ' ');
  return left + "|" + bar + "|" + right;
}

std::string ProgressBar::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::floor(seconds));
  const int64_t h = s / 3600, m = (s / 60) % 60, sec = s % 60;
  char buf[48];
  if (h > 0) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(h),
                           static_cast<long long>(m), static_cast<long long>(sec));
  else std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(m), static_cast<long long>(sec));
  return buf;
}

std::string ProgressBar::format_rate(double per_second) {
  if (std::isnan(per_second)) return "?";
  if (std::isinf(per_second)) return "inf";
  const bool neg = per_second < 0;
  double v = std::abs(per_second);
  static const char* kUnits[] = {"", "k", "M", "G", "T", "P"};
  size_t u = 0;
  while (v >= 1000 && u + 1 < std::size(kUnits)) v /= 1000, ++u;
  char buf[32];
  for (;;) {
    // 3 significant digits: 1.23, 12.3, 123
    const int decimals = v < 10 ? 2 : v < 100 ? 1 : 0;
    const double scale = std::pow(10.0, decimals);
    const double r = std::round(v * scale) / scale;
    const int d2 = r < 10 ? 2 : r < 100 ? 1 : 0;  // rounding may cross 10 or 100
    if (r >= 1000 && u + 1 < std::size(kUnits)) {
      v /= 1000, ++u;
      continue;
    }
    std::snprintf(buf, sizeof buf, "%s%.*f%s", neg ? "-" : "", std::min(decimals, d2), r, kUnits[u]);
    return buf;
  }
}

// ---- StatusLine -----------------------------------------------------------------------------------

StatusLine::StatusLine(std::string desc, double delay_seconds, double log_every_seconds)
    : desc_(std::move(desc)),
      delay_(std::max(0.0, delay_seconds)),
      log_every_(std::max(0.1, log_every_seconds)),
      start_(Clock::now()),
      out_(g_muted.load() ? nullptr : stderr),
      tty_(out_ != nullptr && isatty(fileno(stderr)) != 0) {
  if (out_ != nullptr) thread_ = std::thread([this] { run(); });
}

StatusLine::~StatusLine() {
  try {
    close();
  } catch (...) {
  }
}

void StatusLine::set_stream_for_testing(std::FILE* f, bool is_tty) {
  std::lock_guard<std::mutex> lock(mu_);
  out_ = f;
  tty_ = is_tty;
}

std::string StatusLine::render(double elapsed) const {
  return desc_ + " [" + ProgressBar::format_duration(elapsed) + "]";
}

void StatusLine::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!closed_) {
    const double t = std::chrono::duration<double>(Clock::now() - start_).count();
    if (out_ != nullptr && t >= delay_ && (tty_ || !shown_ || t - last_print_ >= log_every_)) draw_locked(t, false);
    // a terminal's clock ticks visibly; a log gets a line every log_every_ seconds
    const double next = t < delay_ ? delay_ - t : tty_ ? 0.2 : log_every_ - (t - last_print_);
    wake_.wait_for(lock, std::chrono::duration<double>(std::max(0.01, next)));
  }
}

void StatusLine::draw_locked(double t, bool final) {
  std::string line = render(t);
  if (final) {
    char took[48];
    std::snprintf(took, sizeof took, " done in %.1f s", t);
    line = desc_ + took;
  }
  if (tty_) {
    std::fputs("\r", out_);
    std::fputs(line.c_str(), out_);
    std::fputs("\x1b[K", out_);
    drawn_ = !final;
    if (final) std::fputc('\n', out_);
  } else {
    std::fputs(line.c_str(), out_);
    std::fputc('\n', out_);
  }
  std::fflush(out_);
  shown_ = true;
  last_print_ = t;
}

void StatusLine::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (out_ != nullptr && shown_)
      draw_locked(std::chrono::duration<double>(Clock::now() - start_).count(), true);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace qkv::io
