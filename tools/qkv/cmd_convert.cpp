// qkv convert — a Hugging Face model folder (GPT-2, …: models/hf_convert.h) to a qkv model file with
// its tokenizer inside, which every other command then takes with -m.
#include <cstdio>

#include "commands.h"
#include "qkv/text/lm_tokenizer.h"
#include "options.h"
#include "qkv/models/hf_convert.h"

namespace qkv::cli {

void add_convert(CLI::App& app) {
  auto* sub = app.add_subcommand("convert", "convert a Hugging Face model folder (config.json, *.safetensors, "
                                            "tokenizer.json) to a qkv model file");
  struct Args {
    std::string from = "hf", dir, out;
    io::StoreAs dtype = io::StoreAs::kF32;
    std::string head, problem_type, labels;
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("dir", a->dir,
                  "the model folder, as save_pretrained or huggingface-cli download leave it; or, with --head, a qkv "
                  "model file of an encoder (a converted one, or a masked_lm run's model.safetensors)")
      ->required();
  sub->add_option("--from", a->from, "the folder's format (hf: Hugging Face transformers)")
      ->check(CLI::IsMember({"hf"}))
      ->capture_default_str();
  sub->add_option("-o,--out", a->out, "the qkv model file to write (atomically)")->required();
  add_choice(sub, "--dtype", a->dtype, "how the file stores the weights",
             {io::StoreAs::kF32, io::StoreAs::kF16, io::StoreAs::kBF16});
  sub->add_option("--head", a->head,
                  "an encoder's checkpoint (BertForMaskedLM, RobertaModel, …) with a new classifier, as "
                  "AutoModelFor…Classification.from_pretrained(folder, num_labels=…) makes one, to fine-tune "
                  "(qkv train, task text_classification or token_classification); span: a new question-answering "
                  "head, as AutoModelForQuestionAnswering makes one (task question_answering; no --labels); choice: a "
                  "new multiple-choice head, as AutoModelForMultipleChoice makes one (task multiple_choice; no "
                  "--labels)")
      ->check(CLI::IsMember({"sequence", "token", "span", "choice"}));
  sub->add_option("--labels", a->labels, "the new classifier's labels, in id order (comma-separated)")->needs("--head");
  sub->add_option("--problem-type", a->problem_type, "the new sequence classifier's problem_type (transformers')")
      ->check(CLI::IsMember({"single_label_classification", "multi_label_classification", "regression"}))
      ->needs("--head");
  sub->add_option("--seed", a->seed, "the seed of the new head's random weights")
      ->needs("--head")
      ->capture_default_str()
      ->check(unsigned_64());
  std::string archs;
  for (const auto& arch : models::hf_architectures()) archs += (archs.empty() ? "" : ", ") + arch.name;
  sub->footer("Architectures: " + archs +
              ".\nExample (the folder downloaded on a machine that reaches the hub):\n"
              "  huggingface-cli download gpt2 --local-dir gpt2\n"
              "  qkv convert --from hf gpt2 -o gpt2.safetensors && qkv generate -m gpt2.safetensors \"Hello\"\n"
              "A classifier on an encoder pre-trained further by qkv train (\"task\": \"masked_lm\"):\n"
              "  qkv convert out/mlm/best.safetensors --head sequence --labels negative,positive -o cls.safetensors");
  register_runner(sub, [a] {
    models::HfConvertOptions o;
    o.store = a->dtype, o.head = a->head, o.problem_type = a->problem_type, o.seed = a->seed;
    if (!a->labels.empty()) {  // (every field kept: "a,,b" is an empty label, refused by the converter)
      size_t from = 0;
      for (size_t at; (at = a->labels.find(',', from)) != std::string::npos; from = at + 1)
        o.labels.push_back(a->labels.substr(from, at - from));
      o.labels.push_back(a->labels.substr(from));
    }
    QKV_CHECK(a->head.empty() || a->head == "span" || a->head == "choice" || !a->labels.empty(), "convert: --head ",
              a->head, " needs --labels (the new classifier's labels, e.g. --labels negative,positive)");
    models::HfHeadReport report;
    const nlohmann::json meta = models::convert_hf(a->dir, a->out, o, &report);
    std::fprintf(stderr, "%s (%s) -> %s as %s (%s)\n", a->dir.c_str(),
                 meta["converted_from"]["architecture"].get<std::string>().c_str(), a->out.c_str(),
                 meta["model_type"].get<std::string>().c_str(), std::string(enum_name(a->dtype)).c_str());
    if (!a->head.empty()) {
      // transformers' warnings on from_pretrained, as facts: what is new, what was left
      std::string drawn;
      for (const auto& n : report.initialized) drawn += (drawn.empty() ? "" : ", ") + n;
      if (a->head == "span")
        std::fprintf(stderr,
                     "new question-answering head: %s drawn at random — fine-tune it before use (qkv train, "
                     "\"task\": \"question_answering\")\n",
                     drawn.c_str());
      else if (a->head == "choice")
        std::fprintf(stderr,
                     "new multiple-choice head: %s drawn at random — fine-tune it before use (qkv train, "
                     "\"task\": \"multiple_choice\")\n",
                     drawn.c_str());
      else
        std::fprintf(stderr,
                     "new %s head (%zu labels): %s drawn at random — fine-tune it before use (qkv train, "
                     "\"task\": \"%s_classification\")\n",
                     a->head.c_str(), o.labels.size(), drawn.c_str(), a->head == "token" ? "token" : "text");
      if (!report.unused.empty()) {
        std::string some;
        for (size_t i = 0; i < report.unused.size() && i < 4; ++i) some += (i ? ", " : "") + report.unused[i];
        std::fprintf(stderr, "left out: %zu tensor%s of the checkpoint's own head (%s%s)\n", report.unused.size(),
                     report.unused.size() == 1 ? "" : "s", some.c_str(), report.unused.size() > 4 ? ", …" : "");
      }
    }
    // the chat template, which the chat route of `qkv serve` and `generate --chat` render
    const auto chat = text::LMTokenizer::find_chat_template(meta.value("tokenizer", nlohmann::json()));
    if (chat.chat_template) {
      std::fprintf(stderr, "chat template: %s\n", chat.chat_template->jinja().what().c_str());
      for (const auto& u : chat.chat_template->jinja().unknown())
        std::fprintf(stderr, "  warning: it names %s, which qkv does not know: a chat that reaches it fails\n",
                     u.c_str());
    } else if (!chat.error.empty())
      std::fprintf(stderr, "warning: the chat template does not compile here, so chats will be refused: %s\n",
                   chat.error.c_str());
    return 0;
  });
}

}  // namespace qkv::cli
