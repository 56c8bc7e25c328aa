#include "qkv/ops/autocast.h"

#include <algorithm>
#include <cstring>

#include "dispatch.h"
#include "kernels/cpu/gemm_bf16.h"

namespace qkv {

namespace {
thread_local AutocastDType g_autocast = AutocastDType::f32;
thread_local AutocastWeights* g_scope_owner = nullptr;  // the AutocastWeights whose scope is active
}  // namespace

AutocastDType autocast_dtype() { return g_autocast; }

void set_autocast_dtype(AutocastDType dtype) { g_autocast = dtype; }

Autocast::Autocast(AutocastDType dtype) : prev_(g_autocast) { g_autocast = dtype; }

Autocast::~Autocast() { g_autocast = prev_; }

// ---- AutocastWeights ------------------------------------------------------------------------------

AutocastWeights::AutocastWeights(std::vector<Tensor> weights) {
  for (Tensor& w : weights)
    if (w.defined() && w.dtype() == DType::f32 && w.is_contiguous() && w.numel() > 0)
      entries_.push_back({std::move(w), false, Tensor()});
}

int64_t AutocastWeights::cast_count() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += e.used;
  return n;
}

AutocastWeights::Scope AutocastWeights::scope(AutocastDType dtype) {
  if (dtype != AutocastDType::bf16) return Scope(nullptr);
  QKV_CHECK(!g_scope_owner, "AutocastWeights: a scope is already active on this thread (scopes do not nest)");
  begin();
  g_scope_owner = this;
  in_scope_ = true;
  return Scope(this);
}

bool AutocastWeights::Entry::fresh() const { return copy.defined() && weight.impl().storage->writes == fresh_at; }

AutocastWeights::Scope::~Scope() {
  if (owner_) owner_->end();
}

void AutocastWeights::end() {
  in_scope_ = false;
  lent_.clear();
  for (Producer& p : producers_) {
    if (p.lent) p.wanted = p.taken;  // a producer whose copies nobody took stops writing them
    p.lent = p.taken = false;
  }
  if (g_scope_owner == this) g_scope_owner = nullptr;
}

// dst_t = bf16(w_t) for the used weights whose copy is missing or stale, one list kernel a device (the
// weights of one model share one)
void AutocastWeights::begin() {
  std::vector<Entry*> used;
  for (Entry& e : entries_)
    if (e.used && !e.fresh()) used.push_back(&e);
  if (used.empty()) return;
  std::vector<const TensorBase*> operands;
  std::vector<const float*> src;
  std::vector<bf16*> dst;
  std::vector<int64_t> n;
  for (Entry* e : used) {
    if (!e->copy.defined()) e->copy = Tensor::empty(e->weight.shape(), DType::bf16, e->weight.device());
    e->fresh_at = e->weight.impl().storage->writes;
    ++casts_made_;
    operands.push_back(&e->weight);
    src.push_back(e->weight.data());
    dst.push_back(e->copy.data<bf16>());
    n.push_back(e->weight.numel());
  }
  const Device d = ops_detail::device_of("autocast_weights", operands);
  QKV_DISPATCH("autocast_weights", d,
               k::convert_to_bf16_list(src.data(), dst.data(), n.data(), static_cast<int64_t>(used.size())));
}

std::vector<Tensor> AutocastWeights::copies_for(const std::vector<Tensor>& weights) {
  QKV_CHECK(!in_scope_, "AutocastWeights::copies_for: inside a scope (the weights must not change while one lives)");
  std::vector<Tensor> copies;
  for (const Tensor& w : weights) {
    Entry* e = find_whole(w);
    if (e && e->used && !e->copy.defined()) {
      e->copy = Tensor::empty(w.shape(), DType::bf16, w.device());
      e->fresh_at = ~uint64_t{0};  // holds nothing until written()
    }
    copies.push_back(e && e->used ? e->copy : Tensor());
  }
  return copies;
}

void AutocastWeights::written(const std::vector<Tensor>& weights) {
  for (const Tensor& w : weights)
    if (Entry* e = find_whole(w); e && e->used && e->copy.defined()) e->fresh_at = w.impl().storage->writes;
}

