// The translation model(s) of qkv translate / eval / attend and the translation bench: one -m, or
// several for an ensemble; and the progress bar their long runs show.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "qkv/decode/translator.h"
#include "qkv/io/progress.h"
#include "qkv/models/load.h"

namespace qkv::cli {

// Loads each path (shipped paths resolved by find_model); checks they share one vocabulary. weights
// unset: each file's own (models::decoding_weights: int8 for a file qkv quantize wrote).
inline std::vector<models::LoadedSeq2Seq> load_translation_models(const std::vector<std::string>& paths,
                                                                  std::optional<nn::InferenceWeights> weights,
                                                                  Device device = Device::cpu()) {
  std::vector<std::string> found;
  for (const auto& p : paths) found.push_back(find_model(p));
  models::LoadOptions o;
  o.weights = weights;
  o.device = device;
  return models::load_seq2seq_ensemble(found, o);
}

// A "translate" progress bar on stderr for work of more than two batches: opt.on_batch feeds it.
// Keep the returned holder alive while translating; it closes the bar when destroyed.
inline std::shared_ptr<std::unique_ptr<io::ProgressBar>> show_progress(decode::TranslateOptions& opt) {
  auto bar = std::make_shared<std::unique_ptr<io::ProgressBar>>();
  const int64_t batch = opt.batch_size;
  opt.on_batch = [bar, batch](int64_t done, int64_t total) {
    if (total <= 2 * batch) return;
    if (!*bar) *bar = std::make_unique<io::ProgressBar>("translate", total);
    (*bar)->update(done - (*bar)->n());
  };
  return bar;
}

}  // namespace qkv::cli
