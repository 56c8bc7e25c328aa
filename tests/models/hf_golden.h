// The Hugging Face golden folders (tests/golden/hf/<case>/, written by make_hf_golden.py) as the
// importer tests read them: the folder, its reference.json, a [B, T] id matrix from it, and an
// encoder's folder converted and loaded.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/tensor.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "testing.h"

namespace qkv::models::hf_golden {

inline const std::filesystem::path kGolden = std::filesystem::path(QKV_GOLDEN_DIR) / "hf";

inline nlohmann::json reference(const std::string& name) {
  return nlohmann::json::parse(io::read_file((kGolden / name / "reference.json").string()));
}

// [[…], […]] → i32 [B, T]
inline Tensor int_matrix(const nlohmann::json& j) {
  const auto rows = j.get<std::vector<std::vector<int32_t>>>();
  std::vector<int32_t> flat;
  for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_ints(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

// The golden folder `name` converted into `dir` and loaded.
inline LoadedMaskedLanguageModel convert_and_load(const std::string& name, const testing::TempDir& dir) {
  const std::string out = (dir.path / (name + ".safetensors")).string();
  convert_hf((kGolden / name).string(), out);
  return load_masked_language_model(out);
}

}  // namespace qkv::models::hf_golden
