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
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
#include "qkv/models/load.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"

namespace qkv::cli {

namespace {

namespace fs = std::filesystem;

// "▁cat" → "cat", "</s>" stays: SentencePiece marks a word start with U+2581.
std::string label(const text::SentencePiece& sp, int id) {
  std::string p = sp.id_to_piece(id);
  if (p.rfind("\xE2\x96\x81", 0) == 0) p = p.substr(3);
  return p.empty() ? "▁" : p;
}

// weights [1, H, L, S] of each layer → one panel per (layer, head)
std::vector<viz::Panel> panels(const std::vector<Tensor>& per_layer, const char* name) {
  std::vector<viz::Panel> out;
  for (size_t l = 0; l < per_layer.size(); ++l) {
    Tensor w = per_layer[l].contiguous();
    const int64_t H = w.size(1), L = w.size(2), S = w.size(3);
    for (int64_t h = 0; h < H; ++h) {
      viz::Panel p;
      p.caption = std::string(name) + " layer " + std::to_string(l + 1) + ", head " + std::to_string(h + 1);
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
    use_threads(a->decode.threads);
    if (models::model_file_kind(find_model(a->model)) == models::Kind::image_classifier) {
      a->image.out = a->out, a->image.format = a->format;
      return run_image_attend(find_model(a->model), a->inputs, a->image);
    }
    a->caption.invert = a->image.source.invert;
    if (is_captioner_file(find_model(a->model)))
      return run_caption_attend(find_model(a->model), a->inputs, a->caption, a->decode.beam, a->out, a->format);
    QKV_CHECK(a->inputs.size() == 1, "qkv attend: give one sentence (in quotes), got ", a->inputs.size(), " arguments");
    QKV_CHECK(a->image.source.test_images.empty(), "qkv attend: --test-images is for image classifiers");
    const std::string sentence = a->inputs[0];
    models::LoadedSeq2Seq t = models::load_seq2seq(find_model(a->model));
    const models::SpecialTokens c = t.model->special_tokens();
    decode::Translator tr(*t.model, *t.tokenizer);
    std::vector<int32_t> src = tr.encode(sentence);
    QKV_CHECK(!src.empty(), "qkv attend: the sentence is empty");
    decode::Hypothesis h = decode::translate_ids(*t.model, {src}, a->decode.translate_options())[0];
    std::printf("%s\n", tr.decode(h.tokens).c_str());

    // once more with the weights kept: source + EOS, BOS + translation → translation + EOS
    src.push_back(c.eos);
    std::vector<int32_t> tgt_in{c.bos}, tgt_out = h.tokens;
    tgt_in.insert(tgt_in.end(), h.tokens.begin(), h.tokens.end());
    tgt_out.push_back(c.eos);
    if (!h.finished) tgt_in.pop_back(), tgt_out.pop_back();  // stopped at max length: no EOS to show
    nn::AttentionMaps maps;
    {
      NoGradGuard no_grad;
      t.model->forward(Tensor::from_ints(src, {1, static_cast<int64_t>(src.size())}),
                       Tensor::from_ints(tgt_in, {1, static_cast<int64_t>(tgt_in.size())}), &maps);
    }
    std::vector<std::string> src_labels, out_labels;
    for (int id : src) src_labels.push_back(label(*t.tokenizer, id));
    for (int id : tgt_out) out_labels.push_back(label(*t.tokenizer, id));

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
    auto heads = [](const std::vector<Tensor>& layers) { return static_cast<int>(layers.front().size(1)); };
    QKV_CHECK(!maps.cross.empty(), "qkv attend: the model returned no cross-attention weights");
    viz::HeatmapOptions ho;
    ho.cell = 18;
    if (!maps.encoder_self.empty()) {
      ho.title = "Encoder self-attention: \"" + sentence + "\"", ho.x_label = "key (source)", ho.y_label = "query (source)";
      write("encoder-self.svg", viz::heatmap_grid_svg(panels(maps.encoder_self, "encoder"), heads(maps.encoder_self),
                                                      src_labels, src_labels, ho));
    }
    std::vector<std::string> in_labels;
    for (int id : tgt_in) in_labels.push_back(id == c.bos ? "<s>" : label(*t.tokenizer, id));
    if (!maps.decoder_self.empty()) {
      ho.title = "Decoder self-attention (masked)", ho.x_label = "key (output so far)", ho.y_label = "writing";
      write("decoder-self.svg", viz::heatmap_grid_svg(panels(maps.decoder_self, "decoder"), heads(maps.decoder_self),
                                                      out_labels, in_labels, ho));
    }
    ho.title = "Cross-attention: output → source", ho.x_label = "source", ho.y_label = "writing";
    write("cross.svg", viz::heatmap_grid_svg(panels(maps.cross, "cross"), heads(maps.cross), out_labels, src_labels, ho));

    // the summary: last layer, mean over heads; and, per output token, the source token it looks at most
    auto head_mean = [&](const Tensor& w) {
      Tensor c = w.contiguous();
      const int64_t n = c.size(2) * c.size(3), H = c.size(1);
      std::vector<float> m(static_cast<size_t>(n), 0.f);
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t i = 0; i < n; ++i) m[static_cast<size_t>(i)] += c.data<float>()[hh * n + i] / static_cast<float>(H);
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
    const int64_t S = maps.cross.back().size(3), L = maps.cross.back().size(2);
    if (!maps.encoder_self.empty()) {
      std::vector<float> enc = head_mean(maps.encoder_self.back());
      std::fprintf(stderr, "encoder self-attention, last layer, mean over heads: each source token's strongest other "
                   "source token:\n%s", strongest(enc, S, S, src_labels, src_labels, true).c_str());
    }
    std::vector<float> mean = head_mean(maps.cross.back());
    viz::HeatmapOptions mo;
    mo.cell = 34, mo.show_values = false;
    // one layer with one head (a recurrent model's attention): the alignment of Bahdanau et al.
    const bool alignment = maps.cross.size() == 1 && maps.cross.back().size(1) == 1;
    mo.title = alignment ? "Alignment: the decoder's attention over the source"
                         : "Cross-attention, last layer, mean over heads";
    mo.x_label = "source", mo.y_label = "writing";
    write("cross-mean.svg", viz::heatmap_svg(mean, static_cast<int>(L), static_cast<int>(S), out_labels, src_labels, mo));
    std::fprintf(stderr, "cross-attention, last layer, mean over heads: the source token each output token looks at "
                 "most:\n%s", strongest(mean, L, S, out_labels, src_labels, false).c_str());
    return 0;
  });
}

}  // namespace qkv::cli
