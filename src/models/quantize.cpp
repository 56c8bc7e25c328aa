#include "qkv/models/quantize.h"

#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <set>

#include "qkv/core/error.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/ops/inference_weight.h"

namespace qkv::models {

QuantizeReport quantize_model_file(const std::string& in, const std::string& out, io::StoreAs store) {
  std::error_code same_error;
  QKV_CHECK(!std::filesystem::equivalent(in, out, same_error), "qkv quantize: '", out, "' is the input file '", in,
            "': write the int8 file beside it");
  QKV_CHECK(!load_model_metadata(in).contains("quantized"), "qkv quantize: '", in,
            "' holds int8 weights already (written by qkv quantize)");
  LoadedModel loaded = load_any_model(in);
  const std::unique_ptr<Model>& m = loaded.model;
  nlohmann::json& meta = loaded.meta;
  std::set<const Storage*> int8_only;
  for (const Tensor& w : m->int8_file_weights()) int8_only.insert(w.impl().storage.get());
  QKV_CHECK(!int8_only.empty(), "qkv quantize: '", in, "' holds a \"", m->type(),
            "\" model, whose decoding has no int8-only path to store (the sequence-to-sequence transformer has: "
            "decode this one with --dtype int8 from its f32 file)");

  QuantizeReport report;
  report.type = m->type();
  std::deque<QuantizedRows> rows;  // (the I8 tensors below are views of these)
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::set<std::string> scales;  // f32 whatever `store` says: the rows' values are s[n] · W8[n, k] exactly
  for (auto& [name, p] : m->module().named_parameters()) {
    if (!int8_only.contains(p.impl().storage.get())) {
      tensors.emplace_back(name, p.detach());
      report.other_params += p.numel();
      continue;
    }
    const QuantizedRows& q = rows.emplace_back(QuantizedRows::quantize(p));  // as set_inference_weights(int8)
    tensors.emplace_back(name, q.values_tensor());                           // W8, I8 [N, K]
    tensors.emplace_back(name + kInt8ScaleSuffix, q.scales_tensor());        // s, F32 [N]
    scales.insert(name + kInt8ScaleSuffix);
    report.int8_tensors.push_back(name);
    report.int8_params += p.numel();
  }
  for (auto& [name, b] : m->module().named_buffers()) tensors.emplace_back(name, b.detach());
  meta["quantized"] = {{"dtype", "int8"},
                       {"scheme", "per output row: s[n] = max_k |W[n,k]| / 127, W8[n,k] = round(W[n,k] / s[n])"},
                       {"tensors", report.int8_tensors}};
  meta["format"] = "qkv";
  meta["version"] = 1;
  io::save_safetensors(out, std::vector<std::pair<std::string, TensorBase>>(tensors.begin(), tensors.end()),
                       {{"qkv", meta.dump()}}, store, scales);
  try {  // what was written loads for int8 decoding (no f32 copies) and for f32 decoding
    (void)load_any_model(out, LoadOptions{.weights = nn::InferenceWeights::int8});
    check_loadable(out);
  } catch (const Error& e) {
    std::remove(out.c_str());
    throw Error(detail::concat("qkv quantize: the file written from '", in, "' does not load, so '", out,
                               "' was removed: ", e.what()));
  }
  return report;
}

}  // namespace qkv::models
