#include "qkv/train/translation_task.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
#include "qkv/ops.h"
#include "qkv/text/bleu.h"
#include "qkv/train/checkpoint.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string resolve(const std::string& p, const std::string& base) {
  fs::path path = p;
  if (path.is_relative() && !base.empty()) path = fs::path(base) / path;
  return path.string();
}

// {"tsv": PATH, "src_col": 0, "tgt_col": 1} or {"src": PATH, "tgt": PATH}
std::vector<text::SentencePair> read_pairs(const json& spec, const std::string& base, const char* what) {
  QKV_CHECK(spec.is_object(), "translation task: data.", what, " must be {\"tsv\": …} or {\"src\": …, \"tgt\": …}");
  for (auto& [k, v] : spec.items())
    QKV_CHECK(k == "tsv" || k == "src_col" || k == "tgt_col" || k == "src" || k == "tgt", "translation task: data.",
              what, ": unknown key \"", k, "\"");
  std::vector<text::SentencePair> pairs;
  if (spec.contains("tsv"))
    pairs = text::read_tsv_pairs(resolve(spec.at("tsv").get<std::string>(), base), spec.value("src_col", 0),
                                 spec.value("tgt_col", 1));
  else {
    QKV_CHECK(spec.contains("src") && spec.contains("tgt"), "translation task: data.", what,
              " needs \"tsv\" or both \"src\" and \"tgt\"");
    pairs = text::read_file_pairs(resolve(spec.at("src").get<std::string>(), base),
                                  resolve(spec.at("tgt").get<std::string>(), base));
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

std::vector<std::vector<size_t>> token_batches(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& order,
                                               int64_t max_tokens) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> cur;
  size_t longest = 0;
  for (size_t i : order) {
    const size_t len = std::max(pairs[i].src.size(), pairs[i].tgt.size() - 1);
    const size_t l = std::max(longest, len);
    if (!cur.empty() && static_cast<int64_t>(l * (cur.size() + 1)) > max_tokens) {
      out.push_back(std::move(cur));
      cur.clear();
      longest = 0;
    }
    cur.push_back(i);
    longest = std::max(longest, len);
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

Batch make_batch(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& index, int32_t pad) {
  size_t S = 0, T = 0;
  for (size_t i : index) S = std::max(S, pairs[i].src.size()), T = std::max(T, pairs[i].tgt.size() - 1);
  const auto B = static_cast<int64_t>(index.size());
  std::vector<int32_t> src(B * S, pad), tin(B * T, pad), tout(B * T, pad);
  Batch b;
  for (size_t r = 0; r < index.size(); ++r) {
    const EncodedPair& p = pairs[index[r]];
    std::copy(p.src.begin(), p.src.end(), src.begin() + static_cast<std::ptrdiff_t>(r * S));
    std::copy(p.tgt.begin(), p.tgt.end() - 1, tin.begin() + static_cast<std::ptrdiff_t>(r * T));   // BOS y₁ … y_n
    std::copy(p.tgt.begin() + 1, p.tgt.end(), tout.begin() + static_cast<std::ptrdiff_t>(r * T));  // y₁ … y_n EOS
    b.tgt_tokens += static_cast<int64_t>(p.tgt.size() - 1);
  }
  b.src = Tensor::from_ints(src, {B, static_cast<int64_t>(S)});
  b.tgt_in = Tensor::from_ints(tin, {B, static_cast<int64_t>(T)});
  b.tgt_out = Tensor::from_ints(tout, {B, static_cast<int64_t>(T)});
  return b;
}

TranslationTask::TranslationTask(const json& config, const std::string& base, const std::string& out_dir, bool resume,
                                 bool verbose) {
  QKV_CHECK(config.value("task", "") == "translation", "translation task: the config's \"task\" must be \"translation\"");
  for (const char* k : {"data", "model", "train"})
    QKV_CHECK(config.contains(k), "translation task: the config needs a \"", k, "\" section");
  for (auto& [k, v] : config.items())
    QKV_CHECK(k == "task" || k == "data" || k == "model" || k == "train" || k == "tokenizer" || k == "eval" ||
                  k == "description",
              "translation task: unknown section \"", k, "\"");
  cfg_ = TrainConfig::from_json(config.at("train"));
  auto say = [&](const std::string& s) {
    if (verbose) std::fprintf(stderr, "%s\n", s.c_str());
  };

  // ---- data
  const json& d = config.at("data");
  for (auto& [k, v] : d.items())
    QKV_CHECK(k == "train" || k == "dev" || k == "test" || k == "split" || k == "max_tokens",
              "translation task: unknown data key \"", k, "\"");
  QKV_CHECK(d.contains("train"), "translation task: data.train is missing");
  std::vector<text::SentencePair> all = read_pairs(d.at("train"), base, "train");
  if (d.contains("dev")) {
    split_.train = std::move(all);
    split_.dev = read_pairs(d.at("dev"), base, "dev");
    if (d.contains("test")) split_.test = read_pairs(d.at("test"), base, "test");
  } else {
    const json sp = d.value("split", json{{"dev", 1000}, {"test", 2000}, {"seed", 1}});
    split_ = text::split_by_source(all, sp.value("dev", int64_t{1000}), sp.value("test", int64_t{2000}),
                                   sp.value("seed", uint64_t{1}));
  }
  QKV_CHECK(!split_.train.empty() && !split_.dev.empty(), "translation task: no training or dev pairs");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  QKV_CHECK(!ec, "translation task: cannot create '", out_dir, "': ", ec.message());
  write_split(split_.dev, (fs::path(out_dir) / "dev").string());
  if (!split_.test.empty()) write_split(split_.test, (fs::path(out_dir) / "test").string());

  // ---- tokenizer: one SentencePiece model for both languages, trained on the training pairs
  const json tk = config.value("tokenizer", json::object());
  for (auto& [k, v] : tk.items())
    QKV_CHECK(k == "type" || k == "vocab_size" || k == "character_coverage" || k == "input_sentence_size",
              "translation task: unknown tokenizer key \"", k, "\"");
  const std::string spm_path = (fs::path(out_dir) / "spm.model").string();
  const std::string spm_stamp = (fs::path(out_dir) / "spm.json").string();
  const json stamp = {{"tokenizer", tk}, {"data", d.at("train")}, {"train_pairs", split_.train.size()}};
  bool reuse = fs::exists(spm_path) && fs::exists(spm_stamp) && json::parse(io::read_file(spm_stamp)) == stamp;
  QKV_CHECK(!resume || fs::exists(spm_path), "train --resume: '", spm_path, "' is missing");
  if (resume || reuse) {
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(spm_path));
    say("tokenizer: " + spm_path + " (reused)");
  } else {
    const std::string corpus = (fs::path(out_dir) / "spm-train.txt").string();
    std::string lines;
    for (auto& p : split_.train) lines += p.src + "\n" + p.tgt + "\n";
    io::write_file_atomic(corpus, lines);
    say("tokenizer: training SentencePiece (" + tk.value("type", std::string("unigram")) + ", " +
        std::to_string(tk.value("vocab_size", 8000)) + " pieces) on " + std::to_string(2 * split_.train.size()) +
        " lines …");
    text::SentencePiece::train({corpus}, (fs::path(out_dir) / "spm").string(), tk.value("vocab_size", 8000),
                               tk.value("type", std::string("unigram")), tk.value("character_coverage", 1.0),
                               tk.value("input_sentence_size", int64_t{0}));
    fs::remove(corpus, ec);
    io::write_file_atomic(spm_stamp, stamp.dump(2));
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(spm_path));
  }

  // ---- model
  json m = config.at("model");
  QKV_CHECK(m.is_object(), "translation task: \"model\" must be an object");
  QKV_CHECK(!m.contains("vocab_size") || m["vocab_size"] == sp_->vocab_size(), "translation task: model.vocab_size ",
            m["vocab_size"].dump(), " differs from the tokenizer's ", sp_->vocab_size(), " (leave it out)");
  m["vocab_size"] = sp_->vocab_size();
  m["pad_id"] = sp_->pad_id(), m["bos_id"] = sp_->bos_id(), m["eos_id"] = sp_->eos_id();
  nn::Seq2SeqConfig mc = nn::Seq2SeqConfig::from_json(m);
  gen_ = Generator(cfg_.seed);
  model_ = std::make_unique<nn::Seq2SeqTransformer>(mc, &gen_);

  // ---- encode and batch
  const int64_t max_tokens = d.value("max_tokens", mc.max_len - 1);
  size_t dropped = 0, dropped_dev = 0;
  auto encode_all = [&](const std::vector<text::SentencePair>& pairs, size_t* drop) {
    std::vector<EncodedPair> out;
    for (auto& p : pairs) {
      EncodedPair e;
      for (int id : sp_->encode(p.src)) e.src.push_back(id);
      e.src.push_back(mc.eos_id);
      e.tgt.push_back(mc.bos_id);
      for (int id : sp_->encode(p.tgt)) e.tgt.push_back(id);
      e.tgt.push_back(mc.eos_id);
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
  QKV_CHECK(!train_.empty() && !dev_.empty(), "translation task: every pair was empty or longer than ", max_tokens,
            " tokens");
  auto sorted = [&](const std::vector<EncodedPair>& v, uint64_t seed) {
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
  batches_ = token_batches(train_, sorted(train_, cfg_.seed), cfg_.batch_size);
  dev_batches_ = token_batches(dev_, sorted(dev_, 0), cfg_.batch_size);
  say("data: " + std::to_string(train_.size()) + " training pairs in " + std::to_string(batches_.size()) +
      " batches of ≤ " + std::to_string(cfg_.batch_size) + " tokens, " + std::to_string(dev_.size()) + " dev, " +
      std::to_string(split_.test.size()) + " test" +
      (dropped ? " (" + std::to_string(dropped) + " empty or over-long training pairs left out)" : ""));

  const json ev = config.value("eval", json::object());
  for (auto& [k, v] : ev.items())
    QKV_CHECK(k == "bleu_sentences" || k == "beam_size", "translation task: unknown eval key \"", k, "\"");
  bleu_sentences_ = ev.value("bleu_sentences", int64_t{500});
  bleu_beam_ = ev.value("beam_size", int64_t{1});
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
  Batch b = make_batch(train_, batch_for(step * accum + micro), model_->config.pad_id);
  Tensor loss = model_->loss(b.src, b.tgt_in, b.tgt_out, static_cast<float>(cfg_.label_smoothing));
  const double value = loss.item();
  (accum > 1 ? mul(loss, 1.f / static_cast<float>(accum)) : loss).backward();
  return {value, b.tgt_tokens};
}

std::vector<std::pair<std::string, double>> TranslationTask::evaluate(int64_t) {
  NoGradGuard no_grad;
  // val_loss: token-weighted cross-entropy (no smoothing) over the whole dev set
  double sum = 0;
  int64_t count = 0;
  for (auto& idx : dev_batches_) {
    Batch b = make_batch(dev_, idx, model_->config.pad_id);
    sum += model_->loss(b.src, b.tgt_in, b.tgt_out).item() * static_cast<double>(b.tgt_tokens);
    count += b.tgt_tokens;
  }
  std::vector<std::pair<std::string, double>> out{{"val_loss", sum / static_cast<double>(count)}};
  if (bleu_sentences_ > 0) {
    // val_bleu: the first bleu_sentences dev pairs, one reference each
    const size_t n = std::min(split_.dev.size(), static_cast<size_t>(bleu_sentences_));
    std::vector<std::string> src, ref;
    for (size_t i = 0; i < n; ++i) src.push_back(split_.dev[i].src), ref.push_back(split_.dev[i].tgt);
    decode::TranslateOptions to;
    to.beam_size = bleu_beam_;
    std::vector<std::string> hyp = decode::Translator(*model_, *sp_).translate(src, to);
    out.emplace_back("val_bleu", text::corpus_bleu(hyp, {ref}).score);
  }
  return out;
}

json TranslationTask::model_metadata() const {
  return {{"model_type", "transformer"},
          {"model", model_->config.to_json()},
          {"tokenizer", sp_->to_json()}};
}

LoadedTranslator load_translator(const std::string& path) {
  ModelFile f = load_model_file(path);
  QKV_CHECK(f.meta["model_type"] == "transformer", "'", path, "' holds a ", f.meta["model_type"].dump(),
            " model, not a translation Transformer");
  LoadedTranslator t;
  t.meta = f.meta;
  t.tokenizer = std::make_unique<text::SentencePiece>(
      text::SentencePiece::from_json(f.meta.at("tokenizer"), "'" + path + "': the model file"));
  nn::Seq2SeqConfig c = nn::Seq2SeqConfig::from_json(f.meta.at("model"));
  QKV_CHECK(c.vocab_size == t.tokenizer->vocab_size(), "'", path, "': the model's vocab_size ", c.vocab_size,
            " does not match its tokenizer's ", t.tokenizer->vocab_size(), " pieces");
  t.model = std::make_unique<nn::Seq2SeqTransformer>(c);
  load_parameters(*t.model, f);
  t.model->eval();
  return t;
}

std::vector<LoadedTranslator> load_translators(const std::vector<std::string>& paths) {
  QKV_CHECK(!paths.empty(), "no model file given");
  std::vector<LoadedTranslator> out;
  for (const auto& p : paths) out.push_back(load_translator(p));
  const text::SentencePiece& sp = *out[0].tokenizer;
  for (size_t i = 1; i < out.size(); ++i) {
    const text::SentencePiece& other = *out[i].tokenizer;
    QKV_CHECK(other.vocab_size() == sp.vocab_size(), "'", paths[i], "' has a vocabulary of ", other.vocab_size(),
              " pieces, '", paths[0], "' one of ", sp.vocab_size(), ": an ensemble needs one vocabulary");
    for (int id = 0; id < sp.vocab_size(); ++id)
      QKV_CHECK(other.id_to_piece(id) == sp.id_to_piece(id), "'", paths[i], "' and '", paths[0],
                "' were trained with different vocabularies (piece ", id, ": '", other.id_to_piece(id), "' against '",
                sp.id_to_piece(id), "'): an ensemble needs one vocabulary");
  }
  return out;
}

}  // namespace qkv::train
