#include "qkv/models/model_file.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>

#include "qkv/core/error.h"
#include "qkv/io/config.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/models/load.h"

namespace qkv::models {

namespace {
constexpr const char* kOptPrefix = "optimizer.";
}  // namespace

nlohmann::json metadata(const Model& model, const nlohmann::json& tokenizer) {
  return {{"model_type", model.type()}, {"model", model.config_json()}, {"tokenizer", tokenizer}};
}

void save_model_file(const std::string& path, const nn::Module& model, nlohmann::json meta, io::StoreAs store,
                     const std::vector<std::pair<std::string, Tensor>>& optimizer_state) {
  QKV_CHECK(meta.contains("model_type") && meta.contains("model"), "save_model_file: metadata needs model_type and model");
  meta["format"] = "qkv";
  meta["version"] = 1;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, p] : model.named_parameters()) tensors.emplace_back(name, p.detach());
  for (auto& [name, b] : model.named_buffers()) tensors.emplace_back(name, b.detach());
  if (optimizer_state.empty()) {
    io::save_safetensors(path, tensors, {{"qkv", meta.dump()}}, store);
    return;
  }
  QKV_CHECK(store == io::StoreAs::kF32 || store == io::StoreAs::kKeep,
            "save_model_file: a checkpoint with optimizer state keeps f32 parameters");
  for (auto& [name, t] : optimizer_state) tensors.emplace_back(kOptPrefix + name, t.detach());
  io::save_safetensors(path, tensors, {{"qkv", meta.dump()}}, io::StoreAs::kF32);
}

namespace {

// The "qkv" metadata of a safetensors file's metadata, checked: an object with format "qkv",
// version 1, a model_type and a model.
nlohmann::json qkv_metadata(const std::string& path, const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find("qkv");
  QKV_CHECK(it != metadata.end(), "'", path, "' is a safetensors file but not a qkv model (no \"qkv\" metadata)");
  nlohmann::json meta;
  try {
    meta = io::parse_json(it->second, "qkv metadata");
  } catch (const std::exception& e) {
    QKV_CHECK(false, "'", path, "': the qkv metadata is not valid JSON (", e.what(), ")");
  }
  QKV_CHECK(meta.is_object() && io::get_or(meta, "format", "") == "qkv" && meta.contains("model_type") &&
                meta.contains("model"),
            "'", path, "': the qkv metadata lacks format/model_type/model");
  const int64_t version = io::get_or(meta, "version", int64_t{0});
  QKV_CHECK(version == 1, "'", path, "': qkv model format version ", version,
            " is not supported (this qkv reads version 1)");
  return meta;
}

}  // namespace

nlohmann::json load_model_metadata(const std::string& path) {
  return qkv_metadata(path, io::load_safetensors_metadata(path));
}

ModelFile load_model_file(const std::string& path) {
  io::SafetensorsFile f = io::load_safetensors(path);
  ModelFile m;
  m.path = path;
  m.meta = qkv_metadata(path, f.metadata);
  QKV_CHECK(!m.meta.contains("quantized"), "'", path,
            "' holds int8 weights (written by qkv quantize): it loads for decoding only; this needs the f32 model "
            "file it was quantized from");
  for (auto& [name, t] : f.tensors) {
    if (name.starts_with(kOptPrefix)) {
      m.optimizer[name.substr(std::string(kOptPrefix).size())] = t;
    } else {
      QKV_CHECK(t.dtype() == DType::f32, "'", path, "': parameter ", name, " is not a floating-point tensor");
      m.params[name] = t;
    }
  }
  return m;
}

namespace {

// The names a quantized file's "quantized" metadata lists ({"dtype": "int8", "tensors": [names]}),
// checked: each a 2-D parameter of the model.
std::set<std::string> quantized_names(const nlohmann::json& meta, const std::map<std::string, Tensor>& slots,
                                      const std::string& path) {
  std::set<std::string> names;
  if (!meta.contains("quantized")) return names;
  const nlohmann::json& q = meta.at("quantized");
  QKV_CHECK(q.is_object() && q.contains("dtype") && q.at("dtype") == "int8" && q.contains("tensors") &&
                q.at("tensors").is_array(),
            "'", path, "': the metadata's \"quantized\" is not {\"dtype\": \"int8\", \"tensors\": [names]}");
  for (const auto& n : q.at("tensors")) {
    QKV_CHECK(n.is_string(), "'", path, "': \"quantized\" lists ", n.dump(), ", not a tensor name");
    const std::string name = n.get<std::string>();
    auto it = slots.find(name);
    QKV_CHECK(it != slots.end() && it->second.dim() == 2, "'", path, "': \"quantized\" lists \"", name,
              "\", which is not a matrix of the model");
    QKV_CHECK(names.insert(name).second, "'", path, "': \"quantized\" lists \"", name, "\" twice");
    QKV_CHECK(!slots.contains(name + kInt8ScaleSuffix), "'", path, "': \"quantized\" lists \"", name,
              "\", whose scales' name is a parameter of the model");
  }
  return names;
}

}  // namespace

