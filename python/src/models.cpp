// Models and jobs from Python: qkv.Translator, qkv.LanguageModel (generate, streaming),
// qkv.ImageClassifier, qkv.ImageCaptioner, qkv.load (any model file the registry knows) and
// qkv.train (a config, with a callback per logged step). Every long call releases the GIL.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/batching_generator.h"
#include "qkv/decode/caption.h"
#include "qkv/decode/classify.h"
#include "qkv/decode/question_answering.h"
#include "qkv/decode/multiple_choice.h"
#include "qkv/text/unicode.h"
#include "qkv/decode/fill_mask.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/inspect.h"
#include "qkv/decode/replay.h"
#include "qkv/decode/translator.h"
#include "qkv/eval/classification.h"
#include "qkv/eval/perplexity.h"
#include "qkv/io/config.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/hf_export.h"
#include "qkv/models/load.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/ops.h"
#include "qkv/train/from_config.h"

namespace qkv::python {

namespace {

namespace fs = std::filesystem;

// "auto": the file's own (models::decoding_weights: int8 for a file qkv quantize wrote, f32 otherwise).
std::optional<nn::InferenceWeights> weights_of(const std::string& name) {
  if (name == "auto") return std::nullopt;
  return parse_enum<nn::InferenceWeights>(name);
}

// A model file's metadata as a Python dict.
nb::object meta_dict(const nlohmann::json& meta) { return nb::module_::import_("json").attr("loads")(meta.dump()); }

// A Python value as JSON (through json.dumps: a value JSON cannot hold is a TypeError naming it),
// keys in the dicts' order.
nlohmann::ordered_json py_json(nb::handle v, const char* what) {
  std::string text;
  try {
    text = nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(v, "allow_nan"_a = false));
  } catch (nb::python_error& e) {
    const std::string why = nb::cast<std::string>(nb::str(e.value()));
    throw Error(std::string(what) + ": not JSON data (lists, dicts, strings, numbers, bools, None): " + why);
  }
  return nlohmann::ordered_json::parse(text);
}

// apply_chat_template's and chat's arguments as the template's inputs.
text::ChatInputs chat_inputs(nb::handle messages, bool add_generation_prompt, nb::handle tools, nb::handle extra,
                             nb::handle continue_final_message = nb::handle()) {
  text::ChatInputs in;
  // continue_final_message: False, True ("content") or the final message's field to continue
  if (continue_final_message.is_valid() && !continue_final_message.is_none()) {
    if (nb::isinstance<nb::bool_>(continue_final_message))
      in.continue_final_message = nb::cast<bool>(continue_final_message) ? "content" : "";
    else if (nb::isinstance<nb::str>(continue_final_message))
      in.continue_final_message = nb::cast<std::string>(continue_final_message);
    else
      throw nb::type_error("continue_final_message must be a bool or a str (the final message's field)");
  }
  in.messages = py_json(messages, "messages");
  QKV_CHECK(in.messages.is_array(), "messages: expected a list of {'role': …, 'content': …} dicts");
  in.add_generation_prompt = add_generation_prompt;
  if (!tools.is_none()) in.tools = py_json(tools, "tools");
  if (!extra.is_none()) in.extra = py_json(extra, "the chat template's keyword arguments");
  return in;
}

// ---- translation ----------------------------------------------------------------------------

struct TranslationResult {
  std::vector<std::string> hypotheses;  // best first
  std::vector<double> scores;           // the search's score of each (log p / length penalty)
  std::vector<std::string> source_tokens, target_tokens;  // with return_attention: the pieces + </s>
  Tensor attention;                     // [target, source]: last layer, mean over heads
  std::vector<Tensor> cross_attention;  // per layer: [heads, target, source]
};

// Python's beam_size and length_penalty keywords (defaults decode::kDefaultBeamSize and
// kDefaultLengthPenalty, as every front end's) as the TranslateOptions the translators check.
decode::TranslateOptions search_options(int64_t beam_size, double length_penalty) {
  decode::TranslateOptions o;
  o.beam_size = beam_size, o.length_penalty = static_cast<float>(length_penalty);
  return o;
}

class PyTranslator {
 public:
  PyTranslator(const std::string& path, const std::string& weights, const std::string& device) {
    models::LoadOptions o;
    o.weights = weights_of(weights);
    o.device = Device::parse(device);
    m_ = models::load_seq2seq(path, o);
    tr_ = std::make_unique<decode::Translator>(*m_.model, *m_.tokenizer);
  }

  std::vector<TranslationResult> translate_batch(const std::vector<std::string>& lines,
                                                 const decode::TranslateOptions& opt, int64_t num_hypotheses,
                                                 bool return_attention) const {
    decode::check_options(opt);
    decode::check_n_best(num_hypotheses, opt.beam_size, "translate_batch: num_hypotheses");
    std::vector<TranslationResult> out(lines.size());
    decode::TranslateOptions o = opt;
    o.num_hypotheses = num_hypotheses;
    const std::vector<std::vector<decode::Hypothesis>> nbest = tr_->translate_nbest(lines, o);
    for (size_t i = 0; i < lines.size(); ++i) {
      for (size_t k = 0; k < nbest[i].size() && static_cast<int64_t>(k) < num_hypotheses; ++k) {
        out[i].hypotheses.push_back(tr_->decode(nbest[i][k].tokens));
        out[i].scores.push_back(nbest[i][k].score);
      }
      if (out[i].hypotheses.empty()) out[i].hypotheses.push_back(""), out[i].scores.push_back(0.0);
      if (return_attention && !nbest[i].empty()) attend(lines[i], nbest[i][0], out[i]);
    }
    return out;
  }

  const models::LoadedSeq2Seq& loaded() const { return m_; }

 private:
  // The best hypothesis once more, teacher-forced, with the weights kept (decode/replay.h, as
  // `qkv attend`).
  void attend(const std::string& line, const decode::Hypothesis& h, TranslationResult& r) const {
    std::vector<int32_t> src = tr_->encode(line);
    if (src.empty()) return;
    const decode::Replay rp = decode::replay(*m_.model, std::move(src), h);
    const nn::AttentionMaps& maps = rp.maps;
    for (int32_t id : rp.ids.src) r.source_tokens.push_back(m_.tokenizer->id_to_piece(id));
    for (int32_t id : rp.ids.tgt_out) r.target_tokens.push_back(m_.tokenizer->id_to_piece(id));
    for (const Tensor& layer : maps.cross)  // [H, T, S], on the host
      r.cross_attention.push_back(layer.select(0, 0).contiguous().to(Device::cpu()));
    if (!maps.cross.empty()) r.attention = mean(r.cross_attention.back(), {0});  // [T, S]
  }

