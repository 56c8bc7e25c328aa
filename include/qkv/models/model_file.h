// qkv model files and training checkpoints: one safetensors file each, self-describing.
//
//   tensors:   the model's parameters by name (PyTorch-style dotted names), and in a checkpoint
//              also the optimizer's moments as "optimizer.exp_avg.<name>" / "optimizer.exp_avg_sq.<name>"
//   metadata:  "qkv" → JSON {"format": "qkv", "version": 1, "model_type": "gpt" | …,
//              "model": {hyper-parameters}, "tokenizer": {…}, "config": {the training config},
//              "train_state": {"step": …, …} (checkpoints only)}
//
// A model file holds everything `qkv generate` / `qkv translate` need. Files are written atomically
// (a crash never leaves a half-written file) and validated on load.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/io/safetensors.h"
#include "qkv/models/model.h"
#include "qkv/nn/module.h"
#include "qkv/ops/inference_weight.h"

namespace qkv::models {

// The metadata every model file of `model` carries: {"model_type", "model", "tokenizer"}.
nlohmann::json metadata(const Model& model, const nlohmann::json& tokenizer);

struct ModelFile {
  nlohmann::json meta;                        // the "qkv" metadata object
  std::map<std::string, Tensor> params;       // model parameters (f32)
  std::map<std::string, Tensor> optimizer;    // "exp_avg.<name>" … (checkpoints only), prefix stripped
  std::string path;
};

// Writes the model's parameters (converted per `store`: f32, f16 or bf16), the optimizer state if
// given (always f32), and `meta` (which must hold "model_type" and "model").
void save_model_file(const std::string& path, const nn::Module& model, nlohmann::json meta,
                     io::StoreAs store = io::StoreAs::kF32,
                     const std::vector<std::pair<std::string, Tensor>>& optimizer_state = {});

// Reads and checks a file written by save_model_file: a missing file, a file that is not
// safetensors, or one without qkv metadata is an error naming the path.
ModelFile load_model_file(const std::string& path);
// The same file's checked "qkv" metadata alone (format, version, model_type, model present), its
// tensors not read: what a command needs to know which kind of model a file holds.
nlohmann::json load_model_metadata(const std::string& path);

// Loads `file`'s parameters into `model`: every parameter must be present with its shape; an
// unexpected name is an error too (a vocabulary or size mismatch names the tensor and both shapes).
void load_parameters(nn::Module& model, const ModelFile& file);

// Loading for inference without holding the file's tensors beside the model: the file's metadata is
// read and checked (as load_model_file), `build` makes the model it describes — told how many
// bytes the file's parameters take as f32, to bound what its config may allocate — and the
// parameters then stream into that model one tensor at a time (optimizer state is skipped unread),
// with load_parameters' checks. Peak memory: the model plus its largest tensor. Returns the metadata.
//
// A quantized file (qkv quantize: metadata "quantized": {"dtype": "int8", "tensors": [names]}) holds
// each listed matrix as int8 rows W8 (I8 [N, K], under its name) and their scales s (F32 [N], under
// its name + kInt8ScaleSuffix), W ≈ s[n] · W8[n, :] (ops/inference_weight.h's QuantizedRows). With
// `int8_rows`, those rows are handed back there by name and the matrices' f32 parameters are left
// unwritten (the caller makes int8 inference weights of them, models/load.cpp); without, the
// parameters get the rows' values, s[n] · W8[n, k].
inline constexpr const char* kInt8ScaleSuffix = "_scale";
using Int8Rows = std::map<std::string, std::shared_ptr<const QuantizedRows>>;
nlohmann::json load_model_streaming(const std::string& path,
                                    const std::function<nn::Module&(const nlohmann::json& meta, size_t param_bytes)>& build,
                                    Int8Rows* int8_rows = nullptr);

// Checkpoint averaging (as fairseq's average_checkpoints.py; Marian's exponential smoothing is the
// running cousin): θ = (1/n) Σ_i θ_i over model files or checkpoints of the same model, written
// to `out` as a model file (no optimizer state) with the last file's metadata plus
// "averaged_from": [paths]. Each file must first load as its kind's loader loads it (check_loadable);
// files whose model type, hyper-parameters or tensors differ are an error naming the file and the
// keys or the tensor that differ. Nothing is written unless all of it holds.
void average_model_files(const std::vector<std::string>& paths, const std::string& out,
                         io::StoreAs store = io::StoreAs::kF32);

}  // namespace qkv::models
