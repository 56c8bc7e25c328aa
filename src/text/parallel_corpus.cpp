#include "qkv/text/parallel_corpus.h"

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
#include "qkv/io/data_file.h"
#include "qkv/io/file.h"

namespace qkv::text {
namespace {


// Inflates gzip bytes (all members, as gzip -d does). A stream that ends before its trailer — a
// truncated download — or that fails its CRC is an error naming the file.
std::string inflate_gzip(const std::string& raw, const std::string& path) {
  std::string data;
  std::vector<char> out(1 << 20);
  size_t pos = 0;
  while (pos < raw.size()) {
    z_stream zs{};
    QKV_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "read_lines: ", path, ": zlib init failed");
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data() + pos));
    zs.avail_in = static_cast<uInt>(raw.size() - pos);
    int rc = Z_OK;
    while (rc == Z_OK) {
      zs.next_out = reinterpret_cast<Bytef*>(out.data());
      zs.avail_out = static_cast<uInt>(out.size());
      rc = inflate(&zs, Z_NO_FLUSH);
      data.append(out.data(), out.size() - zs.avail_out);
      if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // input exhausted before the end of the stream
    }
    const std::string why = zs.msg ? zs.msg : (rc == Z_BUF_ERROR ? "unexpected end of file (truncated?)" : "corrupt data");
    const size_t used = raw.size() - pos - zs.avail_in;
    inflateEnd(&zs);
    QKV_CHECK(rc == Z_STREAM_END, "read_lines: ", path, ": gzip error: ", why);
    pos += used;
    while (pos < raw.size() && raw[pos] == 0) ++pos;  // padding after the last member
  }
  return data;
}

// The whole file (read once), decompressed when it starts with the gzip magic bytes 1f 8b.
std::string read_file_bytes(const std::string& path) {
  std::string raw = io::read_data_file(path, "parallel corpus");
  const bool gzip = raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f &&
                    static_cast<unsigned char>(raw[1]) == 0x8b;
  return gzip ? inflate_gzip(raw, path) : raw;
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

std::vector<std::string> read_lines(const std::string& path) {
  const std::string data = read_file_bytes(path);
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    const size_t next = end == std::string::npos ? data.size() : end + 1;
    if (end == std::string::npos) end = data.size();
    if (end > pos && data[end - 1] == '\r') --end;
    lines.emplace_back(data, pos, end - pos);
    pos = next;
  }
  return lines;
}

std::vector<SentencePair> read_tsv_pairs(const std::string& path, int src_col, int tgt_col) {
  QKV_CHECK(src_col >= 0 && tgt_col >= 0, "read_tsv_pairs: ", path, ": negative column (",
            src_col, ", ", tgt_col, ")");
  const std::vector<std::string> lines = read_lines(path);
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
  std::vector<std::string> src = read_lines(src_path);
  std::vector<std::string> tgt = read_lines(tgt_path);
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
