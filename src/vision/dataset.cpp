#include "qkv/vision/dataset.h"

#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/vision/idx.h"

namespace qkv::vision {

ImageSet load_idx_images(const std::string& images_path, const std::string& labels_path, int64_t num_classes) {
  IdxArray images = read_idx(images_path), labels = read_idx(labels_path);
  QKV_CHECK(images.shape.size() == 3 || images.shape.size() == 4, "'", images_path,
            "' holds an array of ", images.shape.size(), " dimensions, not images [n, H, W] or [n, C, H, W]");
  QKV_CHECK(labels.shape.size() == 1, "'", labels_path, "' holds an array of ", labels.shape.size(),
            " dimensions, not labels [n]");
  QKV_CHECK(images.shape[0] == labels.shape[0], "'", images_path, "' has ", images.shape[0], " images but '",
            labels_path, "' ", labels.shape[0], " labels");
  ImageSet s;
  const bool chw = images.shape.size() == 4;
  s.channels = chw ? images.shape[1] : 1;
  s.height = images.shape[chw ? 2 : 1];
  s.width = images.shape[chw ? 3 : 2];
  s.pixels = std::move(images.data);
  s.labels.resize(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    QKV_CHECK(labels.data[i] < num_classes, "'", labels_path, "': label ", int(labels.data[i]), " of image ", i,
              " is not a class (0 … ", num_classes - 1, ")");
    s.labels[i] = labels.data[i];
  }
  return s;
}

ImageSet load_fashion_mnist(const std::string& dir, const std::string& split) {
  QKV_CHECK(split == "train" || split == "test", "Fashion-MNIST has the splits \"train\" and \"test\", not \"",
            split, "\"");
  const std::string stem = split == "train" ? "train" : "t10k";
  namespace fs = std::filesystem;
  auto file = [&](const std::string& name) {
    // the files as Debian ships them (.gz), or uncompressed
    const fs::path gz = fs::path(dir) / (name + ".gz"), plain = fs::path(dir) / name;
    std::error_code ec;
    if (fs::exists(gz, ec)) return gz.string();
    if (fs::exists(plain, ec)) return plain.string();
    throw Error(detail::concat("Fashion-MNIST: '", gz.string(), "' not found (install Debian's "
                               "dataset-fashion-mnist: bash scripts/setup.sh)"));
  };
  return load_idx_images(file(stem + "-images-idx3-ubyte"), file(stem + "-labels-idx1-ubyte"), 10);
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

void fill_batch(const ImageSet& set, const std::vector<int64_t>& index, const Augmentation& aug, uint64_t seed,
                uint64_t counter, float* out) {
  const int64_t C = set.channels, H = set.height, W = set.width, P = aug.crop_padding;
  constexpr float kScale = 1.f / 255.f;
  for (size_t i = 0; i < index.size(); ++i) {
    QKV_CHECK(index[i] >= 0 && index[i] < set.size(), "fill_batch: image ", index[i], " of ", set.size());
    const uint8_t* src = set.pixels.data() + index[i] * set.image_bytes();
    float* dst = out + static_cast<int64_t>(i) * set.image_bytes();
    // The window's offset (dy, dx) ∈ [−P, P]² and the flip, from one hash of (seed, counter + i).
    int64_t dy = 0, dx = 0;
    bool flip = false;
    if (P > 0 || aug.horizontal_flip) {
      const uint64_t r = Generator::bits(seed, counter + i);
      const auto span = static_cast<uint64_t>(2 * P + 1);
      dy = static_cast<int64_t>(r % span) - P;
      dx = static_cast<int64_t>((r / span) % span) - P;
      flip = aug.horizontal_flip && ((r >> 63) & 1u);
    }
    // out[c, y, x] = in[c, y + dy, x' + dx] (zero outside), x' = W − 1 − x when flipped
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y) {
        const int64_t sy = y + dy;
        float* row = dst + (c * H + y) * W;
        if (sy < 0 || sy >= H) {
          std::fill(row, row + W, 0.f);
          continue;
        }
        const uint8_t* srow = src + (c * H + sy) * W;
        for (int64_t x = 0; x < W; ++x) {
          const int64_t sx = (flip ? W - 1 - x : x) + dx;
          row[x] = (sx < 0 || sx >= W) ? 0.f : static_cast<float>(srow[sx]) * kScale;
        }
      }
  }
}

}  // namespace qkv::vision
