# Tokenizer benchmark, the references' side: tiktoken and Hugging Face tokenizers on the text bench_tokenizer
# encoded, first checked to give Ember's ids, then timed on 1 thread and on all threads; prints the comparison table.
import argparse
import json
import os
import sys
import time

import numpy as np
import tiktoken
from tokenizers import Tokenizer

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2_unicode_to_byte():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[chr(b)] = b
        else:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def line_blocks(text, lines_per_block):
    """The text cut into blocks of about `lines_per_block` lines, each cut at a newline with a non-space character on
    both sides: there the GPT-2 pattern always ends a piece, so the blocks encode to the ids of the whole text."""
    blocks, start, count, pos = [], 0, 0, text.find("\n")
    while pos != -1:
        count += 1
        if (count >= lines_per_block and 0 < pos and pos + 1 < len(text) and not text[pos - 1].isspace()
                and not text[pos + 1].isspace()):
            blocks.append(text[start:pos + 1])
            start, count = pos + 1, 0
        pos = text.find("\n", pos + 1)
    blocks.append(text[start:])
    return blocks


def best_seconds(rounds, run):
    """The fastest of `rounds` timed calls after one warm-up call."""
    run()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="folder with vocab.json and tokenizer.json")
    ap.add_argument("--text", required=True)
    ap.add_argument("--ember-ids", required=True, help="int32 ids bench_tokenizer wrote")
    ap.add_argument("--ember-results", required=True, help="bench_tokenizer's output lines")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    data = open(args.text, "rb").read()
    text = data.decode("utf-8")  # the benchmark text is valid UTF-8, so every library sees the same string
    u2b = gpt2_unicode_to_byte()
    vocab = json.load(open(os.path.join(args.tokenizer, "vocab.json"), encoding="utf-8"))
    ranks = {bytes(u2b[c] for c in t): i for t, i in vocab.items() if t != "<|endoftext|>"}
    enc = tiktoken.Encoding("bench", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": vocab["<|endoftext|>"]})
    hf = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    hf.encode_special_tokens = True

    # Correctness first: all three give the same ids for the whole text.
    ember_ids = np.fromfile(args.ember_ids, dtype=np.int32).tolist()
    batch = line_blocks(text, 200)
    tt_ids = enc.encode_ordinary(text)
    if tt_ids != ember_ids:
        p = next((i for i, (a, b) in enumerate(zip(tt_ids, ember_ids)) if a != b), min(len(tt_ids), len(ember_ids)))
        sys.exit(f"FAIL: Ember and tiktoken ids differ at position {p}: {ember_ids[p:p + 5]} vs {tt_ids[p:p + 5]}")
    if hf.encode(text, add_special_tokens=False).ids != tt_ids:
        sys.exit("FAIL: Hugging Face tokenizers and tiktoken ids differ on the benchmark text")
    if sum(enc.encode_ordinary_batch(batch, num_threads=args.threads), []) != tt_ids:
        sys.exit("FAIL: tiktoken's batch of line blocks differs from encoding the whole text")

    n_tokens, n_bytes = len(tt_ids), len(data)
    results = {}
    for line in open(args.ember_results):
        name, *fields = line.split()
        kv = dict(f.split("=") for f in fields)
        results[name] = float(kv["seconds"])
    results["tiktoken_1"] = best_seconds(args.rounds, lambda: enc.encode_ordinary(text))
    results[f"tiktoken_{args.threads}"] = best_seconds(
        args.rounds, lambda: enc.encode_ordinary_batch(batch, num_threads=args.threads))
    results["hf_1"] = best_seconds(args.rounds, lambda: hf.encode(text, add_special_tokens=False))
    results[f"hf_{args.threads}"] = best_seconds(args.rounds, lambda: hf.encode_batch(batch, add_special_tokens=False))

    print(f"\ntokenizer benchmark: {n_bytes / 1e6:.1f} MB, {n_tokens} tokens, {len(vocab)} ids; ids checked equal; "
          f"fastest of {args.rounds} rounds after a warm-up")
    print(f"{'library':<32}{'threads':>8}{'tokens/s':>14}{'MB/s':>10}{'Ember/tiktoken':>16}")
    rows = [("Ember encode", "ember_1", "tiktoken_1"), ("Ember encode_parallel", f"ember_{args.threads}",
            f"tiktoken_{args.threads}"), ("tiktoken encode_ordinary", "tiktoken_1", None),
            ("tiktoken encode_ordinary_batch", f"tiktoken_{args.threads}", None),
            ("HF tokenizers encode", "hf_1", None), ("HF tokenizers encode_batch", f"hf_{args.threads}", None)]
    for label, key, ref in rows:
        s = results[key]
        ratio = f"{results[ref] / s:.2f}x" if ref else ""
        threads = key.rsplit("_", 1)[1]
        print(f"{label:<32}{threads:>8}{n_tokens / s:>14.0f}{n_bytes / s / 1e6:>10.2f}{ratio:>16}")


if __name__ == "__main__":
    main()
