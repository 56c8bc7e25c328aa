// qkv caption — describes pictures in words with a captioner (issue 24; seed 004's "Image
// Captioning with RNNs and Attention"): a ConvNet grid, a GRU decoder that attends over it, greedy
// or beam search. Pictures are image files of the size the model was trained on (96×96 grey scenes
// by default; `qkv scenes` makes some), or generated scenes by index (--scenes), which also print
// the scene's own caption.
//
// Also here: what `qkv eval` and `qkv attend` do with a captioner (caption_commands.h).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "caption_commands.h"
#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/decode/caption.h"
#include "qkv/io/file.h"
#include "qkv/io/progress.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/train/caption_task.h"
#include "qkv/vision/image.h"
#include "qkv/vision/overlay.h"
#include "qkv/vision/scenes.h"
#include "qkv/viz/image_attention.h"
#include "qkv/viz/png.h"

namespace qkv::cli {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_captioner_file(const std::string& path) {
  // the registry knows from the type name alone; the tensors are not read (the command loads them once)
  const models::ModelType& t = models::model_file_type(path);
  return t.kind == models::Kind::image_to_text;
}

void add_caption_source_options(CLI::App* sub, CaptionSourceArgs& a, bool shares_invert) {
  sub->add_option("--scenes", a.scenes, "generated scenes by index instead of files, e.g. --scenes 0,1,2")
      ->delimiter(',')
      ->check(zero_or_more());
  sub->add_option("--split", a.split, "the split --scenes come from (val and test join unseen class pairs)")
      ->capture_default_str()
      ->check(CLI::IsMember({"train", "val", "test"}));
  sub->add_flag("--resize", a.resize, "resize image files to the model's input size (default: a wrong size is an error)");
  if (!shares_invert) sub->add_flag("--invert", a.invert, "dark objects on a light ground: invert the grey levels first");
  sub->add_option("--fashion-mnist", a.data_dir, "folder with Fashion-MNIST's IDX files (for --scenes)")
      ->capture_default_str();
}

void add_caption_eval_options(CLI::App* sub, CaptionEvalArgs& a) {
  sub->add_option("--split", a.split, "captioner: the scene split to score (val, test)")
      ->capture_default_str()
      ->check(CLI::IsMember({"train", "val", "test"}));
  sub->add_option("--first", a.first, "captioner: the first scene")->capture_default_str()->check(zero_or_more());
  sub->add_option("--scenes", a.count, "captioner: how many scenes")->capture_default_str()->check(between(1, 1000000));
  sub->add_option("--captions-out", a.captions_out, "captioner: write every scene's caption and reference (TSV)");
}

namespace {

// The model, its scenes (when asked for), and the pictures to caption.
struct Loaded {
  models::LoadedSeq2Seq m;
  vision::ImageSet train_items, test_items;
  std::unique_ptr<vision::SceneGenerator> scenes;