  models::LoadedSeq2Seq m_;
  std::unique_ptr<decode::Translator> tr_;
};

// ---- generation -----------------------------------------------------------------------------

// Generation on a worker thread, its text handed over piece by piece: a Python iterator
// (LanguageModel.generate(stream=True)). Dropping it stops the worker at its next token.
class TextStream {
 public:
  TextStream(std::shared_ptr<models::LoadedLanguageModel> lm, std::vector<int32_t> prompt, decode::GenerateOptions opt)
      : lm_(std::move(lm)) {
    worker_ = std::thread([this, prompt = std::move(prompt), opt] {
      try {
        text::TextStreamer streamer(lm_->tokenizer);
        decode::generate(*lm_->model, prompt, opt, [this, &streamer](int32_t id) {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_) return false;
          pieces_.push_back(streamer.push(id));
          cv_.notify_all();
          return true;
        });
        std::lock_guard<std::mutex> lock(mu_);
        if (std::string rest = streamer.flush(); !rest.empty()) pieces_.push_back(rest);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~TextStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    nb::gil_scoped_release release;
    if (worker_.joinable()) worker_.join();
  }
  std::string next() {
    std::unique_lock<std::mutex> lock(mu_);
    {
      nb::gil_scoped_release release;
      cv_.wait(lock, [this] { return !pieces_.empty() || done_; });
    }
    if (!pieces_.empty()) {
      std::string s = std::move(pieces_.front());
      pieces_.pop_front();
      return s;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    throw nb::stop_iteration();
  }

 private:
  std::shared_ptr<models::LoadedLanguageModel> lm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  bool done_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

class PyLanguageModel {
 public:
  PyLanguageModel(const std::string& path, const std::string& weights, const std::string& device) {
    models::LoadOptions o;
    o.weights = weights_of(weights);
    o.device = Device::parse(device);
    lm_ = std::make_shared<models::LoadedLanguageModel>(models::load_language_model(path, o));
  }
  std::vector<int32_t> encode(const std::string& prompt) const {
    std::vector<int32_t> ids = lm_->tokenizer.encode(prompt);
    QKV_CHECK(!ids.empty(), "generate: the prompt is empty; give at least one character");
    return ids;
  }
  // The chat's prompt in the model's chat template (text/chat_template.h), as apply_chat_template.
  std::string chat_prompt(const text::ChatInputs& in, const char* what) const {
    QKV_CHECK(lm_->tokenizer.chat_template_error().empty(), what, ": ", lm_->tokenizer.chat_template_error());
    const text::ChatTemplate* t = lm_->tokenizer.chat_template();
    QKV_CHECK(t, what, ": '", lm_->path, "' has no chat template (a base model, or one converted without ",
              "chat_template.jinja / tokenizer_config.json's \"chat_template\")");
    return t->apply(in);
  }
  std::vector<int32_t> encode_chat(const text::ChatInputs& in) const {
    std::vector<int32_t> ids = lm_->tokenizer.encode_prompt(chat_prompt(in, "chat"));
    QKV_CHECK(!ids.empty(), "chat: the chat template rendered an empty prompt");
    return ids;
  }
  // With the KV cache, a GPT's or a Llama's generations — from generate_batch, or from generate on
  // several Python threads at once — run together (decode/batching_generator.h), each its tokens alone.
  std::string generate(const std::string& prompt, decode::GenerateOptions opt) const {
    return generate_ids(encode(prompt), std::move(opt));
  }
  std::string generate_ids(const std::vector<int32_t>& ids, decode::GenerateOptions opt) const {
    std::vector<int32_t> out;
    opt.stop_ids = lm_->stop_ids;  // a converted model's end of text
    {
      nb::gil_scoped_release release;
      decode::BatchingGenerator* b = opt.use_cache ? batcher() : nullptr;
      out = b ? b->generate(ids, opt) : decode::generate(*lm_->model, ids, opt);
    }
    return lm_->tokenizer.decode(out);
  }
  // Each prompt's text as generate gives it alone, computed together (BatchingGenerator::generate_all).
  std::vector<std::string> generate_batch(const std::vector<std::string>& prompts, decode::GenerateOptions opt) const {
    std::vector<std::vector<int32_t>> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      try {
        ids.push_back(encode(prompts[i]));
      } catch (const Error& e) {
        throw Error("generate_batch: prompts[" + std::to_string(i) + "]: " + e.what());
      }
    }
    opt.stop_ids = lm_->stop_ids;
    std::vector<std::string> texts(prompts.size());
    nb::gil_scoped_release release;
    decode::BatchingGenerator* b = opt.use_cache ? batcher() : nullptr;
    if (!b) {
      for (size_t i = 0; i < ids.size(); ++i) texts[i] = lm_->tokenizer.decode(decode::generate(*lm_->model, ids[i], opt));
      return texts;
    }
    const auto outs = b->generate_all(ids, std::vector<decode::GenerateOptions>(ids.size(), opt));
    for (size_t i = 0; i < outs.size(); ++i) texts[i] = lm_->tokenizer.decode(outs[i]);
    return texts;
  }
  TextStream* stream(const std::string& prompt, decode::GenerateOptions opt) const {
    return stream_ids(encode(prompt), std::move(opt));
  }
  TextStream* stream_ids(std::vector<int32_t> ids, decode::GenerateOptions opt) const {
    opt.stop_ids = lm_->stop_ids;
    return new TextStream(lm_, std::move(ids), opt);
  }
  const models::LoadedLanguageModel& loaded() const { return *lm_; }

 private:
  // The model's batcher, made at its first use (none for an architecture without a paged step).
  decode::BatchingGenerator* batcher() const {
    std::lock_guard lock(batcher_mu_);
    if (!batcher_ && lm_->model->paged()) batcher_ = std::make_unique<decode::BatchingGenerator>(*lm_->model);
    return batcher_.get();
  }

  std::shared_ptr<models::LoadedLanguageModel> lm_;
  mutable std::mutex batcher_mu_;
  mutable std::unique_ptr<decode::BatchingGenerator> batcher_;  // (after lm_: it stops before the model goes)
};

// A masked language model (a converted BERT) and its tokenizer.
class PyMaskedLanguageModel {
 public:
  explicit PyMaskedLanguageModel(const std::string& path, const std::string& weights = "auto") {
    models::LoadOptions o;
    o.weights = weights_of(weights);
    m_ = std::make_shared<models::LoadedMaskedLanguageModel>(models::load_masked_language_model(path, o));
  }
  std::vector<std::vector<decode::FillMaskCandidate>> fill_mask(const std::string& text, int64_t top_k,
                                                                const std::string& pair) const {
    decode::FillMaskOptions o;
    o.top_k = top_k, o.text_pair = pair;
    nb::gil_scoped_release release;
    return decode::fill_mask(*m_->model, *m_->tokenizer.hf(), text, o);
  }
  const models::LoadedMaskedLanguageModel& loaded() const { return *m_; }
  const models::MaskedLanguageModel& model() const { return *m_->model; }
  const text::HfTokenizer& tokenizer() const { return *m_->tokenizer.hf(); }

 private:
  std::shared_ptr<models::LoadedMaskedLanguageModel> m_;
};

// A str or a list of str → the texts, and whether one was given alone.
std::pair<std::vector<std::string>, bool> texts_arg(const nb::handle& inputs, const char* name) {
  if (nb::isinstance<nb::str>(inputs)) return {{nb::cast<std::string>(inputs)}, true};
  std::vector<std::string> texts;
  if (!nb::try_cast(inputs, texts))
    throw nb::type_error((std::string(name) + " must be a str or a list of str").c_str());
  return {texts, false};
}

// The penalties (decode/sampling.h): repetition (Hugging Face's), frequency and presence (OpenAI's)
struct Penalties {
  double repetition = 1, frequency = 0, presence = 0;
};

decode::GenerateOptions generate_options(int64_t max_new_tokens, double temperature, int64_t top_k, double top_p,
                                         uint64_t seed, bool use_cache, const Penalties& pen = {}) {
  QKV_CHECK(max_new_tokens >= 0, "generate: max_new_tokens must be ≥ 0, got ", max_new_tokens);
  QKV_CHECK(temperature >= 0, "generate: temperature must be ≥ 0, got ", temperature);
  QKV_CHECK(top_k >= 0, "generate: top_k must be ≥ 0, got ", top_k);
  QKV_CHECK(top_p > 0 && top_p <= 1, "generate: top_p must be in (0, 1], got ", top_p);
  QKV_CHECK(pen.repetition > 0 && pen.repetition <= 10, "generate: repetition_penalty must be in (0, 10], got ", pen.repetition);
  QKV_CHECK(pen.frequency >= -2 && pen.frequency <= 2 && pen.presence >= -2 && pen.presence <= 2,
            "generate: frequency_penalty and presence_penalty must be in [-2, 2], got ", pen.frequency, " and ", pen.presence);
  decode::GenerateOptions o;
  o.max_new_tokens = max_new_tokens, o.use_cache = use_cache;
  o.sampling.temperature = temperature, o.sampling.top_k = top_k, o.sampling.top_p = top_p, o.sampling.seed = seed;
  o.sampling.repetition_penalty = pen.repetition, o.sampling.frequency_penalty = pen.frequency,
  o.sampling.presence_penalty = pen.presence;
  return o;
}

// ---- images -----------------------------------------------------------------------------------

// Pictures as the models take them: f32 [N, C, H, W] in [0, 1]. uint8 arrays (0…255, as the IDX
// files and PNGs hold them) are scaled; [N, H, W] gains the channel; [H, W] is one picture.
Tensor images_of(nb::handle obj, const models::ImageShape& want, const char* who) {
  Tensor x = to_tensor(obj);
  const bool bytes = x.dtype() == DType::i32;  // integers (uint8 pixels) were copied to int32
  if (x.dtype() != DType::f32) x = x.to(DType::f32);
  if (bytes) x = x * (1.f / 255.f);
  if (x.dim() == 2) x = x.unsqueeze(0);
  if (x.dim() == 3) x = x.unsqueeze(1);
  QKV_CHECK(x.dim() == 4 && x.size(1) == want.channels && x.size(2) == want.height && x.size(3) == want.width, who,
            ": the model takes pictures of ", want.channels, "×", want.height, "×", want.width,
            " ([N, C, H, W], [N, H, W] or [H, W]), got ", shape_str(x.shape()));
  return x.contiguous();
}

nb::tuple shape_tuple(const models::ImageShape& s) { return nb::make_tuple(s.channels, s.height, s.width); }

// ---- the neuron view ------------------------------------------------------------------------

// decode/inspect.h's NeuronView as a dict with /v1/attention's field names ("detail": "neuron"):
// kind, layer, head, kv_head, query, head_dim, scale, tokens, words, word, key_tokens, key_words,
// key_word, and as NumPy arrays queries [Tq, d], keys [Tk, d], products [Tk, d] (f32; a row of NaN
// for a key the query does not see, where the JSON has []), scores [Tk] (f64; −inf where the JSON
// has null) and weights [Tk] (f64).
nb::dict neuron_dict(const decode::NeuronView& v) {
  const int64_t d = v.head_dim;
  auto matrix = [d](const std::vector<std::vector<float>>& rows) {
    std::vector<float> flat;
    for (const auto& r : rows)
      if (r.empty()) flat.insert(flat.end(), static_cast<size_t>(d), std::numeric_limits<float>::quiet_NaN());
      else flat.insert(flat.end(), r.begin(), r.end());
    return nb::cast(to_array<nb::numpy>(Tensor::from_vector(flat, {static_cast<int64_t>(rows.size()), d})),
                    nb::rv_policy::reference);
  };
  nb::object np_array = nb::module_::import_("numpy").attr("array");
  auto vector = [&](const std::vector<double>& x) { return np_array(nb::cast(x), "float64"); };
  nb::dict out;
  out["kind"] = v.kind, out["layer"] = v.layer, out["head"] = v.head, out["kv_head"] = v.kv_head;
  out["query"] = v.query, out["head_dim"] = v.head_dim, out["scale"] = 1.0 / std::sqrt(static_cast<double>(d));
  out["tokens"] = v.axis.tokens, out["words"] = v.axis.words, out["word"] = v.axis.word;
  out["key_tokens"] = v.key_axis.tokens, out["key_words"] = v.key_axis.words, out["key_word"] = v.key_axis.word;
  out["queries"] = matrix(v.queries), out["keys"] = matrix(v.keys), out["products"] = matrix(v.products);
  out["scores"] = vector(v.scores), out["weights"] = vector(v.weights);
  return out;
}

constexpr const char* kNeuronDoc =
    "The neuron view (bertviz's; decode/inspect.h): how head `head` of layer `layer` (from 0) weighs the\n"
    "keys for query token `query` — its query vector, every key vector, their element-wise products, the\n"
    "scaled dot products and their softmax (that head's row of the attention map). A dict with\n"
    "/v1/attention's field names (\"detail\": \"neuron\"): kind, layer, head, kv_head, query, head_dim, scale,\n"
    "tokens, words, word (the queries), key_tokens, key_words, key_word (the keys), and NumPy arrays\n"
    "queries [Tq, d], keys [Tk, d], products [Tk, d] (NaN rows: keys the query does not see), scores [Tk]\n"
    "(-inf: not seen) and weights [Tk].";
// (static: the bindings keep a pointer to their docstrings)
const std::string kTranslatorNeuronDoc = std::string(kNeuronDoc) +
    "\nkind: 'encoder_self' (the source and </s>), 'decoder_self' or 'cross' (the sentence is translated\n"
    "first with beam_size and length_penalty; queries: the translation and </s>; keys: <s> and the\n"
    "translation, or the source and </s>).";
const std::string kLanguageModelNeuronDoc = std::string(kNeuronDoc) +
    "\nA GPT or a Llama (q and k after the rotary positions; kv_head: the key/value head read).";
const std::string kMaskedNeuronDoc = std::string(kNeuronDoc) + "\nBERT: [CLS] and [SEP] included.";

class PyImageClassifier {
 public:
  explicit PyImageClassifier(const std::string& path) : m_(models::load_image_classifier(path)) {}
  // → (class names of the most likely class, probabilities [N, classes])
  std::pair<std::vector<std::string>, Tensor> classify(nb::handle images) const {
    const Tensor x = images_of(images, m_.model->image_shape(), "ImageClassifier.classify");
    Tensor p;
    {
      nb::gil_scoped_release release;
      NoGradGuard no_grad;
      p = softmax(m_.model->forward(x), -1);
    }
    std::vector<std::string> names;
    const int64_t K = p.size(1);
    const std::vector<float> v = p.to_vector();
    for (int64_t i = 0; i < p.size(0); ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < K; ++k)
        if (v[static_cast<size_t>(i * K + k)] > v[static_cast<size_t>(i * K + best)]) best = k;
      names.push_back(m_.model->class_name(best));
    }
    return {names, p};
  }
  // eval::score_classifier over pictures and their labels
  eval::ClassifierScores evaluate(nb::handle images, const std::vector<int32_t>& labels, int64_t batch_size) const {
    const Tensor x = images_of(images, m_.model->image_shape(), "ImageClassifier.evaluate");
    nb::gil_scoped_release release;
    return eval::score_classifier(*m_.model, x, labels, batch_size);
  }
  const models::LoadedImageClassifier& loaded() const { return m_; }

 private:
  models::LoadedImageClassifier m_;
};

class PyImageCaptioner {
 public:
  explicit PyImageCaptioner(const std::string& path) : m_(models::load_image_to_text(path)) {
    cap_ = std::make_unique<decode::ImageCaptioner>(*m_.model, *m_.tokenizer);
  }
  std::vector<decode::Caption> caption(nb::handle images, const decode::CaptionOptions& opt) const {
    const Tensor x = images_of(images, cap_->image_shape(), "ImageCaptioner.caption");
    nb::gil_scoped_release release;
    return cap_->caption(x, opt);
  }
  const models::LoadedSeq2Seq& loaded() const { return m_; }
  const models::ImageShape& image_shape() const { return cap_->image_shape(); }

 private:
  models::LoadedSeq2Seq m_;
  std::unique_ptr<decode::ImageCaptioner> cap_;
};

}  // namespace

void bind_models(nb::module_& m) {
  nb::class_<TranslationResult>(m, "TranslationResult", "One sentence's translation (CTranslate2's names).")
      .def_ro("hypotheses", &TranslationResult::hypotheses, "The translations, best first.")
      .def_ro("scores", &TranslationResult::scores, "The search's score of each (log p / length penalty).")
      .def_ro("source_tokens", &TranslationResult::source_tokens)
      .def_ro("target_tokens", &TranslationResult::target_tokens)
      .def_prop_ro("attention", [](const TranslationResult& r) -> nb::object {
            if (!r.attention.defined()) return nb::none();
            return nb::cast(to_array<nb::numpy>(r.attention), nb::rv_policy::reference);
          },
          "With return_attention: the last layer's cross-attention, mean over heads, as a NumPy array\n"
          "[target_tokens, source_tokens] (rows sum to 1); None otherwise.")
      .def_prop_ro("cross_attention", [](const TranslationResult& r) {
            nb::list l;
            for (const Tensor& t : r.cross_attention) l.append(nb::cast(to_array<nb::numpy>(t), nb::rv_policy::reference));
            return l;
          },
          "With return_attention: every layer's cross-attention [heads, target_tokens, source_tokens].")
      .def("__repr__", [](const TranslationResult& r) {
        return "TranslationResult(hypotheses=" + std::string(nb::repr(nb::cast(r.hypotheses)).c_str()) + ")";
      });

  nb::class_<PyTranslator>(m, "Translator",
                           "A translation model file (any sequence-to-sequence type: Transformer, rnn-attention …)\n"
                           "with the SentencePiece vocabulary it carries.")
      .def(nb::init<const std::string&, const std::string&, const std::string&>(), "model_path"_a, "weights"_a = "auto",
           "device"_a = "cpu",
           "weights: what the decoding steps read: f32, bf16 (AVX512-BF16 products on the CPU, the tensor\n"
           "cores on a GPU), int8 (the CPU) or auto (int8 for a file qkv quantize wrote, f32 otherwise). device: "
           "'cpu', 'cuda' or 'cuda:N' (CTranslate2's name), where\n"
           "the model decodes.",
           nb::call_guard<nb::gil_scoped_release>())
      .def(
          "translate_batch",
          [](const PyTranslator& t, const std::vector<std::string>& sentences, int64_t beam_size, double length_penalty,
             int64_t max_extra_length, int64_t max_decoding_length, int64_t max_batch_size, int64_t num_hypotheses,
             bool return_attention, bool use_cache) {
            decode::TranslateOptions o = search_options(beam_size, length_penalty);
            o.max_extra = max_extra_length, o.max_length = max_decoding_length, o.batch_size = max_batch_size;
            o.use_cache = use_cache;
            nb::gil_scoped_release release;
            return t.translate_batch(sentences, o, num_hypotheses, return_attention);
          },
          "sentences"_a, "beam_size"_a = decode::kDefaultBeamSize, "length_penalty"_a = decode::kDefaultLengthPenalty,
          "max_extra_length"_a = decode::TranslateOptions{}.max_extra,
          "max_decoding_length"_a = decode::TranslateOptions{}.max_length,
          "max_batch_size"_a = decode::TranslateOptions{}.batch_size, "num_hypotheses"_a = 1,
          "return_attention"_a = false, "use_cache"_a = decode::TranslateOptions{}.use_cache,
          "Translates sentences (plain text; the model's tokenizer splits them) with beam search (greedy at\n"
          "beam_size 1): one TranslationResult each, in order. An output is at most its source's length +\n"
          "max_extra_length tokens (1 … 10000), and at most max_decoding_length tokens, its EOS included\n"
          "(CTranslate2's name; 0 … 1000000, 0: no limit); length_penalty is α of ((5 + n) / 6)^α (0 … 5),\n"
          "as the command line's --max-extra, --max-length and --alpha take them.")
      .def(
          "translate",
          [](const PyTranslator& t, nb::handle text, int64_t beam_size, double length_penalty) -> nb::object {
            const decode::TranslateOptions o = search_options(beam_size, length_penalty);
            const bool one = nb::isinstance<nb::str>(text);
            std::vector<std::string> lines;
            if (one) {
              lines.push_back(utf8_arg(text, "translate: text"));
            } else if (nb::isinstance<nb::list>(text) || nb::isinstance<nb::tuple>(text)) {
              for (nb::handle line : text) lines.push_back(utf8_arg(line, "translate: each sentence of text"));
            } else {
              throw nb::type_error(detail::concat("qkv: translate: text must be a str or a list of str, not ",
                                                  nb::type_name(text.type()).c_str()).c_str());
            }
            std::vector<TranslationResult> r;
            {
              nb::gil_scoped_release release;
              r = t.translate_batch(lines, o, 1, false);
            }
            if (one) return nb::str(r[0].hypotheses[0].c_str());
            nb::list l;
            for (auto& x : r) l.append(nb::str(x.hypotheses[0].c_str()));
            return l;
          },
          "text"_a, "beam_size"_a = decode::kDefaultBeamSize, "length_penalty"_a = decode::kDefaultLengthPenalty,
          "A sentence's translation (a str), or each sentence's of a list.")
      .def(
          "neuron",
          [](const PyTranslator& t, const std::string& text, int64_t layer, int64_t head, int64_t query,
             const std::string& kind, int64_t beam_size, double length_penalty) {
            const decode::TranslateOptions o = search_options(beam_size, length_penalty);
            decode::NeuronView v;
            {
              nb::gil_scoped_release release;
              v = decode::translation_neuron(*t.loaded().model, *t.loaded().tokenizer, text, layer, head, query, kind, o);
            }
            return neuron_dict(v);
          },
          "text"_a, "layer"_a, "head"_a, "query"_a, "kind"_a = "encoder_self", "beam_size"_a = decode::kDefaultBeamSize,
          "length_penalty"_a = decode::kDefaultLengthPenalty, kTranslatorNeuronDoc.c_str())
      .def_prop_ro(
          "metadata", [](const PyTranslator& t) { return meta_dict(t.loaded().meta); },
          "The model file's metadata (type, hyper-parameters, training config).")
      .def("__repr__", [](const PyTranslator& t) { return "qkv.Translator('" + t.loaded().path + "')"; });

  nb::class_<TextStream>(m, "TextStream", "Generated text as it is written (an iterator of pieces).")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &TextStream::next);

