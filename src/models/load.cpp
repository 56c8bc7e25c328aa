#include "qkv/models/load.h"

#include <set>

#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/nn/init.h"

namespace qkv::models {

namespace {

// A key of the file's metadata, which must be there (load_model_file checked only model_type and model).
const nlohmann::json& meta_field(const nlohmann::json& meta, const std::string& path, const char* key) {
  QKV_CHECK(meta.contains(key), "'", path, "': the model file's metadata has no \"", key,
            "\" (not written by qkv, or damaged)");
  return meta.at(key);
}

// The language-model tokenizer a file carries (characters, SentencePiece or Hugging Face's): a
// qkv::Error naming the file otherwise.
text::LMTokenizer read_lm_tokenizer(const nlohmann::json& meta, const std::string& path) {
  try {
    return text::LMTokenizer::from_json(meta_field(meta, path, "tokenizer"));
  } catch (const Error& e) {
    QKV_CHECK(false, "'", path, "': the tokenizer: ", e.what());
  }
  return {};
}

// Every token id the tokenizer can give must be a row of the model's embedding.
void check_tokenizer_fits(const text::LMTokenizer& tokenizer, int64_t model_vocab, const std::string& path) {
  QKV_CHECK(tokenizer.vocab_size() <= model_vocab, "'", path, "': the tokenizer has ", tokenizer.vocab_size(),
            " tokens, more than the model's vocab_size ", model_vocab);
}

// The registered type a file's metadata names (checked by load_model_file / load_model_metadata to
// hold "model_type"); not a registered name: an error naming the file.
const ModelType& named_type(const nlohmann::json& meta, const std::string& path) {
  const nlohmann::json& type = meta.at("model_type");
  QKV_CHECK(type.is_string(), "'", path, "': the model type ", type.dump(), " is not a name");
  try {
    return model_type(type.get<std::string>());
  } catch (const Error& e) {
    throw Error(detail::concat("'", path, "': ", e.what()));
  }
}

// A quantized file's int8 rows become the model's int8 inference weights as written. The matrices
// decoding reads only through them (Model::int8_only_weights, asked once the inference weights are
// set: the encoder's depend on the CPU) keep no f32 values: their storage is given back, and a read
// of it (training, a teacher-forced attention view, an export) is an error saying so. Any other
// listed matrix gets the rows' values, s[n] · W8[n, k].
void give_int8_rows(Model& m, const Int8Rows& rows, const std::string& path) {
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : m.module().named_parameters()) params.emplace(name, p);
  GivenInt8Rows::Map given;
  for (const auto& [name, q] : rows) given.emplace(params.at(name).impl().storage.get(), q);  // (names checked)
  {
    GivenInt8Rows scope(std::move(given));
    m.set_inference_weights(nn::InferenceWeights::int8);
  }
  std::set<const Storage*> int8_only;
  for (const Tensor& w : m.int8_only_weights()) int8_only.insert(w.impl().storage.get());
  for (const auto& [name, q] : rows) {
    Tensor p = params.at(name);
    if (!int8_only.contains(p.impl().storage.get())) {
      p.detach().copy_(q->dequantize());
      continue;
    }
    p.impl().storage->release(detail::concat(
        "'", path, "' holds '", name, "' as int8 rows for decoding (written by qkv quantize), not its f32 values: ",
        "training, teacher-forced attention views and exports need the f32 model file it was quantized from"));
  }
}

// The model a file describes, of `kind` (its registered type checked as type_of does), its
// vocabulary checked against the tokenizer's (tokenizer_vocab(meta) < 0: no tokenizer) before its
// parameters stream in (load_model_streaming: the model is built without drawing initial values,
// and the file's tensors are never all held beside it). Returns the model and fills `meta`.
template <class M>
std::unique_ptr<M> model_from(const std::string& path, Kind kind,
                              const std::function<int64_t(const nlohmann::json& meta)>& tokenizer_vocab,
                              const LoadOptions& options, nlohmann::json& meta) {
  QKV_CHECK(device_available(options.device), "'", path, "': cannot decode on ", options.device.str(),
            ": it is not available in this build of qkv or on this machine");
  const nn::InferenceWeights weights = decoding_weights(path, options);
  QKV_CHECK(options.device.is_cpu() || weights != nn::InferenceWeights::int8, "'", path,
            "': int8 weights are read by the CPU's kernels only; on ", options.device.str(),
            " decode with f32 or bf16 weights");
  std::unique_ptr<M> m;
  auto build = [&](const nlohmann::json& file_meta, size_t param_bytes) -> nn::Module& {
    const ModelType& t = named_type(file_meta, path);
    QKV_CHECK(t.kind == kind, "'", path, "' holds a \"", t.name, "\" model (", kind_name(t.kind), "), not ",
              kind == Kind::seq2seq ? "a sequence-to-sequence (translation)"
              : kind == Kind::image_to_text ? "an image-to-text (captioning)"
              : kind == Kind::image_classifier ? "an image classification"
                                               : std::string("a ") + kind_name(kind),
              " model");
    // The model its config describes may take no more memory than the tensors in the file justify
    // (twice their f32 size, for buffers such as position tables, plus 64 MiB): a crafted config
    // ("max_len": 2^40, 10⁵ layers) is refused before it allocates, and the tensors are then checked
    // name by name and shape by shape before any is read.
    try {
      AllocationBudget budget(2 * param_bytes + (size_t{64} << 20),
                              detail::concat("its config describes a model larger than the tensors it holds (",
                                             param_bytes >> 20, " MiB) justify"));
      nn::init::SkipInit no_init;
      m.reset(static_cast<M*>(t.build(file_meta.at("model"), nullptr).release()));
    } catch (const Error& e) {
      QKV_CHECK(false, "'", path, "': ", e.what());
    }
    const int64_t vocab = tokenizer_vocab(file_meta);
    QKV_CHECK(vocab < 0 || m->vocab_size() == vocab, "'", path, "': the model's vocab_size ", m->vocab_size(),
              " does not match its tokenizer's ", vocab);
    return m->module();
  };
  Int8Rows rows;  // a quantized file's int8 rows, by name (only when decoding with int8 weights)
  meta = load_model_streaming(path, build, weights == nn::InferenceWeights::int8 ? &rows : nullptr);
  m->module().eval();
  if (!options.device.is_cpu()) m->module().to(options.device);
  if (rows.empty()) {
    m->set_inference_weights(weights);  // (made from the parameters where they now live)
    return m;
  }
  give_int8_rows(*m, rows, path);
  return m;
}

}  // namespace

