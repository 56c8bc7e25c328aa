#include "qkv/decode/caption.h"

#include <algorithm>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_budget.h"
#include "qkv/decode/translator.h"
#include "qkv/ops.h"

namespace qkv::decode {

ImageCaptioner::ImageCaptioner(const models::Seq2SeqModel& model, const text::SentencePiece& sp)
    : model_(model), sp_(sp), shape_(model.source_image()) {
  QKV_CHECK(shape_.height > 0, "caption: a ", model.type(), " model translates text; it does not caption images");
  QKV_CHECK(sp.vocab_size() == model.vocab_size(), "caption: the tokenizer has ", sp.vocab_size(),
            " pieces, the model a vocabulary of ", model.vocab_size());
}

std::vector<Caption> ImageCaptioner::caption(const Tensor& images, const CaptionOptions& opt) const {
  QKV_CHECK(images.dim() == 4 && images.size(1) == shape_.channels && images.size(2) == shape_.height &&
                images.size(3) == shape_.width,
            "caption: images of shape ", shape_str(images.shape()), "; the model takes [N, ", shape_.channels, ", ",
            shape_.height, ", ", shape_.width, "]");
  QKV_CHECK(opt.beam_size >= 1 && opt.beam_size <= kMaxBeamSize, "caption: beam_size must be between 1 and ",
            kMaxBeamSize, ", got ", opt.beam_size);
  QKV_CHECK(opt.batch_size >= 1, "caption: batch_size must be ≥ 1, got ", opt.batch_size);
  check_length_penalty(opt.length_penalty, "caption");
  NoGradGuard no_grad;
  const models::SpecialTokens ids = model_.special_tokens();
  SearchOptions so;
  so.beam_size = opt.beam_size, so.length_penalty = opt.length_penalty, so.bos_id = ids.bos, so.eos_id = ids.eos;
  const int64_t N = images.size(0);
  std::vector<Caption> out(static_cast<size_t>(N));
  for (int64_t b0 = 0; b0 < N; b0 += opt.batch_size) {
    const ThreadBudget threads;  // the cores free now, batch by batch (core/thread_budget.h)
    const int64_t n = std::min(opt.batch_size, N - b0);
    const Tensor batch = images.slice(0, b0, b0 + n).contiguous();  // [n, C, H, W]
    // the caption, BOS excluded and EOS included, is at most max_len − 1 tokens
    const std::vector<int64_t> max_len(static_cast<size_t>(n), model_.max_len() - 1);
    Seq2SeqStepModel sm(model_, batch);
    std::vector<Hypothesis> hyps = opt.beam_size == 1 ? greedy_search(sm, max_len, so) : beam_search(sm, max_len, so);
    for (int64_t i = 0; i < n; ++i) {
      Caption& c = out[static_cast<size_t>(b0 + i)];
      c.hypothesis = std::move(hyps[static_cast<size_t>(i)]);
      c.text = sp_.decode(c.hypothesis.tokens);
      for (int32_t t : c.hypothesis.tokens) {
        std::string w = sp_.id_to_piece(t);
        if (w.rfind("\xE2\x96\x81", 0) == 0) w.erase(0, 3);  // "▁", SentencePiece's word boundary
        c.words.push_back(std::move(w));
      }
    }
    if (opt.attention) {
      // One teacher-forced pass over BOS y₁ … y_n (padded to the longest): its step t attends as
      // the search's step t did, the model being deterministic in eval mode.
      int64_t T = 1;
      for (int64_t i = 0; i < n; ++i)
        T = std::max<int64_t>(T, static_cast<int64_t>(out[static_cast<size_t>(b0 + i)].hypothesis.tokens.size()) + 1);
      std::vector<int32_t> tgt(static_cast<size_t>(n * T), ids.pad);
      for (int64_t i = 0; i < n; ++i) {
        const auto& tok = out[static_cast<size_t>(b0 + i)].hypothesis.tokens;
        tgt[static_cast<size_t>(i * T)] = ids.bos;
        std::copy(tok.begin(), tok.end(), tgt.begin() + i * T + 1);
      }
      nn::AttentionMaps maps;
      model_.forward(batch, Tensor::from_ints(tgt, {n, T}), &maps);
      if (maps.cross.empty()) continue;  // no attention (the mean-feature baseline)
      QKV_CHECK(!maps.image_grids.empty(), "caption: the model's attention maps carry no grid");
      const nn::ImageGrid grid = maps.image_grids.front();
      const Tensor& a = maps.cross.front();  // [n, 1, T, L]
      const int64_t L = a.size(3);
      QKV_CHECK(L == grid.height * grid.width, "caption: attention over ", L, " positions, a grid of ", grid.height,
                "×", grid.width);
      const std::vector<float> v = a.contiguous().to_vector();
      for (int64_t i = 0; i < n; ++i) {
        Caption& c = out[static_cast<size_t>(b0 + i)];
        c.rows = grid.height, c.cols = grid.width;
        const int64_t steps = static_cast<int64_t>(c.hypothesis.tokens.size()) + (c.hypothesis.finished ? 1 : 0);
        for (int64_t t = 0; t < std::min(steps, T); ++t) {
          const float* row = v.data() + (i * T + t) * L;
          c.attention.emplace_back(row, row + L);
        }
      }
    }
    if (opt.on_batch) opt.on_batch(b0 + n, N);
  }
  return out;
}

}  // namespace qkv::decode
