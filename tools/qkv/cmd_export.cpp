// qkv export — writes a model in another engine's format:
//   --to hf: a Hugging Face folder (config.json, model.safetensors, the tokenizer) from a model qkv
//     converted from one, a run trained from it, or a language model qkv trained (GPT-2, Llama, Qwen3,
//     Mistral: models/hf_export.h) — the way to transformers;
//   --to ctranslate2: a CTranslate2 model directory made from a qkv translation Transformer (train with
//     qkv, serve with CTranslate2). That conversion is CTranslate2's own Python spec API, so it is done by
//     tools/ctranslate2_export.py (the mapping, weight for weight, is at its top); this command loads the
//     model file as every command does (so a broken file is refused here, before Python runs), finds that
//     script in the qkv checkout, runs it with python3 (QKV_PYTHON overrides) and returns its exit
//     status. Arguments go to the interpreter as an argv (posix_spawnp), never through a shell.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/models/hf_export.h"
#include "qkv/models/load.h"

extern char** environ;

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kScript = "tools/ctranslate2_export.py";

// The CTranslate2 model types (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES) — what model.bin
// stores the weights as.
const std::vector<std::string> kQuantizations = {"float32",      "float16",      "bfloat16",      "int8",
                                                 "int8_float32", "int8_float16", "int8_bfloat16", "int16"};

// "must be a, b or c, got x" unless `in` is one of `choices`.
CLI::Validator one_of(std::vector<std::string> choices) {
  std::string names;
  for (size_t i = 0; i < choices.size(); ++i) names += (i ? (i + 1 == choices.size() ? " or " : ", ") : "") + choices[i];
  return CLI::Validator(
      [choices, names](std::string& in) -> std::string {
        return std::find(choices.begin(), choices.end(), in) != choices.end() ? "" : "must be " + names + ", got " + in;
      },
      "CHOICE");
}

// The exporter script of this qkv: looked for above the executable first (build/qkv lives in the
// checkout, so the script matches the binary), then from the working directory.
std::string find_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      if (fs::is_regular_file(dir / kScript, ec)) return (dir / kScript).string();
  if (fs::is_regular_file(kScript, ec)) return kScript;
  QKV_CHECK(false, "export: cannot find ", kScript, " in the qkv checkout above the executable (",
            exe.string(), ") nor in the working directory");
  return {};
}

// Runs argv[0] (searched on PATH) with `argv`; its exit status. stdin, stdout and stderr are shared,
// so the script's messages reach the user as they are.
int run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  QKV_CHECK(err == 0, "export: cannot run '", args[0], "': ", std::strerror(err),
            " (the export needs Python 3 with the ctranslate2 package: pip install ctranslate2; set QKV_PYTHON to "
            "choose the interpreter)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    QKV_CHECK(errno == EINTR, "export: waiting for '", args[0], "': ", std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  QKV_CHECK(!WIFSIGNALED(status), "export: '", args[0], "' was killed by signal ", WTERMSIG(status), " (",
            strsignal(WTERMSIG(status)), ")");
  return 1;
}

}  // namespace

