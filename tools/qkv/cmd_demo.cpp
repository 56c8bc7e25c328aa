// qkv demo — the worked examples of the notes (shared/seeds), computed by the library and printed
// as tables: the scaled, softmaxed score vector (seed 000), attention for "The quick brown fox
// jumps" with its given Q/K/V (seed 002), the same with a causal mask (a decoder's view), and the
// parameter-free softmax(X·Xᵀ)·X of seed 001.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "qkv/qkv.h"

namespace qkv::cli {

namespace {

void print_matrix(const std::string& title, const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                  const Tensor& m, bool percent) {
  std::printf("\n%s\n", title.c_str());
  std::printf("%10s", "");
  for (const auto& c : cols) std::printf(" %8s", c.c_str());
  std::printf("\n");
  std::vector<float> v = m.to_vector();
  const size_t nc = cols.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    std::printf("%10s", rows[i].c_str());
    for (size_t j = 0; j < nc; ++j) {
      if (percent)
        std::printf(" %7.2f%%", 100.f * v[i * nc + j]);
      else
        std::printf(" %8.4f", v[i * nc + j]);
    }
    std::printf("\n");
  }
}

int run_demo() {
  NoGradGuard no_grad;
  std::printf("qkv demo: the notes' worked examples, computed by qkv::scaled_dot_product_attention\n");

  // Seed 000: raw scores [4.2, 0.1, 0.5, 2.5, -1.5] for one query, d_k = 4, so scaled by 1/√4.
  {
    Tensor scores = Tensor::from_vector({4.2f, 0.1f, 0.5f, 2.5f, -1.5f}, {1, 5});
    Tensor scaled = scores * (1.f / std::sqrt(4.f));
    Tensor w = softmax(scaled, -1);
    std::printf("\n[seed 000] scores → scaled by 1/√d_k (d_k = 4) → softmax\n");
    std::vector<float> s = scaled.to_vector(), p = w.to_vector();
    std::printf("%10s %8s %8s %9s\n", "position", "score", "scaled", "weight");
    const float raw[] = {4.2f, 0.1f, 0.5f, 2.5f, -1.5f};
    for (int j = 0; j < 5; ++j) std::printf("%10d %8.2f %8.2f %8.2f%%\n", j, raw[j], s[j], 100.f * p[j]);
    std::printf("(the notes print [45, 10, 15, 20, 10]%% as an illustration; these are the true values)\n");
  }

  // Seed 002: "The quick brown fox jumps", d = 2, with the notes' Q, K, V.
  const std::vector<std::string> tokens = {"The", "quick", "brown", "fox", "jumps"};
  Tensor Q = Tensor::from_vector({0.1f, 0.2f, 0.5f, 0.6f, 0.9f, 1.0f, 1.3f, 1.4f, 1.7f, 1.8f}, {5, 2});
  Tensor K = Tensor::from_vector({0.2f, 0.1f, 0.6f, 0.5f, 1.0f, 0.9f, 1.4f, 1.3f, 1.8f, 1.7f}, {5, 2});
  Tensor V = Tensor::from_vector({0.3f, 0.4f, 0.7f, 0.8f, 1.1f, 1.2f, 1.5f, 1.6f, 1.9f, 2.0f}, {5, 2});
  {
    AttentionResult r = scaled_dot_product_attention_with_weights(Q, K, V);
    print_matrix("[seed 002] attention weights softmax(Q·Kᵀ/√2), row = query, column = key", tokens, tokens, r.weights,
                 true);
    print_matrix("[seed 002] attention output softmax(Q·Kᵀ/√2)·V", tokens, {"out[0]", "out[1]"}, r.output, false);
    std::vector<float> o = r.output.to_vector();
    std::printf("→ the output for \"quick\" is [%.6f, %.6f]\n", o[2], o[3]);
  }
  {
    AttentionOptions opt;
    opt.is_causal = true;
    AttentionResult r = scaled_dot_product_attention_with_weights(Q, K, V, opt);
    print_matrix("[seed 000/002] with a causal mask (a decoder: each word sees only its past)", tokens, tokens,
                 r.weights, true);
  }
  // Seed 001: parameter-free self-attention softmax(X·Xᵀ)·X on the seed-002 embeddings.
  {
    Tensor X = Tensor::from_vector({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f,
                                    1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f, 1.7f, 1.8f, 1.9f, 2.0f},
                                   {5, 4});
    AttentionOptions opt;
    opt.scale = 1.f;  // no 1/√d: the notes' DotProductAttention(X)
    AttentionResult r = scaled_dot_product_attention_with_weights(X, X, X, opt);
    print_matrix("[seed 001] parameter-free self-attention softmax(X·Xᵀ): every word attends most to the longest "
                 "vector",
                 tokens, tokens, r.weights, true);
  }
  std::printf("\nNext: qkv bench attention --help\n");
  return 0;
}

}  // namespace

void add_demo(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("demo", "Run the notes' worked examples and print the attention weights");
  register_runner(sub, run_demo);
}

}  // namespace qkv::cli
