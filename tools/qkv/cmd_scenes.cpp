// `qkv scenes`: the captioned scenes a captioner learns from (vision/scenes.h), written out to look
// at and to caption: one PNG per scene, their captions and item boxes as JSON lines, and a contact
// sheet with the boxes outlined under each caption.
//
//   qkv scenes --split test -n 12 -o scenes/
//     scenes/test-0.png … test-11.png   the canvases (grey, 96×96 by default)
//     scenes/scenes.jsonl               {"image", "split", "index", "caption", "words", "items": [{"class",
//                                        "word", "row", "col", "box": [x0, y0, x1, y1]}], "word_item"}
//     scenes/sheet.svg, sheet.png       every scene with its caption and boxes
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/viz/image_attention.h"
#include "qkv/viz/png.h"
#include "qkv/vision/dataset.h"
#include "qkv/vision/image.h"
#include "qkv/vision/scenes.h"

namespace qkv::cli {

namespace fs = std::filesystem;
using nlohmann::json;

void add_scenes(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "scenes", "Write captioned scenes (Fashion-MNIST items on a grid, captioned from the layout) as PNG + JSON");
  struct Args {
    std::string split = "train", out = "scenes", data_dir = vision::kFashionMnistDir;
    int64_t first = 0, count = 12, grid = 3, cell = 32, min_items = 1, max_items = 4;
    uint64_t seed = 1;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--split", a->split, "train, val or test (val and test join class pairs training never joins)")
      ->capture_default_str()
      ->check(CLI::IsMember({"train", "val", "test"}));
  sub->add_option("--first", a->first, "index of the first scene")->capture_default_str()->check(zero_or_more());
  sub->add_option("-n,--count", a->count, "how many scenes")->capture_default_str()->check(between(1, 10000));
  sub->add_option("--seed", a->seed, "the scene set's seed (scene i of a split is a function of it)")
      ->capture_default_str()
      ->check(unsigned_64());
  sub->add_option("--grid", a->grid, "grid × grid cells (2 or 3)")->capture_default_str()->check(between(2, 3));
  sub->add_option("--cell", a->cell, "cell side in pixels (≥ 28)")->capture_default_str()->check(between(28, 256));
  sub->add_option("--min-items", a->min_items, "fewest items in a scene")->capture_default_str()->check(between(1, 4));
  sub->add_option("--max-items", a->max_items, "most items in a scene")->capture_default_str()->check(between(2, 4));
  sub->add_option("--fashion-mnist", a->data_dir, "folder with Fashion-MNIST's IDX files")->capture_default_str();
  sub->add_option("-o,--output-dir", a->out, "where to write the pictures and scenes.jsonl")->capture_default_str();
  sub->footer("Example: qkv scenes --split test -n 8 -o scenes/   (then open scenes/sheet.png)");
  register_runner(sub, [a] {
    const vision::ImageSet train = vision::load_fashion_mnist(a->data_dir, "train");
    const vision::ImageSet test = vision::load_fashion_mnist(a->data_dir, "test");
    vision::SceneOptions o;
    o.grid = a->grid, o.cell = a->cell, o.min_items = a->min_items, o.max_items = a->max_items, o.seed = a->seed;
    const vision::SceneGenerator gen(train, test, o);
    const vision::SceneSplit split = vision::scene_split_from_name(a->split);
    std::error_code ec;
    fs::create_directories(a->out, ec);
    QKV_CHECK(!ec, "'", a->out, "': cannot create the folder (", ec.message(), ")");
    std::string lines;
    std::vector<viz::ImageAttentionPanel> panels;
    for (int64_t i = a->first; i < a->first + a->count; ++i) {
      const vision::Scene s = gen.generate(split, i);
      const std::string name = a->split + "-" + std::to_string(i) + ".png";
      vision::Image img;
      img.height = s.height, img.width = s.width;
      img.pixels.resize(s.pixels.size());
      for (size_t p = 0; p < s.pixels.size(); ++p) img.pixels[p] = s.pixels[p] / 255.f;
      vision::write_png((fs::path(a->out) / name).string(), img);
      json items = json::array();
      viz::ImageAttentionPanel panel;
      panel.caption = s.caption();
      panel.image = img.pixels;
      panel.height = static_cast<int>(s.height), panel.width = static_cast<int>(s.width);
      panel.show_query = false;
      for (const vision::SceneItem& it : s.items) {
        items.push_back({{"class", vision::fashion_mnist_classes()[it.label]},
                         {"word", vision::scene_class_words()[it.label]},
                         {"row", it.row},
                         {"col", it.col},
                         {"box", {it.box.x0, it.box.y0, it.box.x1, it.box.y1}}});
        panel.boxes.push_back({static_cast<float>(it.box.x0), static_cast<float>(it.box.y0),
                               static_cast<float>(it.box.x1), static_cast<float>(it.box.y1)});
      }
      lines += json{{"image", name},    {"split", a->split}, {"index", i},         {"caption", s.caption()},
                    {"words", s.words}, {"items", items},    {"word_item", s.word_item}}
                   .dump() +
               "\n";
      std::printf("%s\t%s\n", name.c_str(), s.caption().c_str());
      panels.push_back(std::move(panel));
    }
    io::write_file_atomic((fs::path(a->out) / "scenes.jsonl").string(), lines);
    viz::ImageAttentionOptions vo;
    vo.pixel = 2;
    vo.title = "captioned scenes (" + a->split + "), item boxes in green";
    // 4 columns, or about as many as rows for many scenes (a sheet 75 scenes tall is hard to look at)
    const int columns = std::max(4, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(panels.size())))));
    const std::string svg = viz::image_attention_svg(panels, columns, vo);
    io::write_file_atomic((fs::path(a->out) / "sheet.svg").string(), svg);
    viz::write_picture((fs::path(a->out) / "sheet.png").string(), svg);
    std::fprintf(stderr, "wrote %lld scenes, scenes.jsonl and sheet.svg/png to %s\n",
                 static_cast<long long>(a->count), a->out.c_str());
    return 0;
  });
}

}  // namespace qkv::cli
