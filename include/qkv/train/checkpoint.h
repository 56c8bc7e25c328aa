// The run's checkpoint, out/checkpoint.safetensors: the whole state of a run in one atomic file —
// f32 weights, the optimizer's moments, and in its metadata the model's (type, hyper-parameters,
// tokenizer, config) with the TrainState (train_state.h). model.safetensors (the weights in the
// config's model_dtype) and, with keep_checkpoints = N, the newest N model-<step>.safetensors (f32,
// for `qkv average`) are derived from the same weights right after it.
//
// Data-parallel: the lead (rank 0) alone reads and writes; resume() hands its state to the others
// (the checkpoint need not be on their machines).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/io/safetensors.h"
#include "qkv/nn/module.h"
#include "qkv/train/optim.h"
#include "qkv/train/run_context.h"
#include "qkv/train/train_state.h"

namespace qkv::train {

class Checkpoint {
 public:
  // meta: the model's metadata (TrainingTask::model_metadata() with "config"), which every file
  // written carries; keep_numbered: keep_checkpoints (0: no numbered files).
  Checkpoint(const RunContext& run, nn::Module& model, Adam& adam, nlohmann::json meta, io::StoreAs model_dtype,
             int64_t keep_numbered);

  const std::string& path() const { return path_; }
  const nlohmann::json& meta() const { return meta_; }

  // Data-parallel: every rank must have built the same model and tokenizer as rank 0 (the same
  // config, data and deterministic tokenizer training); a difference would otherwise show as
  // silently wrong sums. A qkv::Error on the rank that differs.
  void check_ranks_agree() const;
  // --resume: the lead reads the checkpoint (an error when missing, when it is a model file
  // without training state, or holds another model type, model or tokenizer), loads its weights
  // and optimizer state; every other rank receives the optimizer state and the training state.
  // Returns the training state, on every rank. (The weights reach the others with the rest of
  // rank 0's, broadcast_parameters.)
  TrainState resume();
  // The lead writes the checkpoint with `state`, then model.safetensors and the numbered copy
  // (removing the oldest beyond keep_numbered); other ranks write nothing.
  void save(const TrainState& state) const;

 private:
  void keep_numbered(int64_t step, const nlohmann::json& model_meta) const;

  const RunContext& run_;
  nn::Module& model_;
  Adam& adam_;
  nlohmann::json meta_;
  io::StoreAs model_dtype_;
  int64_t keep_;
  std::string path_, model_path_;
};

}  // namespace qkv::train
