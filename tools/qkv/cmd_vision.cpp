// The image classifier's commands: `qkv classify`, and what `qkv eval` and `qkv attend` do when the
// model file holds an image classifier (cmd_eval.cpp and cmd_attend.cpp hand over to here).
//
//   qkv classify IMAGE…             top classes of PNG/JPEG pictures (or --test-images of
//                                   Fashion-MNIST), probabilities from the softmax
//   qkv eval -m CONVNET             accuracy and per-class accuracy on Fashion-MNIST's test set (or
//                                   --images/--labels IDX files); --confusion draws the confusion matrix
//   qkv attend -m CONVNET IMAGE…    the non-local block's attention for a grid of query pixels,
//                                   drawn over each image (attention-image.svg/png)
#include "vision_commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "commands.h"
#include "options.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/eval/classification.h"
#include "qkv/io/file.h"
#include "qkv/io/sample.h"
#include "qkv/models/load.h"
#include "qkv/ops.h"
#include "qkv/viz/image_attention.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"
#include "qkv/vision/dataset.h"
#include "qkv/vision/image.h"

namespace qkv::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Writes an SVG document to `path` (.svg) or renders it (.png); other extensions are an error.
void write_svg_or_png(const std::string& path, const std::string& svg) {
  const std::string ext = fs::path(path).extension().string();
  QKV_CHECK(ext == ".svg" || ext == ".png", "'", path, "': a picture is written as .svg or .png");
  if (ext == ".svg") io::write_file_atomic(path, svg);
  else viz::write_picture(path, svg);
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

struct Inputs {
  std::vector<std::string> names;
  std::vector<float> pixels;  // [n, C, H, W]
  std::vector<int32_t> labels;  // the true class where known (test images), else −1
};

// The images to run: files (converted to the model's shape) and/or Fashion-MNIST test images by index.
Inputs read_inputs(const models::ImageClassifier& m, const std::vector<std::string>& files,
                   const std::vector<int64_t>& test_images, bool invert, const std::string& data_dir) {
  const models::ImageShape s = m.image_shape();
  Inputs in;
  for (const std::string& f : files) {
    const vision::Image img = vision::read_image(f, {s.channels, s.height, s.width, invert});
    in.names.push_back(fs::path(f).filename().string());
    in.pixels.insert(in.pixels.end(), img.pixels.begin(), img.pixels.end());
    in.labels.push_back(-1);
  }
  if (!test_images.empty()) {
    const vision::ImageSet test = vision::load_fashion_mnist(data_dir, "test");
    QKV_CHECK(test.channels == s.channels && test.height == s.height && test.width == s.width,
              "the model takes ", s.channels, "×", s.height, "×", s.width, " images, Fashion-MNIST's are ",
              test.channels, "×", test.height, "×", test.width);
    for (int64_t i : test_images) {
      QKV_CHECK(i >= 0 && i < test.size(), "--test-images: Fashion-MNIST's test set has images 0 … ", test.size() - 1,
                ", not ", i);
      std::vector<float> px(static_cast<size_t>(test.image_bytes()));
      vision::fill_batch(test, {i}, {}, 0, 0, px.data());
      in.names.push_back("test image " + std::to_string(i));
      in.pixels.insert(in.pixels.end(), px.begin(), px.end());
      in.labels.push_back(test.labels[static_cast<size_t>(i)]);
    }
  }
  QKV_CHECK(!in.names.empty(), "no image given (image files, or --test-images)");
  return in;
}

Tensor batch_of(const models::ImageClassifier& m, const Inputs& in) {
  const models::ImageShape s = m.image_shape();
  return Tensor::from_vector(in.pixels, {static_cast<int64_t>(in.names.size()), s.channels, s.height, s.width});
}

// softmax of each row of logits [n, K], row-major
std::vector<float> probabilities(const Tensor& logits) { return softmax(logits, -1).to_vector(); }

void add_image_source_options(CLI::App* sub, ImageSourceArgs& a) {
  sub->add_option("--test-images", a.test_images, "Fashion-MNIST test images by index, e.g. --test-images 0,1,2")
      ->delimiter(',');
  sub->add_flag("--invert", a.invert, "invert the pictures' grey levels (dark objects on light ground → as Fashion-MNIST)");
  sub->add_option("--data", a.data_dir, "the Fashion-MNIST folder")->capture_default_str();
}

}  // namespace

