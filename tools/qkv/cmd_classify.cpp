// qkv classify-text — an encoder's classifier on texts, as transformers' pipelines give it: a sequence
// classifier's labels and scores (pipeline("text-classification")), a token classifier's entities
// (pipeline("token-classification"), "simple" aggregation on request), an NLI classifier's scores for
// labels named at run time (pipeline("zero-shot-classification"), --candidate-labels).
// qkv embed — sentence embeddings, as SentenceTransformer.encode gives them.
// qkv rerank — documents ranked for a query by a cross-encoder, as CrossEncoder.rank ranks them.
// qkv answer — the span of a context that answers a question, as pipeline("question-answering").
//
//   qkv classify-text sst2.safetensors "I loved it." "Not for me." [--top-k 0] [--json]
//   qkv classify-text ner.safetensors "Romeo went to Verona." --aggregation simple
//   qkv classify-text nli.safetensors "The match went to extra time." --candidate-labels "sports, politics"
//   qkv embed minilm.safetensors "A cat sat." "A dog sat." --similarity
//   cat lines.txt | qkv embed -m minilm.safetensors --json
//   cat passages.txt | qkv rerank ms-marco.safetensors "how do cats sleep" --top-k 3
//   qkv answer squad.safetensors "Where did the cat sit?" "The cat sat on the mat." [--top-k 3] [--json]
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "encoder_json.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/decode/classify.h"
#include "qkv/decode/multiple_choice.h"
#include "qkv/decode/question_answering.h"
#include "qkv/io/file.h"
#include "qkv/text/unicode.h"
#include "qkv/io/progress.h"
#include "qkv/models/load.h"

