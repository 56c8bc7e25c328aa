// safetensors: round trips, the F16/BF16 storage rounding, a file written by Python's safetensors,
// corrupt files, and atomic writes.
#include "qkv/io/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "qkv/io/file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using io::StoreAs;

// A fresh, empty directory for one test ("<TempDir>/qkv_io_<pid>_<n>_<test>/"), removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    dir_ = fs::path(::testing::TempDir()) /
           detail::concat("qkv_io_", ::getpid(), "_", counter++, "_",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return dir_.string() + "/"; }

 private:
  fs::path dir_;
};

// The message of the qkv::Error `f` throws ("" and a test failure when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no qkv::Error thrown";
  return "";
}

// A safetensors file by hand: u64 header length (or `len` if given), the header, the data.
std::string raw_safetensors(const std::string& header, const std::string& data, uint64_t len = UINT64_MAX) {
  uint64_t n = len == UINT64_MAX ? header.size() : len;
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

uint16_t bits_f16(float f) { return f32_to_f16(f).bits; }

TEST(Safetensors, RoundTripKeepsValuesShapesDtypesAndMetadata) {
  ScratchDir scratch;
  std::string path = scratch.str() + "model.safetensors";
  Tensor w = Tensor::from_vector({0.5f, -1.f, 2.25f, 1e-30f, -0.f, 3e38f}, {2, 3});
  Tensor base = Tensor::arange(12).reshape({3, 4});
  Tensor wt = base.transpose(0, 1).slice(0, 1, 3);  // [2, 3], non-contiguous, offset 1
  ASSERT_FALSE(wt.is_contiguous());
  Tensor b = Tensor::from_vector({1.f, -2.5f, 3.140625f}, {3}).to(DType::bf16);
  Tensor ids = Tensor::from_ints({0, -7, 2147483647}, {3});
  Tensor mask = Tensor::from_bools({true, false, true, true}, {2, 2});
  Tensor s = Tensor::scalar(42.f);
  Tensor e = Tensor::zeros({0, 5});
  io::save_safetensors(path, {{"w", w}, {"wt", wt}, {"b", b}, {"ids", ids}, {"mask", mask}, {"s", s}, {"e", e}},
                       {{"format", "pt"}, {"note", "héllo"}});

  io::SafetensorsFile f = io::load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 7u);
  std::vector<std::string> names;
  for (const auto& [n, t] : f.tensors) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"w", "wt", "b", "ids", "mask", "s", "e"}));  // file order
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "héllo"}}));
  EXPECT_EQ(f.find("nope"), nullptr);
  ASSERT_NE(f.find("w"), nullptr);
  EXPECT_EQ(f.find("w")->dtype(), DType::f32);
  EXPECT_EQ(f.find("w")->shape(), (Shape{2, 3}));
  EXPECT_EQ(f.find("w")->to_vector(), w.to_vector());
  EXPECT_TRUE(std::signbit(f.find("w")->to_vector()[4]));
  EXPECT_EQ(f.find("wt")->shape(), (Shape{2, 3}));
  EXPECT_EQ(f.find("wt")->to_vector(), (std::vector<float>{1, 5, 9, 2, 6, 10}));
  EXPECT_EQ(f.find("b")->dtype(), DType::f32);  // BF16 → f32 unless keep_bf16
  EXPECT_EQ(f.find("b")->to_vector(), (std::vector<float>{1.f, -2.5f, 3.140625f}));
  EXPECT_EQ(f.find("ids")->dtype(), DType::i32);
  EXPECT_EQ(f.find("ids")->to_ints(), (std::vector<int32_t>{0, -7, 2147483647}));
  EXPECT_EQ(f.find("mask")->dtype(), DType::boolean);
  EXPECT_EQ(f.find("mask")->shape(), (Shape{2, 2}));
  EXPECT_EQ(f.find("mask")->to_vector(), (std::vector<float>{1, 0, 1, 1}));
  EXPECT_EQ(f.find("s")->shape(), Shape{});
  EXPECT_EQ(f.find("s")->item(), 42.f);
  EXPECT_EQ(f.find("e")->shape(), (Shape{0, 5}));

  io::SafetensorsFile k = io::load_safetensors(path, /*keep_bf16=*/true);
  EXPECT_EQ(k.find("b")->dtype(), DType::bf16);
  EXPECT_EQ(k.find("b")->to_vector(), (std::vector<float>{1.f, -2.5f, 3.140625f}));
  EXPECT_EQ(k.find("w")->dtype(), DType::f32);

  // StoreAs::kF32 widens bf16; kBF16 narrows f32 (and leaves i32/bool alone).
  io::save_safetensors(path, {{"b", b}, {"ids", ids}}, {}, StoreAs::kF32);
  io::SafetensorsFile w32 = io::load_safetensors(path, true);
  EXPECT_EQ(w32.find("b")->dtype(), DType::f32);
  EXPECT_EQ(w32.find("ids")->dtype(), DType::i32);
  EXPECT_TRUE(w32.metadata.empty());
  io::save_safetensors(path, {{"w", wt}, {"m", mask}}, {}, StoreAs::kBF16);
  io::SafetensorsFile w16 = io::load_safetensors(path, true);
  EXPECT_EQ(w16.find("w")->dtype(), DType::bf16);
  EXPECT_EQ(w16.find("w")->to_vector(), (std::vector<float>{1, 5, 9, 2, 6, 10}));
  EXPECT_EQ(w16.find("m")->dtype(), DType::boolean);

  // A contiguous view that starts past its storage's first element (rows 1 and 2 of [3, 4]; i32 and
  // bf16 too): written from its own first element (the offset counts elements, not bytes).
  Tensor rows = base.slice(0, 1, 3), int_rows = Tensor::from_ints({0, 1, 2, 3, 4, 5}, {3, 2}).slice(0, 1, 3);
  Tensor bf_rows = base.to(DType::bf16).slice(0, 2, 3);
  ASSERT_TRUE(rows.is_contiguous() && rows.offset() == 4);
  io::save_safetensors(path, {{"rows", rows}, {"ints", int_rows}, {"bf", bf_rows}});
  io::SafetensorsFile r = io::load_safetensors(path, true);
  EXPECT_EQ(r.find("rows")->to_vector(), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(r.find("ints")->to_ints(), (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(r.find("bf")->to_vector(), (std::vector<float>{8, 9, 10, 11}));
}

TEST(Safetensors, Int8RowsRoundTripAsI8) {  // a quantized model file's rows (qkv quantize)
  ScratchDir scratch;
  const std::string path = scratch.str() + "int8.safetensors";
  std::vector<int8_t> v = {-127, -1, 0, 1, 127, 42};
  Tensor w8 = Tensor::from_blob(v.data(), {2, 3}, DType::i8);
  io::save_safetensors(path, {{"w8", w8}, {"w8t", w8.transpose(0, 1)}}, {}, StoreAs::kF16);  // i8 stays I8
  const std::string bytes = io::read_file(path);
  EXPECT_NE(bytes.find(R"("dtype":"I8","shape":[2,3])"), std::string::npos) << bytes.substr(0, 200);
  io::SafetensorsFile f = io::load_safetensors(path);
  EXPECT_EQ(f.find("w8")->dtype(), DType::i8);
  EXPECT_EQ(f.find("w8")->to_vector(), (std::vector<float>{-127, -1, 0, 1, 127, 42}));
  EXPECT_EQ(f.find("w8t")->to_vector(), (std::vector<float>{-127, 1, -1, 127, 0, 42}));
}

TEST(Safetensors, HeaderIsPaddedJsonWithContiguousOffsets) {
  ScratchDir scratch;
  std::string path = scratch.str() + "t.safetensors";
  io::save_safetensors(path, {{"a", Tensor::ones({3})}, {"bb", Tensor::from_ints({1, 2}, {2})}}, {{"k", "v"}});
  std::string bytes = io::read_file(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 3 * 4 + 2 * 4);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.substr(header.find_last_not_of(' ') + 1), std::string(n - header.find_last_not_of(' ') - 1, ' '));
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(j["bb"]["dtype"], "I32");
  EXPECT_EQ(j["bb"]["data_offsets"], nlohmann::json::array({12, 20}));
  EXPECT_EQ(j["__metadata__"]["k"], "v");
}

TEST(Safetensors, F16ConversionRoundsToNearestEven) {
  EXPECT_EQ(bits_f16(1.f), 0x3c00);
  EXPECT_EQ(bits_f16(-2.5f), 0xc100);
  EXPECT_EQ(bits_f16(65504.f), 0x7bff);                  // largest finite
  EXPECT_EQ(bits_f16(65519.f), 0x7bff);                  // below the midpoint
  EXPECT_EQ(bits_f16(65520.f), 0x7c00);                  // midpoint to 2^16 → inf (even)
  EXPECT_EQ(bits_f16(-1e6f), 0xfc00);                    // overflow → -inf
  EXPECT_EQ(bits_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(bits_f16(1.f + 0x1p-11f), 0x3c00);           // tie → even (1.0)
  EXPECT_EQ(bits_f16(1.f + 3 * 0x1p-11f), 0x3c02);       // tie → even (up)
  EXPECT_EQ(bits_f16(0x1p-14f), 0x0400);                 // smallest normal
  EXPECT_EQ(bits_f16(0x1p-14f - 0x1p-25f), 0x0400);      // tie between the largest subnormal and it → even
  EXPECT_EQ(bits_f16(1e-7f), 0x0002);                    // subnormal: 1e-7 / 2^-24 = 1.68 → 2
  EXPECT_EQ(bits_f16(0x1p-24f), 0x0001);                 // smallest subnormal
  EXPECT_EQ(bits_f16(0x1p-25f), 0x0000);                 // tie → even (0)
  EXPECT_EQ(bits_f16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(bits_f16(1e-40f), 0x0000);                   // f32 subnormal
  EXPECT_EQ(bits_f16(-0.f), 0x8000);
  uint16_t nan = bits_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // f16 → f32 → f16 is the identity on every non-NaN pattern.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(f16{static_cast<uint16_t>(h)});
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
      EXPECT_TRUE(std::isnan(f)) << h;
    } else {
      ASSERT_EQ(bits_f16(f), h) << h;
    }
  }
  EXPECT_EQ(f16_to_f32(f16{0x0001}), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(f16{0x03ff}), 0x1p-14f - 0x1p-24f);
  EXPECT_EQ(f16_to_f32(f16{0x7bff}), 65504.f);
}

TEST(Safetensors, F16AndBF16StorageRoundKnownValues) {
  ScratchDir scratch;
  std::string path = scratch.str() + "r.safetensors";
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector(
      {1.f, 65504.f, 65520.f, 1e-7f, -0.f, std::numeric_limits<float>::quiet_NaN(), 3.4e38f, 1e-40f}, {8});

  io::save_safetensors(path, {{"x", x}}, {}, StoreAs::kF16);
  EXPECT_NE(io::read_file(path).find("\"F16\""), std::string::npos);
  std::vector<float> h = io::load_safetensors(path).find("x")->to_vector();
  EXPECT_EQ(h[0], 1.f);
  EXPECT_EQ(h[1], 65504.f);
  EXPECT_EQ(h[2], inf);
  EXPECT_EQ(h[3], 0x1p-23f);  // 2 · 2^-24 = 1.1920929e-7
  EXPECT_EQ(h[4], 0.f);
  EXPECT_TRUE(std::signbit(h[4]));
  EXPECT_TRUE(std::isnan(h[5]));
  EXPECT_EQ(h[6], inf);
  EXPECT_EQ(h[7], 0.f);

  io::save_safetensors(path, {{"x", x}}, {}, StoreAs::kBF16);
  std::vector<float> b = io::load_safetensors(path).find("x")->to_vector();
  EXPECT_EQ(b[0], 1.f);
  EXPECT_EQ(b[1], 65536.f);  // bf16 keeps 8 mantissa bits
  EXPECT_EQ(b[2], 65536.f);
  EXPECT_EQ(b[3], 1.0011717677116394e-07f);
  EXPECT_EQ(b[4], 0.f);
  EXPECT_TRUE(std::signbit(b[4]));
  EXPECT_TRUE(std::isnan(b[5]));
  EXPECT_EQ(b[6], inf);                     // past bf16's largest finite → inf
  EXPECT_EQ(b[7], 9.183549615799121e-41f);  // subnormal kept
}

// tests/golden/tiny.safetensors, written by Python's safetensors (make_safetensors_golden.py).
TEST(Safetensors, ReadsFileWrittenByPythonSafetensors) {
  io::SafetensorsFile f = io::load_safetensors(QKV_GOLDEN_DIR "/tiny.safetensors");
  EXPECT_EQ(f.metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"source", "make_safetensors_golden.py"}}));
  ASSERT_EQ(f.tensors.size(), 8u);
  const TensorBase* t = f.find("f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype(), DType::f32);
  EXPECT_EQ(t->shape(), (Shape{2, 3}));
  EXPECT_EQ(t->to_vector(), (std::vector<float>{0.5f, -1.25f, 3.f, 1e-3f, -0.f, 1e30f}));
  ASSERT_NE(t = f.find("f16"), nullptr);
  EXPECT_EQ(t->dtype(), DType::f32);
  EXPECT_EQ(t->to_vector(), (std::vector<float>{1.f, 65504.f, 0x1p-24f, -2.5f}));
  ASSERT_NE(t = f.find("bf16"), nullptr);
  EXPECT_EQ(t->dtype(), DType::f32);
  EXPECT_EQ(t->to_vector(), (std::vector<float>{1.f, -0.5f, 3.140625f, 9.969209968386869e+37f}));
  EXPECT_EQ(io::load_safetensors(QKV_GOLDEN_DIR "/tiny.safetensors", true).find("bf16")->dtype(), DType::bf16);
  ASSERT_NE(t = f.find("i64"), nullptr);
  EXPECT_EQ(t->dtype(), DType::i32);
  EXPECT_EQ(t->shape(), (Shape{2, 2}));
  EXPECT_EQ(t->to_ints(), (std::vector<int32_t>{0, -1, 2147483647, -2147483647 - 1}));
  ASSERT_NE(t = f.find("i32"), nullptr);
  EXPECT_EQ(t->to_ints(), (std::vector<int32_t>{7, -8, 9}));
  ASSERT_NE(t = f.find("bool"), nullptr);
  EXPECT_EQ(t->dtype(), DType::boolean);
  EXPECT_EQ(t->to_vector(), (std::vector<float>{1, 0, 0, 1}));
  ASSERT_NE(t = f.find("scalar"), nullptr);
  EXPECT_EQ(t->shape(), Shape{});
  EXPECT_EQ(t->item(), 42.f);
  ASSERT_NE(t = f.find("empty"), nullptr);
  EXPECT_EQ(t->shape(), (Shape{0, 3}));
  // File order is offset order: Python puts the 8-byte I64 first.
  EXPECT_EQ(f.tensors.front().first, "i64");
}

