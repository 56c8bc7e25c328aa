// qkv bench seq2seq train|translate — the encoder–decoder workloads for a side-by-side run with
// PyTorch (bench/seq2seq_vs_pytorch.py, bench/rnn_vs_pytorch.py):
//   train:      ../shared/pytorch-reference/seq2seq_train.py on qkv: d_model 256, 8 heads, 3+3 layers,
//               d_ff 1024, post-LN, dropout 0.1, shared 8000-token vocabulary, batch 64 × 24 tokens
//               (source and target), label smoothing 0.1, Adam(1e-4, β (0.9, 0.98), ε 1e-9); target tokens/s.
//               --type picks another registered seq2seq model (rnn-attention, rnn-encdec: the type's
//               defaults, vocabulary 8000), --set changes its hyper-parameters, --batch/--len the batch.
//   translate:  beam search (beam 4, α 0.6, batch 32) over the lines of a file with a model file,
//               with the KV cache and recomputing the decoder over the whole prefix each step
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "commands.h"
#include "translation_models.h"
#include "qkv/core/thread_budget.h"
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
#include "qkv/models/registry.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops/autocast.h"
#include "qkv/text/parallel_corpus.h"
#include "qkv/train/optim.h"

namespace qkv::cli {

namespace {

struct Seq2SeqBenchArgs {
  int64_t iters = 30, warmup = 5, sentences = 256;
  std::string type = "transformer";  // train: any registered seq2seq type
  std::vector<std::string> set;      // train: "hidden_size=256", … on the type's hyper-parameters
  int64_t batch = 64, len = 24;      // train: sentences per batch, tokens per source and target
  std::string model = kDefaultTranslator, input, dump_ids;
  AutocastDType dtype = AutocastDType::f32;  // train
  DecodeArgs decode;                         // translate: beam, batch, the weights the steps read, threads
  int threads = 0;
  bool json = false, no_naive = false;
};

int run_train(const Seq2SeqBenchArgs& a) {
  use_threads(a.threads);
  // the hyper-parameters: seq2seq_train.py's Transformer, or the type's defaults at vocabulary 8000
  nlohmann::json config = {{"vocab_size", 8000}};
  if (a.type == "transformer") {
    nn::Seq2SeqConfig c = nn::Seq2SeqConfig::preset("small");
    c.vocab_size = 8000, c.dropout = 0.1f, c.max_len = 512;
    config = c.to_json();
  }
  for (const std::string& kv : a.set) apply_override(config, kv);
  Generator gen(0);
  const std::unique_ptr<models::Seq2SeqModel> m = models::build_seq2seq(a.type, config, &gen);
  m->module().train();
  train::AdamOptions o;
  o.lr = 1e-4f, o.beta1 = 0.9f, o.beta2 = 0.98f, o.eps = 1e-9f;
  train::Adam opt({{m->module().named_parameters(), 0.f}}, o);
  const int64_t B = a.batch, L = a.len;
  const auto V = static_cast<uint64_t>(m->vocab_size());
  QKV_CHECK(V > 4 && L + 1 <= m->max_len(), "bench seq2seq train: --len ", L, " is longer than the model's max_len ",
            m->max_len());
  std::vector<double> times;
  double loss_value = 0;
  for (int64_t it = 0; it < a.warmup + a.iters; ++it) {
    // random tokens 4 … V − 1: src [B, L], tgt [B, L + 1] = BOS-free random, as the reference script
    std::vector<int32_t> src(B * L), tin(B * L), tout(B * L);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int32_t> tgt(L + 1);
      const int64_t row = (it * B + b) * (L + 40);
      for (int64_t i = 0; i <= L; ++i) tgt[i] = 4 + static_cast<int32_t>(Generator::bits(9, row + i) % (V - 4));
      for (int64_t i = 0; i < L; ++i) {
        src[b * L + i] = 4 + static_cast<int32_t>(Generator::bits(8, row + i) % (V - 4));
        tin[b * L + i] = tgt[i], tout[b * L + i] = tgt[i + 1];
      }
    }
    Tensor s = Tensor::from_ints(src, {B, L}), ti = Tensor::from_ints(tin, {B, L}), to = Tensor::from_ints(tout, {B, L});
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      Autocast autocast(a.dtype);  // bf16: mixed precision
      loss = m->loss(s, ti, to, 0.1f);
      loss.backward();
    }
    opt.step();
    const double dt = seconds_since(t0);
    loss_value = loss.item();
    if (it >= a.warmup) times.push_back(dt);
  }
  const TimeStats st = time_stats(times);
  const double mean = st.mean, median = st.median;
  const double tok = static_cast<double>(B * L);
  if (a.json) {
    nlohmann::json j = {{"type", a.type}, {"model", m->describe()}, {"threads", requested_threads()},
                        {"params", m->module().num_parameters()}, {"iters", a.iters}, {"batch", B}, {"len", L},
                        {"mean_ms", mean * 1e3}, {"median_ms", median * 1e3}, {"tgt_tokens_per_s", tok / mean},
                        {"tgt_tokens_per_s_median", tok / median}, {"final_loss", loss_value},
                        {"dtype", std::string(enum_name(a.dtype))}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("qkv seq2seq %s (%s) %s params=%.2fM threads=%d batch=%lld len=%lld: mean %.2f ms/iter (median %.2f) "
                "-> %.0f target tokens/s\n",
                a.type.c_str(), m->describe().c_str(), std::string(enum_name(a.dtype)).c_str(),
                static_cast<double>(m->module().num_parameters()) / 1e6, requested_threads(),
                static_cast<long long>(B),
                static_cast<long long>(L), mean * 1e3, median * 1e3, tok / mean);
  }
  return 0;
}

int run_translate(const Seq2SeqBenchArgs& a) {
  use_threads_for_decoding(a.decode.threads);
  const std::vector<models::LoadedSeq2Seq> ts = load_translation_models({a.model}, a.decode.requested_weights());
  const models::LoadedSeq2Seq& t = ts[0];
  QKV_CHECK(!a.input.empty(), "bench seq2seq translate: --input (source sentences, one per line) is required");
  std::vector<std::string> lines = text::read_lines(a.input);
  if (static_cast<int64_t>(lines.size()) > a.sentences) lines.resize(static_cast<size_t>(a.sentences));
  decode::Translator tr(*t.model, *t.tokenizer);
  nlohmann::json j = {{"threads", requested_threads()}, {"sentences", lines.size()}, {"beam", a.decode.beam()},
                      {"batch", a.decode.translate.batch_size}, {"dtype", std::string(enum_name(a.decode.weights))}};
  std::vector<decode::Hypothesis> reference;
  for (bool cache : {true, false}) {
    if (!cache && a.no_naive) continue;
    decode::TranslateOptions o = a.decode.translate;
    o.use_cache = cache;
    std::vector<decode::Hypothesis> hyps;
    const auto t0 = std::chrono::steady_clock::now();
    tr.translate(lines, o, &hyps);
    const double dt = seconds_since(t0);
    int64_t tokens = 0;
    for (auto& h : hyps) tokens += static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0);
    const char* name = cache ? "kv_cache" : "naive";
    j[name] = {{"seconds", dt}, {"tgt_tokens", tokens}, {"tgt_tokens_per_s", static_cast<double>(tokens) / dt},
               {"sentences_per_s", static_cast<double>(lines.size()) / dt}};
    if (!a.json)
      std::printf("qkv translate %-8s beam %lld batch %lld: %zu sentences, %lld target tokens in %.2f s -> %.0f tokens/s\n",
                  name, static_cast<long long>(a.decode.beam()), static_cast<long long>(a.decode.translate.batch_size), lines.size(),
                  static_cast<long long>(tokens), dt, static_cast<double>(tokens) / dt);
    if (cache) {
      reference = hyps;
      if (!a.dump_ids.empty()) {  // source ids (+EOS) TAB output ids: for the PyTorch side of the benchmark
        std::string out;
        for (size_t i = 0; i < lines.size(); ++i) {
          std::vector<int32_t> src = tr.encode(lines[i]);
          src.push_back(t.model->special_tokens().eos);
          for (size_t k = 0; k < src.size(); ++k) out += (k ? " " : "") + std::to_string(src[k]);
          out += "\t";
          for (size_t k = 0; k < hyps[i].tokens.size(); ++k) out += (k ? " " : "") + std::to_string(hyps[i].tokens[k]);
          out += "\n";
        }
        io::write_file_atomic(a.dump_ids, out);
      }
    } else {
      bool same = true;
      for (size_t i = 0; i < hyps.size(); ++i) same = same && hyps[i].tokens == reference[i].tokens;
      j["identical"] = same;
    }
  }
  if (a.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

void add_bench_seq2seq(CLI::App* bench) {
  auto a = std::make_shared<Seq2SeqBenchArgs>();
  CLI::App* s = bench->add_subcommand("seq2seq", "encoder–decoder training and translation throughput");
  s->require_subcommand(1);
  CLI::App* tr = s->add_subcommand("train", "target tokens/s of seq2seq_train.py's workload (random tokens)");
  add_train_bench_options(tr, a->iters, a->warmup, a->dtype, a->threads, a->json);
  tr->add_option("--type", a->type, "the model type (qkv models): transformer, rnn-attention, rnn-encdec, …")
      ->capture_default_str();
  tr->add_option("--set", a->set, "a hyper-parameter of the type, e.g. --set hidden_size=256 (repeatable)");
  tr->add_option("--batch", a->batch, "sentences per batch")->capture_default_str()->check(greater_than_zero());
  tr->add_option("--len", a->len, "tokens per source and per target")->capture_default_str()->check(greater_than_zero());
  register_runner(tr, [a] { return run_train(*a); });
  CLI::App* te = s->add_subcommand("translate", "beam-search translation tokens/s, with and without the KV cache");
  te->add_option("-m,--model", a->model, "model file")->capture_default_str();
  te->add_option("-i,--input", a->input, "source sentences, one per line")->required();
  te->add_option("--sentences", a->sentences, "use the first N lines")->capture_default_str()->check(greater_than_zero());
  add_decode_options(te, a->decode, kBeam | kBatchSize);
  add_decode_bench_options(te, a->decode, a->no_naive, a->json);
  te->add_option("--dump-ids", a->dump_ids, "write each line's source ids and chosen output ids (TSV) here");
  register_runner(te, [a] { return run_translate(*a); });
}

}  // namespace qkv::cli