namespace qkv::cli {

namespace {

struct EncoderArgs {
  std::string model;
  std::vector<std::string> inputs;
  bool json = false;
  int64_t batch_size = 32;
  DecodeArgs decode;
};

void add_encoder_options(CLI::App* sub, EncoderArgs& a, const char* what) {
  sub->add_option(
      "inputs", a.inputs,
      std::string("MODEL then the texts (or only the texts, with -m); no texts: ") + "one a line from standard input");
  sub->add_option("-m,--model", a.model, what);
  sub->add_option("--batch-size", a.batch_size, "texts run together (padded to the longest)")
      ->capture_default_str()
      ->check(greater_than_zero());
  add_decode_options(sub, a.decode, kThreads | kWeights);
  a.decode.weights_option->description(
      "weights the encoder's layers read: f32, or int8 rows with a scale each (the CPU; ~1.8× faster on a Zen 3, "
      "embeddings at cosine ≥ 0.9996 of f32's); bf16 reads f32. Default: int8 for a file qkv quantize wrote, f32 "
      "otherwise");
}

models::LoadedMaskedLanguageModel load_encoder(const std::string& model, const EncoderArgs& a) {
  models::LoadOptions o;
  o.weights = a.decode.requested_weights();
  return models::load_masked_language_model(find_model(model), o);
}

// The model file and the texts: the arguments, or standard input's lines.
std::pair<std::string, std::vector<std::string>> model_and_texts(const EncoderArgs& a, const char* command) {
  std::vector<std::string> texts = a.inputs;
  std::string model = a.model;
  if (model.empty()) {
    QKV_CHECK(!texts.empty(), "qkv ", command, ": give the model file (or -m MODEL), then the texts");
    model = texts.front();
    texts.erase(texts.begin());
  }
  if (texts.empty())
    for (std::string line; std::getline(std::cin, line);) texts.push_back(line);
  return {model, texts};
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// f(texts[from, to)) for chunks of 16 batches, concatenated, with a progress bar on stderr (rate and
// ETA; shown once the work takes more than 2 s): a file of many lines says how far it got.
template <class R>
std::vector<R> in_chunks(const std::vector<std::string>& texts, int64_t batch_size,
                         const std::function<std::vector<R>(const std::vector<std::string>&)>& f) {
  const size_t chunk = static_cast<size_t>(batch_size) * 16;
  io::ProgressBar bar("texts", static_cast<int64_t>(texts.size()), 0, /*delay_seconds=*/2);
  std::vector<R> out;
  for (size_t from = 0; from < texts.size(); from += chunk) {
    const size_t to = std::min(texts.size(), from + chunk);
    std::vector<R> part = f(std::vector<std::string>(texts.begin() + static_cast<std::ptrdiff_t>(from),
                                                     texts.begin() + static_cast<std::ptrdiff_t>(to)));
    for (auto& r : part) out.push_back(std::move(r));
    bar.update(static_cast<int64_t>(to - from));
  }
  bar.close();
  return out;
}

}  // namespace

void add_classify_text(CLI::App& app) {
  auto* sub =
      app.add_subcommand("classify-text",
                         "Classify texts with an encoder's classifier (BERT, DistilBERT, RoBERTa, XLM-RoBERTa, MPNet, "
                         "ELECTRA, DeBERTa): labels and scores, each token's entity, or (an NLI model) labels of your "
                         "own");
  struct Args : EncoderArgs {
    std::string pair;
    decode::ClassificationFunction function = decode::ClassificationFunction::auto_;
    decode::Aggregation aggregation = decode::Aggregation::none;
    std::vector<std::string> ignore_labels = {"O"};
    int64_t top_k = 1;
    std::string candidate_labels, hypothesis_template = decode::ZeroShotOptions().hypothesis_template;
    bool multi_label = false;
  };
  auto a = std::make_shared<Args>();
  add_encoder_options(sub, *a, "model file (a converted …ForSequenceClassification or …ForTokenClassification)");
  sub->add_option("-k,--top-k", a->top_k, "a sequence classifier's best labels per text (0: every label)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--pair", a->pair, "a second segment after each text, as tokenizer(text, text_pair)");
  add_choice(sub, "--function", a->function,
             "scores from logits; auto: by the config's problem_type (softmax, sigmoid for one label or several "
             "at once, none for regression)")
      ->default_str("auto");
  add_choice(sub, "--aggregation", a->aggregation,
             "a token classifier's entities: each token (none); simple: neighbouring tokens of one tag joined; "
             "first, average, max: each word's tokens given one label first (the first token's, their mean "
             "scores', the highest-scoring token's), then joined as simple joins tokens")
      ->default_str("none");
  sub->add_option("--ignore-labels", a->ignore_labels, "a token classifier's labels left out")->capture_default_str();
  sub->add_option("--candidate-labels", a->candidate_labels,
                  "zero-shot: labels of your own, comma-separated, each scored by an NLI classifier as the entailment "
                  "of the text by the hypothesis the template makes of it");
  sub->add_option("--hypothesis-template", a->hypothesis_template, "zero-shot: the hypothesis; {} is the label")
      ->capture_default_str();
  sub->add_flag("--multi-label", a->multi_label,
                "zero-shot: each label scored alone (entailment against contradiction), not the labels' scores "
                "summing to 1");
  sub->add_flag("--json", a->json,
                "one JSON list per text: the pipeline's [{\"label\", \"score\"}, …], or "
                "[{\"entity\", \"score\", \"index\", \"word\"}, …] ({\"entity_group\", …} with simple); "
                "zero-shot: {\"sequence\", \"labels\", \"scores\"}");
  sub->footer(
      "Example: qkv convert --from hf distilbert-base-uncased-finetuned-sst-2-english -o sst2.safetensors\n"
      "         qkv classify-text sst2.safetensors \"A delight from start to finish.\"\n"
      "         qkv convert --from hf deberta-v3-base-zeroshot-v2.0 -o nli.safetensors\n"
      "         qkv classify-text nli.safetensors \"The match went to extra time.\" --candidate-labels \"sports, "
      "politics\"");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    auto [model, texts] = model_and_texts(*a, "classify-text");
    models::LoadedMaskedLanguageModel m = load_encoder(model, *a);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    if (!a->candidate_labels.empty() || a->multi_label) {
      // zero-shot: the labels as the pipeline parses a string of them (split at commas, stripped)
      const std::vector<std::string> labels = decode::parse_candidate_labels(a->candidate_labels);
      QKV_CHECK(!labels.empty(), "qkv classify-text: --candidate-labels names no label (\"sports, politics, …\")");
      decode::ZeroShotOptions opt;
      opt.hypothesis_template = a->hypothesis_template, opt.multi_label = a->multi_label;
      opt.batch_size = a->batch_size;
      const auto all = in_chunks<std::vector<decode::LabelScore>>(texts, a->batch_size, [&](const auto& part) {
        return decode::zero_shot_classification(*m.model, tok, part, labels, opt);
      });
      for (size_t i = 0; i < texts.size(); ++i) {
        if (a->json) {
          nlohmann::json j = {
              {"sequence", texts[i]}, {"labels", nlohmann::json::array()}, {"scores", nlohmann::json::array()}};
          for (const auto& s : all[i]) j["labels"].push_back(s.label), j["scores"].push_back(s.score);
          std::printf("%s\n", dump(j).c_str());
          continue;
        }
        std::printf("%s\n", texts[i].c_str());
        for (const auto& s : all[i]) std::printf("  %-12s %8.4f\n", s.label.c_str(), s.score);
      }
      return 0;
    }
    if (m.model->task().classifier == nn::BertClassifier::token) {
      decode::TokenClassificationOptions opt;
      opt.aggregation = a->aggregation, opt.ignore_labels = a->ignore_labels;
      opt.batch_size = a->batch_size;
      const auto all = in_chunks<std::vector<decode::TokenEntity>>(
          texts, a->batch_size, [&](const auto& part) { return decode::token_classification(*m.model, tok, part, opt); });
      for (size_t i = 0; i < texts.size(); ++i) {
        if (a->json) {
          std::printf("%s\n", dump(entities_json(all[i], qkv::text::valid_utf8(texts[i]))).c_str());
          continue;
        }
        std::printf("%s\n", texts[i].c_str());
        for (const auto& e : all[i]) {
          if (e.index >= 0)
            std::printf("  %4lld  %-12s %8.4f  %s\n", static_cast<long long>(e.index), e.entity.c_str(), e.score,
                        e.word.c_str());
          else
            std::printf("  %-12s %8.4f  %s\n", e.entity.c_str(), e.score, e.word.c_str());
        }
      }
      return 0;
    }
    decode::TextClassificationOptions opt;
    opt.top_k = a->top_k, opt.function = a->function;
    opt.batch_size = a->batch_size;
    if (!a->pair.empty()) opt.text_pairs.assign(texts.size(), a->pair);
    const auto all = in_chunks<std::vector<decode::LabelScore>>(texts, a->batch_size, [&](const auto& part) {
      decode::TextClassificationOptions o = opt;
      if (!o.text_pairs.empty()) o.text_pairs.resize(part.size());
      return decode::text_classification(*m.model, tok, part, o);
    });
    for (size_t i = 0; i < texts.size(); ++i) {
      if (a->json) {
        std::printf("%s\n", dump(label_scores_json(all[i])).c_str());
        continue;
      }
      if (all[i].size() == 1) {
        std::printf("%-12s %8.4f  %s\n", all[i][0].label.c_str(), all[i][0].score, texts[i].c_str());
        continue;
      }
      std::printf("%s\n", texts[i].c_str());
      for (const auto& s : all[i]) std::printf("  %-12s %8.4f\n", s.label.c_str(), s.score);
    }
    return 0;
  });
}

