#include "qkv/vision/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "qkv/core/error.h"

namespace qkv::vision {

namespace {

// A file read through zlib: gzip-compressed or plain (gzread passes plain files through).
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    std::error_code ec;
    QKV_CHECK(std::filesystem::is_regular_file(path, ec), "'", path, "': no such file");
    f_ = gzopen(path.c_str(), "rb");
    QKV_CHECK(f_ != nullptr, "'", path, "': cannot open (", std::strerror(errno), ")");
    gzbuffer(f_, 1 << 16);
  }
  ~Reader() {
    if (f_) gzclose(f_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  // Reads exactly n bytes; fewer is an error saying what was being read.
  void read(void* out, uint64_t n, const char* what) {
    auto* p = static_cast<uint8_t*>(out);
    uint64_t got = 0;
    while (got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n - got, 1u << 30));
      const int r = gzread(f_, p + got, chunk);
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(f_, &code);
        throw Error(detail::concat("'", path_, "': corrupt compressed data while reading ", what, " (", msg, ")"));
      }
      if (r == 0) break;
      got += static_cast<uint64_t>(r);
    }
    QKV_CHECK(got == n, "'", path_, "': truncated: ", what, " needs ", n, " bytes, the file has ", got);
  }
  bool at_end() {
    uint8_t b;
    return gzread(f_, &b, 1) == 0;
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

}  // namespace

IdxArray read_idx(const std::string& path, uint64_t max_bytes) {
  Reader in(path);
  uint8_t magic[4];
  in.read(magic, 4, "the IDX header");
  QKV_CHECK(magic[0] == 0 && magic[1] == 0, "'", path, "' is not an IDX file (it starts with bytes ",
            int(magic[0]), " ", int(magic[1]), ", not 0 0)");
  QKV_CHECK(magic[2] == 0x08, "'", path, "': IDX element type 0x", std::hex, int(magic[2]), std::dec,
            " is not supported (only unsigned bytes, 0x08, as image sets use)");
  const int ndim = magic[3];
  QKV_CHECK(ndim >= 1 && ndim <= 4, "'", path, "': an IDX array of ", ndim, " dimensions (1 to 4 expected)");
  IdxArray a;
  uint64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    uint8_t b[4];
    in.read(b, 4, "the IDX sizes");
    const uint64_t n = (uint64_t(b[0]) << 24) | (uint64_t(b[1]) << 16) | (uint64_t(b[2]) << 8) | b[3];
    QKV_CHECK(n > 0, "'", path, "': dimension ", d, " has size 0");
    // total·n ≤ max_bytes, checked before multiplying
    QKV_CHECK(total <= max_bytes / n, "'", path, "': the header announces more than ", max_bytes,
              " bytes of data (dimension ", d, " of size ", n, ")");
    total *= n;
    a.shape.push_back(static_cast<int64_t>(n));
  }
  a.data.resize(static_cast<size_t>(total));
  in.read(a.data.data(), total, "the data");
  QKV_CHECK(in.at_end(), "'", path, "': bytes after the ", total, " the header announces (not an IDX file, or a "
            "corrupt one)");
  return a;
}

}  // namespace qkv::vision
