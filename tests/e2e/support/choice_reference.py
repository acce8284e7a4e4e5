"""Multiple-choice scoring written from the task's definition, through transformers on an `ember export` folder
(run by eval_choice.sh and scripts/bench/eval_choice.sh).

  make ITEMS_JSONL HELLASWAG_JSONL CORPUS_DIR N SEED [CHOICES]
      N items drawn from the ASCII words (of at most 8 characters) of the text files under CORPUS_DIR: contexts of
      3 to 120 words (longer than a small model's window, so cut from the left), 2 to 5 (or CHOICES) distinct
      choices of 1 to 4 words, some starting with a space and some not; written in the choice format (context,
      choices, answer) and the HellaSwag format (ctx, endings, label: the endings without their leading space,
      which the hellaswag task puts back).
  score MODEL_DIR ITEMS_JSONL FORMAT WINDOW OUT_JSON [--shift]
      Each choice's log-likelihood given its context: the context's and the choice's token ids (the tokenizer run on
      each apart; HellaSwag's endings after a space), the last WINDOW inputs of context + choice, the fp32
      cross-entropy of the model's logits summed over the choice's tokens; an item's choices in one forward pass.
      Writes per-item logprob, tokens, pred (highest sum) and pred_norm (highest mean per token), and acc,
      acc_norm, items/s. --shift scores the span one token early (a deliberate off-by-one, which the comparison
      must catch).
  compare EMBER_ITEMS_JSONL EMBER_JSON REF_JSON ATOL
      Every item: the same pred and pred_norm, each choice's logprob within ATOL; the same acc and acc_norm.
"""
import json
import os
import random
import sys
import time


def make(items_path, hella_path, corpus, n, seed, per_item=None):
    rng = random.Random(int(seed))
    words = []
    for root, _, files in sorted(os.walk(corpus)):
        for f in sorted(files):
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                words += fh.read().split()
    words = [w for w in words if w.isascii() and w.isprintable() and len(w) <= 8]
    pick = lambda k: " ".join(words[i] for i in (lambda s: range(s, s + k))(rng.randrange(len(words) - k)))
    with open(items_path, "w") as a, open(hella_path, "w") as b:
        for _ in range(int(n)):
            context = pick(rng.choice([3, 8, 20, 40, 80, 120]))
            k = int(per_item) if per_item else rng.randint(2, 5)
            endings = []
            while len(endings) < k:
                e = pick(rng.randint(1, 4))
                if e not in endings:
                    endings.append(e)
            answer = rng.randrange(k)
            choices = [(" " + e) if rng.random() < 0.7 else e for e in endings]
            a.write(json.dumps({"context": context, "choices": choices, "answer": answer}) + "\n")
            b.write(json.dumps({"ctx": context, "endings": endings, "label": answer, "split": "val"}) + "\n")


def score(model_dir, items_path, fmt, window, out_path, shift=False):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.model_max_length = 1 << 30  # contexts longer than the model are cut below, not warned about
    window = int(window)
    out = {"items": []}
    t0 = time.time()
    for line in open(items_path):
        j = json.loads(line)
        if fmt == "hellaswag":
            context, choices, answer = j["ctx"], [" " + e for e in j["endings"]], j["label"]
        else:
            context, choices, answer = j["context"], j["choices"], j["answer"]
        ctx = tok.encode(context)
        # One forward per item, its choices as rows padded on the right (as llm.c's script does): under causal
        # attention the padding changes nothing before it.
        rows = []
        for choice in choices:
            ids = tok.encode(choice)
            seq = ctx + ids
            rows.append((seq[:-1][-window:], seq[1:][-window:], len(ids)))
        width = max(len(r[0]) for r in rows)
        batch = torch.tensor([r[0] + [0] * (width - len(r[0])) for r in rows])
        with torch.no_grad():
            logits = model(batch).logits
            # The per-token cross-entropy in fp32 over every position, as llm.c's script takes it.
            targets = torch.tensor([r[1] + [0] * (width - len(r[1])) for r in rows])
            nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
            nll = nll.view(len(rows), width).double()
        logprob, tokens = [], []
        for k, (_, row_targets, m) in enumerate(rows):
            n = len(row_targets)
            span = nll[k, n - m - 1:n - 1] if shift else nll[k, n - m:n]
            logprob.append(-float(span.sum()))
            tokens.append(m)
        mean = [s / t for s, t in zip(logprob, tokens)]
        pred, pred_norm = logprob.index(max(logprob)), mean.index(max(mean))
        out["items"].append({"answer": answer, "logprob": logprob, "tokens": tokens, "pred": pred,
                             "pred_norm": pred_norm})
    seconds = time.time() - t0
    items = out["items"]
    out["acc"] = sum(i["pred"] == i["answer"] for i in items) / len(items)
    out["acc_norm"] = sum(i["pred_norm"] == i["answer"] for i in items) / len(items)
    out["items_per_s"] = len(items) / seconds
    json.dump(out, open(out_path, "w"))
    print(f"reference: {len(items)} items, acc {out['acc']:.4f}, acc_norm {out['acc_norm']:.4f}, "
          f"{out['items_per_s']:.1f} items/s")


def compare(ember_items, ember_json, ref_json, atol):
    atol = float(atol)
    ember = [json.loads(l) for l in open(ember_items)]
    summary = json.load(open(ember_json))
    ref = json.load(open(ref_json))
    assert len(ember) == len(ref["items"]), (len(ember), len(ref["items"]))
    worst, bad = 0.0, []
    for n, (e, r) in enumerate(zip(ember, ref["items"])):
        assert e["tokens"] == r["tokens"], f"item {n}: token counts {e['tokens']} against {r['tokens']}"
        d = max(abs(a - b) for a, b in zip(e["logprob"], r["logprob"]))
        worst = max(worst, d)
        if d > atol or e["pred"] != r["pred"] or e["pred_norm"] != r["pred_norm"]:
            bad.append(f"item {n}: ember {e['logprob']} pred {e['pred']}/{e['pred_norm']}, "
                       f"reference {r['logprob']} pred {r['pred']}/{r['pred_norm']}")
    print(f"{len(ember)} items; worst |logprob difference| {worst:.3g} (tolerance {atol}); "
          f"acc {summary['acc']:.4f} / {ref['acc']:.4f}, acc_norm {summary['acc_norm']:.4f} / {ref['acc_norm']:.4f}")
    assert not bad, f"{len(bad)} of {len(ember)} items differ, e.g. " + "; ".join(bad[:3])
    assert summary["acc"] == ref["acc"] and summary["acc_norm"] == ref["acc_norm"], "acc or acc_norm differ"


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(*args)
    elif cmd == "score":
        score(*[a for a in args if a != "--shift"], shift="--shift" in args)
    elif cmd == "compare":
        try:
            compare(*args)
        except AssertionError as e:
            sys.exit(f"differ: {e}")
    else:
        sys.exit(f"unknown command {cmd}")
