#!/usr/bin/env python3
"""Summarises scripts/bench/attention.sh's loss runs: WORK holds <variant>-s<seed>/metrics.jsonl.

Prints each variant's final validation loss (mean and per seed), the tokens and seconds its mean curve takes to first
reach the final mean loss of full attention with learned positions and with rope, and plots the mean validation
curves against tokens and against seconds.

  python3 scripts/bench/attention_summary.py WORK SEEDS PLOT.png
"""
import json
import os
import sys

VARIANTS = [("full-learned", "full attention, learned positions"), ("full-rope", "full attention, rope"),
            ("tscale", "tscale (rope)"), ("sssl", "sssl (rope)")]


def curve(path):
    """(tokens, seconds, val_loss) of every evaluation of a run."""
    out = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "val_loss" in r:
                out.append((r["tokens_seen"], r["elapsed_s"], r["val_loss"]))
    return out


def main():
    work, seeds, plot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    mean = {}
    for name, _ in VARIANTS:
        runs = [curve(os.path.join(work, f"{name}-s{s}", "metrics.jsonl")) for s in range(1, seeds + 1)]
        n = min(len(r) for r in runs)
        mean[name] = [(runs[0][k][0], sum(r[k][1] for r in runs) / seeds, sum(r[k][2] for r in runs) / seeds)
                      for k in range(n)]
        finals = [r[n - 1][2] for r in runs]
        print(f"{name:14s} final val loss {sum(finals) / seeds:.4f} (seeds: {', '.join(f'{x:.4f}' for x in finals)}),"
              f" {mean[name][-1][1]:.0f} s")
    for ref in ("full-learned", "full-rope"):
        target = mean[ref][-1][2]
        print(f"first evaluation at or below {ref}'s final mean loss {target:.4f}:")
        for name, _ in VARIANTS:
            hit = next(((t, s) for t, s, v in mean[name] if v <= target), None)
            print(f"  {name:14s} " + (f"{hit[0]} tokens, {hit[1]:.0f} s" if hit else "never"))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, label in VARIANTS:
        t, s, v = zip(*mean[name])
        axes[0].plot(t, v, marker=".", label=label)
        axes[1].plot(s, v, marker=".", label=label)
    axes[0].set_xlabel("tokens")
    axes[1].set_xlabel("seconds (one thread, two runs at a time)")
    for ax in axes:
        ax.set_ylabel(f"validation loss (mean of {seeds} seeds)")
        ax.grid(alpha=0.3)
        ax.set_ylim(top=3.2)
    axes[0].legend()
    fig.tight_layout()
    tmp = plot + ".tmp.png"
    fig.savefig(tmp, dpi=90)
    os.replace(tmp, plot)
    print(f"plot: {plot}")


if __name__ == "__main__":
    main()
