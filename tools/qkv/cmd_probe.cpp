// qkv probe — the coreference probe (issue 50): which heads resolve pronouns. Every layer and head
// of every kind of attention each model has is scored on Winograd-style pairs ("The trophy doesn't
// fit in the suitcase because it is too big / small."): an item counts as right for a head when the
// pronoun attends more to its antecedent than to the other candidate (decode/inspect.h's
// coreference_probe, over the same views as `qkv attend` and /v1/attention; rank_heads' word
// weight). The pairs swap the answer, so a head that always looks at the same noun scores 50%.
// Prints one Markdown table per model, best heads first; with several models, then one table of
// every head of every model ranked together (issue 50's "head search across models").
//
//   qkv probe -m models/en-fr.safetensors -m models/shakespeare-char.safetensors [--items pairs.tsv] [--top 10]
#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/decode/inspect.h"
#include "qkv/io/file.h"
#include "qkv/models/load.h"

namespace qkv::cli {

// A probe set is sentences: 16 MiB is far past any (the built-in one is 2 KB); /dev/zero stops there.
constexpr int64_t kMaxItemsBytes = int64_t{16} << 20;

void add_probe(CLI::App& app) {
  auto* sub = app.add_subcommand("probe", "Score every attention head on Winograd-style pronoun pairs (the coreference probe)");
  struct Args {
    std::vector<std::string> models = {kDefaultTranslator};
    std::string items;
    int top = 10;
    DecodeArgs decode;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("-m,--model", a->models, "model files (a translator, a language model, a BERT); each gets its table")
      ->capture_default_str();
  sub->add_option("--items", a->items,
                  "tab-separated lines: text, pronoun, antecedent, other candidate (default: the built-in 14 pairs)");
  sub->add_option("--top", a->top, "heads shown per model, and in the table across models (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  add_decode_options(sub, a->decode, kBeam | kAlpha | kThreads);
  sub->footer("Example: qkv probe -m models/en-fr.safetensors -m models/shakespeare-char.safetensors --top 5");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    const std::vector<decode::CoreferenceItem> items =
        a->items.empty() ? decode::winograd_pairs() : decode::parse_coreference_items(io::read_file(a->items, kMaxItemsBytes, "qkv probe --items"));
    QKV_CHECK(!items.empty(), "qkv probe: '", a->items, "' has no items");
    struct ModelScore {
      std::string model;
      decode::CoreferenceScore score;
    };
    std::vector<ModelScore> every;  // every model's heads, for the table across models
    for (const std::string& name : a->models) {
      const std::string path = find_model(name);
      const models::Kind kind = models::model_file_kind(path);
      std::vector<decode::AttentionView> views;
      std::vector<decode::CoreferenceItem> kept;  // the items the model takes (a short context skips long ones)
      std::string skipped;
      auto each = [&](auto&& view_of) {
        for (const auto& it : items) {
          try {
            views.push_back(view_of(it.text));
            kept.push_back(it);
          } catch (const Error& e) {
            if (skipped.empty()) skipped = e.what();
          }
        }
      };
      const char* what = "";
      if (kind == models::Kind::masked_language_model) {
        models::LoadedMaskedLanguageModel b = models::load_masked_language_model(path);
        each([&](const std::string& t) { return decode::masked_language_model_attention(*b.model, b.tokenizer, t); });
        what = "masked language model";
      } else if (kind == models::Kind::language_model) {
        models::LoadedLanguageModel g = models::load_language_model(path);
        each([&](const std::string& t) { return decode::language_model_attention(*g.model, g.tokenizer, t); });
        what = "language model";
      } else if (kind == models::Kind::seq2seq) {
        models::LoadedSeq2Seq t = models::load_seq2seq(path);
        each([&](const std::string& s) {
          return decode::translation_attention(*t.model, *t.tokenizer, s, a->decode.translate, "'" + t.path + "'");
        });
        what = "translator";
      } else {
        throw Error("qkv probe: '" + path + "' is not a translator, a language model or a BERT");
      }
      QKV_CHECK(!kept.empty(), "qkv probe: '", path, "' took none of the items: ", skipped);
      const std::vector<decode::CoreferenceScore> scores = decode::coreference_probe(kept, views);
      for (const decode::CoreferenceScore& s : scores) every.push_back({path, s});
      int scored = 0;  // items whose three words some kind of attention has
      for (size_t i = 0; i < kept.size(); ++i) {
        const auto r = decode::rank_heads(views[i], kept[i].pronoun, kept[i].antecedent);
        const auto w = decode::rank_heads(views[i], kept[i].pronoun, kept[i].other);
        scored += !r.empty() && !w.empty();
      }
      std::printf("### %s (%s): %d of %zu items scored, %zu heads; chance is 50%%\n\n", path.c_str(), what, scored,
                  items.size(), scores.size());
      if (scores.empty())  // (a recurrent translator: its one alignment's queries are the translation's words)
        std::printf("No kind of attention of this model has a pronoun among its queries and both candidates among its keys.\n\n");
      else
        std::printf("| rank | attention | layer | head | right | accuracy | weight on the antecedent | on the other |\n");
      if (!scores.empty()) std::printf("|---:|---|---:|---:|---:|---:|---:|---:|\n");
      const size_t n = a->top == 0 ? scores.size() : std::min(scores.size(), static_cast<size_t>(a->top));
      for (size_t i = 0; i < n; ++i) {
        const decode::CoreferenceScore& s = scores[i];
        std::printf("| %zu | %s | %lld | %lld | %d/%d | %.1f%% | %.3f | %.3f |\n", i + 1, s.kind.c_str(),
                    static_cast<long long>(s.layer + 1), static_cast<long long>(s.head + 1), s.right, s.items,
                    100 * s.accuracy(), s.antecedent, s.other);
      }
      if (kept.size() < items.size())
        std::printf("(%zu items skipped: the model does not take them; the first: %s)\n", items.size() - kept.size(),
                    skipped.c_str());
      std::printf("\n");
    }
    if (a->models.size() < 2) return 0;
    // every head of every model in one ranking: by accuracy, then the mean margin (antecedent −
    // other), as each model's table; ties keep the models' order, then each table's
    std::stable_sort(every.begin(), every.end(), [](const ModelScore& x, const ModelScore& y) {
      if (x.score.accuracy() != y.score.accuracy()) return x.score.accuracy() > y.score.accuracy();
      return x.score.antecedent - x.score.other > y.score.antecedent - y.score.other;
    });
    std::printf("### Every head of every model, ranked together: %zu heads in %zu models\n\n", every.size(),
                a->models.size());
    if (every.empty()) {
      std::printf("No model has a kind of attention with a pronoun among its queries and both candidates among its keys.\n");
      return 0;
    }
    std::printf("| rank | model | attention | layer | head | right | accuracy | weight on the antecedent | on the other |\n");
    std::printf("|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
    const size_t n = a->top == 0 ? every.size() : std::min(every.size(), static_cast<size_t>(a->top));
    for (size_t i = 0; i < n; ++i) {
      const decode::CoreferenceScore& s = every[i].score;
      std::printf("| %zu | %s | %s | %lld | %lld | %d/%d | %.1f%% | %.3f | %.3f |\n", i + 1, every[i].model.c_str(),
                  s.kind.c_str(), static_cast<long long>(s.layer + 1), static_cast<long long>(s.head + 1), s.right,
                  s.items, 100 * s.accuracy(), s.antecedent, s.other);
    }
    return 0;
  });
}

}  // namespace qkv::cli
