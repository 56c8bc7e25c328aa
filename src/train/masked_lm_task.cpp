#include "qkv/train/masked_lm_task.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/encoder_batches.h"
#include "qkv/io/data_file.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/models/model_file.h"
#include "qkv/ops.h"
#include "qkv/text/unicode.h"
#include "qkv/train/init_from.h"
#include "qkv/train/memory_plan.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kMlmTask = "masked_lm task";

const io::Fields<MaskedLMDataConfig>& MaskedLMDataConfig::fields() {
  using F = io::Fields<MaskedLMDataConfig>;
  using C = MaskedLMDataConfig;
  static const F f("masked_lm task: data",
                   {
                       F::text("train", &C::train),
                       F::text("val", &C::val),
                       F::number("val_fraction", &C::val_fraction, 0, 1, /*hi_open=*/true),
                       F::text("text", &C::text),
                       F::integer("max_length", &C::max_length, 0, 1 << 20),
                       F::boolean("line_by_line", &C::line_by_line),
                       F::number("mlm_probability", &C::mlm_probability, 0, 1, /*hi_open=*/true),
                       F::number("mask_replace_prob", &C::mask_replace_prob, 0, 1),
                       F::number("random_replace_prob", &C::random_replace_prob, 0, 1),
                       F::boolean("whole_word_mask", &C::whole_word_mask),
                   });
  return f;
}

const io::Fields<MaskedLMTaskConfig>& MaskedLMTaskConfig::fields() {
  static const auto f = fine_tuning_config_fields<MaskedLMTaskConfig>("masked_lm task");
  return f;
}

namespace {

// Texts grouped before they are cut into blocks: datasets' map batch (run_mlm.py's group_texts runs on
// each 1,000 texts alone, and drops each one's remainder).
constexpr size_t kGroupedTexts = 1000;

// The texts of a .txt (a line each, blank ones kept: run_mlm.py's text loader keeps them, and grouping
// tokenizes them to their special tokens), a .jsonl (the string `column` of an object a line) or a .csv
// file (its column `column`).
std::vector<std::string> read_texts(const std::string& path, const std::string& column) {
  const std::string text = io::read_data_file(path, detail::concat(kMlmTask, ": data"));
  const std::string ext = fs::path(path).extension().string();
  QKV_CHECK(ext == ".txt" || ext == ".jsonl" || ext == ".csv", kMlmTask, ": '", path,
            "' is neither .txt (a text a line), .jsonl (an object a line, its text under data.text) nor .csv (a "
            "header line, then a record a line: its text in the column data.text)");
  std::vector<std::string> out;
  if (ext == ".txt") {
    // Python's universal newlines (datasets' text loader reads the file in text mode): "\n", "\r\n" and a
    // lone "\r" each end a line
    const std::string_view all = text;
    for (size_t from = 0; from < all.size();) {
      const size_t end = std::min(all.find('\n', from), all.find('\r', from));  // (npos: the last line)
      out.push_back(text::valid_utf8(all.substr(from, end == std::string_view::npos ? end : end - from)));
      if (end == std::string_view::npos) break;
      from = end + (all[end] == '\r' && end + 1 < all.size() && all[end + 1] == '\n' ? 2 : 1);
    }
  } else {
    for (const auto& [number, row, csv] :
         data_rows(text, path, kMlmTask, "an object a line, its text under data.text")) {
      const std::string where = detail::concat(kMlmTask, ": '", path, "' line ", number);
      out.push_back(text_field(row, column, where + " (data.text names the column)"));
    }
  }
  QKV_CHECK(!out.empty(), kMlmTask, ": '", path, "' holds no texts");
  return out;
}

// run_mlm.py's line_by_line filter: `len(line) > 0 and not line.isspace()`.
bool blank(const std::string& s) { return text::split_whitespace(s).empty(); }

}  // namespace

