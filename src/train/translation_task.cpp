#include "qkv/train/translation_task.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/decode/translator.h"
#include "qkv/io/data_file.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/ops.h"
#include "qkv/eval/translation_scores.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/nn/init.h"
#include "qkv/train/init_from.h"
#include "qkv/train/memory_plan.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- the config's sections -------------------------------------------------------------------

const io::Fields<PairFiles>& PairFiles::fields() {
  using F = io::Fields<PairFiles>;
  static const F f("translation task: data files", {
                                                       F::text("tsv", &PairFiles::tsv),
                                                       F::integer("src_col", &PairFiles::src_col, 0, 1000),
                                                       F::integer("tgt_col", &PairFiles::tgt_col, 0, 1000),
                                                       F::text("src", &PairFiles::src),
                                                       F::text("tgt", &PairFiles::tgt),
                                                   });
  return f;
}

const io::Fields<SplitConfig>& SplitConfig::fields() {
  using F = io::Fields<SplitConfig>;
  static const F f("translation task: data.split", {
                                                       F::integer("dev", &SplitConfig::dev, 0),
                                                       F::integer("test", &SplitConfig::test, 0),
                                                       F::unsigned_integer("seed", &SplitConfig::seed),
                                                   });
  return f;
}

const io::Fields<TranslationDataConfig>& TranslationDataConfig::fields() {
  using F = io::Fields<TranslationDataConfig>;
  using C = TranslationDataConfig;
  static const F f("translation task: data", {
                                                 F::section("train", &C::train),
                                                 F::section("dev", &C::dev),
                                                 F::section("test", &C::test),
                                                 F::section("split", &C::split),
                                                 F::integer("max_tokens", &C::max_tokens, 1),
                                             });
  return f;
}

const io::Fields<TranslationTokenizerConfig>& TranslationTokenizerConfig::fields() {
  using F = io::Fields<TranslationTokenizerConfig>;
  using C = TranslationTokenizerConfig;
  static const F f("translation task: tokenizer", {
                                                      F::text("type", &C::type),
                                                      F::integer("vocab_size", &C::vocab_size, 5, 1 << 20),
                                                      F::number("character_coverage", &C::character_coverage, 0, 1),
                                                      F::integer("input_sentence_size", &C::input_sentence_size, 0),
                                                  });
  return f;
}

const io::Fields<TranslationEvalConfig>& TranslationEvalConfig::fields() {
  using F = io::Fields<TranslationEvalConfig>;
  static const F f("translation task: eval", {
                                                 F::integer("bleu_sentences", &TranslationEvalConfig::bleu_sentences, 0),
                                                 F::integer("beam_size", &TranslationEvalConfig::beam_size, 1, 64),
                                             });
  return f;
}

namespace {

std::string resolve(const std::string& p, const std::string& base) { return io::config_path(p, base); }

// {"tsv": PATH, "src_col": 0, "tgt_col": 1} or {"src": PATH, "tgt": PATH}
std::vector<text::SentencePair> read_pairs(const PairFiles& spec, const std::string& base, const char* what) {
  std::vector<text::SentencePair> pairs;
  if (!spec.tsv.empty()) {
    pairs = text::read_tsv_pairs(resolve(spec.tsv, base), static_cast<int>(spec.src_col), static_cast<int>(spec.tgt_col));
  } else {
    QKV_CHECK(!spec.src.empty() && !spec.tgt.empty(), "translation task: data.", what,
              " needs \"tsv\" or both \"src\" and \"tgt\"");
    pairs = text::read_file_pairs(resolve(spec.src, base), resolve(spec.tgt, base));
  }
  for (auto& p : pairs) p.src = text::normalize_spaces(p.src), p.tgt = text::normalize_spaces(p.tgt);
  return pairs;
}

void write_split(const std::vector<text::SentencePair>& pairs, const std::string& prefix) {
  std::string src, ref;
  for (auto& p : pairs) src += p.src + "\n", ref += p.tgt + "\n";
  io::write_file_atomic(prefix + ".src", src);
  io::write_file_atomic(prefix + ".ref", ref);
}

}  // namespace

const io::Fields<TranslationTaskConfig>& TranslationTaskConfig::fields() {
  using F = io::Fields<TranslationTaskConfig>;
  using C = TranslationTaskConfig;
  static const F f("translation task", {
                                           F::text("task", &C::task),
                                           F::text("description", &C::description),
                                           F::text("_comment", &C::description),
                                           F::text("init_from", &C::init_from),
                                           F::section("data", &C::data),
                                           F::section("tokenizer", &C::tokenizer),
                                           F::any("model", &C::model),
                                           F::section("train", &C::train),
                                           F::section("eval", &C::eval),
                                       });
  return f;
}

