// Mixed precision, like torch.autocast(device_type="cpu", dtype=torch.bfloat16): inside an
// `Autocast guard(AutocastDType::bf16)` scope, `linear` (every projection, feed-forward layer and the
// output head) multiplies bf16-rounded operands with f32 accumulation, forward and backward, and
// returns f32, and scaled_dot_product_attention computes in bf16 (AttentionCompute::bf16, forward
// and backward; f32 where the attention weights or a float mask's gradient are asked for).
// Everything else — parameters and their gradients (the "master weights"), the optimizer, layer
// norm, softmax, the loss — stays f32. Unlike PyTorch's, qkv's
// autocast outputs stay f32, so no op downstream sees bf16 activations. Per thread, as PyTorch's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/core/names.h"
#include "qkv/ops/tensor.h"

namespace qkv {

// The dtype linear layers compute in: f32 (autocast off) or bf16 (a training config's "dtype").
enum class AutocastDType : uint8_t { f32, bf16 };
constexpr EnumTable<AutocastDType, 2> enum_table(AutocastDType) {
  return {"autocast dtype", {{{AutocastDType::f32, "f32"}, {AutocastDType::bf16, "bf16"}}}};
}

AutocastDType autocast_dtype();
void set_autocast_dtype(AutocastDType dtype);  // this thread's, until changed (Autocast restores it)

class Autocast {
 public:
  explicit Autocast(AutocastDType dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  AutocastDType prev_;
};

// The bf16 copies of a model's weights, made once a step (torch.autocast's cast cache, made in one
// pass): under Autocast(bf16) every linear rounds its weight to bf16 — a cast of its own, a launch on
// a GPU, at every forward. An AutocastWeights over a model's parameters learns at its first scope
// which of them linear casts (those it was asked for), and each later scope casts exactly those at its
// start, all in one pass (kernels' convert_to_bf16_list: one launch for up to 64 weights), and lends
// them to every linear in the scope — the same bits as the casts they replace. The copies stay
// between scopes (2 bytes a cast weight), and a scope casts only the weights changed since their copy
// was made: an optimizer that writes the copies as it updates the weights (adam_update_'s
// bf16_copies, through copies_for and written) leaves the next scope nothing to cast.
//
//   AutocastWeights casts(model.parameters());            // once, for the run
//   { auto scope = casts.scope(AutocastDType::bf16); … forward and backward passes … }
//   optimizer.step(…, &casts);                            // outside: the weights (and their copies) change
//
// The weights must not change while a scope lives (the trainer holds one over a step's passes, and
// steps the optimizer after it); a change outside one is seen by the weight's storage's writes
// (core/tensor.h: every in-place op counts one), and the next scope casts it again. A scope under
// AutocastDType::f32 does nothing. Per thread, as Autocast; scopes do not nest.
class AutocastWeights {
 public:
  explicit AutocastWeights(std::vector<Tensor> weights);
  AutocastWeights(const AutocastWeights&) = delete;
  AutocastWeights& operator=(const AutocastWeights&) = delete;

  class Scope {
   public:
    Scope(Scope&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope();

   private:
    friend class AutocastWeights;
    explicit Scope(AutocastWeights* owner) : owner_(owner) {}
    AutocastWeights* owner_;
  };
  Scope scope(AutocastDType dtype);

  // The weights each scope lends (after the first scope: those linear asked for).
  int64_t cast_count() const;
  // (tests) the weights scopes' starts have cast since this object was made
  int64_t casts_made() const { return casts_made_; }

  // ---- the optimizer's side ----------------------------------------------------------------------
  // For each of `weights` (an optimizer's parameters, each one of this object's weights or not): its
  // bf16 copy — made here, of its shape, where it has none yet — if the scopes lend one, else an
  // undefined tensor: for the optimizer's update to write beside the weight (adam_update_'s
  // bf16_copies). Then written(weights), once that update is queued: the copies hold the updated
  // weights, and the next scope casts none of them. Outside a scope.
  std::vector<Tensor> copies_for(const std::vector<Tensor>& weights);
  void written(const std::vector<Tensor>& weights);

  // linear's side (ops/matmul.cpp): `weight`'s bf16 copy in the active scope — a view of the copy
  // that holds it (a contiguous f32 weight, or a contiguous piece of one) — or an undefined tensor,
  // for linear to cast it itself; the scope then notes it for the next one when the weight is one of
  // its owner's.
  static Tensor scope_copy(const Tensor& weight);

  // ---- the activations' copies ----------------------------------------------------------------
  // linear casts its input x in the forward and the gradient dy of its output in the backward, each a
  // pass of its own over an f32 tensor some op has just written. Inside a scope, the ops that write
  // those tensors in a Transformer — the norms' outputs (layer_norm, rms_norm and their add_ forms:
  // the projections' and the head's x), the activations' (relu, gelu, silu_mul: the second FFN
  // layer's x), the gradient a fused norm's backward gives its residual branch (the output
  // projections' dy), the activations' input gradients (the first FFN layer's dy) and
  // cross_entropy's (the output layer's dy) — write the bf16 copy in their own pass and lend it;
  // linear takes it instead of casting. The same bits (the copy is convert_to_bf16's).
  //
  //   producer:  if (AutocastWeights::copy_wanted("gelu")) copy = empty(bf16) … kernel(…, copy) …
  //              AutocastWeights::lend_copy("gelu", out, copy);
  //   linear:    Tensor xb = AutocastWeights::lent_copy(x);  // undefined: cast x itself
  //
  // A copy is the tensor's while its memory holds the values it was made from: an in-place write to
  // it (fill_, copy_, add_ — the backward's sum of gradients —, mul_: core/tensor.h's Storage::writes)
  // disowns it, as does the tensor's end; the scope holds a copy no longer than its tensor lives. A
  // producer whose copies no linear took in one scope writes none in the next (a convolutional
  // network's relu). A `producer` is a string literal that names the op and side.
  static bool copy_wanted(const char* producer);
  static void lend_copy(const char* producer, const Tensor& value, Tensor copy);
  static Tensor lent_copy(const Tensor& value);
  // (tests) copies lent and taken since this object was made
  int64_t copies_lent() const { return copies_lent_; }
  int64_t copies_taken() const { return copies_taken_; }

 private:
  struct Entry {
    Tensor weight;      // f32, the candidate
    bool used = false;  // linear asked for it
    Tensor copy;        // bf16, once `used`
    uint64_t fresh_at = ~uint64_t{0};  // the weight's storage's writes when `copy` last held its values
    bool fresh() const;
  };
  std::vector<Entry> entries_;
  int64_t casts_made_ = 0;
  bool in_scope_ = false;
  Entry* find(const Tensor& weight);
  Entry* find_whole(const Tensor& weight);
  void begin();
  void end();

  struct Lent {  // an activation's bf16 copy
    std::weak_ptr<Storage> storage;
    int64_t offset = 0, numel = 0;
    uint64_t writes = 0;  // the storage's writes when the copy was made
    Tensor copy;
    int producer = 0;
  };
  struct Producer {
    const char* name;
    bool wanted = true;  // write copies (its copies were taken in the last scope that had some, or none yet)
    bool lent = false, taken = false;  // in this scope
  };
  std::vector<Lent> lent_;
  std::vector<Producer> producers_;
  int64_t copies_lent_ = 0, copies_taken_ = 0;
  Producer& producer(const char* name);
};

}  // namespace qkv
