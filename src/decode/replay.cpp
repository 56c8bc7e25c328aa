#include "qkv/decode/replay.h"

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/tensor.h"

namespace qkv::decode {

TeacherForced teacher_forced(const models::SpecialTokens& c, std::vector<int32_t> source, const Hypothesis& h) {
  TeacherForced t;
  t.src = std::move(source);
  t.src.push_back(c.eos);
  t.tgt_in = {c.bos};
  t.tgt_in.insert(t.tgt_in.end(), h.tokens.begin(), h.tokens.end());
  t.tgt_out = h.tokens;
  t.tgt_out.push_back(c.eos);
  if (!h.finished) t.tgt_in.pop_back(), t.tgt_out.pop_back();  // stopped at the length limit: no EOS
  return t;
}

Replay replay(const models::Seq2SeqModel& model, std::vector<int32_t> source, const Hypothesis& h) {
  Replay r;
  r.ids = teacher_forced(model.special_tokens(), std::move(source), h);
  NoGradGuard no_grad;
  model.forward(Tensor::from_ints(r.ids.src, {1, static_cast<int64_t>(r.ids.src.size())}),
                Tensor::from_ints(r.ids.tgt_in, {1, static_cast<int64_t>(r.ids.tgt_in.size())}), &r.maps);
  return r;
}

}  // namespace qkv::decode