nlohmann::json load_model_streaming(const std::string& path,
                                    const std::function<nn::Module&(const nlohmann::json& meta, size_t param_bytes)>& build,
                                    Int8Rows* int8_rows) {
  nlohmann::json meta;
  std::set<std::string> quantized;               // names the file holds as int8 rows + scales
  std::map<std::string, Tensor> pending_rows;    // int8 rows or scales read, waiting for the other
  std::map<std::string, Tensor> params;          // the model's parameters and buffers by name
  nn::Module* model = nullptr;
  std::map<std::string, Tensor> slots;  // the model's parameters and buffers by name, not yet loaded
  std::string type;
  std::unique_ptr<io::ProgressBar> bar;  // over the tensors read: shown when a big file takes over 2 s
  auto misfit = [&](const auto&... what) {
    return Error(detail::concat("'", path, "' does not fit the ", type, " model it describes: load_state_dict: ", what...));
  };
  auto header = [&](const std::map<std::string, std::string>& metadata, const std::vector<io::SafetensorsEntry>& entries) {
    meta = qkv_metadata(path, metadata);
    type = meta.at("model_type").dump();
    size_t bytes = 0;
    for (const auto& e : entries)
      if (!e.name.starts_with(kOptPrefix)) bytes += static_cast<size_t>(numel_of(e.shape)) * sizeof(float);
    model = &build(meta, bytes);
    for (auto& [name, p] : model->named_parameters()) slots.emplace(name, p);
    for (auto& [name, b] : model->named_buffers()) slots.emplace(name, b);
    quantized = quantized_names(meta, slots, path);
    params = slots;
    for (const auto& name : quantized)  // each quantized matrix [N, K] comes with its scales [N]
      slots.emplace(name + kInt8ScaleSuffix, Tensor::empty({slots.at(name).size(0)}));  // (its shape, for the checks)
    for (const auto& e : entries) {  // every name and shape checked before any data is read
      if (e.name.starts_with(kOptPrefix)) continue;
      auto it = slots.find(e.name);
      if (it == slots.end()) throw misfit("unexpected parameter \"", e.name, "\" ", shape_str(e.shape));
      if (it->second.shape() != e.shape)
        throw misfit("parameter \"", e.name, "\" has shape ", shape_str(it->second.shape()), " but the state has ",
                     shape_str(e.shape));
    }
    bar = std::make_unique<io::ProgressBar>("load", static_cast<int64_t>(slots.size()), 0, /*delay_seconds=*/2);
  };
  auto wanted = [](const std::string& name) { return !name.starts_with(kOptPrefix); };
  auto each = [&](const std::string& name, TensorBase&& t) {
    auto it = slots.find(name);  // checked by `header`
    if (it == slots.end()) throw misfit("unexpected parameter \"", name, "\"");
    // a listed matrix's int8 rows (its own name) or its scales (the name + kInt8ScaleSuffix)
    const std::string stem = name.substr(0, name.size() - std::min(name.size(), std::strlen(kInt8ScaleSuffix)));
    const bool is_scale = name.ends_with(kInt8ScaleSuffix) && quantized.contains(stem);
    const std::string& matrix = is_scale ? stem : name;
    if (quantized.contains(matrix)) {  // int8 rows W8 [N, K] and their scales s [N], in either order
      if (!is_scale && t.dtype() != DType::i8)
        throw Error(detail::concat("'", path, "': parameter ", name, " is listed as quantized but is not I8"));
      pending_rows[name] = Tensor(std::move(t));
      slots.erase(it);
      auto w8 = pending_rows.find(matrix), sc = pending_rows.find(matrix + kInt8ScaleSuffix);
      if (w8 != pending_rows.end() && sc != pending_rows.end()) {
        auto q = std::make_shared<const QuantizedRows>(QuantizedRows::from_tensors(
            w8->second, sc->second, detail::concat("'", path, "': tensor ", matrix)));
        if (int8_rows) (*int8_rows)[matrix] = q;  // the caller decides where f32 values are needed
        else params.at(matrix).detach().copy_(q->dequantize());
        pending_rows.erase(w8), pending_rows.erase(matrix + kInt8ScaleSuffix);
      }
      bar->update();
      return;
    }
    if (t.dtype() != DType::f32) throw Error(detail::concat("'", path, "': parameter ", name, " is not a floating-point tensor"));
    it->second.detach().copy_(Tensor(std::move(t)));
    slots.erase(it);
    bar->update();
  };
  io::stream_safetensors(path, /*keep_bf16=*/false, header, wanted, each);
  if (bar) bar->close();
  if (!slots.empty())
    throw misfit("missing parameter \"", slots.begin()->first, "\" ", shape_str(slots.begin()->second.shape()));
  return meta;
}

