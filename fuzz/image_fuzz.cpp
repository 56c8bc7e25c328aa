// Pictures (vision/image.h) on arbitrary bytes: the header check (vision/picture_header.h), then
// gdk-pixbuf's PNG or JPEG loader, as gray at the file's size and as RGB resized to 24×24: a picture
// or a qkv::Error, with memory bounded by the header's checked size.
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/vision/image.h"
#include "qkv/vision/picture_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    qkv::vision::read_picture_header(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const qkv::Error&) {
    return 0;  // read_image refuses the same bytes before decoding
  }
  const std::string path = qkv::fuzz::as_file(data, size, "picture.png");
  for (const qkv::vision::ReadImageOptions o : {qkv::vision::ReadImageOptions{1, 0, 0, false},
                                                qkv::vision::ReadImageOptions{3, 24, 24, true}}) {
    try {
      qkv::vision::read_image(path, o);
    } catch (const qkv::Error&) {
    }
  }
  return 0;
}