TokenBlocks mlm_blocks(const std::vector<std::string>& texts, const text::HfTokenizer& tok, int64_t max_length,
                       bool line_by_line) {
  QKV_CHECK(max_length >= 2, kMlmTask, ": data.max_length ", max_length, " must be at least 2");
  TokenBlocks out;
  io::ProgressBar bar("tokenize", static_cast<int64_t>(texts.size()), 0, /*delay_seconds=*/2);
  // a text's ids and flags: special (the post-processor's [CLS] / [SEP]: sequence id −1; a special token
  // written in the text is a token of it, as transformers' special_tokens_mask counts it), and whether it
  // continues the word before it (it starts where that one ended: the collator's whole-word rule)
  auto encode = [&](const std::string& t, std::vector<int32_t>& ids, std::vector<uint8_t>& flags) {
    text::HfEncoding e = tok.encode_with_offsets(t, /*add_special_tokens=*/true);
    ids = std::move(e.ids);
    flags.assign(ids.size(), 0);
    for (size_t k = 0; k < ids.size(); ++k) {
      if (e.sequence_ids[k] < 0)
        flags[k] = TokenBlocks::kSpecial;
      else if (k > 0 && !(flags[k - 1] & TokenBlocks::kSpecial) && e.offsets[k].first == e.offsets[k - 1].second)
        flags[k] = TokenBlocks::kContinuesWord;
    }
  };
  std::vector<int32_t> ids;
  std::vector<uint8_t> flags;
  if (line_by_line) {
    for (const std::string& t : texts) {
      bar.update();
      if (blank(t)) continue;
      encode(t, ids, flags);
      // truncation=True: the text's last tokens go, its special tokens stay
      for (auto excess = static_cast<int64_t>(ids.size()) - max_length; excess > 0;) {
        size_t k = ids.size();
        while (k > 0 && (flags[k - 1] & TokenBlocks::kSpecial)) --k;
        QKV_CHECK(k > 0, kMlmTask, ": data.max_length ", max_length, " leaves no room for a text beside the ",
                  ids.size(), " special tokens");
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(k - 1));
        flags.erase(flags.begin() + static_cast<std::ptrdiff_t>(k - 1));
        --excess;
      }
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
      out.flags.insert(out.flags.end(), flags.begin(), flags.end());
      out.begin.push_back(out.tokens());
    }
    return out;
  }
  // grouped: each kGroupedTexts texts' tokens end to end, cut into blocks of max_length, the rest dropped
  std::vector<int32_t> group_ids;
  std::vector<uint8_t> group_flags;
  for (size_t from = 0; from < texts.size(); from += kGroupedTexts) {
    group_ids.clear(), group_flags.clear();
    for (size_t i = from; i < std::min(texts.size(), from + kGroupedTexts); ++i) {
      encode(texts[i], ids, flags);
      group_ids.insert(group_ids.end(), ids.begin(), ids.end());
      group_flags.insert(group_flags.end(), flags.begin(), flags.end());
      bar.update();
    }
    const size_t whole = group_ids.size() / static_cast<size_t>(max_length) * static_cast<size_t>(max_length);
    out.ids.insert(out.ids.end(), group_ids.begin(), group_ids.begin() + static_cast<std::ptrdiff_t>(whole));
    out.flags.insert(out.flags.end(), group_flags.begin(), group_flags.begin() + static_cast<std::ptrdiff_t>(whole));
    for (size_t b = 0; b < whole / static_cast<size_t>(max_length); ++b)
      out.begin.push_back(out.begin.back() + max_length);
  }
  return out;
}

namespace {

// The thresholds of the draws below: a probability p as an integer of 24 bits, u < p ⇔ (bits) < ⌊p·2²⁴⌋.
uint64_t threshold(double p) { return static_cast<uint64_t>(p * 16777216.0); }
constexpr uint64_t kRandomTokenSalt = 0x6D61736B6C6D0001ull;
constexpr uint64_t kValMaskSalt = 0x6D61736B6C6D0002ull;  // the validation blocks' masks: seed ^ it

}  // namespace

