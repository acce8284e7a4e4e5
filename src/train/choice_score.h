// Scoring multiple-choice items (data/choice_task.h) with a GPT, as training's eval.task does: a row per choice, the
// context and the choice cut from the left to the model's window, so a long context loses its start.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "data/choice_task.h"
#include "model/gpt.h"

namespace ember {

// Scores items[which[k]] for every k with `model`, in forward passes of at most max_B rows of at most `window`
// tokens (both within what the model was built for), the rows sorted by length so that a pass pads little. Calls
// progress(rows done, rows) after each pass when given. The scores are in the order of `which`.
std::vector<ChoiceScore> score_choices(GPT& model, int max_B, int window, const std::vector<ChoiceItem>& items,
                                       std::span<const size_t> which,
                                       const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace ember