  explicit Loaded(const std::string& path) : m(models::load_image_to_text(path)) {
    QKV_CHECK(m.model->source_image().height > 0, "'", path, "' holds a ", m.model->type(),
              " model, which translates text; qkv caption needs a captioner");
  }
  void make_scenes(const std::string& data_dir) {
    train_items = vision::load_fashion_mnist(data_dir, "train");
    test_items = vision::load_fashion_mnist(data_dir, "test");
    scenes = std::make_unique<vision::SceneGenerator>(train_items, test_items, train::scene_options_of(m.meta));
  }
};

struct Picture {
  std::string name;
  vision::Image image;
  std::optional<vision::Scene> scene;
};

std::vector<Picture> read_pictures(Loaded& l, const std::vector<std::string>& files, const CaptionSourceArgs& a) {
  const models::ImageShape s = l.m.model->source_image();
  std::vector<Picture> out;
  for (const std::string& f : files) {
    vision::ReadImageOptions o;
    o.channels = s.channels, o.invert = a.invert;
    if (a.resize) o.height = s.height, o.width = s.width;
    Picture p{f, vision::read_image(f, o), std::nullopt};
    QKV_CHECK(p.image.height == s.height && p.image.width == s.width, "'", f, "': a ", p.image.width, "×",
              p.image.height, " picture; the captioner takes ", s.width, "×", s.height,
              " (qkv scenes makes such pictures; --resize scales it)");
    out.push_back(std::move(p));
  }
  if (!a.scenes.empty()) {
    l.make_scenes(a.data_dir);
    QKV_CHECK(l.scenes->canvas_size() == s.height && l.scenes->canvas_size() == s.width && s.channels == 1,
              "the model's scenes are ", l.scenes->canvas_size(), " px, its input ", s.width, "×", s.height);
    for (int64_t i : a.scenes) {
      Picture p;
      p.name = a.split + "-" + std::to_string(i);
      p.scene = l.scenes->generate(vision::scene_split_from_name(a.split), i);
      p.image.height = p.scene->height, p.image.width = p.scene->width;
      for (uint8_t v : p.scene->pixels) p.image.pixels.push_back(static_cast<float>(v) / 255.f);
      out.push_back(std::move(p));
    }
  }
  QKV_CHECK(!out.empty(), "no pictures: give image files or --scenes");
  return out;
}

std::vector<decode::Caption> caption_all(const Loaded& l, const std::vector<Picture>& pics, int64_t beam,
                                         bool attention) {
  const models::ImageShape s = l.m.model->source_image();
  const auto N = static_cast<int64_t>(pics.size());
  Tensor x = Tensor::empty({N, s.channels, s.height, s.width});
  float* p = x.data<float>();
  for (const Picture& pic : pics) p = std::copy(pic.image.pixels.begin(), pic.image.pixels.end(), p);
  decode::CaptionOptions o;
  o.beam_size = beam, o.attention = attention;
  return decode::ImageCaptioner(*l.m.model, *l.m.tokenizer).caption(x, o);
}

}  // namespace

void add_caption(CLI::App& app) {
  auto* sub = app.add_subcommand("caption", "Describe pictures in words with an image captioner (attention over a ConvNet grid)");
  struct Args {
    std::string model = kDefaultCaptioner;
    std::vector<std::string> files;
    CaptionSourceArgs source;
    int64_t beam = 3;
    bool json = false;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("images", a->files, "picture files (PNG, JPEG, …) of the model's size");
  sub->add_option("-m,--model", a->model, "captioner model file")->capture_default_str();
  sub->add_option("-b,--beam", a->beam, "beam size (1 = greedy search)")->capture_default_str()->check(between(1, 64));
  add_caption_source_options(sub, a->source);
  sub->add_flag("--json", a->json, "one JSON object per picture");
  add_threads_option(sub, a->threads);
  sub->footer("Examples: qkv scenes --split test -n 4 -o scenes/ && qkv caption scenes/test-0.png\n"
              "          qkv caption --scenes 0,1,2 --split test   (generated scenes, with their own captions)");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->threads);
    Loaded l(find_model(a->model));
    const std::vector<Picture> pics = read_pictures(l, a->files, a->source);
    const std::vector<decode::Caption> caps = caption_all(l, pics, a->beam, false);
    for (size_t i = 0; i < pics.size(); ++i) {
      const std::string ref = pics[i].scene ? pics[i].scene->caption() : "";
      if (a->json) {
        json j = {{"image", pics[i].name}, {"caption", caps[i].text}, {"log_prob", caps[i].hypothesis.log_prob}};
        if (pics[i].scene) j["reference"] = ref;
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%s\t%s\n", pics[i].name.c_str(), caps[i].text.c_str());
        if (pics[i].scene) std::printf("%*s\t(scene: %s)\n", static_cast<int>(pics[i].name.size()), "", ref.c_str());
      }
    }
    return 0;
  });
}

