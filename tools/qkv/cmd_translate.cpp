// qkv translate — translates text with a trained encoder–decoder Transformer (a model.safetensors
// written by `qkv train` on a "translation" config; the default is the shipped English→French
// model). Sentences come from the command line, a file, or stdin (one per line) and go to stdout
// (or --output, written atomically), one translation per line, in order. Beam search with the
// paper's length penalty by default; --beam 1 is greedy.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "commands.h"
#include "options.h"
#include "translation_models.h"
#include "qkv/core/allocator.h"
#include "qkv/core/error.h"
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
#include "qkv/text/parallel_corpus.h"

namespace qkv::cli {

void add_translate(CLI::App& app) {
  auto* sub = app.add_subcommand("translate", "Translate sentences with a trained Transformer (stdin → stdout)");
  struct Args {
    std::string input, output;
    std::vector<std::string> models = {kDefaultTranslator}, text;
    DecodeArgs decode;
    bool stats = false, scores = false, nbest = false;
    std::string device = "cpu";
  };
  auto a = std::make_shared<Args>();
  sub->add_option("text", a->text, "sentences to translate (default: read lines from --input or stdin)");
  sub->add_option("-m,--model", a->models,
                 "model file (model.safetensors from qkv train); repeat to translate with an ensemble of "
                 "models sharing one vocabulary (the mean of their probabilities)")
      ->capture_default_str()
      ->allow_extra_args(false);  // one file per -m, so `-m a -m b "text"` leaves the text alone
  sub->add_option("-i,--input", a->input, "read sentences from this file (plain or .gz), one per line");
  sub->add_option("-o,--output", a->output, "write translations to this file (default: stdout)");
  add_decode_options(sub, a->decode);
  sub->add_flag("--scores", a->scores, "print each translation's log-probability and score after a tab");
  sub->add_flag("--n-best", a->nbest,
                "print every finished hypothesis of the beam, best first, as `LINE ||| translation ||| F0= "
                "log-probability ||| score` (Marian's and Moses' n-best format; LINE counts from 0)");
  sub->add_flag("--stats", a->stats, "print sentences/s, tokens/s and the peak resident memory to stderr");
  add_device_option(sub, a->device, "translate (a GPU: the weights --dtype names, f32 or bf16)");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    const Device device = device_from(a->device, "translate");
    std::vector<models::LoadedSeq2Seq> ts = load_translation_models(a->models, a->decode.requested_weights(), device);
    decode::Translator tr(models::models_of(ts), *ts[0].tokenizer);
    decode::TranslateOptions o = a->decode.translate;
    o.num_hypotheses = a->nbest ? 0 : 1;  // the whole beam's list, or the best alone (a sentence stops once settled)

    std::string out;
    auto emit = [&](const std::vector<std::string>& lines, const std::vector<decode::Hypothesis>& h) {
      for (size_t i = 0; i < lines.size(); ++i) {
        std::string l = lines[i];
        if (a->scores) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "\t%.4f\t%.4f", h[i].log_prob, h[i].score);
          l += buf;
        }
        if (a->output.empty()) std::printf("%s\n", l.c_str());
        else out += l + "\n";
      }
      std::fflush(stdout);
    };
    // Marian's n-best lines: "i ||| text ||| F0= log p ||| score"; an empty line gets one empty entry.
    int64_t line_no = 0;
    auto emit_nbest = [&](const std::vector<std::vector<decode::Hypothesis>>& nb) {
      for (const auto& list : nb) {
        const std::vector<decode::Hypothesis> one{decode::Hypothesis{}};
        for (const auto& h : list.empty() ? one : list) {
          char buf[96];
          std::snprintf(buf, sizeof buf, " ||| F0= %.4f ||| %.4f", h.log_prob, h.score);
          const std::string l = std::to_string(line_no) + " ||| " + tr.decode(h.tokens) + buf;
          if (a->output.empty()) std::printf("%s\n", l.c_str());
          else out += l + "\n";
        }
        ++line_no;
      }
      std::fflush(stdout);
    };
    const bool interactive = a->text.empty() && a->input.empty() && isatty(STDIN_FILENO);
    std::vector<decode::Hypothesis> hyps;
    if (interactive) {  // a person typing: translate each line as it comes
      std::fprintf(stderr, "qkv translate: type a sentence and press Enter (Ctrl-D ends)\n");
      std::string line;
      while (std::getline(std::cin, line)) {
        if (a->nbest) emit_nbest(tr.translate_nbest({line}, o));
        else emit(tr.translate({line}, o, &hyps), hyps);
      }
      return 0;
    }
    std::vector<std::string> lines = a->text;
    if (!a->input.empty()) lines = text::read_lines(a->input, "--input");
    else if (a->text.empty())
      for (std::string line; std::getline(std::cin, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.push_back(line);
      }
    const auto t0 = std::chrono::steady_clock::now();
    auto bar = show_progress(o);
    std::vector<std::vector<decode::Hypothesis>> nbest = tr.translate_nbest(lines, o);
    bar.reset();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a->nbest) {
      emit_nbest(nbest);
    } else {
      std::vector<std::string> res(lines.size());
      hyps.assign(lines.size(), decode::Hypothesis{});
      for (size_t i = 0; i < lines.size(); ++i)
        if (!nbest[i].empty()) res[i] = tr.decode(nbest[i].front().tokens), hyps[i] = nbest[i].front();
      emit(res, hyps);
    }
    if (!a->output.empty()) io::write_file_atomic(a->output, out);
    if (a->stats) {
      int64_t tokens = 0;
      for (auto& list : nbest)
        if (!list.empty()) tokens += static_cast<int64_t>(list[0].tokens.size()) + (list[0].finished ? 1 : 0);
      std::fprintf(stderr, "translated %zu sentences (%lld target tokens) in %.2f s: %.1f sentences/s, %.0f tokens/s "
                   "(beam %lld, %s, %s weights); peak RSS %.0f MiB (tensors at most %.0f MiB; %.0f MiB of free "
                   "blocks cached at the end)\n", lines.size(), static_cast<long long>(tokens), dt,
                   static_cast<double>(lines.size()) / dt, static_cast<double>(tokens) / dt,
                   static_cast<long long>(a->decode.beam()), a->decode.use_cache() ? "KV cache" : "no cache",
                   std::string(enum_name(models::decoding_weights(find_model(a->models[0]), {a->decode.requested_weights(), device}))).c_str(), peak_rss_mib(),
                   static_cast<double>(peak_allocated_bytes()) / (1 << 20),
                   static_cast<double>(cached_bytes()) / (1 << 20));
    }
    return 0;
  });
}

}  // namespace qkv::cli
