#include "qkv/text/parallel_corpus.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/io/data_file.h"
#include "qkv/io/file.h"

namespace qkv::text {
namespace {

std::string mib_str(int64_t bytes) {
  return bytes % (int64_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

// Lines as the bytes come (from the file, or from zlib as it inflates), held within the limits:
// a line longer than limits.max_line_bytes, or lines (and the file's own bytes, `held` at the
// start) taking more than the budget, stop the reading there with an error naming the file — a
// gzip file that inflates to gigabytes is refused after the first line too long or the first
// budget's worth, never inflated whole (issue 43).
class LineCollector {
 public:
  LineCollector(const std::string& path, const std::string& what, const LineLimits& limits, int64_t held, bool gzip)
      : path_(path), what_(what), limits_(limits), held_(held), gzip_(gzip) {
    budget_ = limits.max_bytes > 0 ? limits.max_bytes : machine_memory_bytes() / 2;
    check_budget();
  }

  void feed(const char* p, size_t n) {
    while (n > 0) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', n));
      const size_t take = nl ? static_cast<size_t>(nl - p) : n;
      // (a '\r' before the '\n' is not the line's: one byte of slack)
      QKV_CHECK(partial_.size() + take <= static_cast<size_t>(limits_.max_line_bytes) + 1, what_, " '", path_, "': line ",
                lines_.size() + 1, " is longer than ", mib_str(limits_.max_line_bytes), gzip_ ? " (decompressed)" : "",
                ": the lines of a text file are sentences");
      partial_.append(p, take);
      if (!nl) return;
      end_line();
      p += take + 1, n -= take + 1;
    }
  }

  // The last line, when the text does not end with '\n'.
  std::vector<std::string> finish() {
    if (!partial_.empty()) end_line();
    return std::move(lines_);
  }

 private:
  void end_line() {
    if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
    QKV_CHECK(partial_.size() <= static_cast<size_t>(limits_.max_line_bytes), what_, " '", path_, "': line ",
              lines_.size() + 1, " is longer than ", mib_str(limits_.max_line_bytes), gzip_ ? " (decompressed)" : "",
              ": the lines of a text file are sentences");
    held_ += static_cast<int64_t>(partial_.size() + sizeof(std::string));
    check_budget();
    lines_.emplace_back(partial_);  // a copy of its own size; partial_ keeps its buffer for the next line
    partial_.clear();
  }

  void check_budget() const {
    if (held_ <= budget_) return;
    const std::string whose = limits_.max_bytes > 0 ? std::string("the limit")
                                                    : "half of this machine's " + memory_str(machine_memory_bytes()) +
                                                          " of memory";
    QKV_CHECK(false, what_, " '", path_, "': its lines", gzip_ ? " (decompressed)" : "", " take more than ",
              memory_str(budget_), " (", whose, ")");
  }

  const std::string& path_;
  const std::string& what_;
  const LineLimits& limits_;
  int64_t held_, budget_ = 0;
  bool gzip_;
  std::string partial_;
  std::vector<std::string> lines_;
};

// Inflates gzip bytes (all members, as gzip -d does) into `lines`, a piece at a time. A stream
// that ends before its trailer — a truncated download — or that fails its CRC is an error naming
// the file.
void inflate_gzip(const std::string& raw, const std::string& path, const std::string& what, LineCollector& lines) {
  std::vector<char> out(1 << 20);
  size_t pos = 0;
  while (pos < raw.size()) {
    z_stream zs{};
    QKV_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, what, " '", path, "': zlib init failed");
    struct End {
      z_stream* zs;
      ~End() { inflateEnd(zs); }
    } end{&zs};
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data() + pos));
    const char* const end_of_raw = raw.data() + raw.size();
    auto next_in = [&] { return reinterpret_cast<const char*>(zs.next_in); };
    // (a file past 4 GiB goes to zlib in pieces its 32-bit counts can hold)
    auto give = [&] { zs.avail_in = static_cast<uInt>(std::min<size_t>(end_of_raw - next_in(), size_t{1} << 30)); };
    give();
    int rc = Z_OK;
    while (rc == Z_OK) {
      if (zs.avail_in == 0) give();
      zs.next_out = reinterpret_cast<Bytef*>(out.data());
      zs.avail_out = static_cast<uInt>(out.size());
      rc = inflate(&zs, Z_NO_FLUSH);
      lines.feed(out.data(), out.size() - zs.avail_out);
      if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
        if (next_in() == end_of_raw) break;  // input exhausted before the end of the stream
        rc = Z_OK;                           // the next piece of a large file
      }
    }
    const std::string why = zs.msg ? zs.msg : (rc == Z_BUF_ERROR ? "unexpected end of file (truncated?)" : "corrupt data");
    QKV_CHECK(rc == Z_STREAM_END, what, " '", path, "': gzip error: ", why);
    pos = static_cast<size_t>(next_in() - raw.data());
    while (pos < raw.size() && raw[pos] == 0) ++pos;  // padding after the last member
  }
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, n), n ≥ 1, by rejection (no modulo bias).
uint64_t uniform_below(uint64_t& state, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  while (true) {
    const uint64_t r = splitmix64(state);
    if (r >= threshold) return r % n;
  }
}

}  // namespace

