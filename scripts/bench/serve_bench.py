#!/usr/bin/env python3
# The driver of scripts/bench/serve.sh: decoding speed of a running `ember serve` (HTTP clients, standard library
# only) and of Hugging Face transformers' generate (KV cache) on the same model, then one table with the ratio.
"""Modes:
  ember URL OUT.json     time to first token and decode tokens/s of one stream; aggregate tokens/s of 1, 8 and 32
                         concurrent streams (each client its own request, batched by the server's engine)
  hf DIR OUT.json        the same numbers from transformers' model.generate(use_cache=True) on the model in DIR (an
                         `ember export` folder); C concurrent streams are one generate call over a batch of C prompts
  greedy URL DIR         correctness first: greedy tokens of the server and of transformers agree
  table EMBER HF         prints the table

Every run asks for exactly --tokens new tokens (a byte-level model has no end-of-text token; transformers gets
min_new_tokens), so tokens/s counts the same work on both sides."""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

PROMPT = "int main(int argc, char** argv) {\n  // the prompt of every stream: 64 bytes of C. \n"[:64]
CONCURRENCY = (1, 8, 32)


def stream_times(url, body):
    """Times (s, from the request) of each streamed chunk with text, and the completion tokens (usage)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions",
                 body=json.dumps(dict(body, stream=True, stream_options={"include_usage": True})),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"error: the server answered {resp.status}: {resp.read()[:300]!r}")
    times, tokens = [], 0
    for raw in resp:
        line = raw.decode().strip()
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter() - t0)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    conn.close()
    return times, tokens


def bench_ember(url, tokens, repeats):
    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0}
    stream_times(url, dict(body, max_tokens=4))  # warm-up
    ttft, decode = [], []
    for _ in range(repeats):
        t, tokens = stream_times(url, body)
        ttft.append(t[0])
        decode.append((tokens - 1) / (t[-1] - t[0]))
    out = {"ttft_ms": 1e3 * statistics.median(ttft), "decode_tps": statistics.median(decode), "aggregate": {}}
    for c in CONCURRENCY:
        counts = [0] * c

        def client(k):
            counts[k] = stream_times(url, dict(body, temperature=1.0, seed=k))[1]

        threads = [threading.Thread(target=client, args=(k,)) for k in range(c)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        out["aggregate"][str(c)] = sum(counts) / wall
        print(f"ember: {c} streams: {sum(counts)} tokens in {wall:.2f} s", file=sys.stderr)
    return out


def load_hf(model_dir):
    import torch
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    return torch, model


def only_byte_ids(model):
    """The model's rows past the 256 byte ids are padding (BENCH_VOCAB): ember never samples them, so neither may
    transformers (a logits processor that sets them to -inf, part of what it costs)."""
    v = model.config.vocab_size
    return {"suppress_tokens": list(range(256, v))} if v > 256 else {}


def prompt_ids(torch, batch):
    ids = list(PROMPT.encode())  # the byte-level model: token id = byte
    return torch.tensor([ids] * batch, dtype=torch.long)


def bench_hf(model_dir, tokens, repeats):
    torch, model = load_hf(model_dir)

    def generate(batch, new, sample):
        x = prompt_ids(torch, batch)
        t0 = time.perf_counter()
        with torch.no_grad():
            sampling = {"do_sample": True, "top_k": 0} if sample else {"do_sample": False}
            y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new, min_new_tokens=new,
                               use_cache=True, pad_token_id=0, **sampling, **only_byte_ids(model))
        wall = time.perf_counter() - t0
        assert y.shape[1] - x.shape[1] == new, y.shape
        return wall

    generate(1, 4, False)  # warm-up
    ttft = statistics.median(generate(1, 1, False) for _ in range(repeats))
    full = statistics.median(generate(1, tokens, False) for _ in range(repeats))
    out = {"ttft_ms": 1e3 * ttft, "decode_tps": (tokens - 1) / (full - ttft), "aggregate": {}}
    for c in CONCURRENCY:
        wall = generate(c, tokens, True)
        out["aggregate"][str(c)] = c * tokens / wall
        print(f"hf: batch {c}: {c * tokens} tokens in {wall:.2f} s", file=sys.stderr)
    return out


def best_hf(model_dir, tokens, repeats, thread_list):
    """bench_hf at each torch thread count; each number is the best of them. On a 2-core machine Debian's torch (its
    OpenMP against the OpenBLAS it calls) can be several times slower with 2 threads than with 1, so transformers
    gets whichever count suits it, per measurement."""
    import torch
    best = None
    for t in [int(x) for x in thread_list.split(",")]:
        torch.set_num_threads(t)
        r = bench_hf(model_dir, tokens, repeats)
        print(f"hf: {t} thread(s): {r}", file=sys.stderr)
        if best is None:
            best = r
            continue
        best["ttft_ms"] = min(best["ttft_ms"], r["ttft_ms"])
        best["decode_tps"] = max(best["decode_tps"], r["decode_tps"])
        for c, v in r["aggregate"].items():
            best["aggregate"][c] = max(best["aggregate"][c], v)
    return best


def greedy(url, model_dir, tokens):
    torch, model = load_hf(model_dir)
    x = prompt_ids(torch, 1)
    with torch.no_grad():
        y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=tokens, do_sample=False,
                           use_cache=True, pad_token_id=0, **only_byte_ids(model))
    hf_bytes = bytes(y[0, x.shape[1]:].tolist()).decode("utf-8", errors="replace")
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPT, "max_tokens": tokens,
                                                             "temperature": 0}),
                 headers={"Content-Type": "application/json"})
    text = json.loads(conn.getresponse().read())["choices"][0]["text"]
    if text != hf_bytes:
        sys.exit(f"error: greedy text differs:\n  ember {text!r}\n  hf    {hf_bytes!r}\n"
                 "hint: the exported model or the engine is wrong; timings of different models mean nothing")
    print(f"greedy: ember and transformers agree on {tokens} tokens", file=sys.stderr)


def table(ember_json, hf_json):
    e, h = json.load(open(ember_json)), json.load(open(hf_json))
    rows = [("time to first token (ms)", e["ttft_ms"], h["ttft_ms"], False),
            ("decode, 1 stream (tokens/s)", e["decode_tps"], h["decode_tps"], True)]
    rows += [(f"aggregate, {c} streams (tokens/s)", e["aggregate"][str(c)], h["aggregate"][str(c)], True)
             for c in CONCURRENCY]
    print(f"{'':36} {'ember serve':>12} {'HF generate':>12} {'ember/HF':>9}")
    for name, a, b, higher_better in rows:
        ratio = a / b if higher_better else b / a  # > 1: ember is better
        print(f"{name:36} {a:12.1f} {b:12.1f} {ratio:8.2f}x")
    print("(ember/HF > 1: ember is faster; for time to first token the ratio is HF's time over ember's)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["ember", "hf", "greedy", "table"])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default="1", help="torch thread counts to try, comma-separated (hf mode)")
    args = p.parse_args()
    if args.mode == "ember":
        json.dump(bench_ember(args.a, args.tokens, args.repeats), open(args.b, "w"))
    elif args.mode == "hf":
        json.dump(best_hf(args.a, args.tokens, args.repeats, args.threads), open(args.b, "w"))
    elif args.mode == "greedy":
        greedy(args.a, args.b, args.tokens)
    else:
        table(args.a, args.b)


if __name__ == "__main__":
    main()
