// A chosen translation once more, teacher-forced, with its attention kept — what `qkv attend`, the
// viewer's /v1/attention, the neuron view and Python's translate_batch(return_attention=True) show:
//
//   source + EOS  attended by  BOS + translation  →  translation + EOS
//
// (no EOS on either target side where the search stopped at the length limit). One forward pass
// under no_grad; the maps are the model's own (nn/attention_maps.h: [B = 1, H, T, S] per layer).
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/decode/search.h"
#include "qkv/models/model.h"
#include "qkv/nn/attention_maps.h"

namespace qkv::decode {

struct TeacherForced {
  std::vector<int32_t> src;      // the source's ids + EOS            [S]
  std::vector<int32_t> tgt_in;   // BOS + the translation             [T]
  std::vector<int32_t> tgt_out;  // the translation + EOS             [T]
};

// The ids of the pass: `source` without EOS, `h` a hypothesis of the search over it.
TeacherForced teacher_forced(const models::SpecialTokens& c, std::vector<int32_t> source, const Hypothesis& h);

struct Replay {
  TeacherForced ids;
  nn::AttentionMaps maps;  // encoder_self, decoder_self, cross: what the model's type has
};
Replay replay(const models::Seq2SeqModel& model, std::vector<int32_t> source, const Hypothesis& h);

}  // namespace qkv::decode
