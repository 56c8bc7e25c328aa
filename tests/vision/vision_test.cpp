// The vision floor: the IDX reader (plain and gzip, and every way a file can be wrong), batches with
// augmentation, and reading a picture through gdk-pixbuf.
#include <gtest/gtest.h>

#include <zlib.h>

#include <fstream>

#include "qkv/io/file.h"
#include "qkv/viz/png.h"
#include "qkv/vision/dataset.h"
#include "qkv/vision/idx.h"
#include "qkv/vision/image.h"
#include "testing.h"

namespace qkv::vision {
namespace {

// An IDX file of unsigned bytes: the header for `shape`, then `data`.
std::string idx_bytes(const std::vector<uint32_t>& shape, const std::vector<uint8_t>& data) {
  std::string s = {0, 0, 8, static_cast<char>(shape.size())};
  for (uint32_t n : shape)
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((n >> (8 * k)) & 0xFF));
  s.append(data.begin(), data.end());
  return s;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

TEST(Idx, ReadsPlainAndGzipFiles) {
  testing::TempDir dir("idx");
  std::vector<uint8_t> data(2 * 3 * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  const std::string plain = (dir.path / "a.idx").string(), gz = (dir.path / "a.idx.gz").string();
  io::write_file_atomic(plain, idx_bytes({2, 3, 4}, data));
  write_gz(gz, idx_bytes({2, 3, 4}, data));
  for (const std::string& p : {plain, gz}) {
    const IdxArray a = read_idx(p);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3, 4})) << p;
    EXPECT_EQ(a.data, data) << p;
  }
}

TEST(Idx, BadFilesGiveClearErrors) {
  testing::TempDir dir("idx-bad");
  auto file = [&](const std::string& name, const std::string& bytes) {
    const std::string p = (dir.path / name).string();
    io::write_file_atomic(p, bytes);
    return p;
  };
  const std::vector<uint8_t> six(6, 1);
  EXPECT_NE(testing::error_of([&] { read_idx((dir.path / "missing").string()); }).find("no such file"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { read_idx(file("empty", "")); }).find("truncated"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { read_idx(file("text", "hello world")); }).find("not an IDX file"),
            std::string::npos);
  std::string f32 = idx_bytes({6}, six);
  f32[2] = 0x0D;
  EXPECT_NE(testing::error_of([&] { read_idx(file("f32", f32)); }).find("not supported"), std::string::npos);
  // the data cut short, by one byte
  const std::string full = idx_bytes({2, 3}, six);
  const std::string msg = testing::error_of([&] { read_idx(file("short", full.substr(0, full.size() - 1))); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("short"), std::string::npos) << msg;  // names the file
  EXPECT_NE(testing::error_of([&] { read_idx(file("long", full + "x")); }).find("bytes after"), std::string::npos);
  // a header announcing 2^32 · 2^32 bytes: refused before any allocation
  EXPECT_NE(testing::error_of([&] { read_idx(file("huge", idx_bytes({0xFFFFFFFF, 0xFFFFFFFF}, {}))); })
                .find("more than"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { read_idx(file("zero", idx_bytes({0, 3}, {}))); }).find("size 0"),
            std::string::npos);
  // a gzip stream cut in the middle
  const std::string gz = (dir.path / "cut.gz").string();
  write_gz(gz, idx_bytes({64, 64}, std::vector<uint8_t>(4096, 9)));
  std::string bytes = io::read_file(gz);
  io::write_file_atomic(gz, bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(testing::error_of([&] { read_idx(gz); }).empty());
}

TEST(ImageSet, ImagesAndLabelsMustAgree) {
  testing::TempDir dir("idx-set");
  const std::string img = (dir.path / "img").string(), lab = (dir.path / "lab").string();
  io::write_file_atomic(img, idx_bytes({3, 2, 2}, std::vector<uint8_t>(12, 255)));
  io::write_file_atomic(lab, idx_bytes({3}, {0, 1, 2}));
  const ImageSet s = load_idx_images(img, lab, 3);
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.height, 2);
  EXPECT_NE(testing::error_of([&] { load_idx_images(img, lab, 2); }).find("label 2"), std::string::npos);
  io::write_file_atomic(lab, idx_bytes({4}, {0, 1, 1, 0}));
  EXPECT_NE(testing::error_of([&] { load_idx_images(img, lab, 3); }).find("3 images"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { load_fashion_mnist(dir.path.string(), "train"); }).find("dataset-fashion-mnist"),
            std::string::npos);
}

TEST(FillBatch, ScalesCropsAndFlipsReproducibly) {
  ImageSet s;
  s.height = 3, s.width = 4;
  s.pixels = {0, 51, 102, 153, 204, 255, 0, 51, 102, 153, 204, 255};
  s.labels = {0};
  std::vector<float> plain(12), flipped(12);
  fill_batch(s, {0}, {}, 1, 0, plain.data());
  EXPECT_FLOAT_EQ(plain[1], 0.2f);
  EXPECT_FLOAT_EQ(plain[5], 1.f);
  // Flips only: every image is the original or its mirror, and the same draws give the same batch.
  int mirrors = 0;
  for (uint64_t counter = 0; counter < 40; ++counter) {
    fill_batch(s, {0}, {0, true}, 7, counter, flipped.data());
    bool mirror = true, same = flipped == plain;
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x) mirror &= flipped[y * 4 + x] == plain[y * 4 + 3 - x];
    EXPECT_TRUE(mirror || same);
    mirrors += mirror;
    std::vector<float> again(12);
    fill_batch(s, {0}, {0, true}, 7, counter, again.data());
    EXPECT_EQ(again, flipped);
  }
  EXPECT_GT(mirrors, 5);
  EXPECT_LT(mirrors, 35);
  // Crops: a shifted window with zeros where it leaves the image; the pixels' sum never grows.
  double total = 0;
  for (float v : plain) total += v;
  bool some_shift = false;
  for (uint64_t counter = 0; counter < 20; ++counter) {
    std::vector<float> c(12);
    fill_batch(s, {0}, {1, false}, 3, counter, c.data());
    double sum = 0;
    for (float v : c) sum += v;
    EXPECT_LE(sum, total + 1e-6);
    some_shift |= c != plain;
  }
  EXPECT_TRUE(some_shift);
}