  nb::class_<PyLanguageModel>(m, "LanguageModel", "A language model file (a GPT) with the tokenizer it carries.")
      .def(nb::init<const std::string&, const std::string&, const std::string&>(), "model_path"_a, "weights"_a = "auto",
           "device"_a = "cpu",
           "weights: f32, bf16, int8 (the CPU) or auto (int8 for a quantized file, f32 otherwise); device: 'cpu', "
           "'cuda' or 'cuda:N'.",
           nb::call_guard<nb::gil_scoped_release>())
      .def(
          "generate",
          [](const PyLanguageModel& lm, const std::string& prompt, int64_t max_new_tokens, double temperature,
             int64_t top_k, double top_p, uint64_t seed, bool use_cache, bool stream, double repetition_penalty,
             double frequency_penalty, double presence_penalty) -> nb::object {
            const decode::GenerateOptions o =
                generate_options(max_new_tokens, temperature, top_k, top_p, seed, use_cache,
                                 Penalties{repetition_penalty, frequency_penalty, presence_penalty});
            if (stream) return nb::cast(lm.stream(prompt, o), nb::rv_policy::take_ownership);
            return nb::str(lm.generate(prompt, o).c_str());
          },
          "prompt"_a, "max_new_tokens"_a = 500, "temperature"_a = 0.8, "top_k"_a = 0, "top_p"_a = 1.0, "seed"_a = 1337,
          "use_cache"_a = true, "stream"_a = false, "repetition_penalty"_a = 1.0, "frequency_penalty"_a = 0.0,
          "presence_penalty"_a = 0.0,
          "Continues `prompt` with up to max_new_tokens sampled tokens (temperature 0: greedy; top_k,\n"
          "top_p: truncation; repetition_penalty (Hugging Face's, on the prompt's and the output's tokens),\n"
          "frequency_penalty and presence_penalty (OpenAI's, on the output's): the history's penalties,\n"
          "off at 1, 0, 0) and returns the new text — or, with stream=True, an iterator over its pieces as\n"
          "they are chosen. The same seed gives the same text as `qkv generate --seed`. Calls from several\n"
          "threads at once run together (a GPT's or a Llama's, with the KV cache: one step a token of each).")
      .def(
          "apply_chat_template",
          [](const PyLanguageModel& lm, nb::handle messages, bool add_generation_prompt, nb::handle tools,
             bool tokenize, nb::handle continue_final_message, nb::kwargs kwargs) -> nb::object {
            const text::ChatInputs in =
                chat_inputs(messages, add_generation_prompt, tools, kwargs, continue_final_message);
            const std::string text = lm.chat_prompt(in, "apply_chat_template");
            if (!tokenize) return nb::str(text.c_str(), text.size());
            return nb::cast(lm.loaded().tokenizer.encode_prompt(text));
          },
          "messages"_a, "add_generation_prompt"_a = false, "tools"_a = nb::none(), "tokenize"_a = false,
          "continue_final_message"_a.none() = false, "kwargs"_a,
          "The model's chat template (a converted instruct model's chat_template.jinja or\n"
          "tokenizer_config.json's) rendered on `messages` ([{'role': 'user', 'content': 'Hi'}, …]) as\n"
          "transformers' tokenizer.apply_chat_template renders it — tools, add_generation_prompt and more\n"
          "keyword arguments (enable_thinking=False, …) reach the template — the text, or with\n"
          "tokenize=True its ids (encoded without adding special tokens: the template writes them).\n"
          "continue_final_message=True (or a field's name) ends the prompt inside the final message, for\n"
          "the model to go on with it (a prefill), as transformers does.")
      .def(
          "chat",
          [](const PyLanguageModel& lm, nb::handle messages, int64_t max_new_tokens, double temperature, int64_t top_k,
             double top_p, uint64_t seed, bool use_cache, bool stream, double repetition_penalty,
             double frequency_penalty, double presence_penalty, nb::handle tools, nb::handle continue_final_message,
             nb::kwargs kwargs) -> nb::object {
            const decode::GenerateOptions o =
                generate_options(max_new_tokens, temperature, top_k, top_p, seed, use_cache,
                                 Penalties{repetition_penalty, frequency_penalty, presence_penalty});
            text::ChatInputs in = chat_inputs(messages, true, tools, kwargs, continue_final_message);
            // None: the pipeline's rule — continue when the final message is the assistant's
            if (continue_final_message.is_none() && !in.messages.empty() && in.messages.back().is_object() &&
                in.messages.back().value("role", nlohmann::ordered_json()) == "assistant")
              in.continue_final_message = "content";
            in.add_generation_prompt = in.continue_final_message.empty();
            std::vector<int32_t> ids = lm.encode_chat(in);
            if (stream) return nb::cast(lm.stream_ids(std::move(ids), o), nb::rv_policy::take_ownership);
            const std::string text = lm.generate_ids(ids, o);
            return nb::str(text.c_str(), text.size());
          },
          "messages"_a, "max_new_tokens"_a = 500, "temperature"_a = 0.8, "top_k"_a = 0, "top_p"_a = 1.0,
          "seed"_a = 1337, "use_cache"_a = true, "stream"_a = false, "repetition_penalty"_a = 1.0,
          "frequency_penalty"_a = 0.0, "presence_penalty"_a = 0.0, "tools"_a = nb::none(),
          "continue_final_message"_a.none() = nb::none(), "kwargs"_a,
          "The assistant's answer to `messages`: apply_chat_template(messages, add_generation_prompt=True,\n"
          "tools=tools, **kwargs) encoded, then generated as generate() does with these arguments (stream=True:\n"
          "an iterator over its pieces), as transformers' pipeline('text-generation') answers a chat. A final\n"
          "assistant message is continued (continue_final_message=None, the pipeline's default; False: a new\n"
          "answer after it).")
      .def(
          "generate_batch",
          [](const PyLanguageModel& lm, const std::vector<std::string>& prompts, int64_t max_new_tokens,
             double temperature, int64_t top_k, double top_p, uint64_t seed, bool use_cache, double repetition_penalty,
             double frequency_penalty, double presence_penalty) {
            return lm.generate_batch(prompts, generate_options(max_new_tokens, temperature, top_k, top_p, seed, use_cache,
                                                               Penalties{repetition_penalty, frequency_penalty,
                                                                         presence_penalty}));
          },
          "prompts"_a, "max_new_tokens"_a = 500, "temperature"_a = 0.8, "top_k"_a = 0, "top_p"_a = 1.0, "seed"_a = 1337,
          "use_cache"_a = true, "repetition_penalty"_a = 1.0, "frequency_penalty"_a = 0.0, "presence_penalty"_a = 0.0,
          "The texts generate() gives for each of `prompts` with these arguments, computed together (a GPT's\n"
          "or a Llama's: continuous batching over a paged KV cache, each step a token of every prompt's\n"
          "text, up to 64 at a time), as CTranslate2's Generator.generate_batch.")
      .def(
          "neuron",
          [](const PyLanguageModel& lm, const std::string& text, int64_t layer, int64_t head, int64_t query) {
            decode::NeuronView v;
            {
              nb::gil_scoped_release release;
              v = decode::language_model_neuron(*lm.loaded().model, lm.loaded().tokenizer, text, layer, head, query);
            }
            return neuron_dict(v);
          },
          "text"_a, "layer"_a, "head"_a, "query"_a, kLanguageModelNeuronDoc.c_str())
      .def(
          "perplexity",
          [](const PyLanguageModel& lm, const std::string& text, int64_t block_size) {
            const std::vector<int32_t> ids = lm.loaded().tokenizer.encode(text);
            eval::Perplexity p;
            {
              nb::gil_scoped_release release;
              p = eval::perplexity(*lm.loaded().model, ids, block_size);
            }
            nb::dict d;
            d["perplexity"] = p.perplexity, d["loss"] = p.loss, d["tokens"] = p.tokens, d["block_size"] = p.block;
            return d;
          },
          "text"_a, "block_size"_a = 0,
          "The perplexity of `text` under the model, as `qkv eval --text` reports it: exp of the mean\n"
          "−log p(x_t | x_<t) over its tokens after the first, read in windows of block_size tokens (0: the\n"
          "model's context, at most 1024) that share one token. {'perplexity', 'loss', 'tokens', 'block_size'}.")
      .def_prop_ro("metadata", [](const PyLanguageModel& lm) { return meta_dict(lm.loaded().meta); })
      .def("__repr__", [](const PyLanguageModel& lm) { return "qkv.LanguageModel('" + lm.loaded().path + "')"; });