TEST(Safetensors, CorruptFilesAreErrorsNamingTheFileAndTheProblem) {
  ScratchDir scratch;
  const std::string dir = scratch.str();
  int count = 0;
  // Writes `bytes` to a new file and returns load_safetensors' error, checking it names the file
  // and contains `word`.
  auto expect_error = [&](const std::string& bytes, const std::string& word) {
    std::string path = detail::concat(dir, "bad", count++, ".safetensors");
    io::write_file_atomic(path, bytes);
    std::string msg = error_of([&] { io::load_safetensors(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(word), std::string::npos) << "expected '" << word << "' in: " << msg;
  };
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data8(8, '\0');
  io::write_file_atomic(dir + "ok.safetensors", raw_safetensors(ok, data8));
  EXPECT_EQ(io::load_safetensors(dir + "ok.safetensors").find("a")->to_vector(), (std::vector<float>{0, 0}));

  expect_error("", "too short");
  expect_error("\x10\0\0", "too short");
  std::string full = raw_safetensors(ok, data8);
  expect_error(full.substr(0, full.size() - 1), "out of range");  // truncated data: offsets past the end
  expect_error(full.substr(0, 20), "header length");                   // truncated header
  expect_error(raw_safetensors(ok, data8, uint64_t{1} << 60), "header length");
  expect_error(raw_safetensors("{\"a\": [1, 2", ""), "JSON");
  expect_error(raw_safetensors("\xff\xfe", ""), "JSON");
  expect_error(raw_safetensors("[1, 2]", ""), "not an object");
  expect_error(raw_safetensors(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", data8), "dtype");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", data8), "shape");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2]}})", data8), "data_offsets");
  expect_error(raw_safetensors(R"({"a":7})", data8), "not a JSON object");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data8), "out of range");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8), "reversed");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", data8), "data_offsets");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8), "size mismatch");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8), "negative");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data8), "integers");
  expect_error(raw_safetensors(
                   R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", data8),
               "size mismatch");  // product overflows 64 bits
  expect_error(raw_safetensors(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", data8), "F8_E4M3");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", data8), "dtype");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                   "b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               data8),
               "overlap");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), "gap");
  expect_error(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data8), "gap");
  expect_error(raw_safetensors(R"({"__metadata__":{"k":1}})", ""), "__metadata__");
  std::string i64(8, '\0');
  int64_t big = int64_t{1} << 31;
  std::memcpy(i64.data(), &big, 8);
  expect_error(raw_safetensors(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", i64), "does not fit");

  std::string missing = dir + "missing.safetensors";
  std::string msg = error_of([&] { io::load_safetensors(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
  msg = error_of([&] { io::load_safetensors(dir); });
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
}

// A tensor listed twice (nlohmann kept the last, so the file read as the other tensor's bytes with
// no word said; issue 43): refused by every reader, naming the file and the name, before any data
// is read; a duplicate metadata key the same.
TEST(Safetensors, DuplicateNamesInTheHeaderAreRefused) {
  ScratchDir scratch;
  const std::string path = scratch.str() + "dup.safetensors";
  const std::string data16(16, '\0');
  io::write_file_atomic(path, raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                                  "w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                              data16));
  for (const std::function<void()>& read : std::vector<std::function<void()>>{
           [&] { io::load_safetensors(path); }, [&] { io::load_safetensors_metadata(path); },
           [&] { io::stream_safetensors(path, false, {}, {}, [](const std::string&, TensorBase&&) {}); }}) {
    const std::string msg = error_of(read);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("key \"w\" appears twice"), std::string::npos) << msg;
  }
  const std::string meta = scratch.str() + "dup-meta.safetensors";
  io::write_file_atomic(meta, raw_safetensors(R"({"__metadata__":{"qkv":"{}","qkv":"{}"},
                                                  "w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                              std::string(8, '\0')));
  const std::string msg = error_of([&] { io::load_safetensors(meta); });
  EXPECT_NE(msg.find(meta), std::string::npos) << msg;
  EXPECT_NE(msg.find("key \"qkv\" appears twice (in \"__metadata__\")"), std::string::npos) << msg;
}

TEST(Safetensors, SaveValidatesBeforeTouchingTheFile) {
  ScratchDir scratch;
  std::string path = scratch.str() + "keep.safetensors";
  io::save_safetensors(path, {{"a", Tensor::ones({2})}});
  std::string before = io::read_file(path);
  Tensor t = Tensor::zeros({3});
  for (const auto& bad : std::vector<std::vector<std::pair<std::string, Tensor>>>{
           {{"x", t}, {"y", t}, {"x", t}}, {{"", t}}, {{"__metadata__", t}}, {{"u", Tensor()}}}) {
    std::string msg = error_of([&] { io::save_safetensors(path, bad); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] { io::save_safetensors(path, {{"x", t}, {"x", t}}); }).find("duplicate"), std::string::npos);
  EXPECT_NE(error_of([&] { io::save_safetensors(path, {{"bad\xff", t}}); }).find("UTF-8"), std::string::npos);
  EXPECT_EQ(io::read_file(path), before);
  EXPECT_EQ(files_in(fs::path(path).parent_path().string()), std::vector<std::string>{"keep.safetensors"});
}

TEST(AtomicFile, WritesTheWholeFileAndLeavesNoTemporary) {
  ScratchDir scratch;
  std::string dir = scratch.str();
  std::string path = dir + "out.bin";
  io::write_file_atomic(path, std::string("old contents"));
  EXPECT_EQ(io::read_file(path), "old contents");
  std::string bytes = std::string("new\0bytes", 9) + std::string(100000, 'x');
  io::write_file_atomic(path, bytes);
  EXPECT_EQ(io::read_file(path), bytes);
  io::write_file_atomic(path, "");
  EXPECT_EQ(io::read_file(path), "");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"out.bin"});
}

// Bytes made as they are written: the pieces joined; a producer that fails part-way leaves the old
// file and no temporary.
TEST(AtomicFile, WritesPiecesAsTheyAreMadeOrNothing) {
  ScratchDir scratch;
  std::string dir = scratch.str();
  std::string path = dir + "out.bin";
  io::write_file_atomic(path, [](const io::ByteSink& write) {
    write("abc");
    write(std::string(70000, 'y'));
    write("");
    write("z");
  });
  EXPECT_EQ(io::read_file(path), "abc" + std::string(70000, 'y') + "z");
  const std::string msg = error_of([&] {
    io::write_file_atomic(path, [](const io::ByteSink& write) {
      write("new part");
      throw Error("the producer failed");
    });
  });
  EXPECT_NE(msg.find("the producer failed"), std::string::npos) << msg;
  EXPECT_EQ(io::read_file(path), "abc" + std::string(70000, 'y') + "z");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, MissingDirectoryThrowsAndLeavesNothing) {
  ScratchDir scratch;
  std::string dir = scratch.str();
  std::string path = dir + "no/such/dir/out.bin";
  std::string msg = error_of([&] { io::write_file_atomic(path, "x"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir + "no"));
  EXPECT_TRUE(files_in(dir).empty());
  msg = error_of([&] { io::save_safetensors(path, {{"a", Tensor::ones({1})}}); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_TRUE(files_in(dir).empty());
}

TEST(AtomicFile, ReadFileErrorsNameThePath) {
  ScratchDir scratch;
  std::string dir = scratch.str();
  std::string msg = error_of([&] { io::read_file(dir + "missing.txt"); });
  EXPECT_EQ(msg, "cannot open '" + dir + "missing.txt': No such file or directory");
  msg = error_of([&] { io::read_file(dir); });
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
}

}  // namespace
}  // namespace qkv