void add_image_attend_options(CLI::App* sub, ImageAttendArgs& a) {
  add_image_source_options(sub, a.source);
  sub->add_option("--grid", a.grid, "image classifier: G×G query points per image")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  sub->add_option("--block", a.block, "image classifier: which non-local block to draw (0, 1, …; default: the last)")
      ->check(zero_or_more());
}

ImageSourceArgs::ImageSourceArgs() : data_dir(vision::kFashionMnistDir) {}

void add_image_eval_options(CLI::App* sub, ImageEvalArgs& a) {
  sub->add_option("--images", a.images, "image classifier: IDX images to evaluate on (default: Fashion-MNIST's test set)");
  sub->add_option("--labels", a.labels, "image classifier: their IDX labels");
  sub->add_option("--confusion", a.confusion, "image classifier: draw the confusion matrix to this .svg or .png");
  sub->add_option("--data", a.data_dir, "image classifier: the Fashion-MNIST folder")->capture_default_str();
}

int run_image_eval(const std::string& model_path, const ImageEvalArgs& a, bool as_json) {
  const models::LoadedImageClassifier l = models::load_image_classifier(model_path);
  const models::ImageClassifier& m = *l.model;
  QKV_CHECK(a.images.empty() == a.labels.empty(), "qkv eval: --images and --labels go together");
  vision::ImageSet set = a.images.empty() ? vision::load_fashion_mnist(a.data_dir, "test")
                                          : vision::load_idx_images(a.images, a.labels, m.num_classes());
  if (a.limit > 0 && a.limit < set.size()) {  // --limit: a sample drawn with --seed, in file order
    const int64_t all = set.size();
    const std::vector<int64_t> keep = io::sample_indices(all, a.limit, a.seed);
    const auto bytes = static_cast<size_t>(set.image_bytes());
    std::vector<uint8_t> pixels(keep.size() * bytes);
    for (size_t i = 0; i < keep.size(); ++i)
      std::copy_n(set.pixels.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(keep[i]) * bytes), bytes,
                  pixels.begin() + static_cast<std::ptrdiff_t>(i * bytes));
    set.pixels = std::move(pixels);
    set.labels = io::take(set.labels, keep);
    if (!as_json)
      std::fprintf(stderr, "--limit %lld: %lld of the %lld images, drawn with seed %llu\n",
                   static_cast<long long>(a.limit), static_cast<long long>(a.limit), static_cast<long long>(all),
                   static_cast<unsigned long long>(a.seed));
  }
  const models::ImageShape s = m.image_shape();
  QKV_CHECK(set.channels == s.channels && set.height == s.height && set.width == s.width, "qkv eval: '", model_path,
            "' takes ", s.channels, "×", s.height, "×", s.width, " images, the data has ", set.channels, "×",
            set.height, "×", set.width);
  const auto t0 = std::chrono::steady_clock::now();
  const eval::ClassifierScores e = eval::score_classifier(m, set);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t K = m.num_classes();
  const std::vector<int64_t> count = e.per_class_images();
  const std::vector<double> accuracy = e.per_class_accuracy();
  json per_class = json::array();
  for (int64_t k = 0; k < K; ++k)
    per_class.push_back({{"class", m.class_name(k)}, {"images", count[static_cast<size_t>(k)]},
                         {"accuracy", accuracy[static_cast<size_t>(k)]}});
  if (as_json) {
    json j = {{"model", model_path}, {"images", set.size()},     {"accuracy", e.accuracy}, {"loss", e.loss},
              {"per_class", per_class}, {"confusion", e.confusion}, {"images_per_s", static_cast<double>(set.size()) / secs}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("accuracy %.2f%% (%lld images), loss %.4f, %.0f images/s\n", 100 * e.accuracy,
                static_cast<long long>(set.size()), e.loss, static_cast<double>(set.size()) / secs);
    for (const json& c : per_class)
      std::printf("  %-14s %6.2f%%  (%lld images)\n", c["class"].get<std::string>().c_str(),
                  100 * c["accuracy"].get<double>(), static_cast<long long>(c["images"].get<int64_t>()));
  }
  if (!a.confusion.empty()) {
    // rows: the true class, columns: the prediction; each row as fractions of its class
    const std::vector<float> v = e.confusion_fractions();
    std::vector<std::string> names;
    for (int64_t t = 0; t < K; ++t) names.push_back(m.class_name(t));
    viz::HeatmapOptions ho;
    char title[200];
    std::snprintf(title, sizeof title, "Confusion matrix: %s, accuracy %.2f%%", fs::path(model_path).filename().c_str(),
                  100 * e.accuracy);
    ho.title = title, ho.x_label = "predicted", ho.y_label = "true class", ho.cell = 44, ho.show_values = true;
    write_svg_or_png(a.confusion, viz::heatmap_svg(v, static_cast<int>(K), static_cast<int>(K), names, names, ho));
  }
  return 0;
}

