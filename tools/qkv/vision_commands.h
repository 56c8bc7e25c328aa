// What `qkv eval` and `qkv attend` do with an image classifier (cmd_vision.cpp), and their options.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::cli {

inline constexpr const char* kDefaultImageClassifier = "models/fashion-mnist-nonlocal.safetensors";

// Which images: files, and/or Fashion-MNIST test images by index.
struct ImageSourceArgs {
  ImageSourceArgs();
  std::vector<int64_t> test_images;
  bool invert = false;
  std::string data_dir;
};

struct ImageEvalArgs {
  std::string images, labels, confusion, data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t limit = 0;  // qkv eval --limit: this many images drawn with `seed` (0: all)
  uint64_t seed = 0;
};
void add_image_eval_options(CLI::App* sub, ImageEvalArgs& a);
int run_image_eval(const std::string& model_path, const ImageEvalArgs& a, bool as_json);

struct ImageAttendArgs {
  ImageSourceArgs source;
  int64_t grid = 3;   // G×G query points per image
  int64_t block = -1; // which non-local block (−1: the last)
  std::string out = "attention", format = "both";
};
// also registers --test-images, --invert, --data, --grid, --block on `sub`
void add_image_attend_options(CLI::App* sub, ImageAttendArgs& a);
int run_image_attend(const std::string& model_path, const std::vector<std::string>& files, const ImageAttendArgs& a);

}  // namespace qkv::cli
