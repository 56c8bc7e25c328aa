// qkv eval — scores translations against references with corpus BLEU (identical to sacreBLEU's
// default: 13a tokenization, exponential smoothing, several references allowed) and chrF. Either
// translates --src with a model first, or scores the lines of --hyp as they are.
//
// --group-by-source: lines with the same source sentence count once, scored against the references
// of all those lines (sacreBLEU with a variable number of references per sentence). Tatoeba's test
// split has up to two dozen French translations of one English sentence, each on its own line;
// scored line by line, one output is held against each of them in turn.
//
// A language model (qkv's GPT, a converted GPT-2 / Llama / Qwen2 / Qwen3 / Mistral / Phi-3 / Gemma 3): its perplexity over
// --text, read with the model's own tokenizer.
//
// --by-length: the scores again for the sentences in each bucket of source length (1–5, 6–10, …
// tokens as sacreBLEU's 13a tokenizer splits the source: words and punctuation), the figure of
// Bahdanau et al. (2015) that shows a single context vector failing on long sentences.
// --by-length-csv writes them for `qkv plot FILE… -x source_length -y bleu`.
//
// --limit N, every kind: a sample of N lines (images, perplexity windows) drawn with --seed, not the
// first N (Tatoeba's test file is sorted by length: its first 300 lines are its 300 shortest); the
// captioner's scenes are random draws already, so it scores the first N of --scenes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "translation_models.h"
#include "caption_commands.h"
#include "vision_commands.h"
#include "qkv/models/load.h"
#include "qkv/core/error.h"
#include "qkv/decode/translator.h"
#include "qkv/eval/perplexity.h"
#include "qkv/eval/translation_scores.h"
#include "qkv/io/data_file.h"
#include "qkv/io/file.h"
#include "qkv/io/progress.h"
#include "qkv/io/sample.h"
#include "qkv/text/bleu.h"
#include "qkv/text/parallel_corpus.h"