// Token t of block stream s draws h = bits(seed, s·2³² + t): chosen where h's bits 40–63 < ⌊p·2²⁴⌋ —
// a token that is not special, or with whole_word_mask a word's first token, and then the word's others.
std::vector<uint8_t> choose_tokens(const uint8_t* flags, size_t n, uint64_t seed, uint64_t stream,
                                   const MaskedLMDataConfig& d) {
  const uint64_t choose = threshold(d.mlm_probability);
  std::vector<uint8_t> chosen(n, 0);
  for (size_t t = 0; t < n; ++t) {
    if (flags[t] & TokenBlocks::kSpecial) continue;
    if (d.whole_word_mask && t > 0 && (flags[t] & TokenBlocks::kContinuesWord) &&
        !(flags[t - 1] & TokenBlocks::kSpecial)) {
      chosen[t] = chosen[t - 1];  // (the word's first token drew for it)
      continue;
    }
    chosen[t] = (Generator::bits(seed, (stream << 32) + t) >> 40) < choose;
  }
  return chosen;
}

// A chosen token then becomes the mask token where h's bits 16–39 < ⌊mask_replace_prob·2²⁴⌋, a random one
// (bits(seed ^ salt, same) mod vocab) where they are < ⌊(mask_replace_prob + random_replace_prob)·2²⁴⌋,
// else stays; with whole_word_mask, always the mask token.
std::vector<int32_t> mask_tokens(std::vector<int32_t>& ids, const uint8_t* flags, uint64_t seed, uint64_t stream,
                                 const MaskedLMDataConfig& d, int32_t mask_id, int64_t vocab) {
  const bool all_masked = d.whole_word_mask;
  const uint64_t as_mask = threshold(d.mask_replace_prob),
                 as_random = threshold(std::min(1.0, d.mask_replace_prob + d.random_replace_prob));
  const std::vector<uint8_t> chosen = choose_tokens(flags, ids.size(), seed, stream, d);
  std::vector<int32_t> target(ids.size(), -100);
  for (size_t t = 0; t < ids.size(); ++t) {
    if (!chosen[t]) continue;
    target[t] = ids[t];
    const uint64_t counter = (stream << 32) + t;
    const uint64_t kind = all_masked ? 0 : (Generator::bits(seed, counter) >> 16) & 0xFFFFFF;
    if (kind < as_mask || all_masked)
      ids[t] = mask_id;
    else if (kind < as_random)
      ids[t] = static_cast<int32_t>(Generator::bits(seed ^ kRandomTokenSalt, counter) % static_cast<uint64_t>(vocab));
  }
  return target;
}

struct MaskedLMTask::Masked {
  decode::batching::Batch batch;  // the masked ids, [B, T]
  std::vector<int64_t> at;        // the chosen tokens' places in the batch's B·T
  std::vector<int32_t> target;    // and their original ids
};

