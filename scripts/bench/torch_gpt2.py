#!/usr/bin/env python3
# PyTorch GPT-2 training loop with exactly Ember's architecture and optimizer, the peer in scripts/bench/cpu-vs-torch.sh
# (fp32 on the CPU) and scripts/bench/gpu.sh (CUDA, bf16 autocast, torch.compile, fused attention): same shapes, random
# token batches, tokens/s after warm-up, and on a GPU the peak memory PyTorch allocated.
"""Architecture, as in Ember: learned wte [V, C] and wpe [block_size, C]; pre-LN blocks (eps 1e-5) with causal
multi-head attention scaled by 1/sqrt(HS) and a 4C tanh-GELU MLP; a final LayerNorm; lm_head tied to wte; no dropout.
Optimizer: AdamW (betas 0.9/0.95, weight decay 0.1 on matrices only), gradients clipped to global norm 1.0.
Data: uniform random token ids, since data loading is not what this measures.
On a GPU (--device cuda) with --dtype bf16, matmuls and attention run under bf16 autocast while parameters, gradients
and AdamW stay fp32 (as Ember's training.precision = bf16); attention is scaled_dot_product_attention, which picks
its flash or memory-efficient kernel; --compile wraps the model in torch.compile."""

import argparse
import contextlib
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("error: PyTorch is not importable by " + sys.executable +
             "\nhint: apt-get install python3-torch (Debian), then run this with /usr/bin/python3")

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")  # PyTorch >= 2.0


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        if not HAVE_SDPA:
            mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        HS = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)                    # 3 x (B, T, C)
        q = q.view(B, T, self.n_head, HS).transpose(1, 2)           # (B, NH, T, HS)
        k = k.view(B, T, self.n_head, HS).transpose(1, 2)
        v = v.view(B, T, self.n_head, HS).transpose(1, 2)
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))  # (B, NH, T, T)
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v                                              # (B, NH, T, HS)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)   # (V, C), also the lm_head
        self.wpe = nn.Embedding(block_size, n_embd)   # (block_size, C)
        self.h = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                # GPT-2 init; residual projections scaled by 1/sqrt(2L).
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)                  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)   # (B, T, V), tied lm_head
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8, help="micro-batch B")
    ap.add_argument("--seq-len", type=int, default=64, help="T, at most --block-size")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps in all, warm-up included")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the mean")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = all cores")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast matmuls and attention")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (compiling counts as warm-up)")
    args = ap.parse_args()

    if args.n_embd % args.n_head != 0:
        ap.error(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    if args.seq_len > args.block_size:
        ap.error(f"--seq-len {args.seq_len} exceeds --block-size {args.block_size}")
    if args.steps <= args.warmup:
        ap.error(f"--steps {args.steps} must exceed --warmup {args.warmup} to leave steps to measure")

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch.cuda.is_available() is false (torch " + torch.__version__ + ")"
                 "\nhint: run it on a machine with an NVIDIA GPU and a CUDA build of PyTorch")
    if args.dtype == "bf16" and args.device == "cpu":
        ap.error("--dtype bf16 is for --device cuda; the CPU comparison runs in fp32")
    threads = args.threads if args.threads > 0 else torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if args.device == "cuda":
        # fp32 matmuls stay true fp32 (no TF32), as Ember's fp32 precision; bf16 runs go through autocast instead.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    model = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab_size).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    opt_kwargs = {"lr": args.lr, "betas": (0.9, 0.95), "eps": 1e-8}
    try:
        optimizer = torch.optim.AdamW(groups, fused=True, **opt_kwargs)
        opt_mode = "fused"
    except (TypeError, RuntimeError):
        # PyTorch 1.13 has no fused AdamW (and 2.x only fuses on GPU before 2.4): use the multi-tensor path.
        optimizer = torch.optim.AdamW(groups, foreach=True, **opt_kwargs)
        opt_mode = "foreach"

    n_params = sum(p.numel() for p in model.parameters())
    B, T, A = args.batch_size, args.seq_len, args.grad_accum
    forward = torch.compile(model) if args.compile else model
    def autocast():
        if args.dtype == "bf16":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    where = (f"device {torch.cuda.get_device_name(device)}" if args.device == "cuda" else f"threads {threads}")
    print(f"torch {torch.__version__}, {where}, params {n_params}, "
          f"L={args.n_layer} NH={args.n_head} C={args.n_embd} V={args.vocab_size} block={args.block_size}, "
          f"B={B} T={T} accum={A}, attention={'sdpa' if HAVE_SDPA else 'manual'}, adamw={opt_mode}, "
          f"dtype={args.dtype}, compile={'yes' if args.compile else 'no'}", flush=True)

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    gen = torch.Generator().manual_seed(args.seed)
    rates = []
    for step in range(1, args.steps + 1):
        # Batches are drawn and moved outside the timed region: data loading is not what we measure.
        batches = []
        for _ in range(A):
            tokens = torch.randint(0, args.vocab_size, (B, T + 1), generator=gen).to(device)
            batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
        sync()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        for inputs, targets in batches:
            with autocast():
                loss = forward(inputs, targets) / A
            loss.backward()
            loss_sum += loss.detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_sum = float(loss_sum)  # waits for the step, as Ember's per-step loss does
        sync()
        dt = time.perf_counter() - t0
        rate = B * T * A / dt
        if step > args.warmup:
            rates.append(rate)
        print(f"step {step:4d} loss {loss_sum:.4f} grad_norm {float(grad_norm):.4f} "
              f"ms {dt * 1e3:9.2f} tokens/s {rate:10.1f}{'  (warm-up)' if step <= args.warmup else ''}",
              flush=True)

    print(f"tokens_per_s {statistics.mean(rates):.1f}")
    if args.device == "cuda":
        print(f"peak_memory_mib {torch.cuda.max_memory_allocated(device) / 2**20:.1f}")


if __name__ == "__main__":
    main()