int run_image_attend(const std::string& model_path, const std::vector<std::string>& files, const ImageAttendArgs& a) {
  const models::LoadedImageClassifier l = models::load_image_classifier(model_path);
  const models::ImageClassifier& m = *l.model;
  const Inputs in = read_inputs(m, files, a.source.test_images, a.source.invert, a.source.data_dir);
  nn::AttentionMaps maps;
  Tensor logits;
  {
    NoGradGuard no_grad;
    logits = m.forward(batch_of(m, in), &maps);
  }
  QKV_CHECK(!maps.image.empty(), "qkv attend: '", model_path, "' has no non-local block, so no attention to draw");
  const int64_t nblocks = static_cast<int64_t>(maps.image.size());
  const int64_t b = a.block < 0 ? nblocks - 1 : a.block;
  QKV_CHECK(b >= 0 && b < nblocks, "qkv attend: --block ", a.block, ": the model has ", nblocks, " non-local blocks (0 … ",
            nblocks - 1, ")");
  const Tensor& w = maps.image[static_cast<size_t>(b)];  // [n, heads, P, P']
  const int64_t heads = w.size(1), P = w.size(2), Pk = w.size(3), K = m.num_classes();
  const nn::ImageGrid grid = maps.image_grids.at(static_cast<size_t>(b));
  const int64_t gh = grid.height, gw = grid.width, kh = grid.key_height, kw = grid.key_width;
  QKV_CHECK(gh * gw == P && kh * kw == Pk, "qkv attend: the map's ", P, " × ", Pk, " positions do not fit its ", gh, "×",
            gw, " and ", kh, "×", kw, " grids");
  const models::ImageShape s = m.image_shape();
  const std::vector<float> probs = probabilities(logits);
  const std::vector<float> wv = mean(w, {1}).to_vector();  // the heads' mean: [n, P, P']
  std::vector<viz::ImageAttentionPanel> panels;
  const int64_t G = a.grid;
  for (size_t i = 0; i < in.names.size(); ++i) {
    const float* p = probs.data() + i * static_cast<size_t>(K);
    const auto top = static_cast<int64_t>(std::max_element(p, p + K) - p);
    std::printf("%s: %s (%.1f%%)%s\n", in.names[i].c_str(), m.class_name(top).c_str(), 100 * p[top],
                in.labels[i] >= 0 ? (", true class " + m.class_name(in.labels[i])).c_str() : "");
    // the picture in grey (the channels' mean)
    std::vector<float> grey(static_cast<size_t>(s.height * s.width), 0.f);
    for (int64_t c = 0; c < s.channels; ++c)
      for (int64_t k = 0; k < s.height * s.width; ++k)
        grey[static_cast<size_t>(k)] +=
            in.pixels[i * static_cast<size_t>(s.channels * s.height * s.width) + static_cast<size_t>(c * s.height * s.width + k)] /
            static_cast<float>(s.channels);
    // G×G query cells spread over the grid, the weights averaged over the heads
    for (int64_t qy = 0; qy < G; ++qy)
      for (int64_t qx = 0; qx < G; ++qx) {
        const int64_t gy = (2 * qy + 1) * gh / (2 * G), gx = (2 * qx + 1) * gw / (2 * G), q = gy * gw + gx;
        viz::ImageAttentionPanel panel;
        panel.image = grey, panel.height = static_cast<int>(s.height), panel.width = static_cast<int>(s.width);
        panel.rows = static_cast<int>(kh), panel.cols = static_cast<int>(kw);
        const auto row = wv.begin() + static_cast<std::ptrdiff_t>((static_cast<int64_t>(i) * P + q) * Pk);
        panel.weights.assign(row, row + Pk);
        // the query cell's centre in image pixels
        panel.query_y = static_cast<float>((static_cast<double>(gy) + 0.5) * s.height / gh - 0.5);
        panel.query_x = static_cast<float>((static_cast<double>(gx) + 0.5) * s.width / gw - 0.5);
        panel.caption = in.names[i] + " · query (" + std::to_string(gy) + ", " + std::to_string(gx) + ")";
        panels.push_back(std::move(panel));
      }
  }
  std::error_code ec;
  fs::create_directories(a.out, ec);
  QKV_CHECK(!ec, "qkv attend: cannot create '", a.out, "': ", ec.message());
  viz::ImageAttentionOptions o;
  o.title = "Non-local block " + std::to_string(b + 1) + " of " + std::to_string(nblocks) + " (" +
            std::to_string(gh) + "×" + std::to_string(gw) + " positions, mean of " + std::to_string(heads) +
            " head" + (heads > 1 ? "s" : "") + "): where each ringed position looks";
  const std::string svg = viz::image_attention_svg(panels, static_cast<int>(G * G), o);
  const std::string base = (fs::path(a.out) / "attention-image").string();
  if (a.format != "png") write_svg_or_png(base + ".svg", svg);
  if (a.format != "svg") write_svg_or_png(base + ".png", svg);
  return 0;
}