int run_caption_eval(const std::string& model_path, const CaptionEvalArgs& a, int64_t beam, bool as_json,
                     const std::string& data_dir) {
  Loaded l(model_path);
  l.make_scenes(data_dir);
  decode::CaptionOptions o;
  o.beam_size = beam;
  const vision::SceneSplit split = vision::scene_split_from_name(a.split);
  io::ProgressBar bar("caption", a.count, 0, /*delay_seconds=*/2);  // scenes (29 s per 200 on a busy core)
  o.on_batch = [&bar](int64_t done, int64_t) { bar.update(done - bar.n()); };
  const eval::CaptionScores s =
      eval::score_captions(decode::ImageCaptioner(*l.m.model, *l.m.tokenizer), *l.scenes, split, a.first, a.count, o);
  bar.close();
  if (!a.captions_out.empty()) {
    std::string tsv = "index\tcaption\treference\n";
    for (int64_t i = 0; i < a.count; ++i)
      tsv += detail::concat(a.first + i, "\t", s.captions[static_cast<size_t>(i)].text, "\t",
                            l.scenes->generate(split, a.first + i).caption(), "\n");
    io::write_file_atomic(a.captions_out, tsv);
  }
  if (as_json) {
    json j = {{"split", a.split},       {"scenes", s.scenes},     {"beam", beam},
              {"bleu1", s.bleu.bleu_n(1)}, {"bleu2", s.bleu.bleu_n(2)}, {"bleu3", s.bleu.bleu_n(3)},
              {"bleu4", s.bleu.bleu_n(4)}, {"exact", s.exact}};
    if (s.has_attention) {
      j.update({{"attention_in_box", s.attention_in_box},
                {"uniform_in_box", s.uniform_in_box},
                {"named_words", s.named_words},
                {"unseen_words", s.unseen_words}});
      // the same words' attention at the step before and after, and the best step of their phrase
      auto steps = [](const eval::CaptionScores::ByStep& b) {
        return json{{"words", b.words}, {"before", b.before}, {"own", b.own}, {"after", b.after}, {"phrase", b.phrase}};
      };
      j["attention_by_step"] = steps(s.by_step);
      json by_class = json::object();
      for (size_t k = 0; k < s.by_class.size(); ++k)
        if (s.by_class[k].words) by_class[vision::scene_class_words()[k]] = steps(s.by_class[k]);
      j["attention_by_step_per_class"] = by_class;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%lld %s scenes, beam %lld\n%s\nBLEU-1 %.2f  BLEU-2 %.2f  BLEU-3 %.2f  BLEU-4 %.2f\nexact match %.2f%%\n",
                static_cast<long long>(s.scenes), a.split.c_str(), static_cast<long long>(beam), s.bleu.format().c_str(),
                s.bleu.bleu_n(1), s.bleu.bleu_n(2), s.bleu.bleu_n(3), s.bleu.bleu_n(4), 100 * s.exact);
    if (s.has_attention)
      std::printf("attention on the named item: %.3f of the mass inside its box (uniform attention: %.3f), over %lld "
                  "class words; %lld class words named an item not in the scene\n",
                  s.attention_in_box, s.uniform_in_box, static_cast<long long>(s.named_words),
                  static_cast<long long>(s.unseen_words));
    if (s.has_attention && s.by_step.words)
      std::printf("  the same words at the step before: %.3f, after: %.3f; the best step of their noun phrase "
                  "(\"a\", \"a pair of\"): %.3f\n",
                  s.by_step.before, s.by_step.after, s.by_step.phrase);
    if (!s.has_attention)
      std::printf("no attention (a mean-feature decoder): no attention correctness to measure\n");
  }
  return 0;
}