  nb::class_<PyMaskedLanguageModel>(m, "MaskedLanguageModel",
                                    "A masked language model file (a converted BERT) with the tokenizer it carries.")
      .def(nb::init<const std::string&, const std::string&>(), "model_path"_a, "weights"_a = "auto",
           nb::call_guard<nb::gil_scoped_release>(),
           "weights: what the encoder's layers read: f32, int8 (rows with a scale each, where the CPU's int8\n"
           "products take 8-bit activations: VNNI or AMX; elsewhere f32) or auto (int8 for a file qkv quantize\n"
           "wrote, f32 otherwise).")
      .def(
          "fill_mask",
          [](const PyMaskedLanguageModel& b, const std::string& text, int64_t top_k,
             std::optional<std::string> text_pair) -> nb::object {
            const auto masks = b.fill_mask(text, top_k, text_pair.value_or(""));
            nb::list out;
            for (const auto& cands : masks) {
              nb::list l;
              for (const auto& c : cands) {
                nb::dict d;
                d["score"] = c.score, d["token"] = c.token, d["token_str"] = c.token_str, d["sequence"] = c.sequence;
                l.append(d);
              }
              out.append(l);
            }
            if (masks.size() == 1) return out[0];
            return out;
          },
          "text"_a, "top_k"_a = 5, "text_pair"_a = nb::none(),
          "The top_k tokens for each [MASK] of `text`, as transformers' pipeline(\"fill-mask\") gives them:\n"
          "[{'score', 'token', 'token_str', 'sequence'}, …] for one mask, a list of such lists for several.")
      .def(
          "text_classification",
          [](const PyMaskedLanguageModel& b, const nb::handle& inputs, const nb::object& top_k,
             std::optional<std::string> text_pair, std::optional<std::string> function_to_apply,
             int64_t batch_size) -> nb::object {
            auto [texts, one] = texts_arg(inputs, "inputs");
            decode::TextClassificationOptions o;
            // top_k: not given (the pipeline's legacy answer), None (every label) or k ≥ 1
            const bool legacy = !top_k.is_none() && nb::isinstance<nb::int_>(top_k) && nb::cast<int64_t>(top_k) == -1;
            o.top_k = legacy ? 1 : top_k.is_none() ? 0 : -2;
            if (o.top_k == -2) {
              if (!nb::isinstance<nb::int_>(top_k) || nb::cast<int64_t>(top_k) < 1)
                throw nb::value_error("top_k must be None (every label) or an int of at least 1");
              o.top_k = nb::cast<int64_t>(top_k);
            }
            o.batch_size = batch_size;
            if (text_pair) o.text_pairs.assign(texts.size(), *text_pair);
            if (function_to_apply)
              o.function = parse_enum<decode::ClassificationFunction>(*function_to_apply, "function_to_apply");
            std::vector<std::vector<decode::LabelScore>> all;
            {
              nb::gil_scoped_release release;
              all = decode::text_classification(b.model(), b.tokenizer(), texts, o);
            }
            nb::list out;
            for (const auto& scores : all) {
              nb::list l;
              for (const auto& x : scores) {
                nb::dict d;
                d["label"] = x.label, d["score"] = x.score;
                l.append(d);
              }
              if (legacy)
                out.append(l[0]);  // {'label', 'score'} per text, as the pipeline without top_k
              else
                out.append(l);
            }
            if (one && !legacy) return out[0];
            return out;
          },
          "inputs"_a, "top_k"_a.none() = -1, "text_pair"_a = nb::none(), "function_to_apply"_a = nb::none(),
          "batch_size"_a = 32,
          "A sequence classifier's labels for a text or a list of texts, as transformers'\n"
          "pipeline(\"text-classification\") gives them: without top_k, [{'label', 'score'}] (the best label of\n"
          "each text); with top_k=k, the best k labels of each text, best first; top_k=None, every label.\n"
          "function_to_apply: 'softmax', 'sigmoid' or 'none' (default: by the config's problem_type).")
      .def(
          "zero_shot_classification",
          [](const PyMaskedLanguageModel& b, const nb::handle& sequences, const nb::handle& candidate_labels,
             const std::string& hypothesis_template, bool multi_label, int64_t batch_size) -> nb::object {
            auto [texts, one] = texts_arg(sequences, "sequences");
            std::vector<std::string> labels;
            if (nb::isinstance<nb::str>(candidate_labels)) {  // "a, b, c": split at commas, stripped (the pipeline's)
              labels = decode::parse_candidate_labels(nb::cast<std::string>(candidate_labels));
            } else if (!nb::try_cast(candidate_labels, labels)) {
              throw nb::type_error("candidate_labels must be a str (comma-separated) or a list of str");
            }
            if (labels.empty()) throw nb::value_error("candidate_labels names no label");
            if (batch_size < 1) throw nb::value_error("batch_size must be at least 1");
            decode::ZeroShotOptions o;
            o.hypothesis_template = hypothesis_template, o.multi_label = multi_label, o.batch_size = batch_size;
            std::vector<std::vector<decode::LabelScore>> all;
            {
              nb::gil_scoped_release release;
              all = decode::zero_shot_classification(b.model(), b.tokenizer(), texts, labels, o);
            }
            nb::list out;
            for (size_t i = 0; i < all.size(); ++i) {
              nb::dict d;
              std::vector<std::string> names;
              std::vector<double> scores;
              for (const auto& s : all[i]) names.push_back(s.label), scores.push_back(s.score);
              d["sequence"] = texts[i], d["labels"] = names, d["scores"] = scores;
              out.append(d);
            }
            return one ? out[0] : nb::object(out);
          },
          "sequences"_a, "candidate_labels"_a, "hypothesis_template"_a = "This example is {}.", "multi_label"_a = false,
          "batch_size"_a = 32,
          "An NLI classifier's scores for labels named at run time, as transformers'\n"
          "pipeline(\"zero-shot-classification\") gives them: {'sequence', 'labels', 'scores'} (labels best\n"
          "first) for a str, a list of them for a list. Each label becomes a hypothesis (the template's {})\n"
          "read after the text; its score is the softmax of the entailment logits over the labels, or with\n"
          "multi_label each label's entailment against contradiction alone. candidate_labels: a list of str or\n"
          "one comma-separated str.")
      .def(
          "question_answering",
          [](const PyMaskedLanguageModel& b, const nb::handle& question, const nb::handle& context, int64_t top_k,
             std::optional<int64_t> doc_stride, int64_t max_answer_len, std::optional<int64_t> max_seq_len,
             bool handle_impossible_answer, bool align_to_words, int64_t batch_size) -> nb::object {
            auto [questions, one] = texts_arg(question, "question");
            auto [contexts, one_context] = texts_arg(context, "context");
            if (one != one_context) throw nb::type_error("question and context must both be a str or both a list");
            if (top_k < 1) throw nb::value_error("top_k must be at least 1");
            if (max_answer_len < 1) throw nb::value_error("max_answer_len must be at least 1");
            if (batch_size < 1) throw nb::value_error("batch_size must be at least 1");
            if ((doc_stride && *doc_stride < 0) || (max_seq_len && *max_seq_len < 1))
              throw nb::value_error("doc_stride must be ≥ 0 and max_seq_len ≥ 1");
            decode::QuestionAnsweringOptions o;
            o.top_k = top_k, o.max_answer_len = max_answer_len, o.batch_size = batch_size;
            o.doc_stride = doc_stride.value_or(-1), o.max_seq_len = max_seq_len.value_or(0);
            o.handle_impossible_answer = handle_impossible_answer, o.align_to_words = align_to_words;
            std::vector<std::vector<decode::Answer>> all;
            {
              nb::gil_scoped_release release;
              all = decode::question_answering(b.model(), b.tokenizer(), questions, contexts, o);
            }
            nb::list out;
            for (size_t i = 0; i < all.size(); ++i) {
              const std::string text = qkv::text::valid_utf8(contexts[i]);
              nb::list l;
              for (const auto& x : all[i]) {
                nb::dict d;
                d["score"] = x.score, d["start"] = qkv::text::code_points(text, x.start);
                d["end"] = qkv::text::code_points(text, x.end), d["answer"] = x.answer;
                l.append(d);
              }
              out.append(all[i].size() == 1 ? nb::object(l[0]) : nb::object(l));  // (the pipeline's: one left, a dict)
            }
            return one ? out[0] : nb::object(out);
          },
          "question"_a, "context"_a, "top_k"_a = 1, "doc_stride"_a = nb::none(), "max_answer_len"_a = 15,
          "max_seq_len"_a = nb::none(), "handle_impossible_answer"_a = false, "align_to_words"_a = true,
          "batch_size"_a = 32,
          "The span of `context` that answers `question`, read from a …ForQuestionAnswering model as\n"
          "transformers' pipeline(\"question-answering\") reads it: {'score', 'start', 'end', 'answer'} (start\n"
          "and end: the answer's characters in the context), a list of them best first with top_k > 1 where\n"
          "more than one is found; for lists of questions and contexts, a result per pair. The context is read\n"
          "in windows of max_seq_len tokens (default: the tokenizer's model_max_length, at most 384) reaching\n"
          "doc_stride tokens (default half a window, at most 128) into the one before; a text found in several\n"
          "windows has its scores summed. handle_impossible_answer also scores the empty answer.")
      .def(
          "multiple_choice",
          [](const PyMaskedLanguageModel& b, const std::string& context, const std::vector<std::string>& endings,
             const std::string& header, int64_t max_length) -> nb::list {
            if (max_length < 0) throw nb::value_error("max_length must be ≥ 0 (0: the tokenizer's)");
            std::vector<decode::ChoiceScore> scores;
            {
              nb::gil_scoped_release release;
              scores = decode::multiple_choice(b.model(), b.tokenizer(), context, endings, header, max_length);
            }
            nb::list out;
            for (const auto& s : scores) {
              nb::dict d;
              d["ending"] = s.ending, d["score"] = s.score, d["logit"] = s.logit;
              out.append(d);
            }
            return out;
          },
          "context"_a, "endings"_a, "header"_a = "", "max_length"_a = 0,
          "Which ending follows `context` best, read from a …ForMultipleChoice model (SWAG's, or one\n"
          "qkv.train fine-tuned with \"task\": \"multiple_choice\") as run_swag.py scores it: each ending beside\n"
          "the context (\"{header} {ending}\"), its score, the softmax over them — [{'ending', 'score', 'logit'}]\n"
          "in the endings' order.")
      .def(
          "token_classification",
          [](const PyMaskedLanguageModel& b, const nb::handle& inputs, const std::string& aggregation_strategy,
             std::optional<std::vector<std::string>> ignore_labels, int64_t batch_size) -> nb::object {
            auto [texts, one] = texts_arg(inputs, "inputs");
            decode::TokenClassificationOptions o;
            o.aggregation = parse_enum<decode::Aggregation>(aggregation_strategy, "aggregation_strategy");
            if (ignore_labels) o.ignore_labels = *ignore_labels;
            o.batch_size = batch_size;
            std::vector<std::vector<decode::TokenEntity>> all;
            {
              nb::gil_scoped_release release;
              all = decode::token_classification(b.model(), b.tokenizer(), texts, o);
            }
            nb::list out;
            for (size_t i = 0; i < all.size(); ++i) {
              const auto& entities = all[i];
              const std::string text = qkv::text::valid_utf8(texts[i]);
              nb::list l;
              for (const auto& e : entities) {
                nb::dict d;
                if (e.index < 0)
                  d["entity_group"] = e.entity;
                else
                  d["entity"] = e.entity;
                d["score"] = e.score;
                if (e.index >= 0) d["index"] = e.index;
                d["word"] = e.word, d["start"] = qkv::text::code_points(text, e.start);
                d["end"] = qkv::text::code_points(text, e.end);
                l.append(d);
              }
              out.append(l);
            }
            if (one) return out[0];
            return out;
          },
          "inputs"_a, "aggregation_strategy"_a = "none", "ignore_labels"_a = nb::none(), "batch_size"_a = 32,
          "A token classifier's entities, as transformers' pipeline(\"token-classification\") gives them:\n"
          "[{'entity', 'score', 'index', 'word', 'start', 'end'}, …] per text ('O' left out; ignore_labels\n"
          "to change that); aggregation_strategy='simple' joins neighbouring tokens of one tag into\n"
          "{'entity_group', 'score', 'word', …}. start and end are None: qkv's tokenizer keeps no offsets.")
      .def(
          "encode",
          [](const PyMaskedLanguageModel& b, const nb::handle& sentences, std::optional<bool> normalize_embeddings,
             std::optional<std::string> pooling, int64_t max_length, int64_t batch_size) -> nb::object {
            auto [texts, one] = texts_arg(sentences, "sentences");
            decode::EmbedOptions o;
            if (normalize_embeddings) o.normalize = *normalize_embeddings ? 1 : 0;
            if (pooling) o.pooling = parse_enum<nn::BertPooling>(*pooling, "pooling");
            o.max_length = max_length, o.batch_size = batch_size;
            std::vector<std::vector<float>> e;
            {
              nb::gil_scoped_release release;
              e = decode::embed(b.model(), b.tokenizer(), texts, o);
            }
            const int64_t d = e.empty() ? 0 : static_cast<int64_t>(e[0].size());
            std::vector<float> flat;
            for (const auto& v : e) flat.insert(flat.end(), v.begin(), v.end());
            Tensor t = Tensor::from_vector(flat, {static_cast<int64_t>(e.size()), d});
            if (one) t = t.reshape({d});
            return nb::cast(to_array<nb::numpy>(t), nb::rv_policy::reference);
          },
          "sentences"_a, "normalize_embeddings"_a = nb::none(), "pooling"_a = nb::none(), "max_length"_a = 0,
          "batch_size"_a = 32,
          "Sentence embeddings, as sentence-transformers' SentenceTransformer.encode gives them: a NumPy\n"
          "float32 array [n, hidden] for a list, [hidden] for one str. A converted sentence-transformers\n"
          "folder keeps its pooling, Normalize and max_seq_length; otherwise the mean of the hidden states.\n"
          "pooling: 'cls', 'mean' or 'max'; max_length: texts cut to this many tokens (0: the model's).")
      .def(
          "rank",
          [](const PyMaskedLanguageModel& b, const std::string& query, const nb::handle& documents,
             std::optional<int64_t> top_k, bool return_documents, std::optional<std::string> activation,
             int64_t max_length, int64_t batch_size) {
            auto [docs, one] = texts_arg(documents, "documents");
            decode::RerankOptions o;
            if (top_k) {
              if (*top_k < 1) throw nb::value_error("top_k must be None (every document) or an int of at least 1");
              o.top_k = *top_k;
            }
            if (activation) {
              o.function = parse_enum<decode::ClassificationFunction>(*activation, "activation");
              if (o.function == decode::ClassificationFunction::softmax)
                throw nb::value_error("activation must be 'auto', 'sigmoid' or 'none'");
            }
            if (max_length < 0) throw nb::value_error("max_length must be 0 (the model's) or positive");
            o.max_length = max_length, o.batch_size = batch_size;
            std::vector<decode::RankedDocument> ranked;
            {
              nb::gil_scoped_release release;
              ranked = decode::rerank(b.model(), b.tokenizer(), query, docs, o);
            }
            nb::list out;
            for (const auto& r : ranked) {
              nb::dict d;
              d["corpus_id"] = r.index, d["score"] = r.score;
              if (return_documents) d["text"] = docs[static_cast<size_t>(r.index)];
              out.append(d);
            }
            return out;
          },
          "query"_a, "documents"_a, "top_k"_a = nb::none(), "return_documents"_a = false, "activation"_a = nb::none(),
          "max_length"_a = 0, "batch_size"_a = 32,
          "A cross-encoder's ranking of `documents` for `query`, as sentence-transformers' CrossEncoder.rank\n"
          "gives it: [{'corpus_id', 'score'(, 'text')}, …] best first (top_k: the best k). Each (query,\n"
          "document) pair is cut to max_length tokens (0: the tokenizer's model_max_length) the longer first;\n"
          "the score is the model's activation of its one logit (sigmoid unless its config says identity;\n"
          "activation='none': the logit).")
      .def_prop_ro(
          "labels", [](const PyMaskedLanguageModel& b) { return b.model().task().labels; },
          "A classifier's labels (config.id2label, in id order); [] without a classifier.")
      .def(
          "neuron",
          [](const PyMaskedLanguageModel& b, const std::string& text, int64_t layer, int64_t head, int64_t query) {
            decode::NeuronView v;
            {
              nb::gil_scoped_release release;
              v = decode::masked_language_model_neuron(*b.loaded().model, b.loaded().tokenizer, text, layer, head, query);
            }
            return neuron_dict(v);
          },
          "text"_a, "layer"_a, "head"_a, "query"_a, kMaskedNeuronDoc.c_str())
      .def_prop_ro("metadata", [](const PyMaskedLanguageModel& b) { return meta_dict(b.loaded().meta); })
      .def("__repr__",
           [](const PyMaskedLanguageModel& b) { return "qkv.MaskedLanguageModel('" + b.loaded().path + "')"; });

