// The translation model(s) of qkv translate / qkv eval: one -m, or several for an ensemble.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "qkv/decode/translator.h"
#include "qkv/nn/transformer.h"
#include "qkv/train/progress.h"
#include "qkv/train/translation_task.h"

namespace qkv::cli {

// Loads each path (shipped paths resolved by find_model); checks they share one vocabulary.
// dtype "bf16": decoding steps read bf16 copies of the weights.
inline std::vector<train::LoadedTranslator> load_translation_models(const std::vector<std::string>& paths,
                                                                    const std::string& dtype) {
  std::vector<std::string> found;
  for (const auto& p : paths) found.push_back(find_model(p));
  std::vector<train::LoadedTranslator> ts = train::load_translators(found);
  if (dtype == "bf16")
    for (auto& t : ts) t.model->set_inference_dtype(DType::bf16);
  return ts;
}

inline std::vector<const nn::Seq2SeqTransformer*> model_list(const std::vector<train::LoadedTranslator>& ts) {
  std::vector<const nn::Seq2SeqTransformer*> m;
  for (const auto& t : ts) m.push_back(t.model.get());
  return m;
}

// A "translate" progress bar on stderr for work of more than two batches: opt.on_batch feeds it.
// Keep the returned holder alive while translating; it closes the bar when destroyed.
inline std::shared_ptr<std::unique_ptr<train::ProgressBar>> show_progress(decode::TranslateOptions& opt) {
  auto bar = std::make_shared<std::unique_ptr<train::ProgressBar>>();
  const int64_t batch = opt.batch_size;
  opt.on_batch = [bar, batch](int64_t done, int64_t total) {
    if (total <= 2 * batch) return;
    if (!*bar) *bar = std::make_unique<train::ProgressBar>("translate", total);
    (*bar)->update(done - (*bar)->n());
  };
  return bar;
}

}  // namespace qkv::cli