MaskedLMTask::MaskedLMTask(const json& config, const std::string& base_dir, bool verbose) {
  QKV_CHECK(io::get_or(config, "task", "") == "masked_lm", kMlmTask, ": the config's \"task\" must be \"masked_lm\"");
  QKV_CHECK(config.contains("init_from") && config.contains("data") && config.contains("train"), kMlmTask,
            ": the config needs \"init_from\" (a model file with its masked-language-model head: a converted "
            "…ForMaskedLM), \"data\" and \"train\"");
  const MaskedLMTaskConfig c = MaskedLMTaskConfig::fields().from_json(config);
  cfg_ = c.train, data_ = c.data;
  gen_ = Generator(cfg_.seed);
  PretrainedEncoder pre = load_pretrained_encoder(c.init_from, base_dir, config.value("model", json()), kMlmTask,
                                                  nn::BertClassifier::none, gen_);
  tok_ = std::move(pre.tokenizer), model_ = std::move(pre.model);
  tokenizer_meta_ = pre.file.tokenizer, carried_ = pre.file.carried;

  const text::HfTokenizer& tok = *tok_.hf();
  pad_id_ = decode::batching::pad_id_of(tok);
  mask_id_ = tok.mask_token_id();
  QKV_CHECK(mask_id_ >= 0, kMlmTask, ": init_from '", pre.file.path,
            "': its tokenizer has no mask token (tokenizer_config.json's mask_token)");
  const auto model_vocab = pre.file.model.value("vocab_size", int64_t{0});
  vocab_ = std::min<int64_t>(tok.vocab_size(), model_vocab);
  QKV_CHECK(vocab_ >= 1 && mask_id_ < model_vocab, kMlmTask, ": init_from '", pre.file.path, "': its mask token ",
            mask_id_, " lies outside the model's ", model_vocab, " word embeddings");

  MaskedLMDataConfig& d = data_;
  QKV_CHECK(!d.train.empty(), kMlmTask, ": data.train (the text: .txt, a text a line, .jsonl or .csv) is missing");
  QKV_CHECK(d.val_fraction > 0 || !d.val.empty(), kMlmTask,
            ": data.val_fraction must be > 0 where there is no data.val");
  QKV_CHECK(d.mlm_probability > 0, kMlmTask, ": data.mlm_probability must be > 0 (no token would be masked)");
  QKV_CHECK(d.mask_replace_prob + d.random_replace_prob <= 1 + 1e-12, kMlmTask, ": data.mask_replace_prob ",
            d.mask_replace_prob, " + data.random_replace_prob ", d.random_replace_prob, " is more than 1");
  QKV_CHECK(!d.whole_word_mask || (d.mask_replace_prob == MaskedLMDataConfig{}.mask_replace_prob &&
                                   d.random_replace_prob == MaskedLMDataConfig{}.random_replace_prob),
            kMlmTask, ": data.whole_word_mask masks every token of a chosen word with the mask token "
            "(transformers sets mask_replace_prob to 1 there): data.mask_replace_prob and data.random_replace_prob "
            "do not apply — leave them out");
  // run_mlm.py's max_seq_length: the tokenizer's model_max_length, at most 1,024, where none is given
  const int64_t positions = model_->max_positions();
  if (d.max_length == 0) d.max_length = std::min<int64_t>({tok.model_max_length().value_or(1024), 1024, positions});
  QKV_CHECK(d.max_length <= positions, kMlmTask, ": data.max_length ", d.max_length, " is more than the model's ",
            positions, " positions");
  auto resolve = [&](const std::string& p) { return io::config_path(p, base_dir); };
  {
    const io::ProgressBar::MutedScope muted(!verbose);
    const std::string train_path = resolve(d.train);
    std::vector<std::string> train = read_texts(train_path, d.text), val;
    if (!d.val.empty()) {
      val = read_texts(resolve(d.val), d.text);
    } else {
      // the first val_fraction of the texts (datasets' train[:p%], rounded to the nearest, half to even)
      const auto n = static_cast<double>(train.size());
      const auto n_val = static_cast<size_t>(std::nearbyint(d.val_fraction * n));
      QKV_CHECK(n_val >= 1 && n_val < train.size(), kMlmTask, ": data.val_fraction ", d.val_fraction, " of the ",
                train.size(), " texts of '", train_path, "' leaves ", n_val, " to validate on and ",
                train.size() - n_val, " to train on (give data.val)");
      val.assign(std::make_move_iterator(train.begin()),
                 std::make_move_iterator(train.begin() + static_cast<std::ptrdiff_t>(n_val)));
      train.erase(train.begin(), train.begin() + static_cast<std::ptrdiff_t>(n_val));
    }
    train_ = mlm_blocks(train, tok, d.max_length, d.line_by_line);
    val_ = mlm_blocks(val, tok, d.max_length, d.line_by_line);
  }
  auto none = [&](const char* which, const std::string& path, const TokenBlocks& b) {
    return detail::concat(kMlmTask, ": the ", which, " text of '", path, "' makes no block",
                          d.line_by_line ? " (every line is blank)"
                                         : detail::concat(" of data.max_length ", d.max_length,
                                                          " tokens (each 1,000 lines' tokens are cut into blocks, "
                                                          "the remainder dropped: a shorter max_length, or "
                                                          "data.line_by_line)"),
                          " — ", b.tokens(), " tokens kept");
  };
  QKV_CHECK(train_.size() >= 1, none("training", d.train, train_));
  QKV_CHECK(val_.size() >= 1, none("validation", d.val.empty() ? d.train : d.val, val_));
  order_ = io::EpochOrder(train_.size(), cfg_.seed);
  check_encoder_batch_fits(kMlmTask, *model_, pre.file.model, pre.parameters, cfg_.batch_size, d.max_length);
}

