#include "qkv/train/lm_task.h"

#include <filesystem>
#include <unistd.h>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/io/data_file.h"
#include "qkv/io/file.h"
#include "qkv/io/progress.h"
#include "qkv/ops.h"
#include "qkv/core/utf8.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/nn/init.h"
#include "qkv/train/init_from.h"
#include "qkv/train/memory_plan.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::pair<Tensor, Tensor> lm_batch(const std::vector<int32_t>& data, int64_t B, int64_t T, uint64_t seed,
                                   uint64_t counter) {
  const auto n = static_cast<int64_t>(data.size());
  QKV_CHECK(B >= 1 && T >= 1, "lm: batch_size ", B, " and block_size ", T, " must be ≥ 1");
  QKV_CHECK(n - 1 > T, "lm: the text has ", n, " tokens, too few for windows of block_size ", T, " + 1");
  const int64_t BT = checked_mul(B, T, "lm: batch_size × block_size");  // (wrapped, it allocated 0 bytes)
  std::vector<int32_t> x(static_cast<size_t>(BT)), y(static_cast<size_t>(BT));
  for (int64_t b = 0; b < B; ++b) {
    // start ∈ [0, n − T − 1), as nanoGPT's torch.randint(len(data) − block_size)
    const auto start = static_cast<int64_t>(Generator::bits(seed, counter + static_cast<uint64_t>(b)) %
                                            static_cast<uint64_t>(n - T - 1));
    std::copy_n(data.begin() + start, T, x.begin() + b * T);
    std::copy_n(data.begin() + start + 1, T, y.begin() + b * T);
  }
  return {Tensor::from_ints(x, {B, T}), Tensor::from_ints(y, {B, T})};
}

const io::Fields<LMTokenizerSpec>& LMTokenizerSpec::fields() {
  using F = io::Fields<LMTokenizerSpec>;
  static const F f("lm task: data.tokenizer", {
                                                  F::text("type", &LMTokenizerSpec::type),
                                                  F::integer("vocab_size", &LMTokenizerSpec::vocab_size, 2, 1 << 20),
                                                  F::text("model_type", &LMTokenizerSpec::model_type),
                                              });
  return f;
}

LMTokenizerSpec LMTokenizerSpec::from_json(const json& j) {
  LMTokenizerSpec t;
  if (j.is_string()) t.type = j.get<std::string>();
  else t = fields().from_json(j);
  QKV_CHECK(t.type == "char" || t.type == "sentencepiece",
            "lm task: data.tokenizer must be \"char\" or {\"type\": \"sentencepiece\", \"vocab_size\": N}, got ", j.dump());
  return t;
}

const io::Fields<LMDataConfig>& LMDataConfig::fields() {
  using F = io::Fields<LMDataConfig>;
  static const F f("lm task: data", {
                                        F::text("path", &LMDataConfig::path),
                                        F::number("val_fraction", &LMDataConfig::val_fraction, 0, 1, /*hi_open=*/true),
                                        F::any("tokenizer", &LMDataConfig::tokenizer),
                                        F::integer("block_size", &LMDataConfig::block_size, 0, 1 << 24),
                                    });
  return f;
}

const io::Fields<LMTaskConfig>& LMTaskConfig::fields() {
  static const auto f = fine_tuning_config_fields<LMTaskConfig>("lm task");
  return f;
}