void add_embed(CLI::App& app) {
  auto* sub = app.add_subcommand("embed",
                                 "Sentence embeddings from an encoder (a sentence-transformers folder's "
                                 "pooling and normalization, or the mean of the hidden states)");
  struct Args : EncoderArgs {
    nn::BertPooling pooling = nn::BertPooling::unset;  // not given: the model's
    std::string normalize = "model";
    int64_t max_length = 0;
    bool similarity = false;
  };
  auto a = std::make_shared<Args>();
  add_encoder_options(
      sub, *a,
      "model file (a converted BERT, DistilBERT, RoBERTa, XLM-RoBERTa or MPNet; sentence-transformers' folders "
      "keep their pooling)");
  add_choice(sub, "--pooling", a->pooling, "the sentence-transformers folder's pooling where not given, else mean",
             {nn::BertPooling::cls, nn::BertPooling::mean, nn::BertPooling::max});
  sub->add_option("--normalize", a->normalize,
                  "model (sentence-transformers' Normalize where the folder had it), "
                  "yes (unit length) or no")
      ->capture_default_str()
      ->check(CLI::IsMember({"model", "yes", "no"}));
  sub->add_option("--max-length", a->max_length,
                  "texts cut to this many tokens (0: the model's max_seq_length, "
                  "else its positions)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--similarity", a->similarity, "print the texts' cosine similarities instead of the vectors");
  sub->add_flag("--json", a->json, "one JSON list of floats per text (with --similarity: the matrix)");
  sub->footer(
      "Example: qkv convert --from hf all-MiniLM-L6-v2 -o minilm.safetensors\n"
      "         qkv embed minilm.safetensors \"A cat sat on the mat.\" \"A dog lay on the rug.\" --similarity");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    auto [model, texts] = model_and_texts(*a, "embed");
    models::LoadedMaskedLanguageModel m = load_encoder(model, *a);
    decode::EmbedOptions opt;
    opt.pooling = a->pooling;
    if (a->normalize != "model") opt.normalize = a->normalize == "yes";
    opt.max_length = a->max_length, opt.batch_size = a->batch_size;
    const auto e = in_chunks<std::vector<float>>(
        texts, a->batch_size, [&](const auto& part) { return decode::embed(*m.model, *m.tokenizer.hf(), part, opt); });
    if (a->similarity) {
      // cos(a, b) = a·b / (‖a‖ ‖b‖)
      std::vector<std::vector<double>> sim(e.size(), std::vector<double>(e.size()));
      for (size_t i = 0; i < e.size(); ++i)
        for (size_t j = 0; j < e.size(); ++j) {
          double dot = 0, na = 0, nb = 0;
          for (size_t d = 0; d < e[i].size(); ++d)
            dot += double(e[i][d]) * e[j][d], na += double(e[i][d]) * e[i][d], nb += double(e[j][d]) * e[j][d];
          sim[i][j] = dot / std::max(std::sqrt(na * nb), 1e-12);
        }
      if (a->json) {
        std::printf("%s\n", dump(sim).c_str());
        return 0;
      }
      for (size_t i = 0; i < e.size(); ++i) {
        for (size_t j = 0; j < e.size(); ++j) std::printf("%7.4f ", sim[i][j]);
        std::printf(" %s\n", texts[i].c_str());
      }
      return 0;
    }
    for (size_t i = 0; i < e.size(); ++i) {
      if (a->json) {
        std::printf("%s\n", dump(e[i]).c_str());
        continue;
      }
      std::printf("%s\n ", texts[i].c_str());
      for (float v : e[i]) std::printf(" %.6g", v);
      std::printf("\n");
    }
    return 0;
  });
}

