#include "qkv/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/json.h"
#include "qkv/models/model_file.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

Checkpoint::Checkpoint(const RunContext& run, nn::Module& model, Adam& adam, json meta, io::StoreAs model_dtype,
                       int64_t keep_numbered)
    : run_(run),
      model_(model),
      adam_(adam),
      meta_(std::move(meta)),
      model_dtype_(model_dtype),
      keep_(keep_numbered),
      path_(run.path("checkpoint.safetensors")),
      model_path_(run.path("model.safetensors")) {}

void Checkpoint::check_ranks_agree() const {
  distributed::Communicator* comm = run_.comm();
  if (!comm) return;
  std::string lead_meta = run_.lead() ? meta_.dump() : "";
  distributed::broadcast_string(*comm, lead_meta, 0);
  QKV_CHECK(lead_meta == meta_.dump(), "train: rank ", comm->rank(), " built a different model or tokenizer than ",
            "rank 0 (are all ranks running the same qkv, config and data files?)");
}

TrainState Checkpoint::resume() {
  TrainState st;
  if (run_.lead()) {
    QKV_CHECK(fs::exists(path_), "train --resume: no checkpoint at '", path_, "'");
    models::ModelFile ck = models::load_model_file(path_);
    QKV_CHECK(ck.meta.contains("train_state"), "'", path_, "' is a model file without training state");
    QKV_CHECK(ck.meta["model_type"] == meta_["model_type"], "train --resume: '", path_, "' holds a ",
              ck.meta["model_type"].dump(), " model; the config describes a ", meta_["model_type"].dump(), " model");
    QKV_CHECK(ck.meta["model"] == meta_["model"] && ck.meta["tokenizer"] == meta_["tokenizer"],
              "train --resume: the checkpoint was trained with another model or tokenizer (checkpoint: ",
              ck.meta["model"].dump(), "; config: ", meta_["model"].dump(), ")");
    models::load_parameters(model_, ck);
    st = TrainState::from_json(ck.meta["train_state"], path_);
    adam_.load_state(ck.optimizer, st.optimizer_steps);
  }
  if (distributed::Communicator* comm = run_.comm()) {
    std::string state = run_.lead() ? st.to_json().dump() : "";
    distributed::broadcast_string(*comm, state, 0);
    st = TrainState::from_json(io::parse_json(state, "the training state"), "the training state");
    for (auto& [name, t] : adam_.state())
      comm->broadcast(t.data(), t.numel() * static_cast<int64_t>(sizeof(float)), 0);
    adam_.set_steps(st.optimizer_steps);
  }
  return st;
}

void Checkpoint::save(const TrainState& state) const {
  if (!run_.lead()) return;
  // The checkpoint first: model.safetensors and the numbered copies are derived from it, so a kill
  // at any instant leaves the old state or the new one, and --resume rewrites whatever lags.
  json m = meta_;
  m["train_state"] = state.to_json();
  models::save_model_file(path_, model_, m, io::StoreAs::kF32, adam_.state());
  json mm = meta_;
  mm["trained_steps"] = state.step;
  models::save_model_file(model_path_, model_, mm, model_dtype_);
  if (keep_ > 0) keep_numbered(state.step, mm);
}

// model-<step>.safetensors (f32) for checkpoint averaging; only the newest keep_ stay.
void Checkpoint::keep_numbered(int64_t step, const json& model_meta) const {
  models::save_model_file(run_.path("model-" + std::to_string(step) + ".safetensors"), model_, model_meta);
  std::vector<std::pair<int64_t, fs::path>> kept;
  for (auto& e : fs::directory_iterator(run_.out_dir())) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("model-") && name.ends_with(".safetensors") && name.size() > 18) {
      const std::string digits = name.substr(6, name.size() - 18);
      if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos)
        kept.emplace_back(std::stoll(digits), e.path());
    }
  }
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_) < kept.size(); ++i) fs::remove(kept[i].second);
}

}  // namespace qkv::train
