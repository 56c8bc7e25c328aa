#include "qkv/eval/label_scores.h"

#include <algorithm>

namespace qkv::eval {

void LabelCounts::add(size_t predicted, size_t truth) {
  if (predicted == truth) {
    ++tp[predicted];
  } else {
    ++fp[predicted];
    ++fn[truth];
  }
}

double LabelCounts::macro_f1() const {
  double f1 = 0;
  int64_t present = 0;
  for (size_t l = 0; l < tp.size(); ++l) {
    const int64_t denom = 2 * tp[l] + fp[l] + fn[l];
    if (denom == 0) continue;  // neither seen nor predicted: not one of scikit-learn's labels
    f1 += 2.0 * static_cast<double>(tp[l]) / static_cast<double>(denom);
    ++present;
  }
  return present > 0 ? f1 / static_cast<double>(present) : 0.0;
}

// seqeval's get_entities: a chunk ending and starting at each position as its end_of_chunk /
// start_of_chunk say, a last "O" closing the sentence.
std::vector<std::tuple<std::string, size_t, size_t>> entities(const std::vector<std::string>& seq) {
  std::vector<std::tuple<std::string, size_t, size_t>> out;
  char prev_tag = 'O';
  std::string prev_type;
  size_t begin = 0;
  for (size_t i = 0; i <= seq.size(); ++i) {
    const std::string chunk = i < seq.size() ? seq[i] : "O";
    // tag = chunk[0]; type = chunk[1:].split('-', maxsplit=1)[-1] or '_'
    const char tag = chunk.empty() ? 'O' : chunk[0];
    const std::string rest = chunk.empty() ? std::string() : chunk.substr(1);
    const size_t dash = rest.find('-');
    std::string type = dash == std::string::npos ? rest : rest.substr(dash + 1);
    if (type.empty()) type = "_";
    const bool end = prev_tag == 'E' || prev_tag == 'S' ||
                     ((prev_tag == 'B' || prev_tag == 'I') && (tag == 'B' || tag == 'S' || tag == 'O')) ||
                     (prev_tag != 'O' && prev_tag != '.' && prev_type != type);
    const bool start =
        tag == 'B' || tag == 'S' || ((prev_tag == 'E' || prev_tag == 'S') && (tag == 'E' || tag == 'I')) ||
        (prev_tag == 'O' && (tag == 'E' || tag == 'I')) || (tag != 'O' && tag != '.' && prev_type != type);
    if (end && i > 0) out.emplace_back(prev_type, begin, i - 1);
    if (start) begin = i;
    prev_tag = tag, prev_type = type;
  }
  return out;
}

EntityScores entity_scores(const std::vector<std::vector<std::string>>& truth,
                           const std::vector<std::vector<std::string>>& predicted) {
  EntityScores s;
  for (size_t i = 0; i < truth.size() && i < predicted.size(); ++i) {
    const auto t = entities(truth[i]), p = entities(predicted[i]);
    s.true_entities += static_cast<int64_t>(t.size()), s.predicted += static_cast<int64_t>(p.size());
    for (const auto& e : p) s.correct += std::find(t.begin(), t.end(), e) != t.end();
  }
  s.precision = s.predicted > 0 ? static_cast<double>(s.correct) / static_cast<double>(s.predicted) : 0.0;
  s.recall = s.true_entities > 0 ? static_cast<double>(s.correct) / static_cast<double>(s.true_entities) : 0.0;
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

}  // namespace qkv::eval