MaskedLMTask::Masked MaskedLMTask::batch_of(const TokenBlocks& set, const std::vector<int64_t>& rows,
                                            const std::vector<uint64_t>& streams, uint64_t seed, int64_t T) const {
  // the blocks masked and padded to T (at least the longest): ids, attention_mask [B, T]
  const auto B = static_cast<int64_t>(rows.size());
  for (const int64_t r : rows) T = std::max(T, set.length(r));
  Masked m;
  decode::batching::Batch& b = m.batch;
  b.T = T;
  std::vector<int32_t> ids(static_cast<size_t>(B * T), pad_id_), mask(ids.size(), 0), block;
  for (int64_t r = 0; r < B; ++r) {
    const auto from = static_cast<size_t>(set.begin[static_cast<size_t>(rows[static_cast<size_t>(r)])]);
    const int64_t n = set.length(rows[static_cast<size_t>(r)]);
    block.assign(set.ids.begin() + static_cast<std::ptrdiff_t>(from),
                 set.ids.begin() + static_cast<std::ptrdiff_t>(from) + n);
    const std::vector<int32_t> target =
        mask_tokens(block, set.flags.data() + from, seed, streams[static_cast<size_t>(r)], data_, mask_id_, vocab_);
    std::copy(block.begin(), block.end(), ids.begin() + r * T);
    std::fill_n(mask.begin() + r * T, n, 1);
    b.lengths.push_back(n);
    for (int64_t t = 0; t < n; ++t)
      if (target[static_cast<size_t>(t)] >= 0) {
        m.at.push_back(r * T + t);
        m.target.push_back(target[static_cast<size_t>(t)]);
      }
  }
  b.ids = Tensor::from_ints(ids, {B, T});
  b.mask = Tensor::from_ints(mask, {B, T});
  return m;
}

Tensor MaskedLMTask::loss_sum(const Masked& m, int64_t* correct) const {
  const decode::batching::Batch& b = m.batch;
  const bool padded = std::any_of(b.lengths.begin(), b.lengths.end(), [&](int64_t n) { return n < b.T; });
  const Tensor x = model_->encode(b.ids.to(device_), Tensor(), padded ? b.mask.to(device_) : Tensor());  // [B, T, E]
  // the chosen tokens' hidden states [N, E] (none chosen: token 0, its loss weighed 0 by the caller)
  const bool none = m.at.empty();
  const Tensor rows = index_select(x.reshape({-1, x.size(2)}), 0, none ? std::vector<int64_t>{0} : m.at);
  const Tensor h = model_->mlm_transform(rows);  // [N, E_w]
  const auto [weight, bias] = model_->mlm_decoder();
  const std::vector<int32_t> target = none ? std::vector<int32_t>{0} : m.target;
  const Tensor y = Tensor::from_ints(target, {static_cast<int64_t>(target.size())}).to(device_);
  if (!correct) return linear_cross_entropy(h, weight, y, bias, -100, 0.f, "sum");
  // evaluation: the chosen tokens' logits h Wᵀ + b [N, V] once, for the loss and each one's argmax
  const Tensor z = linear(h, weight, bias);
  const std::vector<float> v = z.to_vector();
  const size_t V = v.size() / target.size();
  *correct = 0;
  for (size_t i = 0; i < target.size() && !none; ++i) {
    const auto row = v.begin() + static_cast<std::ptrdiff_t>(i * V);
    *correct += std::max_element(row, row + static_cast<std::ptrdiff_t>(V)) - row == target[i];
  }
  return cross_entropy(z, y, -100, 0.f, "sum");
}

std::pair<int64_t, uint64_t> MaskedLMTask::drawn(uint64_t k) {
  const auto n = static_cast<uint64_t>(train_.size());
  const int64_t block = order_.at(k);
  return {block, k / n * n + static_cast<uint64_t>(block)};  // (epoch·n + block)
}