void add_rerank(CLI::App& app) {
  auto* sub = app.add_subcommand("rerank",
                                 "Documents ranked for a query by a cross-encoder (a reranker: a sequence "
                                 "classifier of one label scoring each (query, document) pair), as "
                                 "sentence-transformers' CrossEncoder.rank ranks them");
  struct Args : EncoderArgs {
    std::string query;
    int64_t top_k = 0;
    int64_t max_length = 0;
    decode::ClassificationFunction function = decode::ClassificationFunction::auto_;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("-q,--query", a->query, "the query (else the first text after the model)");
  add_encoder_options(sub, *a, "model file (a converted cross-encoder: BERT, RoBERTa, XLM-RoBERTa, MPNet, …)");
  sub->get_option("inputs")->description(
      "MODEL, the query (unless -q), then the documents (or only these, with -m); no documents: one a line from "
      "standard input");
  sub->add_option("-k,--top-k", a->top_k, "the best k documents (0: every one)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-length", a->max_length,
                  "each (query, document) pair cut to this many tokens, the longer of the two first (0: the "
                  "tokenizer's model_max_length, at most the model's positions)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_choice(sub, "--function", a->function,
             "the score: auto (the model's activation_fn: sigmoid unless its config says identity), sigmoid, "
             "or none (the logit)",
             {decode::ClassificationFunction::auto_, decode::ClassificationFunction::sigmoid,
              decode::ClassificationFunction::none});
  sub->add_flag("--json", a->json, "one JSON list of {\"index\", \"score\", \"text\"}, best first");
  sub->footer(
      "Example: qkv convert --from hf ms-marco-MiniLM-L6-v2 -o ms-marco.safetensors\n"
      "         qkv rerank ms-marco.safetensors \"how do cats sleep\" \"Cats sleep 16 hours a day.\" \"Dogs bark.\"\n"
      "         cat passages.txt | qkv rerank -m ms-marco.safetensors -q \"how do cats sleep\" -k 3 --json");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    auto [model, texts] = model_and_texts(*a, "rerank");
    std::string query = a->query;
    if (query.empty()) {
      QKV_CHECK(!texts.empty() && !a->inputs.empty(),
                "qkv rerank: give the query (-q, or the first text after the model)");
      query = texts.front();
      texts.erase(texts.begin());
      if (texts.empty())
        for (std::string line; std::getline(std::cin, line);) texts.push_back(line);
    }
    QKV_CHECK(!texts.empty(), "qkv rerank: no documents (give them after the query, or a line each on standard input)");
    models::LoadedMaskedLanguageModel m = load_encoder(model, *a);
    decode::RerankOptions opt;
    opt.max_length = a->max_length, opt.function = a->function, opt.batch_size = a->batch_size;
    // every document scored (in chunks, for the progress bar), then ranked: best first, equal scores
    // in the documents' order (as one call ranks them)
    size_t offset = 0;
    std::vector<decode::RankedDocument> all =
        in_chunks<decode::RankedDocument>(texts, a->batch_size, [&](const auto& part) {
          auto r = decode::rerank(*m.model, *m.tokenizer.hf(), query, part, opt);
          for (auto& d : r) d.index += static_cast<int64_t>(offset);
          offset += part.size();
          return r;
        });
    std::sort(all.begin(), all.end(),
              [](const auto& x, const auto& y) { return x.score != y.score ? x.score > y.score : x.index < y.index; });
    if (a->top_k > 0 && a->top_k < static_cast<int64_t>(all.size())) all.resize(static_cast<size_t>(a->top_k));
    nlohmann::json list = nlohmann::json::array();
    for (const auto& d : all) {
      const std::string& text = texts[static_cast<size_t>(d.index)];
      if (a->json)
        list.push_back({{"index", d.index}, {"score", d.score}, {"text", text}});
      else
        std::printf("%8.4f  %3lld  %s\n", d.score, static_cast<long long>(d.index), text.c_str());
    }
    if (a->json) std::printf("%s\n", dump(list).c_str());
    return 0;
  });
}

