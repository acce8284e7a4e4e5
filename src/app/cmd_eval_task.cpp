// `ember eval --task`: a checkpoint scored on a multiple-choice task file (data/choice_task.h) with the checkpoint's
// tokenizer, on the CPU or the GPU, by a KvModel that runs each item's context once (infer/choice_score_kv.h).
#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/commands.h"
#include "app/eval_output.h"
#include "app/eval_task.h"
#include "core/error.h"
#include "core/output.h"
#include "core/timer.h"
#include "infer/choice_score_kv.h"
#include "infer/kv_model.h"
#include "tokenizer/tokenizer_choice.h"

namespace ember {

namespace {

// Context tokens one step of the KvModel runs at most (more where one row is longer): a few HellaSwag contexts of a
// GPT-2 tokenizer (about 50 tokens each) up to --batch-size 8 of them at their longest.
constexpr int kContextRows = 2048;

// --items-out: one JSON line per item, under the output rule (core/output.h). Taken before the model loads.
void write_items(StagedOutput& out, const std::vector<ChoiceItem>& items, const std::vector<ChoiceScore>& scores) {
  std::ofstream f(out.staging(), std::ios::binary);
  for (size_t i = 0; i < items.size(); ++i) {
    const nlohmann::json rec = {{"line", items[i].line},
                                {"answer", items[i].answer},
                                {"pred", scores[i].pred},
                                {"pred_norm", scores[i].pred_norm},
                                {"logprob", scores[i].logprob},
                                {"tokens", scores[i].tokens},
                                {"context_tokens", items[i].context.size()}};
    f << rec.dump() << '\n';
  }
  if (!f.flush()) throw_error("--items-out file " + out.staging() + ": write failed", "check the disk");
  f.close();
  out.commit();
}

}  // namespace

int eval_task(const EvalTaskArgs& a) {
  const std::optional<TaskFormat> format = parse_task_format(a.task);
  if (!format) throw_error("ember eval: --task " + a.task + " is not a task", "give --task hellaswag or --task choice");
  // The cheap checks first (the output, the checkpoint's metadata, the task file), the model's allocation last.
  std::unique_ptr<StagedOutput> items_out;
  // Its records begin with "answer" (a JSON object's keys are written in order), which marks the file as ours.
  if (!a.items_out.empty())
    items_out =
        stage_eval_output(a.items_out, "--items-out", a.overwrite, "{\"answer\":", "a JSONL file of per-item records");
  const DeviceRequest request = parse_device_option(a.device);
  const CheckpointMeta meta = read_checkpoint_meta(a.checkpoint);
  const int T = model_seq_len(meta, a.seq_len);
  const std::unique_ptr<Tokenizer> tokenizer = checkpoint_tokenizer(a.checkpoint, meta);
  const std::vector<ChoiceItem> items = read_choice_task(a.data, *format, *tokenizer, T, a.limit);

  auto backend = backend_for_device(request);
  // --batch-size items at once; a step's rows hold their contexts (at least the longest row), a step's logit rows
  // their k-th choices; the cache only as deep as the longest row.
  const int need = choice_positions(items, T);
  const KvModelShape shape{
      .max_slots = a.batch_size, .max_rows = std::max(need, kContextRows), .max_logit_rows = need, .max_T = need};
  const std::unique_ptr<KvModel> model = load_kv_model(a.checkpoint, meta, *backend, shape);
  const double t0 = now_seconds();
  double last = t0;
  auto progress = [&](size_t done, size_t rows) {
    const double now = now_seconds();
    if (now - last < 5.0 && done < rows) return;
    last = now;
    fprintf(stderr, "%s: %zu/%zu choices scored (%.0f%%), %.1f choices/s\n", a.task.c_str(), done, rows,
            100.0 * double(done) / double(rows), double(done) / std::max(now - t0, 1e-9));
  };
  const std::vector<ChoiceScore> scores = score_choices_kv(*model, T, items, progress);
  const double seconds = std::max(now_seconds() - t0, 1e-9);
  ChoiceTally tally;
  for (size_t i = 0; i < items.size(); ++i) tally.add(items[i], scores[i]);
  if (items_out) write_items(*items_out, items, scores);
  if (a.json) {
    const nlohmann::json out = {{"checkpoint", a.checkpoint},
                                {"step", meta.step},
                                {"task", a.task},
                                {"data", a.data},
                                {"items", int64_t(tally.items)},
                                {"acc", tally.acc()},
                                {"acc_norm", tally.acc_norm()},
                                {"correct", int64_t(tally.correct)},
                                {"correct_norm", int64_t(tally.correct_norm)},
                                {"seq_len", T},
                                {"items_per_s", tally.items / seconds}};
    printf("%s\n", out.dump().c_str());
  } else {
    printf("%s (step %lld) on %s (%s): %lld items | acc %.4f | acc_norm %.4f | %.1f items/s\n", a.checkpoint.c_str(),
           (long long)meta.step, a.data.c_str(), a.task.c_str(), (long long)tally.items, tally.acc(), tally.acc_norm(),
           tally.items / seconds);
  }
  return EXIT_CODE_OK;
}

}  // namespace ember