LMTask::LMTask(const json& config, const std::string& base_dir, const std::string& out_dir, bool resume) {
  QKV_CHECK(io::get_or(config, "task", "") == "lm", "lm task: the config's \"task\" must be \"lm\"");
  const bool fine_tune = config.is_object() && config.contains("init_from");
  QKV_CHECK(config.contains("data") && (config.contains("model") || fine_tune) && config.contains("train"),
            "lm task: the config needs \"data\", \"model\" (or \"init_from\") and \"train\" sections");
  const LMTaskConfig c = LMTaskConfig::fields().from_json(config);
  cfg_ = c.train;
  // Fine-tuning (train/init_from.h): the file's model type, hyper-parameters and tokenizer.
  std::unique_ptr<Pretrained> pre;
  if (fine_tune) {
    QKV_CHECK(!c.init_from.empty(), "lm task: init_from is empty (a model file to fine-tune)");
    pre = std::make_unique<Pretrained>(load_pretrained(c.init_from, base_dir, models::Kind::language_model,
                                                       config.value("model", json()), "lm task"));
    QKV_CHECK(!config["data"].is_object() || !config["data"].contains("tokenizer"), "lm task: data.tokenizer ",
              config["data"].is_object() ? config["data"].value("tokenizer", json()).dump() : "",
              " would make a new tokenizer, but a model fine-tuned from init_from '", pre->path,
              "' reads its data with the file's own: leave data.tokenizer out");
  }
  auto [type, m] = pre ? std::pair{pre->type, pre->model} : model_section(c.model, "gpt");
  QKV_CHECK(models::model_type(type).kind == models::Kind::language_model, "lm task: model.type \"", type,
            "\" is not a language model type");
  const LMDataConfig& d = c.data;
  QKV_CHECK(!d.path.empty(), "lm task: data.path (the text file) is missing");
  fs::path path = d.path;
  if (path.is_relative() && !base_dir.empty()) path = fs::path(base_dir) / path;
  const double val_fraction = d.val_fraction;
  QKV_CHECK(val_fraction > 0 && val_fraction < 1, "lm task: data.val_fraction must be in (0, 1), got ", val_fraction);

  const std::string text = io::read_data_file(path.string(), "lm task: data.path");
  QKV_CHECK(!text.empty(), "lm task: '", path.string(), "' is empty");
  const LMTokenizerSpec tk = pre ? LMTokenizerSpec{} : LMTokenizerSpec::from_json(d.tokenizer);
  if (pre) {
    // The file's tokenizer: the text split 90/10 (at a character boundary), each part encoded.
    try {
      tok_ = text::LMTokenizer::from_json(pre->tokenizer);
    } catch (const Error& e) {
      QKV_CHECK(false, "lm task: init_from '", pre->path, "': its tokenizer: ", e.what());
    }
    tokenizer_meta_ = pre->tokenizer;
    carried_ = pre->carried;
    const size_t cut = utf8::boundary_at_or_after(text, static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - val_fraction)));
    data_.train = tok_.encode(std::string_view(text.data(), cut));
    data_.val = tok_.encode(std::string_view(text.data() + cut, text.size() - cut));
  } else if (tk.type == "char") {
    // Characters: the vocabulary of the whole text (nanoGPT's prepare.py), ids split 90/10.
    tok_ = text::LMTokenizer::chars(text);
    std::vector<int32_t> ids = tok_.encode(text);
    const auto n_train = static_cast<size_t>(static_cast<double>(ids.size()) * (1.0 - val_fraction));
    data_.train.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_train));
    data_.val.assign(ids.begin() + static_cast<std::ptrdiff_t>(n_train), ids.end());
  } else {
    // Subwords: the text split 90/10 first (as nanoGPT's GPT-2 BPE prepare.py), SentencePiece
    // trained on the training part only, then each part encoded.
    const size_t cut = utf8::boundary_at_or_after(text, static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - val_fraction)));
    const std::string_view train_text(text.data(), cut), val_text(text.data() + cut, text.size() - cut);
    // The model goes to out_dir/spm.model; without an out_dir, to a temporary prefix removed at once
    // (the model file carries the tokenizer anyway).
    std::error_code ec;
    if (!out_dir.empty()) fs::create_directories(out_dir, ec);
    QKV_CHECK(!ec, "lm task: cannot create '", out_dir, "': ", ec.message());
    const std::string prefix = out_dir.empty()
                                   ? (fs::temp_directory_path() / ("qkv-lm-spm-" + std::to_string(::getpid()))).string()
                                   : (fs::path(out_dir) / "spm").string();
    if (resume && fs::exists(prefix + ".model")) {
      tok_ = text::LMTokenizer::sentencepiece(text::SentencePiece::load(prefix + ".model"));
    } else {
      io::StatusLine busy("tokenizer: training SentencePiece (" + tk.model_type + ", " + std::to_string(tk.vocab_size) +
                          " pieces)");  // (the library reports no progress)
      tok_ = text::LMTokenizer::train_sentencepiece(train_text, prefix, static_cast<int>(tk.vocab_size), tk.model_type);
      if (out_dir.empty()) {
        fs::remove(prefix + ".model", ec);
        fs::remove(prefix + ".vocab", ec);
      }
    }
    io::StatusLine encoding("data: encoding the text with the tokenizer");
    data_.train = tok_.encode(train_text);
    data_.val = tok_.encode(val_text);
  }

  if (pre) {
    // (a converted model's embedding may have rows past its tokenizer's, as Qwen2's)
    QKV_CHECK(m.contains("vocab_size") && m["vocab_size"].is_number_integer() &&
                  m["vocab_size"].get<int64_t>() >= tok_.vocab_size(),
              "lm task: init_from '", pre->path, "': its tokenizer has ", tok_.vocab_size(),
              " tokens, more than the model's vocab_size ", m.value("vocab_size", json()).dump());
  } else {
    QKV_CHECK(!m.contains("vocab_size") || m["vocab_size"] == tok_.vocab_size(), "lm task: model.vocab_size ",
              m["vocab_size"].dump(), " differs from the tokenizer's ", tok_.vocab_size(), " (leave it out)");
    m["vocab_size"] = tok_.vocab_size();
  }
  // Sizes first (train/memory_plan.h): the model, then one step's logits B·T·V and their gradient.
  const int64_t params = check_model_fits(
      "lm task", m, [&type = type, &m = m] { return models::build_language_model(type, m, nullptr)->module().num_parameters(); });
  gen_ = Generator(cfg_.seed);
  if (pre) {
    {
      nn::init::SkipInit no_init;  // (the file's values replace them)
      model_ = models::build_language_model(type, m, &gen_);
    }
    pre->load_into(model_->module());
  } else {
    model_ = models::build_language_model(type, m, &gen_);
  }
  // Windows of data.block_size tokens, or the model's whole context.
  QKV_CHECK(d.block_size <= model_->block_size(), "lm task: data.block_size ", d.block_size,
            " is longer than the model's context of ", model_->block_size(), " tokens");
  block_ = d.block_size > 0 ? d.block_size : model_->block_size();
  const int64_t B = cfg_.batch_size, T = block_, V = model_->vocab_size();
  const char* keys = "lm task: train.batch_size × model.block_size × vocab_size × 8 bytes";
  // one step's logits and its graph (graph_bytes: what 10^5 thin layers need however small the batch)
  const int64_t weight_tensors = static_cast<int64_t>(model_->module().parameters().size());
  const int64_t layers = m.contains("n_layer") && m["n_layer"].is_number_integer() ? m["n_layer"].get<int64_t>() : 0;
  check_batch_fits("lm task", params,
                   checked_add(checked_mul(checked_mul(checked_mul(B, T, keys), V, keys), 8, keys),
                               graph_bytes(layers, weight_tensors, keys), keys),
                   detail::concat("train.batch_size ", B, " × model.block_size ", T, " × vocab_size ", V,
                                  " logits and their gradient, and the graph of its ", weight_tensors,
                                  " weight tensors (model.n_layer ", m.value("n_layer", json(0)).dump(), ")"));
}

