// Pictures are checked before they are decoded: PNG and JPEG only (by content, whatever the name),
// their size bounded by the header, every chunk within the file, special files refused by what they are.
#include "qkv/vision/picture_header.h"

#include <sys/stat.h>
#include <zlib.h>

#include <string>

#include "qkv/io/file.h"
#include "qkv/vision/image.h"
#include "testing.h"

namespace qkv::vision {
namespace {

using testing::error_of;

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// One PNG chunk with its CRC.
std::string chunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return be32(static_cast<uint32_t>(data.size())) + body + be32(static_cast<uint32_t>(crc));
}

// An 8-bit grey PNG of width × height whose IDAT holds `rows` (compressed here).
std::string png(uint32_t width, uint32_t height, const std::string& rows, const std::string& extra = "") {
  std::string z(compressBound(rows.size()), '\0');
  uLongf n = z.size();
  compress(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(rows.data()), rows.size());
  z.resize(n);
  return "\x89PNG\r\n\x1a\n" + chunk("IHDR", be32(width) + be32(height) + std::string("\x08\0\0\0\0", 5)) +
         extra + chunk("IDAT", z) + chunk("IEND", "");
}

// A valid 8×8 grey baseline JPEG (Pillow, quality 75).
std::string tiny_jpeg() {
  const char* hex =
      "ffd8ffe000104a46494600010100000100010000ffdb004300080606070605080707070909080a0c140d0c0b0b0c1912"
      "130f141d1a1f1e1d1a1c1c20242e2720222c231c1c2837292c30313434341f27393d38323c2e333432ffc0000b080008"
      "000801011100ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303"
      "020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282"
      "090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a73747576"
      "7778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9ca"
      "d2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f00e32bffd9";
  std::string out;
  for (const char* p = hex; p[0] && p[1]; p += 2) out += static_cast<char>(std::stoi(std::string(p, 2), nullptr, 16));
  return out;
}

TEST(PictureHeader, SizeAndFormatComeFromTheBytes) {
  PictureHeader h = read_picture_header(png(3, 2, std::string(8, '\0')));
  EXPECT_EQ(h.format, PictureFormat::png);
  EXPECT_EQ(h.width, 3);
  EXPECT_EQ(h.height, 2);
  h = read_picture_header(tiny_jpeg());
  EXPECT_EQ(h.format, PictureFormat::jpeg);
  EXPECT_EQ(h.width, 8);
  EXPECT_EQ(h.height, 8);
}

// gdk-pixbuf's PNG loader fills a picture whose image data stops short with zeros, silently: the
// data must inflate to exactly what the header's size takes (a filter byte and the pixels of each row).
TEST(PictureHeader, APngWhoseDataDoesNotFillItIsRefused) {
  EXPECT_NO_THROW(read_picture_header(png(96, 96, std::string(96 * 97, '\0'))));
  for (size_t n : {size_t{50}, size_t{96 * 97 - 1}, size_t{96 * 97 + 1}}) {
    try {
      read_picture_header(png(96, 96, std::string(n, '\0')));
      ADD_FAILURE() << n << " bytes of image data for 96×96 were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("9312"), std::string::npos) << e.what();  // what 96×96 takes
    }
  }
}

TEST(PictureHeader, HugeOrLyingPicturesAreRefusedBeforeDecoding) {
  testing::TempDir dir("picture");
  const auto refusal = [&](const std::string& name, const std::string& bytes) {
    const std::string path = (dir.path / name).string();
    io::write_file_atomic(path, bytes);
    const std::string msg = error_of([&] { read_image(path); });
    EXPECT_EQ(msg.rfind("'" + path + "': cannot read the image (", 0), 0u) << msg;
    return msg;
  };
  // 20000×20000 in a few hundred bytes (one zero row): said before gdk-pixbuf allocates 1.6 GB.
  std::string msg = refusal("huge.png", png(20000, 20000, std::string(20001, '\0')));
  EXPECT_NE(msg.find("20000×20000 pixels"), std::string::npos) << msg;
  msg = refusal("wide.png", png(0x7fffffff, 1, std::string(100, '\0')));
  EXPECT_NE(msg.find("2147483647×1"), std::string::npos) << msg;
  refusal("empty-size.png", png(0, 0, ""));
  // A tEXt chunk that says 2^31 − 1 bytes in a 57-byte file.
  const std::string text = "\x89PNG\r\n\x1a\n" + chunk("IHDR", be32(96) + be32(96) + std::string("\x08\0\0\0\0", 5)) +
                           be32(0x7fffffff) + "tEXtcomment" + std::string(1, '\0') + "xxxx";
  msg = refusal("text-chunk.png", text);
  EXPECT_NE(msg.find("2147483647 bytes"), std::string::npos) << msg;
  std::string jpeg = tiny_jpeg();
  jpeg.replace(jpeg.find(std::string("\xff\xc0\x00\x0b\x08\x00\x08\x00\x08", 9)), 9,
               std::string("\xff\xc0\x00\x0b\x08\xff\xdc\xff\xdc", 9));
  msg = refusal("huge.jpg", jpeg);
  EXPECT_NE(msg.find("65500×65500 pixels"), std::string::npos) << msg;
  refusal("cut.jpg", tiny_jpeg().substr(0, 20));
}

TEST(PictureHeader, OtherFormatsBehindAPngNameAreRefusedByWhatTheyAre) {
  testing::TempDir dir("picture");
  const std::pair<const char*, std::string> cases[] = {
      {"an SVG", "<?xml version=\"1.0\"?><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100000\" height=\"100000\"/>"},
      {"a TIFF", std::string("II*\0\x08\0\0\0", 8)},
      {"an XPM", "/* XPM */\nstatic char *x[] = {\n\"100000 100000 1 1\",\n};\n"},
      {"a GIF", "GIF89a\xff\xff\xff\xff"},
      {"a BMP", "BM\0\0\0\0"},
      {"a PNM", "P5\n100000 100000\n255\n"},
      {"an animated cursor", std::string("RIFF\0\0\0\0ACON", 12)},
      {"an empty file", ""},
      {"unknown kind", "RIFF&M"},  // found by fuzzing: shorter than a RIFF header
      {"unknown kind", std::string(64, '\x17')},
  };
  for (const auto& [kind, bytes] : cases) {
    const std::string path = (dir.path / "picture.png").string();
    io::write_file_atomic(path, bytes);
    const std::string msg = error_of([&] { read_image(path); });
    EXPECT_NE(msg.find("'" + path + "': cannot read the image (not a PNG or JPEG picture: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(kind), std::string::npos) << kind << ": " << msg;
  }
}

TEST(PictureHeader, DirectoriesFifosAndDevicesAreNamedForWhatTheyAre) {
  testing::TempDir dir("picture");
  const std::string sub = (dir.path / "a.png").string(), fifo = (dir.path / "f.png").string();
  std::filesystem::create_directory(sub);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { read_image(sub); }), "'" + sub + "': a directory, not a picture file");
  EXPECT_EQ(error_of([&] { read_image(fifo); }), "'" + fifo + "': a FIFO, not a picture file");
  EXPECT_EQ(error_of([&] { read_image("/dev/zero"); }), "'/dev/zero': a device, not a picture file");
  EXPECT_EQ(error_of([&] { read_image((dir.path / "none.png").string()); }),
            "'" + (dir.path / "none.png").string() + "': no such file");
}

TEST(PictureHeader, ValidPngAndJpegStillDecode) {
  testing::TempDir dir("picture");
  const std::string p = (dir.path / "ok.png").string(), j = (dir.path / "ok.jpg").string();
  io::write_file_atomic(p, png(2, 2, std::string("\0\x00\xff\0\x80\x40", 6)));
  Image img = read_image(p);
  ASSERT_EQ(img.pixels.size(), 4u);
  EXPECT_NEAR(img.pixels[1], 1.f, 1e-6);
  EXPECT_NEAR(img.pixels[2], 128.f / 255.f, 1e-6);
  io::write_file_atomic(j, tiny_jpeg());
  img = read_image(j, {3, 0, 0, false});
  EXPECT_EQ(img.width, 8);
  EXPECT_EQ(img.pixels.size(), 3u * 64);
}

}  // namespace
}  // namespace qkv::vision