void add_export(CLI::App& app) {
  auto* sub = app.add_subcommand("export",
                                 "Write a model for another engine: --to hf makes a Hugging Face folder (transformers' "
                                 "from_pretrained), --to ctranslate2 a CTranslate2 model directory");
  struct Args {
    std::string to, model, quantization = "float32";
    std::string first, second;  // MODEL OUT_DIR, or OUT_DIR alone after -m MODEL
    bool force = false;
    io::StoreAs dtype = io::StoreAs::kF32;
    std::string max_shard_size = "5GB";
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--to", a->to, "the target format: hf (Hugging Face transformers) or ctranslate2")
      ->required()
      ->check(one_of({"hf", "ctranslate2"}));
  sub->add_option("MODEL", a->first,
                  "the model file to export: for hf, one qkv convert made from a Hugging Face folder or a run trained "
                  "from one; for ctranslate2, a translation Transformer (model.safetensors from qkv train)");
  sub->add_option("OUT_DIR", a->second, "the folder to write");
  sub->add_option("-m,--model", a->model, "the model file (instead of the MODEL argument)");
  sub->add_option(
         "--quantization", a->quantization,
         "(ctranslate2) how model.bin stores the weights: float32 (the model's weights exactly), float16, bfloat16, "
         "int8 (a scale per weight row), int8_float32, int8_float16, int8_bfloat16 or int16")
      ->capture_default_str()
      ->check(one_of(kQuantizations));
  add_choice(sub, "--dtype", a->dtype, "(hf) the weights' dtype: f32 keeps the file's values exactly",
             {io::StoreAs::kF32, io::StoreAs::kF16, io::StoreAs::kBF16});
  sub->add_option("--max-shard-size", a->max_shard_size,
                  "(hf) the largest weight file, as save_pretrained's max_shard_size: 5GB, 500MB, 2GiB")
      ->capture_default_str();
  sub->add_flag("--force", a->force, "write into a non-empty OUT_DIR (over an earlier export)");
  sub->footer(
      "--to hf, for a model that qkv convert made or a run trained from one (init_from):\n"
      "  qkv export --to hf out/sst2/best.safetensors bert-sst2\n"
      "  python3 -c 'import transformers as t; print(t.pipeline(\"text-classification\", \"bert-sst2\")(\"Great!\"))'\n"
      "OUT_DIR gets config.json, model.safetensors (or shards and their index), the tokenizer's files and\n"
      "generation_config.json, under the checkpoint's names: what save_pretrained would have written.\n"
      "A language model qkv trained (qkv train, task lm) goes as the class that computes it — a GPT as\n"
      "GPT2LMHeadModel, a Llama as LlamaForCausalLM (Qwen3ForCausalLM with qk_norm, MistralForCausalLM\n"
      "with a window) — its tokenizer as tokenizer.json:\n"
      "  qkv export --to hf models/shakespeare-char.safetensors shakespeare-gpt2\n"
      "  python3 -c 'import transformers as t; print(t.pipeline(\"text-generation\", "
      "\"shakespeare-gpt2\")(\"ROMEO:\"))'\n"
      "--to ctranslate2, for a qkv translation Transformer:\n"
      "  qkv export --to ctranslate2 models/en-fr.safetensors en-fr-ct2\n"
      "  qkv export --to ctranslate2 -m out/run/model.safetensors run-ct2-int8 --quantization int8\n"
      "OUT_DIR gets model.bin, config.json, shared_vocabulary.json and spm.model (the SentencePiece\n"
      "tokenizer). Translate as qkv does with CTranslate2's Python API:\n"
      "  sp = sentencepiece.SentencePieceProcessor(model_file=\"en-fr-ct2/spm.model\")\n"
      "  tr = ctranslate2.Translator(\"en-fr-ct2\")\n"
      "  sp.decode(tr.translate_batch([sp.encode(\"The cat sleeps.\", out_type=str)])[0].hypotheses[0])\n"
      "(`qkv translate --alpha 0` = translate_batch(…, length_penalty=1e-9, min_decoding_length=0).)\n"
      "Needs python3 with `pip install ctranslate2`; QKV_PYTHON names another interpreter.");
  register_runner(sub, [a, sub] {
    std::string model = a->model, out_dir = a->second;
    if (a->model.empty()) {
      QKV_CHECK(!a->first.empty() && !a->second.empty(), "export: expected MODEL OUT_DIR (or -m MODEL OUT_DIR)");
      model = a->first;
    } else {
      QKV_CHECK(a->second.empty(), "export: a model given twice: -m ", a->model, " and ", a->first,
                " (with -m MODEL, give OUT_DIR alone)");
      out_dir = a->first;
      QKV_CHECK(!out_dir.empty(), "export: expected OUT_DIR after -m MODEL");
    }
    model = find_model(model);  // models/… also from outside the checkout
    QKV_CHECK(fs::exists(model), "export: model file '", model, "' not found");
    // The file is read by qkv's own loader first — every check loading makes (its header, offsets, shapes, names,
    // metadata, tokenizer) — so a broken file is qkv's one-line error naming it, not the exporter's traceback.
    if (a->to == "hf") {
      QKV_CHECK(sub->count("--quantization") == 0, "export: --quantization is ctranslate2's (hf takes --dtype)");
      models::HfExportOptions o;
      o.store = a->dtype, o.force = a->force;
      o.max_shard_bytes = models::parse_shard_size(a->max_shard_size, "export: --max-shard-size");
      const models::HfExportReport r = models::export_hf(model, out_dir, o);
      std::fprintf(stderr, "%s -> %s (%s: %lld weights, %.1f MB in %s)\n", model.c_str(), out_dir.c_str(),
                   r.architecture.c_str(), static_cast<long long>(r.tensors), static_cast<double>(r.bytes) / 1e6,
                   std::string(enum_name(a->dtype)).c_str());
      std::string files;
      for (const auto& f : r.files) files += (files.empty() ? "" : ", ") + f;
      std::fprintf(stderr, "wrote %s\n", files.c_str());
      return 0;
    }
    QKV_CHECK(sub->count("--dtype") == 0 && sub->count("--max-shard-size") == 0,
              "export: --dtype and --max-shard-size are hf's (ctranslate2 takes --quantization)");
    models::check_loadable(model);
    const char* python = std::getenv("QKV_PYTHON");
    std::vector<std::string> args = {python && *python ? python : "python3", find_script(), "--quantization",
                                     a->quantization};
    if (a->force) args.push_back("--force");
    args.insert(args.end(), {"--", model, out_dir});  // "--": a path starting with '-' stays a path
    return run_process(args);
  });
}

}  // namespace qkv::cli