void load_parameters(nn::Module& model, const ModelFile& file) {
  try {
    model.load_state_dict(file.params, /*strict=*/true);
  } catch (const Error& e) {
    QKV_CHECK(false, "'", file.path, "' does not fit the ", file.meta.at("model_type").dump(),
              " model it describes: ", e.what());
  }
}

namespace {

// A JSON value in a message: at most 80 characters of it.
std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() <= 80 ? s : detail::concat(s.substr(0, 80), "… (", s.size(), " bytes)");
}

// Where two files' model metadata differ: "model_type \"gpt\" vs \"transformer\"", "model.n_embd 16 vs 8", …
std::string differences(const nlohmann::json& a, const nlohmann::json& b) {
  std::string out;
  auto add = [&](const std::string& key, const nlohmann::json& x, const nlohmann::json& y) {
    out += detail::concat(out.empty() ? "" : ", ", key, " ", x.is_null() ? "(none)" : shown(x), " vs ",
                          y.is_null() ? "(none)" : shown(y));
  };
  if (a.at("model_type") != b.at("model_type")) add("model_type", a.at("model_type"), b.at("model_type"));
  const nlohmann::json &ma = a.at("model"), &mb = b.at("model");
  if (ma.is_object() && mb.is_object()) {
    for (const auto& [k, v] : ma.items())
      if (!mb.contains(k) || mb.at(k) != v) add("model." + k, v, mb.contains(k) ? mb.at(k) : nlohmann::json());
    for (const auto& [k, v] : mb.items())
      if (!ma.contains(k)) add("model." + k, nlohmann::json(), v);
  } else if (ma != mb) {
    add("model", ma, mb);
  }
  return out;
}

}  // namespace

// θ = (1/n) Σ_i θ_i, summed in double
void average_model_files(const std::vector<std::string>& paths, const std::string& out, io::StoreAs store) {
  QKV_CHECK(!paths.empty(), "average: no model files given");
  // Each input passes the loader's checks first (config, tokenizer, tensors): a file whose config
  // lies would otherwise be averaged into a model file no command can load.
  for (const std::string& p : paths) {
    try {
      check_loadable(p);
    } catch (const Error& e) {
      throw Error(detail::concat("average: ", e.what()));
    }
  }
  ModelFile first = load_model_file(paths.front());
  std::map<std::string, std::vector<double>> sum;
  for (auto& [name, t] : first.params) {
    std::vector<float> v = t.to_vector();
    sum[name].assign(v.begin(), v.end());
  }
  nlohmann::json meta = first.meta;
  for (size_t i = 1; i < paths.size(); ++i) {
    ModelFile f = load_model_file(paths[i]);
    // load_model_file guarantees both keys
    QKV_CHECK(f.meta.at("model_type") == first.meta.at("model_type") && f.meta.at("model") == first.meta.at("model"),
              "average: '", paths[i], "' is a different model from '", paths.front(), "' (",
              differences(f.meta, first.meta), ")");
    QKV_CHECK(f.params.size() == first.params.size(), "average: '", paths[i], "' has ", f.params.size(),
              " parameters, '", paths.front(), "' has ", first.params.size());
    for (auto& [name, t] : f.params) {
      auto it = first.params.find(name);
      QKV_CHECK(it != first.params.end(), "average: '", paths[i], "' has a parameter ", name, " that '", paths.front(),
                "' lacks");
      QKV_CHECK(it->second.shape() == t.shape(), "average: ", name, " is ", shape_str(t.shape()), " in '", paths[i],
                "' but ", shape_str(it->second.shape()), " in '", paths.front(), "'");
      std::vector<float> v = t.to_vector();
      std::vector<double>& acc = sum[name];
      for (size_t j = 0; j < v.size(); ++j) acc[j] += v[j];
    }
    meta = f.meta;  // the last file's metadata (its tokenizer and training config)
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  const double n = static_cast<double>(paths.size());
  for (auto& [name, acc] : sum) {
    std::vector<float> v(acc.size());
    for (size_t j = 0; j < acc.size(); ++j) v[j] = static_cast<float>(acc[j] / n);
    tensors.emplace_back(name, Tensor::from_vector(v, first.params.at(name).shape()));
  }
  meta.erase("train_state");
  meta["averaged_from"] = paths;
  meta["format"] = "qkv";
  meta["version"] = 1;
  io::save_safetensors(out, tensors, {{"qkv", meta.dump()}}, store);
}

}  // namespace qkv::models