TranslationTask::TranslationTask(const json& config, const std::string& base, const std::string& out_dir, bool resume,
                                 bool verbose) {
  QKV_CHECK(io::get_or(config, "task", "") == "translation", "translation task: the config's \"task\" must be \"translation\"");
  const bool fine_tune = config.is_object() && config.contains("init_from");
  for (const char* k : {"data", "model", "train"})
    QKV_CHECK(config.contains(k) || (fine_tune && std::string(k) == "model"), "translation task: the config needs a \"", k,
              "\" section");
  const TranslationTaskConfig c = TranslationTaskConfig::fields().from_json(config);
  cfg_ = c.train;
  // Fine-tuning (train/init_from.h): the file's model type, hyper-parameters and SentencePiece.
  std::unique_ptr<Pretrained> pre;
  if (fine_tune) {
    QKV_CHECK(!c.init_from.empty(), "translation task: init_from is empty (a model file to fine-tune)");
    pre = std::make_unique<Pretrained>(load_pretrained(c.init_from, base, models::Kind::seq2seq,
                                                       config.value("model", json()), "translation task"));
    QKV_CHECK(!config.contains("tokenizer"), "translation task: \"tokenizer\" would train a new SentencePiece model, ",
              "but a model fine-tuned from init_from '", pre->path, "' reads its data with the file's own: leave ",
              "\"tokenizer\" out");
    carried_ = pre->carried;
  }
  auto [type, m] = pre ? std::pair{pre->type, pre->model} : model_section(c.model, "transformer");
  QKV_CHECK(models::model_type(type).kind == models::Kind::seq2seq, "translation task: model.type \"", type,
            "\" is not a sequence-to-sequence model type");
  auto say = [&](const std::string& s) {
    if (verbose) std::fprintf(stderr, "%s\n", s.c_str());
  };

  // ---- data
  const TranslationDataConfig& d = c.data;
  QKV_CHECK(d.train.given(), "translation task: data.train is missing");
  std::vector<text::SentencePair> all = read_pairs(d.train, base, "train");
  if (d.dev.given()) {
    split_.train = std::move(all);
    split_.dev = read_pairs(d.dev, base, "dev");
    if (d.test.given()) split_.test = read_pairs(d.test, base, "test");
  } else {
    split_ = text::split_by_source(all, d.split.dev, d.split.test, d.split.seed);
  }
  QKV_CHECK(!split_.train.empty() && !split_.dev.empty(), "translation task: no training or dev pairs");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  QKV_CHECK(!ec, "translation task: cannot create '", out_dir, "': ", ec.message());
  write_split(split_.dev, (fs::path(out_dir) / "dev").string());
  if (!split_.test.empty()) write_split(split_.test, (fs::path(out_dir) / "test").string());

  // ---- tokenizer: one SentencePiece model for both languages, trained on the training pairs
  const TranslationTokenizerConfig& tk = c.tokenizer;
  const std::string spm_path = (fs::path(out_dir) / "spm.model").string();
  const std::string spm_stamp = (fs::path(out_dir) / "spm.json").string();
  const json stamp = {{"tokenizer", TranslationTokenizerConfig::fields().to_json(tk)},
                      {"data", PairFiles::fields().to_json(d.train)},
                      {"train_pairs", split_.train.size()}};
  bool reuse = false;
  if (fs::exists(spm_path) && fs::exists(spm_stamp)) {
    try {
      reuse = io::parse_json(io::read_file(spm_stamp), spm_stamp) == stamp;
    } catch (const std::exception&) {
      reuse = false;  // a damaged stamp: train again
    }
  }
  QKV_CHECK(pre || !resume || fs::exists(spm_path), "train --resume: '", spm_path, "' is missing");
  if (pre) {
    sp_ = std::make_unique<text::SentencePiece>(
        text::SentencePiece::from_json(pre->tokenizer, "translation task: init_from '" + pre->path + "'"));
    say("tokenizer: the one in " + pre->path);
  } else if (resume || reuse) {
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(spm_path));
    say("tokenizer: " + spm_path + " (reused)");
  } else {
    const std::string corpus = (fs::path(out_dir) / "spm-train.txt").string();
    std::string lines;
    for (auto& p : split_.train) lines += p.src + "\n" + p.tgt + "\n";
    io::write_file_atomic(corpus, lines);
    say("tokenizer: training SentencePiece (" + tk.type + ", " + std::to_string(tk.vocab_size) + " pieces) on " +
        std::to_string(2 * split_.train.size()) + " lines …");
    io::StatusLine busy("tokenizer: training SentencePiece");  // (the library reports no progress)
    text::SentencePiece::train({corpus}, (fs::path(out_dir) / "spm").string(), static_cast<int>(tk.vocab_size), tk.type,
                               tk.character_coverage, tk.input_sentence_size);
    fs::remove(corpus, ec);
    io::write_file_atomic(spm_stamp, stamp.dump(2));
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(spm_path));
  }

  // ---- model: the type the config names (a Transformer by default), sized to the tokenizer
  QKV_CHECK(!m.contains("vocab_size") || m["vocab_size"] == sp_->vocab_size(), "translation task: model.vocab_size ",
            m["vocab_size"].dump(), " differs from the tokenizer's ", sp_->vocab_size(),
            pre ? " in init_from '" + pre->path + "'" : std::string(" (leave it out)"));
  if (!pre) {  // (a file's model keeps its own special ids: Marian starts decoding from <pad>)
    m["vocab_size"] = sp_->vocab_size();
    m["pad_id"] = sp_->pad_id(), m["bos_id"] = sp_->bos_id(), m["eos_id"] = sp_->eos_id();
  }
  // Sizes first (train/memory_plan.h): the model, then a batch's logits (≤ batch_size tokens × V).
  const int64_t params = check_model_fits(
      "translation task", m, [&type = type, &m = m] { return models::build_seq2seq(type, m, nullptr)->module().num_parameters(); });
  gen_ = Generator(cfg_.seed);
  if (pre) {
    {
      nn::init::SkipInit no_init;  // (the file's values replace them)
      model_ = models::build_seq2seq(type, m, &gen_);
    }
    pre->load_into(model_->module());
  } else {
    model_ = models::build_seq2seq(type, m, &gen_);
  }
  {
    const int64_t B = cfg_.batch_size, V = model_->vocab_size();
    const char* keys = "translation task: train.batch_size × vocab_size × 8 bytes";
    check_batch_fits("translation task", params, checked_mul(checked_mul(B, V, keys), 8, keys),
                     detail::concat("train.batch_size ", B, " tokens × vocab_size ", V, " logits and their gradient"));
  }
  const models::SpecialTokens ids = model_->special_tokens();

  // ---- encode and batch
  const int64_t max_tokens = d.max_tokens > 0 ? d.max_tokens : model_->max_len() - 1;
  size_t dropped = 0, dropped_dev = 0;
  io::ProgressBar encoding("data: encoding", static_cast<int64_t>(split_.train.size() + split_.dev.size()), 0,
                           /*delay_seconds=*/2);  // pairs
  auto encode_all = [&](const std::vector<text::SentencePair>& pairs, size_t* drop) {
    std::vector<text::EncodedPair> out;
    for (auto& p : pairs) {
      encoding.update();
      text::EncodedPair e;
      for (int id : sp_->encode(p.src)) e.src.push_back(id);
      e.src.push_back(ids.eos);
      e.tgt.push_back(ids.bos);
      for (int id : sp_->encode_target(p.tgt)) e.tgt.push_back(id);
      e.tgt.push_back(ids.eos);
      if (e.src.size() < 2 || e.tgt.size() < 3 || static_cast<int64_t>(e.src.size()) > max_tokens ||
          static_cast<int64_t>(e.tgt.size()) - 1 > max_tokens) {
        ++*drop;  // empty or over-long pairs are left out of training (counted, reported)
        continue;
      }
      out.push_back(std::move(e));
    }
    return out;
  };
  train_ = encode_all(split_.train, &dropped);
  dev_ = encode_all(split_.dev, &dropped_dev);
  encoding.close();
  QKV_CHECK(!train_.empty() && !dev_.empty(), "translation task: every pair was empty or longer than ", max_tokens,
            " tokens");
  auto sorted = [&](const std::vector<text::EncodedPair>& v, uint64_t seed) {
    // by length, ties broken by a seeded hash so equal-length pairs mix across the corpus
    std::vector<size_t> o(v.size());
    std::iota(o.begin(), o.end(), 0);
    std::vector<uint64_t> key(v.size());
    for (size_t i = 0; i < v.size(); ++i) key[i] = Generator::bits(seed, i);
    std::sort(o.begin(), o.end(), [&](size_t a, size_t b) {
      auto la = std::pair(v[a].tgt.size(), v[a].src.size()), lb = std::pair(v[b].tgt.size(), v[b].src.size());
      return la != lb ? la < lb : key[a] < key[b];
    });
    return o;
  };
  batches_ = text::token_batches(train_, sorted(train_, cfg_.seed), cfg_.batch_size);
  dev_batches_ = text::token_batches(dev_, sorted(dev_, 0), cfg_.batch_size);
  say("data: " + std::to_string(train_.size()) + " training pairs in " + std::to_string(batches_.size()) +
      " batches of ≤ " + std::to_string(cfg_.batch_size) + " tokens, " + std::to_string(dev_.size()) + " dev, " +
      std::to_string(split_.test.size()) + " test" +
      (dropped ? " (" + std::to_string(dropped) + " empty or over-long training pairs left out)" : ""));

  eval_ = c.eval;
}

