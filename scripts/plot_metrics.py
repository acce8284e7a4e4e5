#!/usr/bin/env python3
"""Plots the metrics.jsonl of one or more Ember runs against tokens seen, the runs overlaid.

Panels: training loss (thin) and validation loss (markers); tokens/s; learning rate; gradient norm. Where a run
has them, also validation bits per byte and the acc_norm of a multiple-choice task evaluation (e.g. hellaswag), both
against tokens seen, so that runs with different tokenizers share one axis.

  python3 scripts/plot_metrics.py runs/a runs/b -o loss.png

A RUN_DIR is a run folder (holding metrics.jsonl) or a metrics.jsonl file. The picture is written to a temporary
name and renamed, so an error never leaves a partial file. As every Ember output: an existing picture is replaced only
with --overwrite (and moved aside to <name>.previous-<UTC time>, not deleted), and never anything but a picture.
"""
import argparse
import json
import math
import os
import stat
import sys
import time


def fail(message, hint):
    print(f"error: {message}", file=sys.stderr)
    print(f"hint: {hint}", file=sys.stderr)
    sys.exit(1)


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def train_loss(row):
    """A record's training loss: `loss` (sync runs, async workers), or the mean loss of the deltas an async center
    applied in that step; None for records without one (an evaluation alone)."""
    if number(row.get("loss")):
        return row["loss"]
    deltas = row.get("deltas")
    losses = [d["loss"] for d in deltas if isinstance(d, dict) and number(d.get("loss"))] if isinstance(deltas, list) else []
    return sum(losses) / len(losses) if losses else None


# Fields of evaluation records that, when present and not null, must be finite numbers in the given range.
EVAL_RANGES = {"bits_per_byte": (0.0, math.inf), "task_acc": (0.0, 1.0), "task_acc_norm": (0.0, 1.0)}


def check_eval_fields(path, line, row):
    """Refuses an evaluation record whose bits per byte or task fields are not what `ember train` writes."""
    hint = "the file is written by `ember train`; fix or remove that line"
    for key, (lo, hi) in EVAL_RANGES.items():
        v = row.get(key)
        if v is not None and not (number(v) and lo <= v <= hi):
            bounds = f">= {lo:g}" if hi == math.inf else f"in [{lo:g}, {hi:g}]"
            fail(f"metrics file {path} line {line}: \"{key}\" is {json.dumps(v)[:40]}, not a number {bounds}", hint)
    items = row.get("task_items")
    if items is not None and (not isinstance(items, int) or isinstance(items, bool) or items < 0):
        fail(f"metrics file {path} line {line}: \"task_items\" is {json.dumps(items)[:40]}, not a whole number", hint)
    task = row.get("task")
    has_task = any(row.get(k) is not None for k in ("task_acc", "task_acc_norm", "task_items"))
    if (has_task or task is not None) and not (isinstance(task, str) and task):
        fail(f"metrics file {path} line {line}: \"task\" is {json.dumps(task)[:40]}, not a task name", hint)


def read_metrics(run):
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    if not os.path.isfile(path):
        fail(f"run {run} has no metrics.jsonl", "pass a run folder (run.dir of `ember train`) or a metrics.jsonl file")
    rows, damaged = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number_, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                damaged.append(number_)  # e.g. the half-written last line of a run that was killed
                continue
            # A loss that is neither a number nor null (a diverged step's NaN is written as null) is not ember's.
            if not isinstance(row, dict) or "step" not in row or any(
                    row.get(k) is not None and not number(row[k]) for k in ("loss", "val_loss")):
                damaged.append(number_)
                continue
            if not isinstance(row["step"], int) or isinstance(row["step"], bool):
                fail(f"metrics file {path} line {number_}: \"step\" is {json.dumps(row['step'])[:40]}, not a whole number",
                     "the file is written by `ember train`; fix or remove that line")
            check_eval_fields(path, number_, row)
            rows.append(row)
    if damaged:
        shown = ", ".join(str(n) for n in damaged[:5]) + (", ..." if len(damaged) > 5 else "")
        print(f"plot_metrics: {path}: skipped {len(damaged)} lines that are not metrics records (line {shown})",
              file=sys.stderr)
    # Records appended to a file that already held later steps (e.g. metrics files joined by hand, or a run resumed
    # from an earlier checkpoint by another tool) would draw the curve backwards: each step keeps its last values.
    # An async center writes a step's evaluation and its applied deltas as two records: they merge.
    by_step = {}
    for row in rows:
        by_step.setdefault(row["step"], {}).update(row)
    rows = [by_step[s] for s in sorted(by_step)]
    if not any(train_loss(r) is not None or number(r.get("val_loss")) for r in rows):
        fail(f"metrics file {path} holds no losses", "plot a run that trained at least one step")
    return path, rows


