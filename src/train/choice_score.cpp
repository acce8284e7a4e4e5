// Scoring multiple-choice items (implementation).
#include "train/choice_score.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace ember {

namespace {

// One choice of one item as a row of a forward pass: the last `length` inputs of context + choice (all but the
// last token), each predicting the next; the choice's tokens are the last targets, and only the last positions of a
// pass (as many as its longest choice) get logits (GPT::forward_tail).
struct Row {
  size_t slot;  // index into `which`
  int choice;
  int length;
};

}  // namespace

std::vector<ChoiceScore> score_choices(GPT& model, int max_B, int window, const std::vector<ChoiceItem>& items,
                                       std::span<const size_t> which,
                                       const std::function<void(size_t, size_t)>& progress) {
  EMBER_ASSERT(max_B > 0 && window > 0, "score_choices: empty passes");
  std::vector<ChoiceScore> scores(which.size());
  std::vector<Row> rows;
  for (size_t k = 0; k < which.size(); ++k) {
    const ChoiceItem& item = items.at(which[k]);
    scores[k].logprob.assign(item.choices.size(), 0.0);
    scores[k].tokens.resize(item.choices.size());
    for (size_t c = 0; c < item.choices.size(); ++c) {
      const size_t full = item.context.size() + item.choices[c].size();
      EMBER_ASSERT(item.choices[c].size() <= size_t(window) && !item.context.empty(), "score_choices: a bad item");
      rows.push_back({k, int(c), int(std::min(full - 1, size_t(window)))});
      scores[k].tokens[c] = int(item.choices[c].size());
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.length > b.length; });
  std::vector<int32_t> inputs, targets, seq;
  std::vector<int> ends;
  for (size_t first = 0; first < rows.size(); first += size_t(max_B)) {
    const size_t B = std::min(rows.size() - first, size_t(max_B));
    const int T = rows[first].length;  // the longest of the pass
    int scored = 0;                    // the longest choice of the pass: only its last positions get logits
    for (size_t r = 0; r < B; ++r)
      scored = std::max(scored, scores[rows[first + r].slot].tokens[size_t(rows[first + r].choice)]);
    inputs.assign(B * size_t(T), 0);
    targets.assign(B * size_t(scored), 0);
    ends.resize(B);
    for (size_t r = 0; r < B; ++r) {
      const Row& row = rows[first + r];
      const ChoiceItem& item = items[which[row.slot]];
      seq = item.context;
      seq.insert(seq.end(), item.choices[size_t(row.choice)].begin(), item.choices[size_t(row.choice)].end());
      // The row holds seq[start, start + length) as inputs; position t predicts seq[start + t + 1].
      const size_t start = seq.size() - 1 - size_t(row.length);
      std::copy_n(seq.begin() + ptrdiff_t(start), row.length, inputs.begin() + ptrdiff_t(r * size_t(T)));
      ends[r] = row.length;
      for (int j = 0; j < scored; ++j) {
        const int t = row.length - scored + j;
        if (t >= 0) targets[r * size_t(scored) + size_t(j)] = seq[start + size_t(t) + 1];
      }
    }
    model.forward_tail(inputs.data(), targets.data(), int(B), T, ends.data(), scored);
    const std::span<const float> losses = model.token_losses();
    for (size_t r = 0; r < B; ++r) {
      const Row& row = rows[first + r];
      ChoiceScore& s = scores[row.slot];
      const int m = s.tokens[size_t(row.choice)];
      double sum = 0.0;
      for (int j = scored - m; j < scored; ++j) sum -= double(losses[r * size_t(scored) + size_t(j)]);
      s.logprob[size_t(row.choice)] = sum;
    }
    if (progress) progress(first + B, rows.size());
  }
  for (ChoiceScore& s : scores) s.decide();
  return scores;
}

}  // namespace ember
