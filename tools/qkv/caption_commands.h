// What `qkv caption`, `qkv eval` and `qkv attend` do with a captioner (cmd_caption.cpp): a
// sequence-to-sequence model whose source is a picture (issue 24).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "qkv/vision/dataset.h"

namespace qkv::cli {

inline constexpr const char* kDefaultCaptioner = "models/captioner.safetensors";

// Whether a model file holds a captioner (a sequence-to-sequence model that takes images).
bool is_captioner_file(const std::string& path);

// Which pictures: image files, and/or generated scenes of a split by index (with their captions and
// item boxes, from the scene options the captioner was trained with).
struct CaptionSourceArgs {
  std::vector<int64_t> scenes;
  std::string split = "test";
  bool resize = false, invert = false;
  std::string data_dir = vision::kFashionMnistDir;
};
// shares_invert: the command already has --invert (qkv attend's image classifier options); the
// caller copies it into `a`.
void add_caption_source_options(CLI::App* sub, CaptionSourceArgs& a, bool shares_invert = false);

// qkv eval -m captioner: BLEU-1…4, exact match and attention correctness on a scene split.
struct CaptionEvalArgs {
  std::string split = "test";
  int64_t first = 0, count = 2000;
  std::string captions_out;
};
void add_caption_eval_options(CLI::App* sub, CaptionEvalArgs& a);
int run_caption_eval(const std::string& model_path, const CaptionEvalArgs& a, int64_t beam, bool as_json,
                     const std::string& data_dir);

// qkv attend -m captioner: the picture once per word with that step's attention over it.
int run_caption_attend(const std::string& model_path, const std::vector<std::string>& files,
                       const CaptionSourceArgs& source, int64_t beam, const std::string& out_dir,
                       const std::string& format);

}  // namespace qkv::cli