const std::vector<size_t>& TranslationTask::batch_for(int64_t g) {
  const auto nb = static_cast<int64_t>(batches_.size());
  const int64_t epoch = g / nb;
  if (epoch != epoch_cached_) {  // the epoch's batch order: a Fisher–Yates shuffle seeded by (seed, epoch)
    epoch_order_.resize(batches_.size());
    std::iota(epoch_order_.begin(), epoch_order_.end(), 0);
    for (size_t i = epoch_order_.size(); i > 1; --i) {
      const uint64_t r = Generator::bits(cfg_.seed ^ 0xBA7C4E5ull, static_cast<uint64_t>(epoch) * 0x100000000ull + i);
      std::swap(epoch_order_[i - 1], epoch_order_[r % i]);
    }
    epoch_cached_ = epoch;
  }
  return batches_[epoch_order_[static_cast<size_t>(g % nb)]];
}

StepStats TranslationTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  const std::vector<size_t>& all = batch_for(step * accum + micro);
  // This process's sentences [b0, b0 + nb) of the batch (all of them in one process), padded to the
  // whole batch's lengths (so each row, and its dropout, is what it is in one process); the loss is
  // a per-token mean, so the shard's share is its fraction of the batch's target tokens.
  const auto B = static_cast<int64_t>(all.size()), b0 = shard_.first(B), nb = shard_.count(B);
  size_t S = 0, T = 0;
  int64_t batch_tokens = 0;
  for (size_t i : all) {
    S = std::max(S, train_[i].src.size()), T = std::max(T, train_[i].tgt.size() - 1);
    batch_tokens += static_cast<int64_t>(train_[i].tgt.size() - 1);
  }
  // A batch of fewer sentences than processes (one very long pair) leaves some without a row: they
  // run the first row with weight 0, which keeps their dropout stream in step with the others.
  const std::vector<size_t> rows = nb > 0 ? std::vector<size_t>(all.begin() + b0, all.begin() + b0 + nb)
                                          : std::vector<size_t>{all[0]};
  if (shard_.world > 1) gen_.set_shard(nb > 0 ? static_cast<uint64_t>(b0) : 0, rows.size(), static_cast<uint64_t>(B));
  text::Batch b = text::make_batch(train_, rows, model_->special_tokens().pad, S, T);
  Tensor loss = model_->loss(b.src, b.tgt_in, b.tgt_out, static_cast<float>(cfg_.label_smoothing));
  const double share = nb > 0 ? static_cast<double>(b.tgt_tokens) / static_cast<double>(batch_tokens) : 0.0;
  backward_share(loss, share, accum);
  const double value = loss.item();  // after the backward is queued: a GPU runs it meanwhile
  return {nb > 0 ? value : 0.0, nb > 0 ? b.tgt_tokens : 0, share};
}