int64_t MaskedLMTask::chosen_in(uint64_t first, int64_t count) {
  int64_t chosen = 0;
  for (uint64_t k = first; k < first + static_cast<uint64_t>(count); ++k) {
    const auto [block, stream] = drawn(k);
    const auto from = static_cast<size_t>(train_.begin[static_cast<size_t>(block)]);
    for (const uint8_t c :
         choose_tokens(train_.flags.data() + from, static_cast<size_t>(train_.length(block)), cfg_.seed, stream, data_))
      chosen += c;
  }
  return chosen;
}

StepStats MaskedLMTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  // this process's blocks of the micro-batch; block k of the run (the epoch's order) masks as stream
  // epoch·n + block: the same masks whatever the sharding, and a new draw each epoch
  const int64_t batch = cfg_.batch_size;
  const Rows rows = shard_rows(batch, gen_, kMlmTask);
  const auto step_first = static_cast<uint64_t>(step * accum * batch);
  const auto first = step_first + static_cast<uint64_t>(micro * batch + rows.first);
  std::vector<int64_t> index(static_cast<size_t>(rows.count));
  std::vector<uint64_t> streams(index.size());
  for (size_t i = 0; i < index.size(); ++i) std::tie(index[i], streams[i]) = drawn(first + i);
  // the step's chosen tokens, every micro-batch and process (the loss is their mean)
  if (step != counted_step_) counted_step_ = step, step_chosen_ = chosen_in(step_first, accum * batch);
  // padded to the micro-batch's longest block, whichever rows this process holds (its dropout draws are
  // then its rows' share of one process's)
  int64_t T = 0;
  for (int64_t i = 0; i < batch; ++i)
    T = std::max(T, train_.length(order_.at(step_first + static_cast<uint64_t>(micro * batch + i))));
  const Masked m = batch_of(train_, index, streams, cfg_.seed, T);
  const Tensor sum = loss_sum(m);
  const auto chosen = static_cast<int64_t>(m.at.size());
  // backward of sum / N_step: the micro-batch's mean, its share chosen / N_step of the step (× accum,
  // which backward_share divides by)
  const Tensor mean = mul(sum, chosen > 0 ? 1.f / static_cast<float>(chosen) : 0.f);
  const double share = static_cast<double>(accum) * static_cast<double>(chosen) /
                       static_cast<double>(std::max<int64_t>(step_chosen_, 1));
  backward_share(mean, share, accum);
  int64_t tokens = 0;  // (the rate counts the blocks' tokens, not the chosen ones alone)
  for (const int64_t n : m.batch.lengths) tokens += n;
  return {mean.item(), tokens, share};
}

std::vector<std::pair<std::string, double>> MaskedLMTask::evaluate(int64_t) {
  // every validation block, masked by the seed alone (the same masks at every evaluation)
  const NoGradGuard no_grad;
  double sum = 0;
  int64_t chosen = 0, correct = 0;
  const int64_t B = cfg_.batch_size;
  io::ProgressBar bar("eval", val_.size(), 0, /*delay_seconds=*/2);
  for (int64_t from = 0; from < val_.size(); from += B) {
    std::vector<int64_t> rows;
    std::vector<uint64_t> streams;
    for (int64_t i = from; i < std::min(val_.size(), from + B); ++i)
      rows.push_back(i), streams.push_back(static_cast<uint64_t>(i));
    const Masked m = batch_of(val_, rows, streams, cfg_.seed ^ kValMaskSalt, 0);
    bar.update(static_cast<int64_t>(rows.size()));
    if (m.at.empty()) continue;
    int64_t right = 0;
    sum += loss_sum(m, &right).item();
    chosen += static_cast<int64_t>(m.at.size()), correct += right;
  }
  QKV_CHECK(chosen > 0, kMlmTask, ": the validation blocks have no token to mask (", val_.tokens(),
            " tokens, all special, or data.mlm_probability too low)");
  const double loss = sum / static_cast<double>(chosen);
  return {{"val_loss", loss},
          {"val_perplexity", std::exp(loss)},
          {"val_accuracy", static_cast<double>(correct) / static_cast<double>(chosen)}};
}

}  // namespace qkv::train