namespace {

// A pipe, a FIFO or a device (`-i <(cmd)`, /dev/stdin) read as a stream, as `cat` does: opening a
// FIFO waits for its writer. Plain lines are collected as they come (a line past the limit — /dev/zero —
// stops the reading there); gzip bytes are held, within the budget, then inflated.
std::vector<std::string> read_stream_lines(const std::string& path, const std::string& what, const LineLimits& limits) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw Error(detail::concat(what, ": cannot open '", path, "': ", std::strerror(errno)));
  const int64_t budget = limits.max_bytes > 0 ? limits.max_bytes : machine_memory_bytes() / 2;
  std::vector<char> buf(1 << 16);
  std::string raw;  // gzip only
  int gzip = -1;    // unknown until the first two bytes
  std::unique_ptr<LineCollector> lines;
  std::string head;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    if (gzip < 0) {
      head.append(buf.data(), n);
      if (head.size() < 2) continue;
      gzip = static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b;
      if (gzip) raw = std::move(head);
      else {
        lines = std::make_unique<LineCollector>(path, what, limits, 0, false);
        lines->feed(head.data(), head.size());
      }
      head.clear();
      continue;
    }
    if (gzip) {
      raw.append(buf.data(), n);
      QKV_CHECK(static_cast<int64_t>(raw.size()) <= budget, what, " '", path, "': more than ", memory_str(budget),
                " of gzip bytes");
    } else {
      lines->feed(buf.data(), n);
    }
  }
  QKV_CHECK(!std::ferror(f.get()), what, ": cannot read '", path, "': ", std::strerror(errno));
  if (gzip < 0) {  // fewer than two bytes
    LineCollector few(path, what, limits, 0, false);
    few.feed(head.data(), head.size());
    return few.finish();
  }
  if (gzip) {
    LineCollector inflated(path, what, limits, static_cast<int64_t>(raw.size()), true);
    inflate_gzip(raw, path, what, inflated);
    return inflated.finish();
  }
  return lines->finish();
}

}  // namespace

std::vector<std::string> read_lines(const std::string& path, const std::string& what, const LineLimits& limits) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return read_stream_lines(path, what, limits);
  // A regular file no larger than half the memory (io/data_file.h), read once; gzip (its magic
  // bytes 1f 8b) inflated as its lines are collected.
  const std::string raw = io::read_data_file(path, what);
  const bool gzip = raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f &&
                    static_cast<unsigned char>(raw[1]) == 0x8b;
  // The lines of a plain file are held beside its bytes; a gzip file's beside its compressed bytes.
  LineCollector lines(path, what, limits, static_cast<int64_t>(raw.size()), gzip);
  if (gzip) inflate_gzip(raw, path, what, lines);
  else lines.feed(raw.data(), raw.size());
  return lines.finish();
}

