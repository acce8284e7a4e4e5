// Multiple-choice tasks (implementation): each line parsed on its own, so an error names its line.
#include "data/choice_task.h"

#include <algorithm>
#include <fstream>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/json_input.h"

namespace ember {

namespace {

// The fields of an item in each format: its context, its choices and the answer's index.
struct Fields {
  const char *context, *choices, *answer;
};
Fields fields_of(TaskFormat f) {
  return f == TaskFormat::hellaswag ? Fields{"ctx", "endings", "label"} : Fields{"context", "choices", "answer"};
}

std::string format_hint(TaskFormat f) {
  const Fields k = fields_of(f);
  return std::string("a --task ") + task_format_name(f) + " line is one JSON object with \"" + k.context +
         "\" (a string), \"" + k.choices + "\" (a list of strings) and \"" + k.answer +
         "\" (the index of the right one), e.g. " +
         (f == TaskFormat::hellaswag ? R"({"ctx": "A man sits on a roof. he", "endings": ["is ...", ...], "label": 3})"
                                     : R"({"context": "2 + 2 =", "choices": [" 3", " 4"], "answer": 1})");
}

ChoiceItem parse_item(const nlohmann::json& j, TaskFormat format, const Tokenizer& tokenizer, int window,
                      const std::string& where) {
  const Fields k = fields_of(format);
  const TaskFormat other = format == TaskFormat::hellaswag ? TaskFormat::choice : TaskFormat::hellaswag;
  const std::string hint = format_hint(format);
  if (!j.is_object()) throw_error(where + ": not a JSON object", hint);
  for (const char* f : {k.context, k.choices, k.answer})
    if (!j.contains(f)) {
      if (j.contains(fields_of(other).choices))
        throw_error(where + ": no field \"" + f + "\": this is a --task " + task_format_name(other) + " item",
                    std::string("give --task ") + task_format_name(other) + " for this file");
      throw_error(where + ": no field \"" + f + "\"", hint);
    }
  ChoiceItem item;
  const std::string context = json_field<std::string>(j, k.context, "", where, hint);
  if (context.empty()) throw_error(where + ": \"" + k.context + "\" is empty", "a choice is scored given its context");
  item.context = tokenizer.encode(context);
  const nlohmann::json& choices = j[k.choices];
  if (!choices.is_array() || choices.empty())
    throw_error(where + ": \"" + k.choices + "\" is " + (choices.is_array() ? "empty" : "not a list"), hint);
  for (size_t c = 0; c < choices.size(); ++c) {
    const std::string field = std::string(k.choices) + "[" + std::to_string(c) + "]";
    if (!choices[c].is_string()) throw_error(where + ": \"" + field + "\" is not a string", hint);
    const std::string text = choices[c].get<std::string>();
    if (text.empty()) throw_error(where + ": \"" + field + "\" is empty", "every choice needs text to score");
    // HellaSwag's endings follow the context after a space (llm.c's script and the harness score them so).
    std::vector<int32_t> ids = tokenizer.encode(format == TaskFormat::hellaswag ? " " + text : text);
    if (int64_t(ids.size()) > window)
      throw_error(where + ": \"" + field + "\" is " + std::to_string(ids.size()) + " tokens, more than the " +
                      std::to_string(window) + " the model sees at once",
                  "shorten the choice, or evaluate with a longer --seq-len (at most the model's block_size)");
    item.choices.push_back(std::move(ids));
  }
  const int64_t answer = json_field<int64_t>(j, k.answer, -1, where, hint);
  if (answer < 0 || answer >= int64_t(choices.size()))
    throw_error(where + ": \"" + k.answer + "\" is " + j[k.answer].dump() + ", not an index into the " +
                    std::to_string(choices.size()) + " " + k.choices,
                std::string("give the right choice's 0-based index in \"") + k.answer + "\"");
  item.answer = int(answer);
  return item;
}

}  // namespace

void ChoiceScore::decide() {
  std::vector<double> mean(logprob.size());
  for (size_t c = 0; c < mean.size(); ++c) mean[c] = logprob[c] / double(tokens[c]);
  pred = int(std::max_element(logprob.begin(), logprob.end()) - logprob.begin());
  pred_norm = int(std::max_element(mean.begin(), mean.end()) - mean.begin());
}

void ChoiceTally::add(const ChoiceItem& item, const ChoiceScore& score) {
  items += 1;
  correct += score.pred == item.answer;
  correct_norm += score.pred_norm == item.answer;
}

const char* task_format_name(TaskFormat f) { return f == TaskFormat::hellaswag ? "hellaswag" : "choice"; }

std::optional<TaskFormat> parse_task_format(const std::string& name) {
  return find_by_name(kTaskFormats, task_format_name, name);
}

std::vector<ChoiceItem> read_choice_task(const std::string& path, TaskFormat format, const Tokenizer& tokenizer,
                                         int window, int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw_error("task file " + path + " cannot be read",
                "check the path; scripts/data/download.sh hellaswag fetches HellaSwag's validation file");
  std::vector<ChoiceItem> items;
  std::string line;
  for (int n = 1; (limit <= 0 || int64_t(items.size()) < limit) && std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "task file " + path + " line " + std::to_string(n);
    const nlohmann::json j = parse_json_input(line, where, format_hint(format));
    items.push_back(parse_item(j, format, tokenizer, window, where));
    items.back().line = n;
  }
  if (in.bad()) throw_error("task file " + path + ": read error", "check the file and the disk");
  if (items.empty())
    throw_error("task file " + path + " holds no items",
                "give a JSONL file of items, one per line: " + format_hint(format));
  return items;
}

}  // namespace ember
