// qkv quantize — a model file rewritten for int8 decoding (models/quantize.h): the matrices its
// decoding reads through int8 kernels stored as int8 rows with a scale each, so `qkv translate
// --dtype int8` on it loads a quarter of their bytes and never holds their f32 values.
#include <cstdio>

#include "commands.h"
#include "options.h"
#include "qkv/models/quantize.h"

namespace qkv::cli {

void add_quantize(CLI::App& app) {
  auto* sub = app.add_subcommand("quantize", "rewrite a model file with int8 weights for int8 decoding (less memory)");
  struct Args {
    std::string input, out;
    io::StoreAs dtype = io::StoreAs::kF32;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("model", a->input, "the model file (.safetensors) to quantize")->required()->check(CLI::ExistingFile);
  sub->add_option("-o,--out", a->out, "the int8 model file (written atomically, then loaded back as a check)")
      ->required();
  add_choice(sub, "--dtype", a->dtype, "how the file stores the tensors that stay floating point (norms, biases, encoder)",
             {io::StoreAs::kF32, io::StoreAs::kF16, io::StoreAs::kBF16});
  sub->footer(
      "Example: qkv quantize models/en-fr.safetensors -o en-fr.int8.safetensors --dtype f16\n"
      "         qkv translate --model en-fr.int8.safetensors --dtype int8 < input.en\n"
      "The int8 rows are those --dtype int8 makes from the f32 file: the same translations, in less memory, on a\n"
      "CPU with VNNI or AMX (8-bit activations); elsewhere the f32 file's encoder keeps its f32 products and the\n"
      "int8 file's computes with its rows' values: close, not the same numbers.");
  register_runner(sub, [a] {
    const models::QuantizeReport r = models::quantize_model_file(a->input, a->out, a->dtype);
    std::fprintf(stderr, "quantized a %s model: %zu matrices (%.1fM weights) as int8 rows, %.1fM kept %s -> %s\n",
                 r.type.c_str(), r.int8_tensors.size(), static_cast<double>(r.int8_params) / 1e6,
                 static_cast<double>(r.other_params) / 1e6, std::string(enum_name(a->dtype)).c_str(), a->out.c_str());
    return 0;
  });
}

}  // namespace qkv::cli
