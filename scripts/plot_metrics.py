#!/usr/bin/env python3
"""Plots the metrics.jsonl of one or more Ember runs against tokens seen, the runs overlaid.

Panels: training loss (thin) and validation loss (markers); tokens/s; learning rate; gradient norm.

  python3 scripts/plot_metrics.py runs/a runs/b -o loss.png

A RUN_DIR is a run folder (holding metrics.jsonl) or a metrics.jsonl file. The picture is written to a temporary
name and renamed, so an error never leaves a partial file.
"""
import argparse
import json
import math
import os
import sys


def fail(message, hint):
    print(f"error: {message}", file=sys.stderr)
    print(f"hint: {hint}", file=sys.stderr)
    sys.exit(1)


def read_metrics(run):
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    if not os.path.isfile(path):
        fail(f"run {run} has no metrics.jsonl", "pass a run folder (run.dir of `ember train`) or a metrics.jsonl file")
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict) or "step" not in row or "loss" not in row:
                    raise ValueError("not a metrics record (no step or loss)")
            except ValueError as e:
                fail(f"metrics file {path} line {number}: {e}", "the file is written by `ember train`; remove the bad line")
            rows.append(row)
    if not rows:
        fail(f"metrics file {path} holds no steps", "plot a run that trained at least one step")
    # Records appended to a file that already held later steps (e.g. metrics files joined by hand, or a run resumed
    # from an earlier checkpoint by another tool) would draw the curve backwards: each step keeps its last record.
    by_step = {}
    for row in rows:
        by_step[row["step"]] = row
    return path, [by_step[s] for s in sorted(by_step)]


def x_of(rows):
    """Tokens seen, or steps for records that lack tokens_seen."""
    if all("tokens_seen" in r for r in rows):
        return [r["tokens_seen"] for r in rows], "tokens seen"
    return [r["step"] for r in rows], "step"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders or metrics.jsonl files")
    p.add_argument("-o", "--output", required=True, help="the picture to write (.png, .svg or .pdf)")
    p.add_argument("--title", default="", help="a title over the panels")
    args = p.parse_args()
    ext = os.path.splitext(args.output)[1].lower()
    if ext not in (".png", ".svg", ".pdf"):
        fail(f"output {args.output} is not a .png, .svg or .pdf file", "name the picture e.g. loss.png")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        fail(f"output folder {out_dir} does not exist", "create it first, or write the picture elsewhere")
    runs = [(run, *read_metrics(run)) for run in args.runs]

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed", "apt-get install python3-matplotlib (scripts/setup.sh does), and use /usr/bin/python3")

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    (ax_loss, ax_speed), (ax_lr, ax_norm) = axes
    xlabel = "tokens seen"
    for i, (run, path, rows) in enumerate(runs):
        color = f"C{i % 10}"
        # A run's name: its folder, also when the metrics.jsonl inside was named.
        label = os.path.basename(os.path.dirname(os.path.abspath(path))) or run
        xs, xlabel = x_of(rows)
        ax_loss.plot(xs, [r["loss"] for r in rows], color=color, linewidth=0.8, alpha=0.6, label=f"{label} train")
        val = [(x, r["val_loss"]) for x, r in zip(xs, rows) if isinstance(r.get("val_loss"), (int, float))]
        if val:
            ax_loss.plot(*zip(*val), color=color, marker="o", markersize=4, linewidth=1.5, label=f"{label} val")
        for ax, key in ((ax_speed, "tokens_per_s"), (ax_lr, "lr"), (ax_norm, "grad_norm")):
            pts = [(x, r[key]) for x, r in zip(xs, rows) if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
            if pts:
                ax.plot(*zip(*pts), color=color, linewidth=0.8, label=label)
        print(f"plot_metrics: {path}: {len(rows)} steps, {len(val)} evaluations, last loss {rows[-1]['loss']:.4f}",
              file=sys.stderr)
    for ax, name in ((ax_loss, "loss"), (ax_speed, "tokens/s"), (ax_lr, "learning rate"), (ax_norm, "gradient norm")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    tmp = os.path.join(out_dir, "." + os.path.basename(args.output) + ".tmp" + ext)
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, args.output)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        fail(f"cannot write {args.output}: {e.strerror}", "check that the folder is writable and has free space")
    print(f"plot_metrics: wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