# The first bytes of the pictures this script writes: only these are ever replaced.
PICTURE_MAGIC = {".png": (b"\x89PNG",), ".pdf": (b"%PDF",), ".svg": (b"<?xml", b"<svg")}


def check_output(path, overwrite):
    """Refuses a special file, anything that is not a picture of the asked kind, and an earlier picture without
    --overwrite, before anything is read or drawn."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        fail(f"output {path} exists and is not a regular file", "give -o the path of a new picture")
    with open(path, "rb") as f:
        head = f.read(8)
    if not any(head.startswith(m) for m in PICTURE_MAGIC[os.path.splitext(path)[1].lower()]):
        fail(f"output {path} exists and is not a picture of its kind: it is not replaced, --overwrite or not",
             "give -o the path of a new picture")
    if not overwrite:
        fail(f"output {path} exists", "give another -o, or pass --overwrite to replace it (the old one is moved aside)")


def move_aside(path):
    """The earlier picture to <path>.previous-<UTC time>; returns where it went, or None when there was none."""
    if not os.path.exists(path):
        return None
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    aside, k = f"{path}.previous-{stamp}", 1
    while os.path.exists(aside):
        k += 1
        aside = f"{path}.previous-{stamp}-{k}"
    os.link(path, aside)  # a second name first: the picture is never missing, and the replace below drops the first
    return aside


def x_of(rows):
    """Tokens seen, or steps for records that lack tokens_seen."""
    if all(number(r.get("tokens_seen")) for r in rows):
        return [r["tokens_seen"] for r in rows], "tokens seen"
    return [r["step"] for r in rows], "step"


def bpb_points(rows):
    """(tokens seen, bits per byte) of each evaluation that has both: bits per byte is compared across tokenizers,
    whose steps hold different numbers of tokens, so it is drawn against tokens whatever the other panels use."""
    return [(r["tokens_seen"], r["bits_per_byte"]) for r in rows
            if number(r.get("bits_per_byte")) and number(r.get("tokens_seen"))]


def task_points(rows):
    """{task name: [(tokens seen, acc_norm)]} of a run's task evaluations."""
    tasks = {}
    for r in rows:
        if number(r.get("task_acc_norm")) and number(r.get("tokens_seen")):
            tasks.setdefault(r["task"], []).append((r["tokens_seen"], r["task_acc_norm"]))
    return tasks


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders or metrics.jsonl files")
    p.add_argument("-o", "--output", required=True, help="the picture to write (.png, .svg or .pdf)")
    p.add_argument("--title", default="", help="a title over the panels")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier picture (moved aside, not deleted)")
    args = p.parse_args()
    ext = os.path.splitext(args.output)[1].lower()
    if ext not in (".png", ".svg", ".pdf"):
        fail(f"output {args.output} is not a .png, .svg or .pdf file", "name the picture e.g. loss.png")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        fail(f"output folder {out_dir} does not exist", "create it first, or write the picture elsewhere")
    runs = [(run, *read_metrics(run)) for run in args.runs]
    check_output(args.output, args.overwrite)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed", "apt-get install python3-matplotlib (scripts/setup.sh does), and use /usr/bin/python3")

    bpbs = [bpb_points(rows) for _, _, rows in runs]
    tasks = [task_points(rows) for _, _, rows in runs]
    task_names = sorted({name for t in tasks for name in t})
    n_rows = 3 if any(bpbs) or task_names else 2
    # Two columns, 4 inches a row: the four panels every run has, then a row for bits per byte and task accuracy.
    fig, axes = plt.subplots(n_rows, 2, figsize=(12, 4 * n_rows))
    (ax_loss, ax_speed), (ax_lr, ax_norm) = axes[:2]
    spare = list(axes[2]) if n_rows == 3 else []
    ax_bpb = spare.pop(0) if any(bpbs) else None
    ax_task = spare.pop(0) if task_names else None
    for ax in spare:
        ax.set_visible(False)
    xlabel = "tokens seen"
    for i, (run, path, rows) in enumerate(runs):
        color = f"C{i % 10}"
        # A run's name: its folder, also when the metrics.jsonl inside was named.
        label = os.path.basename(os.path.dirname(os.path.abspath(path))) or run
        xs, xlabel = x_of(rows)
        train = [(x, train_loss(r)) for x, r in zip(xs, rows) if train_loss(r) is not None]
        if train:
            ax_loss.plot(*zip(*train), color=color, linewidth=0.8, alpha=0.6, label=f"{label} train")
        val = [(x, r["val_loss"]) for x, r in zip(xs, rows) if number(r.get("val_loss"))]
        if val:
            ax_loss.plot(*zip(*val), color=color, marker="o", markersize=4, linewidth=1.5, label=f"{label} val")
        for ax, key in ((ax_speed, "tokens_per_s"), (ax_lr, "lr"), (ax_norm, "grad_norm")):
            pts = [(x, r[key]) for x, r in zip(xs, rows) if number(r.get(key))]
            if pts:
                ax.plot(*zip(*pts), color=color, linewidth=0.8, label=label)
        if bpbs[i]:
            ax_bpb.plot(*zip(*bpbs[i]), color=color, marker="o", markersize=4, linewidth=1.5, label=label)
        for k, (task, pts) in enumerate(sorted(tasks[i].items())):
            ax_task.plot(*zip(*pts), color=color, marker="osv^D"[k % 5], markersize=4, linewidth=1.5,
                         label=f"{label} {task}")
        last = f", last loss {train[-1][1]:.4f}" if train else ""
        last += f", last bits per byte {bpbs[i][-1][1]:.4f}" if bpbs[i] else ""
        last += "".join(f", last {task} acc_norm {pts[-1][1]:.4f}" for task, pts in sorted(tasks[i].items()))
        print(f"plot_metrics: {path}: {len(rows)} steps, {len(val)} evaluations{last}", file=sys.stderr)
        unplaced = sum(1 for r in rows if not number(r.get("tokens_seen")) and
                       (number(r.get("bits_per_byte")) or number(r.get("task_acc_norm"))))
        if unplaced:
            print(f"plot_metrics: {path}: {unplaced} evaluations without tokens_seen are left out of the bits per byte "
                  "and task panels", file=sys.stderr)
    panels = [(ax_loss, "loss", xlabel), (ax_speed, "tokens/s", xlabel), (ax_lr, "learning rate", xlabel),
              (ax_norm, "gradient norm", xlabel)]
    if ax_bpb is not None:
        panels.append((ax_bpb, "validation bits per byte", "tokens seen"))
    if ax_task is not None:
        panels.append((ax_task, f"{' / '.join(task_names)} acc_norm", "tokens seen"))
    for ax, name, x_name in panels:
        ax.set_xlabel(x_name)
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
        aside = move_aside(args.output)
        os.replace(tmp, args.output)
        if aside:
            print(f"plot_metrics: the earlier {args.output} moved aside to {aside}", file=sys.stderr)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        fail(f"cannot write {args.output}: {e.strerror}", "check that the folder is writable and has free space")
    print(f"plot_metrics: wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
