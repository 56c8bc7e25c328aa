// qkv attend — shows what a translation model attends to (seed 003: "it" attends to "cat").
// Translates one sentence, runs the model once more over (source, translation) with the weights
// kept, and writes heat maps (SVG and PNG by --format, one file per kind of attention the model has,
// a panel per layer and head):
//
//   encoder-self.svg   encoder self-attention          rows: source tokens (queries), cols: source tokens
//   decoder-self.svg   masked decoder self-attention   rows: output tokens, cols: the tokens before them
//   cross.svg          decoder → encoder attention     rows: output tokens, cols: source tokens
//   cross-mean.svg     cross-attention of the last layer, averaged over heads (the one-picture summary)
//
// A language model draws self.svg and self-mean.svg (its causal self-attention over the text); a
// masked language model (BERT) the same for its bidirectional self-attention, [CLS] and [SEP] included.
//
//   rollout.svg (encoder-rollout.svg for a translator)   attention rollout across every layer
//                (Abnar & Zuidema 2020; decode/inspect.h's attention_rollout): rows: tokens after
//                the last layer, cols: the input tokens they draw on, the residual counted
//   flow.svg (encoder-flow.svg)   attention flow (their other measure; attention_flow): each row
//                the max-flow from that token after the last layer to each input token through the
//                layers' graph, rows renormalised (at most 128 tokens: longer inputs draw none)
//
// A row is labelled with the token produced at that position (the decoder's input there is the
// token before it), so row "chat" of cross.svg shows where the model looked while writing "chat".
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "options.h"
#include "caption_commands.h"
#include "vision_commands.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/decode/inspect.h"
#include "qkv/io/file.h"
#include "qkv/models/load.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"

