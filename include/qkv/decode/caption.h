// Captioning images with a sequence-to-sequence model whose source is an image (a captioner:
// models::Seq2SeqModel::source_image() has a height; seed 004, "Image Captioning with RNNs and
// Attention"): encode each image once, then write the caption one word at a time with greedy or
// beam search — the same search code, step interface and cache as translation (decode/search.h).
//
// Pictures in, text out: the SentencePiece model the captioner was trained with turns the chosen ids
// into words. With `attention`, each caption also gets the attention weights of every step it wrote
// (the words and the EOS), read off one teacher-forced forward pass over the chosen tokens — the
// weights the decoder used when it chose them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qkv/decode/search.h"
#include "qkv/models/model.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::decode {

struct CaptionOptions {
  int64_t beam_size = 3;        // 1: greedy search
  float length_penalty = static_cast<float>(kDefaultLengthPenalty);  // α (beam search)
  int64_t batch_size = 64;      // images per batch
  bool attention = false;       // also return each step's attention over the grid
  // Called after each batch with the images captioned so far and in all (a progress bar).
  std::function<void(int64_t done, int64_t total)> on_batch;
};

struct Caption {
  std::string text;                // the caption
  std::vector<std::string> words;  // one per generated token (SentencePiece's "▁" removed)
  Hypothesis hypothesis;           // the token ids and their log-probability
  // With CaptionOptions::attention: α_t over the grid (rows × cols, row-major) for every generated
  // token and then the EOS, [words.size() + 1][rows · cols] (no EOS step when the caption ran out
  // of length). Empty for a model without attention.
  std::vector<std::vector<float>> attention;
  int64_t rows = 0, cols = 0;
};

class ImageCaptioner {
 public:
  // `model` must take images (qkv::Error naming its type otherwise); `sp` is its tokenizer.
  ImageCaptioner(const models::Seq2SeqModel& model, const text::SentencePiece& sp);

  // images f32 [N, C, H, W] of the model's source_image() shape, pixels in [0, 1] → N captions.
  std::vector<Caption> caption(const Tensor& images, const CaptionOptions& opt) const;

  const models::ImageShape& image_shape() const { return shape_; }

 private:
  const models::Seq2SeqModel& model_;
  const text::SentencePiece& sp_;
  models::ImageShape shape_;
};

}  // namespace qkv::decode