TEST(ReadImage, ReadsAPngAsGrayOrRgbAndResizes) {
  testing::TempDir dir("image");
  // A 20×10 picture: the left half red, the right half white.
  const std::string png = (dir.path / "half.png").string();
  viz::write_picture(png,
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"20\" height=\"10\">"
                     "<rect x=\"0\" y=\"0\" width=\"10\" height=\"10\" fill=\"#ff0000\"/>"
                     "<rect x=\"10\" y=\"0\" width=\"10\" height=\"10\" fill=\"#ffffff\"/></svg>");
  const Image rgb = read_image(png, {3, 0, 0, false});
  const int64_t H = rgb.height, W = rgb.width;  // write_picture may render at a higher resolution
  ASSERT_GE(H, 10);
  ASSERT_EQ(W, 2 * H);
  EXPECT_NEAR(rgb.pixels[0], 1.f, 1e-6);                  // R at (0, 0)
  EXPECT_NEAR(rgb.pixels[H * W], 0.f, 1e-6);              // G at (0, 0)
  EXPECT_NEAR(rgb.pixels[H * W + W * 3 / 4], 1.f, 1e-6);  // G at (0, ¾ W): white
  const Image gray = read_image(png, {1, 5, 4, true});  // resized to 4×5, inverted
  ASSERT_EQ(gray.pixels.size(), 20u);
  EXPECT_NEAR(gray.pixels[0], 1.f - 0.299f, 1e-2);
  EXPECT_NEAR(gray.pixels[3], 0.f, 1e-2);
  EXPECT_NE(testing::error_of([&] { read_image((dir.path / "none.png").string()); }).find("no such file"),
            std::string::npos);
  io::write_file_atomic((dir.path / "bad.png").string(), "\x89PNG not really");
  EXPECT_NE(testing::error_of([&] { read_image((dir.path / "bad.png").string()); }).find("cannot read the image"),
            std::string::npos);
}

// A crafted arithmetic-coded JPEG (111 bytes, found by fuzz/image_fuzz) made libjpeg spin for minutes:
// it is refused at once, the picture named; the same bytes as a Huffman frame still reach the decoder.
TEST(Vision, AnArithmeticCodedJpegIsRefusedNotDecodedForever) {
  const std::string arith("\xff\xd8\xff\xff\xdb\x00\x43\x00\x72\x6e\x6e\x2d\x65\x6e\x63\x64\x65\x63\x09\x09\x08\x0a\x0c\x14\x0d\x0c\x0b\x0b\x0c\x19\x12\x13\x0f\x14\x1d\x1a\x1f\x1e\x1d\x1a\x1c\x1c\x20\x24\x2e\x27\x20\x22\x2c\x23\x1c\x73\x65\x6c\x69\x6e\x75\x88\x99\xcc\xd3\x1f\x38\x34\x3d\x32\x27\x3c\x2e\x33\x34\x32\xff\xc9\x00\x0b\x08\x00\x26\x00\x0c\x01\x01\x11\x00\x00\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\xff\xda\x00\x08\x01\x01\x00\x00\x3f\xff\xd9", 111);
  try {
    decode_image(arith, "crafted.jpg");
    FAIL() << "an arithmetic-coded JPEG was decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("crafted.jpg: cannot read the image (an arithmetic-coded JPEG"), std::string::npos)
        << e.what();
  }
  std::string huffman = arith;
  huffman[huffman.find("\xff\xc9")+1] = '\xc0';
  try {
    decode_image(huffman, "huffman.jpg");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("arithmetic"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv::vision