namespace qkv::cli {

namespace {

namespace fs = std::filesystem;

// weights [H, L, S] of each layer → one panel per (layer, head); a single attention (one layer of
// one head: a recurrent decoder's) is captioned `single` instead of "cross layer 1, head 1"
std::vector<viz::Panel> panels(const std::vector<Tensor>& per_layer, const char* name, const char* single = nullptr) {
  std::vector<viz::Panel> out;
  const bool one = single != nullptr && per_layer.size() == 1 && per_layer[0].size(0) == 1;
  for (size_t l = 0; l < per_layer.size(); ++l) {
    const Tensor& w = per_layer[l];
    const int64_t H = w.size(0), L = w.size(1), S = w.size(2);
    for (int64_t h = 0; h < H; ++h) {
      viz::Panel p;
      p.caption = one ? std::string(single)
                      : std::string(name) + " layer " + std::to_string(l + 1) + ", head " + std::to_string(h + 1);
      p.rows = static_cast<int>(L), p.cols = static_cast<int>(S);
      const float* src = w.data<float>() + h * L * S;
      p.values.assign(src, src + L * S);
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace

void add_attend(CLI::App& app) {
  auto* sub = app.add_subcommand("attend", "Translate a sentence and draw its attention weights as heat maps (SVG and PNG)");
  struct Args {
    std::string model = kDefaultTranslator, out = "attention", format = "both";
    std::vector<std::string> inputs;
    DecodeArgs decode;
    ImageAttendArgs image;
    CaptionSourceArgs caption;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("input", a->inputs,
                  "the sentence to translate; for an image classifier, picture files (or --test-images)");
  sub->add_option("-m,--model", a->model, "model file")->capture_default_str();
  sub->add_option("-o,--out", a->out, "folder for the pictures")->capture_default_str();
  sub->add_option("--format", a->format, "svg, png or both")->capture_default_str()->check(CLI::IsMember({"svg", "png", "both"}));
  add_decode_options(sub, a->decode, kBeam | kAlpha | kMaxExtra | kThreads);
  add_image_attend_options(sub, a->image);
  add_caption_source_options(sub, a->caption, /*shares_invert=*/true);
  sub->footer("Examples: qkv attend \"The cat sat on the mat because it was tired.\"\n"
              "          qkv attend -m models/fashion-mnist-nonlocal.safetensors --test-images 0,1 --grid 3\n"
              "          qkv attend -m models/captioner.safetensors scene.png   (or --scenes 0,1 --split test)");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    if (models::model_file_kind(find_model(a->model)) == models::Kind::image_classifier) {
      a->image.out = a->out, a->image.format = a->format;
      return run_image_attend(find_model(a->model), a->inputs, a->image);
    }
    a->caption.invert = a->image.source.invert;
    if (is_captioner_file(find_model(a->model)))
      return run_caption_attend(find_model(a->model), a->inputs, a->caption, a->decode.beam(), a->out, a->format);
    QKV_CHECK(a->inputs.size() == 1, "qkv attend: give one sentence (in quotes), got ", a->inputs.size(), " arguments");
    QKV_CHECK(a->image.source.test_images.empty(), "qkv attend: --test-images is for image classifiers");
    const std::string sentence = a->inputs[0];
    // A language model (qkv's GPT, a converted GPT-2 or Llama): its causal self-attention over the
    // text; a translator: its attention while translating the sentence.
    const models::Kind kind = models::model_file_kind(find_model(a->model));
    const bool lm = kind == models::Kind::language_model, mlm = kind == models::Kind::masked_language_model;
    decode::AttentionView view;
    if (mlm) {
      models::LoadedMaskedLanguageModel b = models::load_masked_language_model(find_model(a->model));
      view = decode::masked_language_model_attention(*b.model, b.tokenizer, sentence);
    } else if (lm) {
      models::LoadedLanguageModel g = models::load_language_model(find_model(a->model));
      view = decode::language_model_attention(*g.model, g.tokenizer, sentence);
    } else {
      models::LoadedSeq2Seq t = models::load_seq2seq(find_model(a->model));
      view = decode::translation_attention(*t.model, *t.tokenizer, sentence, a->decode.translate,
                                           "'" + t.path + "'");
      std::printf("%s\n", view.output.c_str());
    }

    std::error_code ec;
    fs::create_directories(a->out, ec);
    QKV_CHECK(!ec, "qkv attend: cannot create '", a->out, "': ", ec.message());
    auto write = [&](const char* file, const std::string& svg) {
      const std::string path = (fs::path(a->out) / file).string();
      if (a->format != "png") {
        io::write_file_atomic(path, svg);
        std::fprintf(stderr, "wrote %s\n", path.c_str());
      }
      if (a->format != "svg") {
        const std::string png = fs::path(path).replace_extension(".png").string();
        viz::write_picture(png, svg);
        std::fprintf(stderr, "wrote %s\n", png.c_str());
      }
    };
    // One picture per kind of attention the model has (a panel per layer and head; a model without
    // self-attention draws cross-attention only), heads per row read off the weights' shape.
    auto heads = [](const decode::AttentionKind& k) { return static_cast<int>(k.layers.front().size(0)); };
    const decode::AttentionKind* enc = view.find("encoder_self");
    const decode::AttentionKind* dec = view.find("decoder_self");
    const decode::AttentionKind* cross = view.find("cross");
    viz::HeatmapOptions ho;
    ho.cell = 18;
    if (enc && mlm) {
      ho.title = "Self-attention (bidirectional): \"" + sentence + "\"", ho.x_label = "key", ho.y_label = "query";
      write("self.svg", viz::heatmap_grid_svg(panels(enc->layers, "layer"), heads(*enc), enc->queries.tokens,
                                              enc->keys.tokens, ho));
    } else if (enc) {
      ho.title = "Encoder self-attention: \"" + sentence + "\"", ho.x_label = "key (source)", ho.y_label = "query (source)";
      write("encoder-self.svg", viz::heatmap_grid_svg(panels(enc->layers, "encoder"), heads(*enc), enc->queries.tokens,
                                                      enc->keys.tokens, ho));
    }
    if (dec && lm) {
      ho.title = "Self-attention (causal): \"" + sentence + "\"", ho.x_label = "key (text before)", ho.y_label = "query";
      write("self.svg", viz::heatmap_grid_svg(panels(dec->layers, "layer"), heads(*dec), dec->queries.tokens,
                                              dec->keys.tokens, ho));
    } else if (dec) {
      ho.title = "Decoder self-attention (masked)", ho.x_label = "key (output so far)", ho.y_label = "writing";
      write("decoder-self.svg", viz::heatmap_grid_svg(panels(dec->layers, "decoder"), heads(*dec), dec->queries.tokens,
                                                      dec->keys.tokens, ho));
    }
    if (cross) {
      ho.title = "Cross-attention: output → source", ho.x_label = "source", ho.y_label = "writing";
      write("cross.svg",
            viz::heatmap_grid_svg(panels(cross->layers, "cross", "the decoder's attention (one; no layers or heads)"),
                                  heads(*cross), cross->queries.tokens, cross->keys.tokens, ho));
    }

    // attention rollout across the layers of each self-attention kind (decode/inspect.h: Abnar &
    // Zuidema, the residual counted as half of each layer): how much of each token's last-layer
    // representation comes from each input token
    // and attention flow beside it (the max-flow through the layers; at most kMaxFlowTokens tokens)
    auto rollout = [&](const decode::AttentionKind& k, const char* file, const std::string& title, const char* x,
                       const char* y) {
      const bool flow = std::string(file).find("flow") != std::string::npos;
      if (flow && k.layers.front().size(1) > decode::kMaxFlowTokens) {
        std::fprintf(stderr, "no %s: %lld tokens, more than the %lld attention flow is computed for\n", file,
                     static_cast<long long>(k.layers.front().size(1)), static_cast<long long>(decode::kMaxFlowTokens));
        return;
      }
      const Tensor r = flow ? decode::attention_flow(k.layers) : decode::attention_rollout(k.layers);
      viz::HeatmapOptions ro;
      ro.cell = 34, ro.show_values = false, ro.title = title, ro.x_label = x, ro.y_label = y;
      write(file, viz::heatmap_svg(std::vector<float>(r.data<float>(), r.data<float>() + r.numel()),
                                   static_cast<int>(r.size(0)), static_cast<int>(r.size(1)), k.queries.tokens,
                                   k.keys.tokens, ro));
    };
    if (enc) {
      rollout(*enc, mlm ? "rollout.svg" : "encoder-rollout.svg",
              std::string(mlm ? "Attention rollout" : "Encoder attention rollout") + " over " +
                  std::to_string(enc->layers.size()) + " layers",
              mlm ? "input token" : "source token", mlm ? "token" : "source token");
      rollout(*enc, mlm ? "flow.svg" : "encoder-flow.svg",
              std::string(mlm ? "Attention flow" : "Encoder attention flow") + " through " +
                  std::to_string(enc->layers.size()) + " layers",
              mlm ? "input token" : "source token", mlm ? "token" : "source token");
    }
    if (dec && lm) {
      rollout(*dec, "rollout.svg", "Attention rollout (causal) over " + std::to_string(dec->layers.size()) + " layers",
              "input token (text before)", "token");
      rollout(*dec, "flow.svg", "Attention flow (causal) through " + std::to_string(dec->layers.size()) + " layers",
              "input token (text before)", "token");
    }

    // the summary: last layer, mean over heads; and, per output token, the source token it looks at most
    auto head_mean = [&](const Tensor& w) {
      const int64_t n = w.size(1) * w.size(2), H = w.size(0);
      std::vector<float> m(static_cast<size_t>(n), 0.f);
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t i = 0; i < n; ++i) m[static_cast<size_t>(i)] += w.data<float>()[hh * n + i] / static_cast<float>(H);
      return m;
    };
    auto strongest = [](const std::vector<float>& m, int64_t rows, int64_t cols, const std::vector<std::string>& rl,
                        const std::vector<std::string>& cl, bool skip_self) {
      std::string s;
      for (int64_t i = 0; i < rows; ++i) {
        const float* row = m.data() + i * cols;
        int64_t j = -1;
        for (int64_t k = 0; k < cols; ++k)
          if (!(skip_self && k == i) && (j < 0 || row[k] > row[j])) j = k;
        s += "  " + rl[static_cast<size_t>(i)] + " → " + cl[static_cast<size_t>(j)] + " (" +
             std::to_string(static_cast<int>(row[j] * 100 + 0.5f)) + "%)\n";
      }
      return s;
    };
    if (mlm || lm) {  // the seed's question: which token each token looks at most (last layer, mean over heads)
      const decode::AttentionKind* self = mlm ? enc : dec;  // a BERT's bidirectional self-attention, or an LM's causal one
      const std::vector<std::string>& labels = self->keys.tokens;
      const int64_t T = self->layers.back().size(2);
      std::vector<float> m = head_mean(self->layers.back());
      viz::HeatmapOptions mo;
      mo.cell = 34, mo.show_values = false, mo.title = "Self-attention, last layer, mean over heads";
      mo.x_label = mlm ? "key" : "key (text before)", mo.y_label = "query";
      write("self-mean.svg", viz::heatmap_svg(m, static_cast<int>(T), static_cast<int>(T), labels, labels, mo));
      std::fprintf(stderr, "self-attention, last layer, mean over heads: the %s token each token looks at most:\n%s",
                   mlm ? "other" : "earlier", strongest(m, T, T, labels, labels, mlm).c_str());
      return 0;
    }
    const std::vector<std::string>& src_labels = cross->keys.tokens;
    const std::vector<std::string>& out_labels = cross->queries.tokens;
    const int64_t S = cross->layers.back().size(2), L = cross->layers.back().size(1);
    if (enc) {
      std::vector<float> e = head_mean(enc->layers.back());
      std::fprintf(stderr, "encoder self-attention, last layer, mean over heads: each source token's strongest other "
                   "source token:\n%s", strongest(e, S, S, src_labels, src_labels, true).c_str());
    }
    std::vector<float> mean = head_mean(cross->layers.back());
    viz::HeatmapOptions mo;
    mo.cell = 34, mo.show_values = false;
    // one layer with one head (a recurrent model's attention): the alignment of Bahdanau et al.
    const bool alignment = cross->layers.size() == 1 && cross->layers.back().size(0) == 1;
    mo.title = alignment ? "Alignment: the decoder's attention over the source"
                         : "Cross-attention, last layer, mean over heads";
    mo.x_label = "source", mo.y_label = "writing";
    write("cross-mean.svg", viz::heatmap_svg(mean, static_cast<int>(L), static_cast<int>(S), out_labels, src_labels, mo));
    std::fprintf(stderr, "%s: the source token each output token looks at most:\n%s",
                 alignment ? "the decoder's attention (one; no layers or heads)"
                           : "cross-attention, last layer, mean over heads",
                 strongest(mean, L, S, out_labels, src_labels, false).c_str());
    return 0;
  });
}

}  // namespace qkv::cli