std::vector<SentencePair> read_tsv_pairs(const std::string& path, int src_col, int tgt_col) {
  QKV_CHECK(src_col >= 0 && tgt_col >= 0, "read_tsv_pairs: ", path, ": negative column (",
            src_col, ", ", tgt_col, ")");
  // training data: a regular file (a pipe would not be read at random, and is refused before it is opened)
  io::require_regular_file(path, "parallel corpus", "a regular file: training data is read from files");
  const std::vector<std::string> lines = read_lines(path, "parallel corpus");
  const size_t need = static_cast<size_t>(std::max(src_col, tgt_col)) + 1;
  std::vector<SentencePair> pairs;
  pairs.reserve(lines.size());
  std::vector<std::string_view> cols;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    cols.clear();
    size_t pos = 0;
    while (true) {
      const size_t tab = line.find('\t', pos);
      if (tab == std::string_view::npos) {
        cols.push_back(line.substr(pos));
        break;
      }
      cols.push_back(line.substr(pos, tab - pos));
      pos = tab + 1;
    }
    QKV_CHECK(cols.size() >= need, path, ":", i + 1, ": ", cols.size(),
              " tab-separated column(s), need at least ", need, " (columns ", src_col, " and ",
              tgt_col, ")");
    pairs.push_back({std::string(cols[src_col]), std::string(cols[tgt_col])});
  }
  return pairs;
}

std::vector<SentencePair> read_file_pairs(const std::string& src_path,
                                          const std::string& tgt_path) {
  io::require_regular_file(src_path, "parallel corpus", "a regular file: training data is read from files");
  io::require_regular_file(tgt_path, "parallel corpus", "a regular file: training data is read from files");
  std::vector<std::string> src = read_lines(src_path, "parallel corpus");
  std::vector<std::string> tgt = read_lines(tgt_path, "parallel corpus");
  QKV_CHECK(src.size() == tgt.size(), "read_file_pairs: ", src_path, " has ", src.size(),
            " lines but ", tgt_path, " has ", tgt.size());
  std::vector<SentencePair> pairs(src.size());
  for (size_t i = 0; i < src.size(); ++i) pairs[i] = {std::move(src[i]), std::move(tgt[i])};
  return pairs;
}

Split split_by_source(const std::vector<SentencePair>& pairs, int64_t dev_sources,
                      int64_t test_sources, uint64_t seed) {
  QKV_CHECK(dev_sources >= 0 && test_sources >= 0, "split_by_source: negative sizes (dev ",
            dev_sources, ", test ", test_sources, ")");
  // Distinct sources in order of first appearance.
  std::unordered_map<std::string_view, int64_t> index;
  index.reserve(pairs.size());
  std::vector<int64_t> group(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [it, inserted] =
        index.try_emplace(pairs[i].src, static_cast<int64_t>(index.size()));
    group[i] = it->second;
  }
  const auto n = static_cast<int64_t>(index.size());
  QKV_CHECK(dev_sources + test_sources <= n, "split_by_source: dev ", dev_sources, " + test ",
            test_sources, " sources requested but there are only ", n, " distinct sources");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  // 0 = train, 1 = dev, 2 = test, per distinct source.
  std::vector<uint8_t> where(static_cast<size_t>(n), 0);
  for (int64_t k = 0; k < dev_sources; ++k) where[order[k]] = 1;
  for (int64_t k = dev_sources; k < dev_sources + test_sources; ++k) where[order[k]] = 2;
  Split out;
  for (size_t i = 0; i < pairs.size(); ++i) {
    switch (where[group[i]]) {
      case 1: out.dev.push_back(pairs[i]); break;
      case 2: out.test.push_back(pairs[i]); break;
      default: out.train.push_back(pairs[i]); break;
    }
  }
  return out;
}

std::string normalize_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t space_len = 0;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r') {
      space_len = 1;
    } else if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0xA0) {
      space_len = 2;  // U+00A0
    } else if (c == 0xE2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(text[i + 2]) == 0xAF ||     // U+202F
                static_cast<unsigned char>(text[i + 2]) == 0x89)) {    // U+2009
      space_len = 3;
    }
    if (space_len) {
      pending_space = !out.empty();
      i += space_len;
    } else {
      if (pending_space) out += ' ';
      pending_space = false;
      out += text[i++];
    }
  }
  return out;
}

}  // namespace qkv::text