namespace {

LoadedSeq2Seq load_seq2seq_of(Kind kind, const std::string& path, const LoadOptions& options) {
  LoadedSeq2Seq r;
  r.path = path;
  auto vocab = [&](const nlohmann::json& meta) -> int64_t {
    r.tokenizer = std::make_unique<text::SentencePiece>(
        text::SentencePiece::from_json(meta_field(meta, path, "tokenizer"), "'" + path + "': the model file"));
    return r.tokenizer->vocab_size();
  };
  r.model = model_from<Seq2SeqModel>(path, kind, vocab, options, r.meta);
  return r;
}

}  // namespace

LoadedSeq2Seq load_seq2seq(const std::string& path, const LoadOptions& options) {
  return load_seq2seq_of(Kind::seq2seq, path, options);
}

LoadedSeq2Seq load_image_to_text(const std::string& path, const LoadOptions& options) {
  return load_seq2seq_of(Kind::image_to_text, path, options);
}

std::vector<LoadedSeq2Seq> load_seq2seq_ensemble(const std::vector<std::string>& paths, const LoadOptions& options) {
  QKV_CHECK(!paths.empty(), "no model file given");
  std::vector<LoadedSeq2Seq> out;
  for (const auto& p : paths) out.push_back(load_seq2seq(p, options));
  const text::SentencePiece& sp = *out[0].tokenizer;
  for (size_t i = 1; i < out.size(); ++i) {
    const text::SentencePiece& other = *out[i].tokenizer;
    QKV_CHECK(other.vocab_size() == sp.vocab_size(), "'", paths[i], "' has a vocabulary of ", other.vocab_size(),
              " pieces, '", paths[0], "' one of ", sp.vocab_size(), ": an ensemble needs one vocabulary");
    for (int id = 0; id < sp.vocab_size(); ++id)
      QKV_CHECK(other.id_to_piece(id) == sp.id_to_piece(id), "'", paths[i], "' and '", paths[0],
                "' were trained with different vocabularies (piece ", id, ": '", other.id_to_piece(id), "' against '",
                sp.id_to_piece(id), "'): an ensemble needs one vocabulary");
  }
  return out;
}