void add_classify(CLI::App& app) {
  auto* sub = app.add_subcommand("classify", "Classify pictures (PNG or JPEG) with an image classifier");
  struct Args {
    std::string model = kDefaultImageClassifier;
    std::vector<std::string> files;
    ImageSourceArgs source;
    int64_t top = 3;
    int threads = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("images", a->files, "picture files, resized and converted to the model's input");
  sub->add_option("-m,--model", a->model, "model file")->capture_default_str();
  add_image_source_options(sub, a->source);
  sub->add_option("--top", a->top, "classes to show per image")->capture_default_str()->check(greater_than_zero());
  add_threads_option(sub, a->threads);
  sub->add_flag("--json", a->json, "one JSON object per image");
  sub->footer("Example: qkv classify --test-images 0,1,2   |   qkv classify --invert shoe.png");
  register_runner(sub, [a] {
    use_threads(a->threads);
    const models::LoadedImageClassifier l = models::load_image_classifier(find_model(a->model));
    const models::ImageClassifier& m = *l.model;
    const Inputs in = read_inputs(m, a->files, a->source.test_images, a->source.invert, a->source.data_dir);
    Tensor logits;
    {
      NoGradGuard no_grad;
      logits = m.forward(batch_of(m, in));
    }
    const std::vector<float> probs = probabilities(logits);
    const int64_t K = m.num_classes();
    for (size_t i = 0; i < in.names.size(); ++i) {
      const float* p = probs.data() + i * static_cast<size_t>(K);
      std::vector<int64_t> order(static_cast<size_t>(K));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return p[x] > p[y]; });
      order.resize(static_cast<size_t>(std::min(a->top, K)));
      if (a->json) {
        json j = {{"image", in.names[i]}, {"top", json::array()}};
        if (in.labels[i] >= 0) j["true_class"] = m.class_name(in.labels[i]);
        for (int64_t k : order) j["top"].push_back({{"class", m.class_name(k)}, {"probability", p[k]}});
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%s%s:", in.names[i].c_str(),
                    in.labels[i] >= 0 ? (" (true class " + m.class_name(in.labels[i]) + ")").c_str() : "");
        for (int64_t k : order) std::printf("  %s %.1f%%", m.class_name(k).c_str(), 100 * p[k]);
        std::printf("\n");
      }
    }
    return 0;
  });
}

}  // namespace qkv::cli