  nb::class_<PyImageClassifier>(m, "ImageClassifier", "An image classifier file (a ConvNet, with or without non-local blocks).")
      .def(nb::init<const std::string&>(), "model_path"_a, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "classify",
          [](const PyImageClassifier& c, nb::handle images) {
            auto [names, p] = c.classify(images);
            return nb::make_tuple(names, to_array<nb::numpy>(p));
          },
          "images"_a,
          "(class names, probabilities [N, classes]) of pictures: float [N, C, H, W] in [0, 1], or uint8\n"
          "0…255 as [N, H, W] or one [H, W].")
      .def(
          "evaluate",
          [](const PyImageClassifier& c, nb::handle images, const std::vector<int32_t>& labels, int64_t batch_size) {
            const eval::ClassifierScores e = c.evaluate(images, labels, batch_size);
            nb::dict d;
            d["accuracy"] = e.accuracy, d["loss"] = e.loss, d["images"] = e.images;
            d["per_class_accuracy"] = e.per_class_accuracy();
            nb::list confusion;
            for (int64_t t = 0; t < e.classes; ++t)
              confusion.append(std::vector<int64_t>(e.confusion.begin() + t * e.classes,
                                                    e.confusion.begin() + (t + 1) * e.classes));
            d["confusion"] = confusion;
            d["predictions"] = e.predictions;
            return d;
          },
          "images"_a, "labels"_a, "batch_size"_a = 500,
          "Scores labelled pictures as `qkv eval` does (images as classify takes them, labels 0 … classes − 1):\n"
          "{'accuracy', 'loss' (mean cross-entropy), 'images', 'per_class_accuracy', 'confusion' (rows: the\n"
          "true class, columns: the prediction), 'predictions'}.")
      .def_prop_ro("classes", [](const PyImageClassifier& c) {
        std::vector<std::string> names;
        for (int64_t k = 0; k < c.loaded().model->num_classes(); ++k) names.push_back(c.loaded().model->class_name(k));
        return names;
      })
      .def_prop_ro("image_shape", [](const PyImageClassifier& c) { return shape_tuple(c.loaded().model->image_shape()); },
                   "(channels, height, width) of the pictures it takes.")
      .def_prop_ro("metadata", [](const PyImageClassifier& c) { return meta_dict(c.loaded().meta); })
      .def("__repr__", [](const PyImageClassifier& c) { return "qkv.ImageClassifier('" + c.loaded().path + "')"; });