std::vector<const Seq2SeqModel*> models_of(const std::vector<LoadedSeq2Seq>& loaded) {
  std::vector<const Seq2SeqModel*> m;
  for (const auto& l : loaded) m.push_back(l.model.get());
  return m;
}

LoadedLanguageModel load_language_model(const std::string& path, const LoadOptions& options) {
  LoadedLanguageModel r;
  r.path = path;
  auto vocab = [&](const nlohmann::json& meta) -> int64_t {
    r.tokenizer = read_lm_tokenizer(meta, path);
    // A converted model's embedding may be padded past its tokenizer (Qwen2's 151,936 rows for
    // 151,665 tokens): checked below, as at most the model's.
    return r.tokenizer.hf() ? int64_t{-1} : r.tokenizer.vocab_size();
  };
  r.model = model_from<LanguageModel>(path, Kind::language_model, vocab, options, r.meta);
  check_tokenizer_fits(r.tokenizer, r.model->vocab_size(), path);
  if (auto g = r.meta.find("generation"); g != r.meta.end() && g->is_object() && g->contains("eos_token_id")) {
    const nlohmann::json& e = (*g)["eos_token_id"];
    for (const auto& id : e.is_array() ? e : nlohmann::json::array({e})) {
      QKV_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < r.model->vocab_size(), "'",
                path, "': generation.eos_token_id ", id.dump().substr(0, 40), " is not a token id of the model");
      r.stop_ids.push_back(id.get<int32_t>());
    }
  }
  return r;
}

Kind model_file_kind(const std::string& path) { return model_file_type(path).kind; }

nn::InferenceWeights decoding_weights(const std::string& path, const LoadOptions& options) {
  if (options.weights) return *options.weights;
  if (!options.device.is_cpu()) return nn::InferenceWeights::f32;
  return load_model_metadata(path).contains("quantized") ? nn::InferenceWeights::int8 : nn::InferenceWeights::f32;
}

const ModelType& model_file_type(const std::string& path) { return named_type(load_model_metadata(path), path); }

LoadedImageClassifier load_image_classifier(const std::string& path, const LoadOptions& options) {
  LoadedImageClassifier r;
  r.path = path;
  r.model = model_from<ImageClassifier>(path, Kind::image_classifier, [](const nlohmann::json&) { return int64_t{-1}; },
                                        options, r.meta);
  return r;
}

LoadedMaskedLanguageModel load_masked_language_model(const std::string& path, const LoadOptions& options) {
  LoadedMaskedLanguageModel r;
  r.path = path;
  auto vocab = [&](const nlohmann::json& meta) -> int64_t {
    r.tokenizer = read_lm_tokenizer(meta, path);
    return int64_t{-1};  // checked below: at most the model's (an embedding may be padded past it)
  };
  r.model = model_from<MaskedLanguageModel>(path, Kind::masked_language_model, vocab, options, r.meta);
  QKV_CHECK(r.tokenizer.hf(), "'", path, "': a masked language model needs its Hugging Face tokenizer (",
            r.tokenizer.type(), " found)");
  check_tokenizer_fits(r.tokenizer, r.model->vocab_size(), path);
  return r;
}

LoadedModel load_any_model(const std::string& path, const LoadOptions& options) {
  auto take = [](auto loaded) { return LoadedModel{std::move(loaded.model), std::move(loaded.meta)}; };
  switch (model_file_kind(path)) {
    case Kind::seq2seq: return take(load_seq2seq(path, options));
    case Kind::image_to_text: return take(load_image_to_text(path, options));
    case Kind::language_model: return take(load_language_model(path, options));
    case Kind::image_classifier: return take(load_image_classifier(path, options));
    case Kind::masked_language_model: return take(load_masked_language_model(path, options));
  }
  throw Error(detail::concat("'", path, "': a model of a kind no loader reads"));
}

// The loader of the file's kind, run for its checks alone (what is loaded is let go).
void check_loadable(const std::string& path) { (void)load_any_model(path); }

}  // namespace qkv::models
