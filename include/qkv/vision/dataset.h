// Labelled image sets in memory (8-bit pixels, as the IDX files hold them) and the batches a
// classifier trains on: pixels to [0, 1], with random crops (zero padding, then a window at a random
// offset) and horizontal flips as augmentation, every draw a function of (seed, counter) so that a
// resumed run sees the same batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::vision {

struct ImageSet {
  int64_t channels = 1, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // [n, channels, height, width]
  std::vector<int32_t> labels;  // [n]
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t image_bytes() const { return channels * height * width; }
};

// An image file [n, H, W] (or [n, C, H, W]) and a label file [n] in IDX format (io: vision/idx.h),
// checked against each other: the same n, every label < num_classes.
ImageSet load_idx_images(const std::string& images_path, const std::string& labels_path, int64_t num_classes);

// Fashion-MNIST from a folder with its four files (Debian's dataset-fashion-mnist installs them in
// /usr/share/datasets/fashion-mnist): split "train" (60,000) or "test" (10,000).
ImageSet load_fashion_mnist(const std::string& dir, const std::string& split);
const std::vector<std::string>& fashion_mnist_classes();  // "T-shirt/top", "Trouser", …
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Augmentation {
  int64_t crop_padding = 0;  // > 0: pad by this many zero pixels, then crop the original size at random
  bool horizontal_flip = false;  // flip half the images, left to right
};

// Images `index` of `set` as floats in [0, 1], [index.size(), C, H, W] into `out`; with
// augmentation, image i's crop offset and flip are drawn from (seed, counter + i).
void fill_batch(const ImageSet& set, const std::vector<int64_t>& index, const Augmentation& aug, uint64_t seed,
                uint64_t counter, float* out);

}  // namespace qkv::vision