  nb::class_<PyImageCaptioner>(m, "ImageCaptioner", "An image captioner file (a ConvNet encoder, an attending decoder).")
      .def(nb::init<const std::string&>(), "model_path"_a, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "caption",
          [](const PyImageCaptioner& c, nb::handle images, int64_t beam_size, bool return_attention) -> nb::object {
            QKV_CHECK(beam_size >= 1, "caption: beam_size must be ≥ 1, got ", beam_size);
            decode::CaptionOptions o;
            o.beam_size = beam_size, o.attention = return_attention;
            const std::vector<decode::Caption> caps = c.caption(images, o);
            nb::list l;
            for (const decode::Caption& cap : caps) {
              if (!return_attention) {
                l.append(nb::str(cap.text.c_str()));
                continue;
              }
              std::vector<float> flat;
              for (const auto& step : cap.attention) flat.insert(flat.end(), step.begin(), step.end());
              const auto steps = static_cast<int64_t>(cap.attention.size());
              Tensor a = Tensor::from_vector(flat, {steps, cap.rows, cap.cols});
              nb::dict d;
              d["caption"] = cap.text, d["words"] = cap.words;
              d["attention"] = nb::cast(to_array<nb::numpy>(a), nb::rv_policy::reference);
              l.append(d);
            }
            return l;
          },
          "images"_a, "beam_size"_a = decode::CaptionOptions{}.beam_size, "return_attention"_a = false,
          "A caption (str) per picture; with return_attention, a dict per picture: caption, words, and\n"
          "attention [steps, grid rows, grid cols] — where the decoder looked while writing each word and </s>.")
      .def_prop_ro("image_shape", [](const PyImageCaptioner& c) { return shape_tuple(c.image_shape()); },
                   "(channels, height, width) of the pictures it takes.")
      .def_prop_ro("metadata", [](const PyImageCaptioner& c) { return meta_dict(c.loaded().meta); })
      .def("__repr__", [](const PyImageCaptioner& c) { return "qkv.ImageCaptioner('" + c.loaded().path + "')"; });

