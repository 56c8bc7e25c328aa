#include "qkv/models/load.h"

#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"

namespace qkv::models {

namespace {

// The registered type a file names, which must be of `kind`.
const ModelType& type_of(const ModelFile& f, Kind kind) {
  QKV_CHECK(f.meta["model_type"].is_string(), "'", f.path, "': the model type ", f.meta["model_type"].dump(),
            " is not a name");
  const std::string name = f.meta["model_type"].get<std::string>();
  const ModelType* t = nullptr;
  try {
    t = &model_type(name);
  } catch (const Error& e) {
    QKV_CHECK(false, "'", f.path, "': ", e.what());
  }
  QKV_CHECK(t->kind == kind, "'", f.path, "' holds a \"", name, "\" model (", kind_name(t->kind), "), not ",
            kind == Kind::seq2seq ? "a sequence-to-sequence (translation)" : kind_name(kind), " model");
  return *t;
}

// The model the file describes, of the type `t` (type_of), its vocabulary checked against the
// tokenizer's (tokenizer_vocab < 0: no tokenizer) before its parameters load.
template <class M>
std::unique_ptr<M> model_from(const ModelFile& f, const ModelType& t, int64_t tokenizer_vocab,
                              const LoadOptions& options) {
  std::unique_ptr<M> m;
  try {
    m.reset(static_cast<M*>(t.build(f.meta.at("model"), nullptr).release()));
  } catch (const Error& e) {
    QKV_CHECK(false, "'", f.path, "': ", e.what());
  }
  QKV_CHECK(tokenizer_vocab < 0 || m->vocab_size() == tokenizer_vocab, "'", f.path, "': the model's vocab_size ", m->vocab_size(),
            " does not match its tokenizer's ", tokenizer_vocab);
  load_parameters(m->module(), f);
  m->module().eval();
  m->set_inference_weights(options.weights);
  return m;
}

}  // namespace

LoadedSeq2Seq load_seq2seq(const std::string& path, const LoadOptions& options) {
  ModelFile f = load_model_file(path);
  const ModelType& t = type_of(f, Kind::seq2seq);
  LoadedSeq2Seq r;
  r.path = path;
  r.meta = f.meta;
  r.tokenizer = std::make_unique<text::SentencePiece>(
      text::SentencePiece::from_json(f.meta.at("tokenizer"), "'" + path + "': the model file"));
  r.model = model_from<Seq2SeqModel>(f, t, r.tokenizer->vocab_size(), options);
  return r;
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
  ModelFile f = load_model_file(path);
  const ModelType& t = type_of(f, Kind::language_model);
  LoadedLanguageModel r;
  r.path = path;
  r.meta = f.meta;
  try {
    r.tokenizer = text::LMTokenizer::from_json(f.meta.at("tokenizer"));
  } catch (const Error& e) {
    QKV_CHECK(false, "'", path, "': the tokenizer: ", e.what());
  }
  r.model = model_from<LanguageModel>(f, t, r.tokenizer.vocab_size(), options);
  return r;
}

LoadedImageClassifier load_image_classifier(const std::string& path, const LoadOptions& options) {
  ModelFile f = load_model_file(path);
  const ModelType& t = type_of(f, Kind::image_classifier);
  LoadedImageClassifier r;
  r.path = path;
  r.meta = f.meta;
  r.model = model_from<ImageClassifier>(f, t, -1, options);
  return r;
}

}  // namespace qkv::models