std::vector<std::pair<std::string, double>> TranslationTask::evaluate(int64_t) {
  NoGradGuard no_grad;
  // val_loss: token-weighted cross-entropy (no smoothing) over the whole dev set
  double sum = 0;
  int64_t count = 0;
  {
    io::ProgressBar bar("eval loss", static_cast<int64_t>(dev_batches_.size()), 0, /*delay_seconds=*/2);  // batches
    for (auto& idx : dev_batches_) {
      text::Batch b = text::make_batch(dev_, idx, model_->special_tokens().pad);
      sum += model_->loss(b.src, b.tgt_in, b.tgt_out).item() * static_cast<double>(b.tgt_tokens);
      count += b.tgt_tokens;
      bar.update(1);
    }
  }
  std::vector<std::pair<std::string, double>> out{{"val_loss", sum / static_cast<double>(count)}};
  if (eval_.bleu_sentences > 0) {
    // val_bleu: the first bleu_sentences dev pairs, one reference each
    const size_t n = std::min(split_.dev.size(), static_cast<size_t>(eval_.bleu_sentences));
    std::vector<std::string> src, ref;
    for (size_t i = 0; i < n; ++i) src.push_back(split_.dev[i].src), ref.push_back(split_.dev[i].tgt);
    decode::TranslateOptions to;
    to.beam_size = eval_.beam_size;
    io::ProgressBar bar("eval BLEU", static_cast<int64_t>(n), 0, /*delay_seconds=*/2);  // sentences
    to.on_batch = [&bar](int64_t done, int64_t) { bar.update(done - bar.n()); };
    std::vector<std::string> hyp = decode::Translator(*model_, *sp_).translate(src, to);
    out.emplace_back("val_bleu", eval::score_translations(eval::group_by_source({}, n, false), hyp, {ref}).bleu.score);
  }
  return out;
}

json TranslationTask::model_metadata() const {
  return fine_tuned_metadata(*model_, sp_->to_json(), carried_);  // (init_from's "converted_from", …)
}

}  // namespace qkv::train