// The entry whose weight is `weight` itself (the same elements), or null.
AutocastWeights::Entry* AutocastWeights::find_whole(const Tensor& weight) {
  if (!weight.defined() || weight.dtype() != DType::f32 || weight.numel() == 0) return nullptr;
  for (Entry& e : entries_)
    if (e.weight.device() == weight.device() && e.weight.data() == weight.data() && e.weight.numel() == weight.numel())
      return &e;
  return nullptr;
}

// The entry whose weight holds `weight`'s elements (the weight itself, or a contiguous piece of it:
// a row block of a fused projection), or null.
AutocastWeights::Entry* AutocastWeights::find(const Tensor& weight) {
  if (weight.dtype() != DType::f32 || !weight.is_contiguous() || weight.numel() == 0) return nullptr;
  const float* p = weight.data();
  for (Entry& e : entries_) {
    const float* b = e.weight.data();
    if (e.weight.device() == weight.device() && p >= b && p + weight.numel() <= b + e.weight.numel()) return &e;
  }
  return nullptr;
}

Tensor AutocastWeights::scope_copy(const Tensor& weight) {
  Entry* e = g_scope_owner ? g_scope_owner->find(weight) : nullptr;
  if (!e) return Tensor();
  if (!e->copy.defined()) {
    e->used = true;  // cast by the next scope
    return Tensor();
  }
  const int64_t at = weight.data() - e->weight.data();  // a view of the copy at the piece's place
  return e->copy.as_strided(weight.shape(), weight.strides(), e->copy.offset() + at);
}

// ---- the activations' copies ----------------------------------------------------------------------

AutocastWeights::Producer& AutocastWeights::producer(const char* name) {
  for (Producer& p : producers_)
    if (p.name == name || std::strcmp(p.name, name) == 0) return p;
  return producers_.push_back({name}), producers_.back();
}

bool AutocastWeights::copy_wanted(const char* producer) {
  return g_scope_owner && g_autocast == AutocastDType::bf16 && g_scope_owner->producer(producer).wanted;
}

void AutocastWeights::lend_copy(const char* producer, const Tensor& value, Tensor copy) {
  AutocastWeights* owner = g_scope_owner;
  if (!owner || !copy.defined()) return;
  QKV_CHECK(copy.dtype() == DType::bf16 && value.dtype() == DType::f32 && value.is_contiguous() &&
                copy.is_contiguous() && copy.numel() == value.numel() && copy.device() == value.device(),
            "AutocastWeights::lend_copy: ", copy.str(), " is not a bf16 copy of ", value.str());
  // the copies of tensors gone since, or written over, are dropped here: the scope holds none longer
  std::erase_if(owner->lent_, [](const Lent& l) {
    const std::shared_ptr<Storage> s = l.storage.lock();
    return !s || s->writes != l.writes;
  });
  const int id = static_cast<int>(&owner->producer(producer) - owner->producers_.data());
  owner->producers_[static_cast<size_t>(id)].lent = true;
  const std::shared_ptr<Storage>& storage = value.impl().storage;
  owner->lent_.push_back({storage, value.offset(), value.numel(), storage->writes, std::move(copy), id});
  ++owner->copies_lent_;
}

Tensor AutocastWeights::lent_copy(const Tensor& value) {
  AutocastWeights* owner = g_scope_owner;
  if (!owner || owner->lent_.empty() || value.dtype() != DType::f32 || !value.is_contiguous()) return Tensor();
  const Storage* storage = value.impl().storage.get();
  for (const Lent& l : owner->lent_) {
    if (l.offset != value.offset() || l.numel != value.numel()) continue;
    const std::shared_ptr<Storage> s = l.storage.lock();
    if (s.get() != storage || s->writes != l.writes) continue;
    owner->producers_[static_cast<size_t>(l.producer)].taken = true;
    ++owner->copies_taken_;
    return l.copy.reshape(value.shape());
  }
  return Tensor();
}

}  // namespace qkv
