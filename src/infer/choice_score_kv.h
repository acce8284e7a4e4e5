// Scoring multiple-choice items (data/choice_task.h) with a KvModel, as `ember eval --task` does: each item's context
// runs once, and its choices continue from the context's cached keys and values one after the other in the item's
// slot (a choice's rows overwrite the previous choice's, which no later row reads), so no context is computed once
// per choice. The numbers are a row per choice's (train/choice_score.h): a choice whose row would be cut to the window
// gets a context of its own, cut as that row is.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "data/choice_task.h"
#include "infer/kv_model.h"

namespace ember {

// The cached positions a KvModel needs to score `items` at `window`: the longest row, context and choice, after the
// cut to the window.
int choice_positions(const std::vector<ChoiceItem>& items, int window);

// Scores every item with `model`, whose shape bounds the items scored at once (max_slots), the context tokens of a
// step (max_rows) and the choice tokens of a step (max_logit_rows); max_rows, max_logit_rows and max_T must be at least
// choice_positions(items, window). Calls progress(choices done, choices) after each group when given.
std::vector<ChoiceScore> score_choices_kv(KvModel& model, int window, const std::vector<ChoiceItem>& items,
                                          const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace ember