namespace qkv::cli {

namespace {

// A language model's perplexity over --text (eval/perplexity.h), read with the model's own tokenizer.
int run_lm_eval(const std::string& path, const std::string& text_path, int64_t block, int64_t limit, uint64_t seed,
                bool json) {
  QKV_CHECK(!text_path.empty(), "qkv eval: '", path, "' is a language model: give --text (a text file to score)");
  models::LoadedLanguageModel lm = models::load_language_model(path);
  const std::vector<int32_t> ids = lm.tokenizer.encode(io::read_data_file(text_path, "qkv eval: --text"));
  const auto n = static_cast<int64_t>(ids.size());
  QKV_CHECK(n >= 2, "qkv eval: '", text_path, "' holds ", n, " token(s); perplexity needs at least 2");
  // windows: the model's context, at most 1024 tokens unless --block-size says otherwise
  const int64_t T = block > 0 ? std::min(block, lm.model->block_size()) : eval::default_perplexity_block(*lm.model);
  // the windows: all, or --limit of them drawn with --seed
  const int64_t windows = eval::perplexity_windows(n, T);
  const std::vector<int64_t> which = io::sample_indices(windows, limit, seed);
  if (limit > 0 && limit < windows && !json)
    std::fprintf(stderr, "--limit %lld: %lld of the %lld windows, drawn with seed %llu\n",
                 static_cast<long long>(limit), static_cast<long long>(limit), static_cast<long long>(windows),
                 static_cast<unsigned long long>(seed));
  io::ProgressBar bar("perplexity", static_cast<int64_t>(which.size()), 0, /*delay_seconds=*/2);
  const auto t0 = std::chrono::steady_clock::now();
  const eval::Perplexity p = eval::perplexity(*lm.model, ids, T, which, [&] { bar.update(1); });
  bar.close();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (json) {
    std::printf("%s\n", nlohmann::json({{"perplexity", p.perplexity}, {"loss", p.loss}, {"tokens", p.tokens},
                                        {"block_size", T}, {"seconds", seconds}})
                            .dump()
                            .c_str());
  } else {
    std::printf("perplexity %.3f (cross-entropy %.4f nats per token over %lld tokens, windows of %lld)\n",
                p.perplexity, p.loss, static_cast<long long>(p.tokens), static_cast<long long>(T));
  }
  return 0;
}

}  // namespace

void add_eval(CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "BLEU and chrF of a model's translations (or of a file) against references");
  struct Args {
    std::string src, hyp, hyp_out;
    std::vector<std::string> models = {kDefaultTranslator}, refs;
    DecodeArgs decode;
    int64_t limit = 0, bucket = 5;
    uint64_t seed = 0;
    bool json = false, group = false, by_length = false;
    std::string by_length_csv, text;
    int64_t block = 0;
    ImageEvalArgs image;
    CaptionEvalArgs caption;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("-m,--model", a->models, "model file; repeat for an ensemble (as qkv translate)")
      ->capture_default_str();
  sub->add_option("-s,--src", a->src, "source sentences to translate, one per line (plain or .gz)");
  sub->add_option("-r,--ref", a->refs, "reference translations, one per line; repeat for more references");
  sub->add_option("--hyp", a->hyp, "score these translations instead of translating --src");
  sub->add_option("--hyp-out", a->hyp_out, "also write the model's translations to this file");
  add_decode_options(sub, a->decode);
  sub->add_option("--limit", a->limit,
                  "only N sentences (images, perplexity windows) drawn at random with --seed, in file order "
                  "(0 = all); a captioner: at most N scenes")
      ->check(zero_or_more());
  sub->add_option("--seed", a->seed, "the seed of --limit's sample")->capture_default_str()->check(unsigned_64());
  sub->add_flag("--group-by-source", a->group,
                "score each distinct --src sentence once, against the references of all its lines");
  sub->add_flag("--by-length", a->by_length, "also score each bucket of source length (needs --src)");
  sub->add_option("--bucket-width", a->bucket, "source tokens per --by-length bucket")
      ->capture_default_str()
      ->check(greater_than_zero());
  sub->add_option("--by-length-csv", a->by_length_csv, "write the --by-length scores to this CSV file (for qkv plot)");
  sub->add_flag("--json", a->json, "print the scores as JSON");
  sub->add_option("--text", a->text, "a language model: the text file whose perplexity to measure (plain or .gz)");
  sub->add_option("--block-size", a->block,
                  "a language model: tokens per window (default: its context, at most 1024)")
      ->check(zero_or_more());
  add_image_eval_options(sub, a->image);
  add_caption_eval_options(sub, a->caption);
  sub->footer("Examples: qkv eval -m models/en-fr.safetensors --src test.en --ref test.fr --by-length\n"
              "          qkv eval -m models/fashion-mnist-nonlocal.safetensors --confusion confusion.png\n"
              "          qkv eval -m qwen.safetensors --text held-out.txt\n"
              "          qkv eval -m models/captioner.safetensors --split test --scenes 2000 --beam 3");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    // A language model: perplexity over --text.
    if (a->refs.empty() && a->models.size() == 1 &&
        models::model_file_kind(find_model(a->models[0])) == models::Kind::language_model)
      return run_lm_eval(find_model(a->models[0]), a->text, a->block, a->limit, a->seed, a->json);
    // An image classifier: accuracy on its test images (no --ref: nothing to translate).
    if (a->refs.empty() && a->models.size() == 1 &&
        models::model_file_kind(find_model(a->models[0])) == models::Kind::image_classifier) {
      a->image.limit = a->limit, a->image.seed = a->seed;
      return run_image_eval(find_model(a->models[0]), a->image, a->json);
    }
    // A captioner: BLEU-1…4, exact match and attention correctness on generated scenes.
    if (a->refs.empty() && a->models.size() == 1 && is_captioner_file(find_model(a->models[0]))) {
      if (a->limit > 0) a->caption.count = std::min(a->caption.count, a->limit);  // scenes are random draws already
      return run_caption_eval(find_model(a->models[0]), a->caption, a->decode.beam(), a->json, a->image.data_dir);
    }
    QKV_CHECK(!a->refs.empty(), "qkv eval: --ref (the reference translations) is required for a translation model");
    QKV_CHECK(!a->src.empty() || !a->hyp.empty(), "qkv eval: give --src (translate with the model) or --hyp");
    if (!a->by_length_csv.empty()) a->by_length = true;
    QKV_CHECK(a->hyp.empty() || a->src.empty() || a->group || a->by_length,
              "qkv eval: --src and --hyp together only with --group-by-source or --by-length (which read the sources "
              "of --hyp)");
    QKV_CHECK(!a->group || !a->src.empty(), "qkv eval: --group-by-source needs --src");
    QKV_CHECK(!a->by_length || !a->src.empty(), "qkv eval: --by-length needs --src (the lengths are the sources')");
    std::vector<std::vector<std::string>> refs;
    for (auto& r : a->refs) refs.push_back(text::read_lines(r, "--ref"));
    std::vector<std::string> src = a->src.empty() ? std::vector<std::string>{} : text::read_lines(a->src, "--src");
    std::vector<std::string> hyp_lines = a->hyp.empty() ? std::vector<std::string>{} : text::read_lines(a->hyp, "--hyp");
    // --limit: a sample of the lines drawn with --seed (the same lines of every file), in file order
    if (a->limit > 0) {
      const size_t n_all = a->src.empty() ? hyp_lines.size() : src.size();
      bool same = true;
      for (const auto& r : refs) same = same && r.size() == n_all;
      if (!a->hyp.empty() && !a->src.empty()) same = same && hyp_lines.size() == n_all;
      if (same && static_cast<int64_t>(n_all) > a->limit) {  // (unequal files: the check below names them)
        const std::vector<int64_t> keep = io::sample_indices(static_cast<int64_t>(n_all), a->limit, a->seed);
        for (auto& r : refs) r = io::take(r, keep);
        if (!src.empty()) src = io::take(src, keep);
        if (!hyp_lines.empty()) hyp_lines = io::take(hyp_lines, keep);
        if (!a->json)
          std::fprintf(stderr, "--limit %lld: %lld of the %zu lines, drawn with seed %llu\n",
                       static_cast<long long>(a->limit), static_cast<long long>(a->limit), n_all,
                       static_cast<unsigned long long>(a->seed));
      }
    }
    const size_t n_lines = a->src.empty() ? hyp_lines.size() : src.size();
    for (size_t i = 0; i < refs.size(); ++i)
      QKV_CHECK(refs[i].size() == n_lines, "qkv eval: ", n_lines, " ", a->src.empty() ? "translations" : "source lines",
                " but ", refs[i].size(), " lines in the reference '", a->refs[i], "'");
    QKV_CHECK(a->hyp.empty() || a->src.empty() || hyp_lines.size() == n_lines, "qkv eval: ", hyp_lines.size(),
              " lines in --hyp '", a->hyp, "' but ", n_lines, " in --src '", a->src, "'");