void add_answer(CLI::App& app) {
  auto* sub = app.add_subcommand("answer",
                                 "The span of a context that answers a question, read from an extractive "
                                 "question-answering model (…ForQuestionAnswering: SQuAD's BERTs, RoBERTas, "
                                 "DeBERTas) as transformers' pipeline(\"question-answering\") reads it");
  struct Args : EncoderArgs {
    std::string question, context_file;
    decode::QuestionAnsweringOptions qa;
    bool no_align = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("-q,--question", a->question, "the question (else the first text after the model)");
  sub->add_option("-c,--context-file", a->context_file,
                  "a file whose whole text is the context (- : standard input); else the texts after the question, "
                  "joined by newlines");
  add_encoder_options(sub, *a, "model file (a converted …ForQuestionAnswering)");
  sub->get_option("inputs")->description(
      "MODEL, the question (unless -q), then the context (unless -c; several texts are joined by newlines); no "
      "context: standard input's whole text");
  sub->get_option("--batch-size")->description("windows run together (padded to the longest)");
  sub->add_option("-k,--top-k", a->qa.top_k, "answers, best first (fewer where fewer are found)")
      ->capture_default_str()
      ->check(greater_than_zero());
  sub->add_option("--max-answer-len", a->qa.max_answer_len, "the longest answer, in tokens")
      ->capture_default_str()
      ->check(greater_than_zero());
  sub->add_option("--max-seq-len", a->qa.max_seq_len,
                  "the window the context is read in, question and special tokens included (0: the tokenizer's "
                  "model_max_length, at most 384 and the model's positions)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--doc-stride", a->qa.doc_stride,
                  "tokens each window reaches back into the one before (-1: half the window, at most 128)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 20));
  sub->add_flag("--handle-impossible-answer", a->qa.handle_impossible_answer,
                "also score the empty answer (\"no answer in this context\", as SQuAD 2.0's models learned it)");
  sub->add_flag("--no-align-to-words", a->no_align,
                "answers from their tokens' own characters, not widened to whole words");
  sub->add_flag("--json", a->json,
                "the pipeline's JSON: {\"score\", \"start\", \"end\", \"answer\"} (start and end in characters), "
                "a list of them with --top-k > 1 where more than one is found");
  sub->footer(
      "Example: qkv convert --from hf distilbert-base-cased-distilled-squad -o squad.safetensors\n"
      "         qkv answer squad.safetensors \"Where did the cat sit?\" \"The cat sat on the mat in the garden.\"\n"
      "         qkv answer -m squad.safetensors -q \"Who wrote it?\" -c article.txt -k 3 --json");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    std::vector<std::string> texts = a->inputs;
    std::string model = a->model;
    if (model.empty()) {
      QKV_CHECK(!texts.empty(), "qkv answer: give the model file (or -m MODEL), then the question and the context");
      model = texts.front();
      texts.erase(texts.begin());
    }
    std::string question = a->question;
    if (question.empty()) {
      QKV_CHECK(!texts.empty(), "qkv answer: give the question (-q, or the first text after the model)");
      question = texts.front();
      texts.erase(texts.begin());
    }
    std::string context;
    if (!a->context_file.empty()) {
      QKV_CHECK(texts.empty(), "qkv answer: the context is -c's file; ", texts.size(), " more texts were given");
      if (a->context_file == "-")
        context.assign(std::istreambuf_iterator<char>(std::cin), {});
      else
        context = io::read_file(a->context_file, int64_t{256} << 20, "the context");
    } else if (!texts.empty()) {
      for (size_t i = 0; i < texts.size(); ++i) context += (i ? "\n" : "") + texts[i];
    } else {
      context.assign(std::istreambuf_iterator<char>(std::cin), {});
    }
    QKV_CHECK(!context.empty(), "qkv answer: the context is empty");
    models::LoadedMaskedLanguageModel m = load_encoder(model, *a);
    decode::QuestionAnsweringOptions opt = a->qa;
    opt.align_to_words = !a->no_align;
    opt.batch_size = a->batch_size;
    const auto answers = decode::question_answering(*m.model, *m.tokenizer.hf(), {question}, {context}, opt).at(0);
    const std::string text = qkv::text::valid_utf8(context);
    if (a->json) {
      std::printf("%s\n", dump(answers_json(answers, text)).c_str());
      return 0;
    }
    // a line each: the score, the characters start-end, the answer (its line breaks and tabs escaped)
    for (const auto& x : answers) {
      std::string shown;
      for (char c : x.answer) shown += c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : std::string(1, c);
      std::printf("%8.4f  %zu-%zu  %s\n", x.score, qkv::text::code_points(text, x.start),
                  qkv::text::code_points(text, x.end), x.answer.empty() ? "(no answer)" : shown.c_str());
    }
    return 0;
  });
}