  m.def(
      "convert",
      [](const std::string& folder, const std::string& out, const std::string& dtype, const std::string& head,
         const std::vector<std::string>& labels, const std::string& problem_type, uint64_t seed) {
        models::HfConvertOptions o;
        o.store = parse_enum<io::StoreAs>(dtype);
        QKV_CHECK(o.store != io::StoreAs::kKeep, "convert: dtype must be f32, f16 or bf16, got \"keep\"");
        QKV_CHECK(!head.empty() || (labels.empty() && problem_type.empty()),
                  "convert: labels and problem_type are a new head's (head=\"sequence\" or \"token\")");
        QKV_CHECK(head != "span" || labels.empty(), "convert: a new span head (question answering) takes no labels");
        o.head = head, o.labels = labels, o.problem_type = problem_type, o.seed = seed;
        nb::gil_scoped_release release;
        models::convert_hf(folder, out, o);
      },
      "folder"_a, "out"_a, "dtype"_a = "f32", "head"_a = "", "labels"_a = std::vector<std::string>{},
      "problem_type"_a = "", "seed"_a = 0,
      "Converts a Hugging Face model folder (config.json, *.safetensors, tokenizer.json: GPT-2, Llama,\n"
      "Qwen2, Qwen3, Mistral, Phi-3, Gemma 3, Marian/OPUS-MT, the BERT family, ModernBERT) to a qkv model\n"
      "file, as `qkv convert --from hf FOLDER -o OUT`. head=\"sequence\" (or \"token\") with labels=[...]\n"
      "puts a new classifier on an encoder's checkpoint, as AutoModelForSequenceClassification.from_pretrained(\n"
      "folder, num_labels=...) does — to fine-tune with qkv.train({\"task\": \"text_classification\", ...});\n"
      "head=\"span\" a new question-answering head, as AutoModelForQuestionAnswering does (the task\n"
      "\"question_answering\"); head=\"choice\" a multiple-choice head, as AutoModelForMultipleChoice does\n"
      "(the task \"multiple_choice\"). `folder` may also be a qkv encoder file (a \"masked_lm\" run's\n"
      "model.safetensors: pre-training continued on your text) to put a new head on, as\n"
      "from_pretrained(run_mlm.py's output, num_labels=...) does.");