    // The sentences to score: every line, or the first line of each distinct source.
    const eval::SentenceGroups groups = eval::group_by_source(src, n_lines, a->group);

    std::vector<std::string> hyps;
    double seconds = 0;
    if (!a->hyp.empty()) {
      for (size_t l : groups.first_line) hyps.push_back(hyp_lines[l]);
    } else {
      std::vector<std::string> todo;
      for (size_t l : groups.first_line) todo.push_back(src[l]);
      std::vector<models::LoadedSeq2Seq> ts = load_translation_models(a->models, a->decode.requested_weights());
      decode::TranslateOptions o = a->decode.translate;
      const auto t0 = std::chrono::steady_clock::now();
      auto bar = show_progress(o);
      hyps = decode::Translator(models::models_of(ts), *ts[0].tokenizer).translate(todo, o);
      bar.reset();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!a->hyp_out.empty()) {  // one line per --src line, grouped or not
        std::string s;
        for (size_t i = 0; i < n_lines; ++i) s += hyps[groups.sentence_of[i]] + "\n";
        io::write_file_atomic(a->hyp_out, s);
      }
    }

    const eval::TranslationScores scores =
        eval::score_translations(groups, hyps, refs, src, a->by_length ? a->bucket : 0);
    const text::BleuScore& bleu = scores.bleu;
    const text::ChrfScore& chrf = scores.chrf;
    const std::vector<eval::LengthBucket>& buckets = scores.by_length;
    if (a->group && !a->json)
      std::fprintf(stderr, "%zu distinct sources on %zu lines; %.2f references each on average\n", hyps.size(), n_lines,
                   static_cast<double>(n_lines * refs.size()) / static_cast<double>(hyps.size()));
    if (!a->by_length_csv.empty()) {
      std::string csv = "length_from,length_to,source_length,sentences,bleu,chrf\n";
      for (const eval::LengthBucket& b : buckets)
        csv += detail::concat(b.from, ",", b.to, ",", b.to, ",", b.sentences, ",", b.bleu.score, ",", b.chrf.score,
                              "\n");
      io::write_file_atomic(a->by_length_csv, csv);
    }

    if (a->json) {
      nlohmann::json j = {{"bleu", bleu.score}, {"chrf", chrf.score}, {"sentences", hyps.size()},
                          {"bp", bleu.bp}, {"hyp_len", bleu.hyp_len}, {"ref_len", bleu.ref_len}};
      if (seconds > 0) j["seconds"] = seconds;
      if (a->by_length) {
        j["by_length"] = nlohmann::json::array();
        for (const eval::LengthBucket& b : buckets)
          j["by_length"].push_back({{"from", b.from}, {"to", b.to}, {"sentences", b.sentences},
                                    {"bleu", b.bleu.score}, {"chrf", b.chrf.score}, {"bp", b.bleu.bp}});
      }
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s\n%s\n", bleu.format().c_str(), chrf.format().c_str());
      if (a->by_length) {
        std::printf("\n%-14s %9s %7s %7s %6s\n", "source tokens", "sentences", "BLEU", "chrF2", "BP");
        for (const eval::LengthBucket& b : buckets)
          std::printf("%-14s %9zu %7.2f %7.2f %6.3f\n", detail::concat(b.from, "-", b.to).c_str(), b.sentences,
                      b.bleu.score, b.chrf.score, b.bleu.bp);
      }
      if (seconds > 0) std::fprintf(stderr, "%zu sentences translated in %.1f s\n", hyps.size(), seconds);
    }
    return 0;
  });
}

}  // namespace qkv::cli
