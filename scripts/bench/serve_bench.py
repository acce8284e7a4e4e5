#!/usr/bin/env python3
# The driver of scripts/bench/serve.sh: decoding speed of a running `ember serve` (HTTP clients, standard library
# only), of Hugging Face transformers' generate (KV cache) and of CTranslate2's Generator on the same model, then one
# table with the ratios.
"""Modes:
  ember URL OUT.json     time to first token and decode tokens/s of one stream; aggregate tokens/s of 1, 8 and 32
                         concurrent streams (each client its own request, batched by the server's engine)
  hf DIR OUT.json        the same numbers from transformers' model.generate(use_cache=True) on the model in DIR (an
                         `ember export` folder); C concurrent streams are one generate call over a batch of C prompts
  ct2 DIR OUT.json       the same from CTranslate2 (converted from DIR with --compute-type's weights: float32 or
                         int8), in-process, C streams as one generate_batch of C prompts
  greedy URL DIR         correctness first: greedy tokens of the server and of transformers agree
  table EMBER HF [CT2]   prints the table

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


def time_in_process(generate, tokens, repeats, name):
    """The numbers of an in-process generator, generate(batch, new_tokens, sample) -> seconds: time to first token
    (one new token), decode tokens/s of one stream (the rest of `tokens`), and C streams as one batch of C."""
    generate(1, 4, False)  # warm-up
    ttft = statistics.median(generate(1, 1, False) for _ in range(repeats))
    full = statistics.median(generate(1, tokens, False) for _ in range(repeats))
    out = {"ttft_ms": 1e3 * ttft, "decode_tps": (tokens - 1) / (full - ttft), "aggregate": {}}
    for c in CONCURRENCY:
        wall = generate(c, tokens, True)
        out["aggregate"][str(c)] = c * tokens / wall
        print(f"{name}: batch {c}: {c * tokens} tokens in {wall:.2f} s", file=sys.stderr)
    return out


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

    return time_in_process(generate, tokens, repeats, "hf")


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


def convert_ct2(model_dir, out_dir, compute_type):
    """CTranslate2's converter on an `ember export` folder. Two adjustments, neither touching the weights: the
    byte-level tokenizer lists 256 tokens where the model has vocab_size rows (the rest padding), so the vocabulary is
    padded with names for those rows; and it has no special tokens, so the last padding row stands in for them. The
    converter also passes `dtype=` to transformers, which 4.40 calls `torch_dtype`."""
    from ctranslate2.converters import TransformersConverter
    from ctranslate2.converters import transformers as ct2t

    base = ct2t.GPT2Loader.get_vocabulary

    def vocabulary(self, model, tokenizer):
        tokens = base(self, model, tokenizer)
        return tokens + [f"<unused{i}>" for i in range(len(tokens), model.config.vocab_size)]

    def config(self, config, model, tokenizer):
        config.bos_token = config.eos_token = config.unk_token = f"<unused{model.config.vocab_size - 1}>"
        config.layer_norm_epsilon = model.config.layer_norm_epsilon

    ct2t.GPT2Loader.get_vocabulary = vocabulary
    ct2t.GPT2Loader.set_config = config

    class Converter(TransformersConverter):
        def load_model(self, model_class, name, **kwargs):
            if "dtype" in kwargs:
                kwargs["torch_dtype"] = kwargs.pop("dtype")
            return super().load_model(model_class, name, **kwargs)

    Converter(model_dir).convert(out_dir, quantization=compute_type, force=True)


def bench_ct2(model_dir, tokens, repeats, compute_type, threads):
    import ctranslate2
    out_dir = f"ct2_{compute_type}"
    convert_ct2(model_dir, out_dir, compute_type)
    vocab = json.load(open(f"{out_dir}/vocabulary.json"))
    prompt = [vocab[b] for b in PROMPT.encode()]  # the byte-level model: token id = byte
    gen = ctranslate2.Generator(out_dir, device="cpu", compute_type=compute_type, intra_threads=threads)

    def generate(batch, new, sample):
        t0 = time.perf_counter()
        r = gen.generate_batch([prompt] * batch, max_length=new, min_length=new, include_prompt_in_result=False,
                               sampling_topk=0 if sample else 1, sampling_temperature=1.0)
        wall = time.perf_counter() - t0
        assert all(len(x.sequences[0]) == new for x in r), [len(x.sequences[0]) for x in r]
        return wall

    return time_in_process(generate, tokens, repeats, f"ct2 {compute_type}")


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


def table(ember_json, hf_json, ct2_json=None):
    results = [json.load(open(f)) for f in (ember_json, hf_json, ct2_json) if f]
    names = ["ember serve", "HF generate", "CTranslate2"][:len(results)]
    rows = [("time to first token (ms)", "ttft_ms", False), ("decode, 1 stream (tokens/s)", "decode_tps", True)]
    rows += [(f"aggregate, {c} streams (tokens/s)", str(c), True) for c in CONCURRENCY]
    get = lambda r, key: r["aggregate"][key] if key in r["aggregate"] else r[key]
    print(f"{'':36}" + "".join(f"{n:>13}" for n in names) + "".join(f"{'ember/' + n.split()[0]:>18}"
                                                                      for n in names[1:]))
    for name, key, higher_better in rows:
        v = [get(r, key) for r in results]
        ratios = [(v[0] / x if higher_better else x / v[0]) for x in v[1:]]  # > 1: ember is better
        print(f"{name:36}" + "".join(f"{x:13.1f}" for x in v) + "".join(f"{x:17.2f}x" for x in ratios))
    print("(ember/X > 1: ember is faster; for time to first token the ratio is X's time over ember's)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["ember", "hf", "ct2", "greedy", "table"])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("c", nargs="?", help="table: CTranslate2's results")
    p.add_argument("--compute-type", default="float32", help="ct2: float32 or int8")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default="1", help="torch thread counts to try, comma-separated (hf mode)")
    args = p.parse_args()
    if args.mode == "ember":
        json.dump(bench_ember(args.a, args.tokens, args.repeats), open(args.b, "w"))
    elif args.mode == "hf":
        json.dump(best_hf(args.a, args.tokens, args.repeats, args.threads), open(args.b, "w"))
    elif args.mode == "ct2":
        json.dump(bench_ct2(args.a, args.tokens, args.repeats, args.compute_type, int(args.threads.split(",")[-1])),
                  open(args.b, "w"))
    elif args.mode == "greedy":
        greedy(args.a, args.b, args.tokens)
    else:
        table(args.a, args.b, args.c)


if __name__ == "__main__":
    main()