  m.def(
      "export_hf",
      [](const std::string& model, const std::string& folder, const std::string& dtype,
         const std::string& max_shard_size, bool force) {
        models::HfExportOptions o;
        o.store = parse_enum<io::StoreAs>(dtype);
        QKV_CHECK(o.store != io::StoreAs::kKeep, "export_hf: dtype must be f32, f16 or bf16, got \"keep\"");
        o.max_shard_bytes = models::parse_shard_size(max_shard_size, "export_hf: max_shard_size");
        o.force = force;
        nb::gil_scoped_release release;
        const models::HfExportReport r = models::export_hf(model, folder, o);
        return r.files;
      },
      "model"_a, "folder"_a, "dtype"_a = "f32", "max_shard_size"_a = "5GB", "force"_a = false,
      "Writes a qkv model file that qkv.convert made from a Hugging Face folder — or a run trained from one\n"
      "(a classifier fine-tuned with qkv.train, pre-training continued) — as a Hugging Face folder that\n"
      "transformers' from_pretrained loads: config.json, model.safetensors (sharded past max_shard_size,\n"
      "as save_pretrained shards), the tokenizer's files, under the checkpoint's own names; as\n"
      "`qkv export --to hf MODEL FOLDER`. A language model qkv trained (qkv.train, task \"lm\") goes as\n"
      "the class that computes it (GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)\n"
      "with its tokenizer as tokenizer.json. Returns the files written. The folder must not exist or be\n"
      "empty unless force=True.");

  m.def(
      "load",
      [](const std::string& path_in) -> nb::object {
        // A Hugging Face folder: converted to a temporary model file, loaded, and the file removed.
        std::string path = path_in;
        std::optional<fs::path> tmp;
        if (fs::is_directory(path_in)) {
          tmp = fs::temp_directory_path() / ("qkv-load-" + std::to_string(::getpid()) + "-" +
                                             std::to_string(reinterpret_cast<uintptr_t>(&path)) + ".safetensors");
          {
            nb::gil_scoped_release release;
            models::convert_hf(path_in, tmp->string());
          }
          path = tmp->string();
        }
        struct Remove {
          std::optional<fs::path>& p;
          ~Remove() {
            std::error_code ec;
            if (p) fs::remove(*p, ec);
          }
        } remove{tmp};
        const models::ModelType& t = models::model_file_type(path);
        switch (t.kind) {
          case models::Kind::image_to_text:
            return nb::cast(new PyImageCaptioner(path), nb::rv_policy::take_ownership);
          case models::Kind::seq2seq:
            return nb::cast(new PyTranslator(path, "f32", "cpu"), nb::rv_policy::take_ownership);
          case models::Kind::language_model:
            return nb::cast(new PyLanguageModel(path, "f32", "cpu"), nb::rv_policy::take_ownership);
          case models::Kind::image_classifier:
            return nb::cast(new PyImageClassifier(path), nb::rv_policy::take_ownership);
          case models::Kind::masked_language_model:
            return nb::cast(new PyMaskedLanguageModel(path), nb::rv_policy::take_ownership);
        }
        return nb::none();
      },
      "model_path"_a,
      "Any model file the registry knows, as what serves its kind: a Translator, LanguageModel,\n"
      "MaskedLanguageModel, ImageClassifier or ImageCaptioner; or a Hugging Face model folder (converted as qkv.convert does).");

  m.def(
      "train",
      [](nb::handle config, std::optional<std::string> out_dir, bool resume, nb::object callback, bool quiet,
         std::optional<std::string> base_dir) {
        nlohmann::json cfg;
        std::string name = "(dict)", base = base_dir.value_or(".");
        if (nb::isinstance<nb::str>(config) || nb::hasattr(config, "__fspath__")) {
          name = nb::cast<std::string>(nb::str(config));
          const std::string text = io::read_file(name, io::kMaxConfigBytes, "config");
          try {
            cfg = io::parse_json(text, "config '" + name + "'");
          } catch (const nlohmann::json::exception& e) {
            QKV_CHECK(false, "config '", name, "' is not valid JSON: ", e.what());
          }
          if (!base_dir) base = fs::path(name).parent_path().string();
        } else {
          cfg = io::parse_json(nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(config)), "config (dict)");
        }
        QKV_CHECK(cfg.is_object(), "config '", name, "' must be a JSON object");
        train::TrainerOptions o;
        o.out_dir = out_dir.value_or((fs::path("out") / (name == "(dict)" ? "python" : fs::path(name).stem().string())).string());
        o.resume = resume, o.full_config = cfg, o.quiet = quiet;
        std::exception_ptr raised;  // a callback's exception stops the run and is re-raised after it
        if (!callback.is_none())
          o.on_metrics = [&](const nlohmann::json& row) {
            nb::gil_scoped_acquire gil;
            try {
              nb::object r = callback(nb::module_::import_("json").attr("loads")(row.dump()));
              return r.is_none() || nb::cast<bool>(r);
            } catch (...) {
              raised = std::current_exception();
              return false;
            }
          };
        train::TrainResult r;
        {
          nb::gil_scoped_release release;
          r = train::train_from_config(cfg, name, base, o, [quiet](const std::string& line) {
            if (!quiet) std::fprintf(stderr, "qkv.train: %s\n", line.c_str());
          });
        }
        if (raised) std::rethrow_exception(raised);
        nb::dict d;
        d["steps"] = r.steps_done, d["interrupted"] = r.interrupted, d["loss"] = r.last_loss;
        d["rate"] = r.tokens_per_second, d["rate_unit"] = train::rate_unit(cfg);
        nb::dict ev;
        for (const auto& [k, v] : r.last_eval) ev[k.c_str()] = v;
        d["eval"] = ev;
        d["model"] = (fs::path(o.out_dir) / "model.safetensors").string();
        d["out_dir"] = o.out_dir;
        return d;
      },
      "config"_a, "out_dir"_a = nb::none(), "resume"_a = false, "callback"_a = nb::none(), "quiet"_a = true,
      "base_dir"_a = nb::none(),
      "Trains what a config describes (a path to a configs/*.json file, or the same as a dict), as\n"
      "`qkv train` does: checkpoints, metrics.jsonl and model.safetensors go to out_dir (default\n"
      "out/<config name>). callback(row) sees every metrics row as it is written (logged steps: step,\n"
      "loss, lr, grad_norm, tokens_per_s, elapsed_s; evaluations: step and the metrics); returning False\n"
      "stops the run (a checkpoint is saved). Returns a dict: steps, interrupted, loss, rate, eval, model.");
}

}  // namespace qkv::python