void add_choose(CLI::App& app) {
  auto* sub = app.add_subcommand("choose",
                                 "Which ending follows a context best, read from a multiple-choice model "
                                 "(…ForMultipleChoice: SWAG's; or one qkv train fine-tuned, \"task\": "
                                 "\"multiple_choice\"): each ending's probability, as run_swag.py scores them");
  struct Args : EncoderArgs {
    std::string header;
    int64_t max_length = 0;
  };
  auto a = std::make_shared<Args>();
  add_encoder_options(sub, *a, "model file (a converted …ForMultipleChoice, or a multiple_choice run's)");
  sub->get_option("inputs")->description("MODEL (unless -m), the context, then two endings or more");
  sub->remove_option(sub->get_option("--batch-size"));
  sub->add_option("--header", a->header,
                  "the start every ending shares (SWAG's sent2), put before each as run_swag.py does: \"HEADER "
                  "ENDING\"");
  sub->add_option("--max-length", a->max_length,
                  "tokens a (context, ending) pair is cut to (0: the tokenizer's model_max_length, at most 1,024 and "
                  "the model's positions)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--json", a->json, "{\"choices\": [{\"ending\", \"score\", \"logit\"}, …], \"best\": index}");
  sub->footer(
      "Example: qkv convert --from hf bert-base-uncased --head choice -o bert-swag.safetensors\n"
      "         qkv train configs/fine-tune-swag.json -o out/swag\n"
      "         qkv choose out/swag/best.safetensors \"The cook cracks two eggs.\" \"He whisks them.\" \"He eats the "
      "pan.\"");
  register_runner(sub, [a] {
    use_threads_for_decoding(a->decode.threads);
    std::vector<std::string> texts = a->inputs;
    std::string model = a->model;
    if (model.empty()) {
      QKV_CHECK(!texts.empty(), "qkv choose: give the model file (or -m MODEL), the context and the endings");
      model = texts.front();
      texts.erase(texts.begin());
    }
    QKV_CHECK(texts.size() >= 3, "qkv choose: give the context, then two endings or more (", texts.size(),
              " texts given)");
    const std::string context = texts.front();
    texts.erase(texts.begin());
    models::LoadedMaskedLanguageModel m = load_encoder(model, *a);
    const auto scores = decode::multiple_choice(*m.model, *m.tokenizer.hf(), context, texts, a->header, a->max_length);
    size_t best = 0;
    for (size_t i = 1; i < scores.size(); ++i)
      if (scores[i].score > scores[best].score) best = i;
    if (a->json) {
      nlohmann::json j = {{"choices", nlohmann::json::array()}, {"best", best}};
      for (const auto& s : scores) j["choices"].push_back({{"ending", s.ending}, {"score", s.score}, {"logit", s.logit}});
      std::printf("%s\n", dump(j).c_str());
      return 0;
    }
    for (size_t i = 0; i < scores.size(); ++i)
      std::printf("%s %8.4f  %s\n", i == best ? "*" : " ", scores[i].score, scores[i].ending.c_str());
    return 0;
  });
}

}  // namespace qkv::cli
