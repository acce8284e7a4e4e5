#!/usr/bin/env python3
# Independent float64 NumPy GPT-2 forward: reads an ember checkpoint with h5py by the paths documented in
# docs/checkpoint-format.md (nothing from ember is imported) and prints the mean validation cross-entropy.
"""Mean cross-entropy of an ember checkpoint on llm.c-format token shards, computed in float64.

    gpt2_numpy.py --checkpoint runs/x/checkpoints/step_00000100.h5 --data data/demo --split val \
                  --seq-len 64 --batch-size 8 --max-batches 4

prints one line, `loss <nats per target token>`. Samples follow ember's sequential (validation) order: the shards
<split>_*.bin sorted by name, sample s of a shard is tokens [s*T, s*T+T+1), samples per shard (n-1)//T, batch k is
global samples k*B .. k*B+B-1, and only full batches are evaluated.
"""
import argparse
import glob
import math
import os
import sys

import h5py
import numpy as np

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
LN_EPS = 1e-5


def fail(msg):
    print(f"gpt2_numpy.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header.size != HEADER_INTS or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        fail(f"{path}: not an llm.c token shard (magic/version)")
    n = int(header[2])
    tokens = np.fromfile(path, dtype="<u2", offset=HEADER_INTS * 4)
    if tokens.size != n:
        fail(f"{path}: header says {n} tokens, file holds {tokens.size}")
    return tokens


def as_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load_model(path):
    """Weights as float64 arrays keyed by Hugging Face name, plus the root attributes we need."""
    with h5py.File(path, "r") as f:
        if as_str(f.attrs.get("format", "")) != "ember-checkpoint":
            fail(f"{path}: not an ember checkpoint")
        if int(f.attrs["format_version"]) != 1:
            fail(f"{path}: unsupported format_version {f.attrs['format_version']}")
        cfg = {k: int(f.attrs[k]) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}
        w = {}

        def grab(name, obj):
            if isinstance(obj, h5py.Dataset):
                w[name.replace("/", ".")] = np.asarray(obj[...], dtype=np.float64)

        f["model"].visititems(grab)
    return cfg, w


def layernorm(x, g, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch.nn.LayerNorm
    return (x - mu) / np.sqrt(var + LN_EPS) * g + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward_hidden(cfg, w, idx):
    """Final hidden states (after ln_f), shape (B, T, C), for token ids idx of shape (B, T)."""
    B, T = idx.shape
    C, NH = cfg["n_embd"], cfg["n_head"]
    HS = C // NH
    x = w["transformer.wte.weight"][idx] + w["transformer.wpe.weight"][:T][None, :, :]
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)  # True above the diagonal: future positions
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        h = layernorm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # (B, T, 3C), Conv1D: x @ W + b
        q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
        # head h takes columns h*HS .. h*HS+HS-1 of each of q, k, v -> (B, NH, T, HS)
        q = q.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
        k = k.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
        v = v.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
        att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(HS)  # (B, NH, T, T)
        att = np.where(causal, -np.inf, att)
        att = att - att.max(axis=-1, keepdims=True)
        att = np.exp(att)
        att /= att.sum(axis=-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layernorm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        h = gelu_tanh(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    return layernorm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])


def nll_sum(cfg, w, inputs, targets, rows_per_block=512):
    """Summed negative log-likelihood of targets; logits = h @ wte.T, computed in row blocks to bound memory."""
    h = forward_hidden(cfg, w, inputs).reshape(-1, cfg["n_embd"])
    t = targets.reshape(-1)
    wte = w["transformer.wte.weight"]
    total = 0.0
    for s in range(0, h.shape[0], rows_per_block):
        logits = h[s:s + rows_per_block] @ wte.T  # (rows, V)
        m = logits.max(axis=-1)
        lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=-1))
        total += float((lse - logits[np.arange(logits.shape[0]), t[s:s + rows_per_block]]).sum())
    return total


def samples(shards, T):
    """Global sequential sample order: every shard's samples in turn, T+1 tokens each."""
    for tokens in shards:
        for s in range((tokens.size - 1) // T):
            yield tokens[s * T:s * T + T + 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data", required=True, help="directory holding <split>_*.bin shards")
    ap.add_argument("--split", default="val")
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--max-batches", type=int, required=True, help="<= 0: every full batch")
    a = ap.parse_args()
    T, B = a.seq_len, a.batch_size
    if T < 1 or B < 1:
        fail("--seq-len and --batch-size must be positive")

    cfg, w = load_model(a.checkpoint)
    if T > cfg["block_size"]:
        fail(f"--seq-len {T} exceeds the model's block_size {cfg['block_size']}")
    paths = sorted(glob.glob(os.path.join(a.data, f"{a.split}_*.bin")))
    if not paths:
        fail(f"no {a.split}_*.bin shards in {a.data}")
    shards = [read_shard(p) for p in paths]

    total, count, batch = 0.0, 0, []
    batches_done = 0
    for sample in samples(shards, T):
        if a.max_batches > 0 and batches_done >= a.max_batches:
            break
        batch.append(sample)
        if len(batch) < B:
            continue
        arr = np.stack(batch).astype(np.int64)  # (B, T+1)
        if arr.max() >= cfg["vocab_size"]:
            fail(f"token {arr.max()} is outside the model's vocab_size {cfg['vocab_size']}")
        total += nll_sum(cfg, w, arr[:, :T], arr[:, 1:])
        count += B * T
        batch = []
        batches_done += 1
    if count == 0:
        fail(f"the {a.split} shards hold fewer than one full batch of {B} x {T + 1} tokens")
    print(f"loss {total / count:.10f}")


if __name__ == "__main__":
    main()