int run_caption_attend(const std::string& model_path, const std::vector<std::string>& files,
                       const CaptionSourceArgs& source, int64_t beam, const std::string& out_dir,
                       const std::string& format) {
  Loaded l(model_path);
  const std::vector<Picture> pics = read_pictures(l, files, source);
  const std::vector<decode::Caption> caps = caption_all(l, pics, beam, true);
  QKV_CHECK(!caps.empty() && !caps[0].attention.empty(), "qkv attend: '", model_path,
            "' has no attention (a mean-feature captioner): nothing to draw");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  QKV_CHECK(!ec, "qkv attend: cannot create '", out_dir, "': ", ec.message());
  for (size_t i = 0; i < pics.size(); ++i) {
    const Picture& pic = pics[i];
    const decode::Caption& c = caps[i];
    std::printf("%s\t%s\n", pic.name.c_str(), c.text.c_str());
    // the panels: the picture with its caption, then one per step (each word, then the end)
    std::vector<viz::ImageAttentionPanel> smooth, grid;
    const std::string plain = vision::encode_png(pic.image);  // the grid's panels: the picture once, as PNG
    viz::ImageAttentionPanel first;
    first.caption = "\"" + c.text + "\"";
    first.image = pic.image.pixels, first.height = static_cast<int>(pic.image.height);
    first.width = static_cast<int>(pic.image.width), first.show_query = false;
    smooth.push_back(first), grid.push_back(first);
    for (size_t t = 0; t < c.attention.size(); ++t) {
      const std::string word = t < c.words.size() ? c.words[t] : "<end>";
      viz::ImageAttentionPanel p;
      p.caption = word, p.height = first.height, p.width = first.width, p.show_query = false;
      // the item this step's word helps name: its own class word, or for "a", "pair", "of" the class
      // word that ends their noun phrase (the model may look at the item while writing those)
      int32_t k = eval::class_of_word(word);
      std::string named = word;
      for (size_t u = t + 1; k < 0 && t < c.words.size() && u < std::min(c.words.size(), t + 4); ++u)
        if (eval::class_of_word(c.words[u]) >= 0) {
          if (eval::noun_phrase_start(c.words, u) <= t) k = eval::class_of_word(c.words[u]), named = c.words[u];
          break;
        }
      std::string share;
      if (pic.scene && k >= 0) {
        std::vector<vision::Box> boxes;
        for (const vision::SceneItem& it : pic.scene->items)
          if (it.label == k) {
            boxes.push_back(it.box);
            p.boxes.push_back({static_cast<float>(it.box.x0), static_cast<float>(it.box.y0),
                               static_cast<float>(it.box.x1), static_cast<float>(it.box.y1)});
          }
        if (!boxes.empty()) {
          const double m = eval::mass_in_boxes(c.attention[t], c.rows, c.cols, pic.image.height, pic.image.width, boxes);
          if (named == word) {
            share = detail::concat(" (", static_cast<int>(m * 100 + 0.5), "% in box)");
            std::printf("  %-10s %5.1f%% of the attention inside its box\n", word.c_str(), 100 * m);
          } else {
            share = detail::concat(" (", static_cast<int>(m * 100 + 0.5), "% in ", named, ")");
            std::printf("  %-10s %5.1f%% of the attention inside the box of the %s its phrase names\n", word.c_str(),
                        100 * m, named.c_str());
          }
        }
      }
      p.caption += share;
      // the smooth figure: the weights upsampled and laid over the picture, as a PNG
      p.png = vision::encode_png(vision::attention_overlay(pic.image, c.attention[t], c.rows, c.cols));
      smooth.push_back(p);
      // the grid: the picture and the weights cell by cell (hover a cell for its weight)
      p.png = plain;
      p.weights = c.attention[t];
      p.rows = static_cast<int>(c.rows), p.cols = static_cast<int>(c.cols);
      grid.push_back(std::move(p));
    }
    viz::ImageAttentionOptions o;
    o.pixel = 2;
    o.title = "Where the captioner looks as it writes each word: " + pic.name;
    std::string stem = fs::path(pic.name).stem().string();
    const fs::path base = fs::path(out_dir) / ("caption-" + stem);
    const std::string svg = viz::image_attention_svg(smooth, 6, o);
    if (format != "svg") {
      viz::write_picture(base.string() + ".png", svg);
      std::fprintf(stderr, "wrote %s.png\n", base.string().c_str());
    }
    if (format != "png") {
      io::write_file_atomic(base.string() + ".svg", svg);
      o.title += " (grid cells)";
      io::write_file_atomic(base.string() + "-grid.svg", viz::image_attention_svg(grid, 6, o));
      std::fprintf(stderr, "wrote %s.svg and %s-grid.svg\n", base.string().c_str(), base.string().c_str());
    }
  }
  return 0;
}

}  // namespace qkv::cli
