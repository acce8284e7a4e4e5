"""PyTorch's AdamW on the same parameters as tests/bench/bench_adamw (scripts/bench/adamw.sh): GPT-2's parameter
tensors for a given shape, the matrices with weight decay and the vectors without (as nanoGPT groups them), one
torch.optim.AdamW step at a time with foreach on or off. Prints the best milliseconds per step and parameters per
second, in all and per thread, in bench_adamw's format."""
import argparse
import sys
import time

import torch


def gpt2_shapes(n_layer, n_embd, vocab, block):
    shapes = [(vocab, n_embd), (block, n_embd)]
    for _ in range(n_layer):
        shapes += [(n_embd,), (n_embd,), (3 * n_embd, n_embd), (3 * n_embd,), (n_embd, n_embd), (n_embd,),
                   (n_embd,), (n_embd,), (4 * n_embd, n_embd), (4 * n_embd,), (n_embd, 4 * n_embd), (n_embd,)]
    return shapes + [(n_embd,), (n_embd,)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab-size", type=int, default=50257)
    ap.add_argument("--block-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--foreach", choices=["on", "off"], default="on")
    a = ap.parse_args()
    if min(a.n_layer, a.n_embd, a.vocab_size, a.block_size, a.rounds, a.threads) < 1:
        sys.exit("error: every option must be a positive integer\nhint: e.g. --n-layer 12 --threads 2")
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(11)
    params = []
    for shape in gpt2_shapes(a.n_layer, a.n_embd, a.vocab_size, a.block_size):
        p = torch.nn.Parameter(0.02 * torch.randn(shape, generator=gen))
        p.grad = 1e-3 * torch.randn(shape, generator=gen)
        params.append(p)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, foreach=a.foreach == "on")
    n = sum(p.numel() for p in params)
    best = float("inf")
    for r in range(a.rounds + 1):  # step 0 warms up (the moments are created there)
        t0 = time.perf_counter()
        opt.step()
        ms = 1e3 * (time.perf_counter() - t0)
        if r > 0:
            best = min(best, ms)
    per_s = n / (best * 1e-3)
    print(f"torch {torch.__version__} AdamW (foreach {a.foreach}): {n} parameters, {a.threads} thread(s): "
          f"{best:.2f} ms per step, {per_s * 1e-6:.1f} M parameters/s, {per_s * 1e-6 / a.threads:.1f} M per thread")


if __name__ == "__main__":
    main()
