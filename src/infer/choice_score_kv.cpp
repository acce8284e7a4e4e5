// Scoring multiple-choice items with a KvModel (implementation).
#include "infer/choice_score_kv.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ember {

namespace {

// What one slot runs: a context (an item's, or one choice's cut to the window) and the choices scored after it.
struct Part {
  size_t item;
  std::vector<int32_t> context;
  std::vector<int> choices;  // indexes into the item's choices
};

std::vector<Part> parts_of(const std::vector<ChoiceItem>& items, int window) {
  std::vector<Part> parts;
  for (size_t i = 0; i < items.size(); ++i) {
    const ChoiceItem& item = items[i];
    const size_t n = item.context.size();
    bool cut = false;
    for (const std::vector<int32_t>& c : item.choices) cut |= n + c.size() - 1 > size_t(window);
    if (!cut) {
      Part p{i, item.context, {}};
      for (size_t c = 0; c < item.choices.size(); ++c) p.choices.push_back(int(c));
      parts.push_back(std::move(p));
      continue;
    }
    for (size_t c = 0; c < item.choices.size(); ++c) {  // the row's own cut: its last `window` inputs
      const size_t keep = std::min(n, size_t(window) + 1 - item.choices[c].size());
      parts.push_back({i, std::vector<int32_t>(item.context.end() - ptrdiff_t(keep), item.context.end()), {int(c)}});
    }
  }
  return parts;
}

// log p[target] of a row of logits, in double.
double log_prob(const float* logits, int V, int32_t target) {
  const float top = *std::max_element(logits, logits + V);
  double sum = 0.0;
  for (int v = 0; v < V; ++v) sum += std::exp(double(logits[v]) - top);
  return double(logits[target]) - top - std::log(sum);
}

}  // namespace

int choice_positions(const std::vector<ChoiceItem>& items, int window) {
  size_t longest = 1;
  for (const ChoiceItem& item : items)
    for (const std::vector<int32_t>& c : item.choices)
      longest = std::max(longest, std::min(item.context.size() + c.size() - 1, size_t(window)));
  return int(longest);
}

std::vector<ChoiceScore> score_choices_kv(KvModel& model, int window, const std::vector<ChoiceItem>& items,
                                          const std::function<void(size_t, size_t)>& progress) {
  const KvModelShape& shape = model.shape();
  const int need = choice_positions(items, window), V = model.config().vocab_size;
  EMBER_ASSERT(shape.max_rows >= need && shape.max_logit_rows >= need && shape.max_T >= need,
               "score_choices_kv: the KvModel is smaller than the longest row");
  std::vector<ChoiceScore> scores(items.size());
  size_t total = 0, done = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    scores[i].logprob.assign(items[i].choices.size(), 0.0);
    scores[i].tokens.resize(items[i].choices.size());
    for (size_t c = 0; c < items[i].choices.size(); ++c) scores[i].tokens[c] = int(items[i].choices[c].size());
    total += items[i].choices.size();
  }
  const std::vector<Part> parts = parts_of(items, window);
  auto choice = [&](const Part& p, int k) -> const std::vector<int32_t>& { return items[p.item].choices[size_t(k)]; };
  std::vector<int32_t> tokens, slots, pos;
  std::vector<int> logit_rows;
  std::vector<float> logits;
  for (size_t first = 0; first < parts.size();) {
    // A group: at most max_slots parts whose contexts fit one step, and whose k-th choices fit one step for each k.
    size_t end = first, rows = 0, most = 0;
    std::vector<size_t> choice_rows;
    while (end < parts.size() && end - first < size_t(shape.max_slots)) {
      const Part& p = parts[end];
      std::vector<size_t> next = choice_rows;
      next.resize(std::max(next.size(), p.choices.size()), 0);
      bool fits = rows + p.context.size() <= size_t(shape.max_rows) && end - first < size_t(shape.max_logit_rows);
      for (size_t k = 0; k < p.choices.size(); ++k) {
        next[k] += choice(p, p.choices[k]).size() - 1;
        fits &= next[k] <= size_t(std::min(shape.max_rows, shape.max_logit_rows));
      }
      if (!fits && end > first) break;
      rows += p.context.size();
      choice_rows = std::move(next);
      most = std::max(most, p.choices.size());
      ++end;
    }
    // The contexts, each in its slot from position 0: the last row's logits give every choice's first token.
    tokens.clear(), slots.clear(), pos.clear(), logit_rows.clear();
    for (size_t s = first; s < end; ++s) {
      const Part& p = parts[s];
      for (size_t t = 0; t < p.context.size(); ++t) {
        tokens.push_back(p.context[t]), slots.push_back(int32_t(s - first)), pos.push_back(int32_t(t));
      }
      logit_rows.push_back(int(tokens.size()) - 1);
    }
    logits.resize(logit_rows.size() * size_t(V));
    model.forward(tokens.data(), slots.data(), pos.data(), int(tokens.size()), logit_rows.data(),
                  int(logit_rows.size()), logits.data());
    for (size_t s = first; s < end; ++s)
      for (int c : parts[s].choices)
        scores[parts[s].item].logprob[size_t(c)] +=
            log_prob(logits.data() + (s - first) * size_t(V), V, choice(parts[s], c)[0]);
    // The k-th choice of every part, after its context (overwriting the (k-1)-th's positions in the slot).
    for (size_t k = 0; k < most; ++k) {
      tokens.clear(), slots.clear(), pos.clear(), logit_rows.clear();
      std::vector<std::pair<size_t, size_t>> owner;  // per row: the part, the token it predicts
      for (size_t s = first; s < end; ++s) {
        const Part& p = parts[s];
        if (k >= p.choices.size()) continue;
        const std::vector<int32_t>& ids = choice(p, p.choices[k]);
        for (size_t j = 0; j + 1 < ids.size(); ++j) {
          logit_rows.push_back(int(tokens.size()));
          tokens.push_back(ids[j]), slots.push_back(int32_t(s - first));
          pos.push_back(int32_t(p.context.size() + j));
          owner.push_back({s, j + 1});
        }
      }
      if (tokens.empty()) continue;
      logits.resize(logit_rows.size() * size_t(V));
      model.forward(tokens.data(), slots.data(), pos.data(), int(tokens.size()), logit_rows.data(),
                    int(logit_rows.size()), logits.data());
      for (size_t r = 0; r < owner.size(); ++r) {
        const Part& p = parts[owner[r].first];
        const int c = p.choices[k];
        scores[p.item].logprob[size_t(c)] += log_prob(logits.data() + r * size_t(V), V, choice(p, c)[owner[r].second]);
      }
    }
    for (size_t s = first; s < end; ++s) done += parts[s].choices.size();
    if (progress) progress(done, total);
    first = end;
  }
  for (ChoiceScore& s : scores) s.decide();
  return scores;
}

}  // namespace ember
