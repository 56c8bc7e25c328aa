// qkv average — checkpoint averaging: the mean of several model files or checkpoints of one model
// (e.g. the last few of a training run), written as a model file. Averaging the weights of nearby
// checkpoints usually gains a little BLEU for free (as fairseq's scripts/average_checkpoints.py).
#include <cstdio>

#include "commands.h"
#include "options.h"
#include "qkv/models/model_file.h"

namespace qkv::cli {

void add_average(CLI::App& app) {
  auto* sub = app.add_subcommand("average", "average the weights of several checkpoints or model files of one model");
  struct Args {
    std::vector<std::string> inputs;
    std::string out;
    io::StoreAs dtype = io::StoreAs::kF32;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("inputs", a->inputs, "model files or checkpoints (.safetensors) of the same model")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("-o,--out", a->out, "the averaged model file (written atomically)")->required();
  add_choice(sub, "--dtype", a->dtype, "how the file stores the weights",
             {io::StoreAs::kF32, io::StoreAs::kF16, io::StoreAs::kBF16});
  sub->footer("Example: qkv average out/run/ckpt-10000.safetensors out/run/ckpt-11000.safetensors -o avg.safetensors");
  register_runner(sub, [a] {
    models::average_model_files(a->inputs, a->out, a->dtype);
    std::fprintf(stderr, "averaged %zu file%s -> %s (%s)\n", a->inputs.size(), a->inputs.size() == 1 ? "" : "s",
                 a->out.c_str(), std::string(enum_name(a->dtype)).c_str());
    return 0;
  });
}

}  // namespace qkv::cli