TrainingTask::MicroBatch LMTask::micro_batch(int64_t step, int64_t micro, int64_t accum) {
  // this process's windows of the batch of B (all of them in one process)
  const int64_t B = cfg_.batch_size, T = block_;
  const Rows rows = shard_rows(B, gen_, "lm task");
  // (unsigned: a counter for the random windows, which may wrap)
  const uint64_t counter = (static_cast<uint64_t>(step) * static_cast<uint64_t>(accum) + static_cast<uint64_t>(micro)) *
                               static_cast<uint64_t>(B) + static_cast<uint64_t>(rows.first);
  auto [x, y] = lm_batch(data_.train, rows.count, T, cfg_.seed, counter);
  // every window has T targets: the shard's share of the batch's mean loss is its share of windows
  return {{x, y}, rows.count * T, static_cast<double>(rows.count) / static_cast<double>(B)};
}

Tensor LMTask::micro_loss(const std::vector<Tensor>& inputs, double share, int64_t accum) {
  Tensor loss = model_->loss(inputs.at(0), inputs.at(1));
  backward_share(loss, share, accum);
  return loss;
}

StepStats LMTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  const MicroBatch b = micro_batch(step, micro, accum);
  const Tensor loss = micro_loss({b.inputs[0].to(device_), b.inputs[1].to(device_)}, b.share, accum);
  return {loss.item(), b.tokens, b.share};  // (read after the backward is queued: a GPU runs it meanwhile)
}

std::vector<std::pair<std::string, double>> LMTask::evaluate(int64_t) {
  NoGradGuard no_grad;
  const int64_t B = cfg_.batch_size, T = block_;
  std::vector<std::pair<std::string, double>> out;
  io::ProgressBar bar("eval", 2 * cfg_.eval_iters, 0, /*delay_seconds=*/2);  // batches; shown when it runs long
  for (auto [name, data] : {std::pair{"train_loss", &data_.train}, std::pair{"val_loss", &data_.val}}) {
    double sum = 0;
    for (int64_t i = 0; i < cfg_.eval_iters; ++i) {  // the same batches at every evaluation
      auto [x, y] = lm_batch(*data, B, T, cfg_.seed ^ 0x5EEDE7A1ull, static_cast<uint64_t>(i) * static_cast<uint64_t>(B));
      sum += model_->loss(x.to(device_), y.to(device_)).item();
      bar.update(1);
    }
    out.emplace_back(name, sum / static_cast<double>(cfg_.eval_iters));
  }
  return out;
}

json LMTask::model_metadata() const {
  // (init_from's "generation", …)
  return fine_tuned_metadata(*model_, tokenizer_meta_.is_null() ? tok_.to_json() : tokenizer_meta_, carried_);
}

}  // namespace qkv::train
