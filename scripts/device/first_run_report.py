#!/usr/bin/env python3
"""Tables for scripts/device/first-run.sh's report.md: the 124M losses on the GPU against the CPU's (train), and the
kernels that take most GPU time beside the cost ledger's modelled time (kernels). Standard library only: it runs with
whatever python3 the GPU machine has."""
import csv
import json
import re
import sys


def metrics(path):
    """{step: loss} of a run's metrics.jsonl (the records that carry a training loss)."""
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec and "step" in rec:
                out[int(rec["step"])] = float(rec["loss"])
    return out


def train(ref_path, gpu_path, swap_path, compared, steps, tol, report, result):
    compared, steps, tol = int(compared), int(steps), float(tol)
    ref = {}
    with open(ref_path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                step, loss = line.split()
                ref[int(step)] = float(loss)
    gpu, swap = metrics(gpu_path), metrics(swap_path)
    want = list(range(1, compared + 1))
    missing = [s for s in want if s not in ref or s not in gpu]
    if missing:
        sys.exit(f"steps {missing} lack a loss (reference {sorted(ref)[:3]}..., gpu {sorted(gpu)[:3]}...)")
    rel = lambda a, b: abs(a - b) / abs(a)
    worst = max(rel(ref[s], gpu[s]) for s in want)
    # After the checkpoint at `compared`: the CPU continues the GPU's run for 2 steps, then the GPU the CPU's.
    after = list(range(compared + 1, steps + 1))
    missing = [s for s in after if s not in gpu or s not in swap]
    if missing:
        sys.exit(f"steps {missing} lack a loss in the resumed runs")
    worst_swap = max(rel(gpu[s], swap[s]) for s in after)
    lines = ["## GPT-2 124M, bf16: GPU against the CPU", "",
             f"Steps 1-{compared}: the CPU's losses were recorded when the bundle was made (same config and data).",
             f"Steps {compared + 1}-{steps}: the straight GPU run against a copy of it stopped at {compared}, resumed "
             f"on the CPU for 2 steps, then on the GPU from the CPU's checkpoint.", "",
             "| step | CPU (rows 21+: the swapped run) | GPU, straight run | relative difference |", "|---|---|---|---|"]
    lines += [f"| {s} | {ref[s]:.6f} | {gpu[s]:.6f} | {rel(ref[s], gpu[s]):.2e} |" for s in want]
    lines += [f"| {s} ({'CPU' if s <= compared + 2 else 'GPU'} after the swap) | {swap[s]:.6f} | {gpu[s]:.6f} | "
              f"{rel(gpu[s], swap[s]):.2e} |" for s in after]
    verdict = worst <= tol and worst_swap <= tol
    lines += ["", f"max relative difference {worst:.2e} over steps 1-{compared}, {worst_swap:.2e} after the swap "
              f"(tolerance {tol:.0e}): {'ok' if verdict else 'FAILED'}", ""]
    with open(report, "a") as f:
        f.write("\n".join(lines) + "\n")
    with open(result, "w") as f:
        f.write(f"max rel. difference {worst:.2e} (steps 1-{compared}), {worst_swap:.2e} (swap), tolerance {tol:.0e}")
    print("\n".join(lines))
    sys.exit(0 if verdict else 1)


def read_kernels(tool, path):
    """{kernel name: [launches, total ns]} from nsys's cuda_gpu_kern_sum or ncu's raw page, both as CSV."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    start = next((i for i, r in enumerate(rows) if ("Name" in r or "Kernel Name" in r)), None)
    if start is None:
        sys.exit(f"{path}: no header row with a kernel name column")
    header, body = rows[start], rows[start + 1:]
    out = {}
    if tool == "nsys":
        name, total, count = header.index("Name"), header.index("Total Time (ns)"), header.index("Instances")
        for r in body:
            out[r[name]] = [int(float(r[count])), float(r[total])]
        return out
    name, metric = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    scale = 1.0
    if body and not re.match(r"^[0-9.,]+$", body[0][metric]):  # the units row
        scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(body[0][metric], 1.0)
        body = body[1:]
    for r in body:
        entry = out.setdefault(r[name], [0, 0.0])
        entry[0] += 1
        entry[1] += float(r[metric].replace(",", "")) * scale
    return out


def read_ledger(path):
    """{launch name: H100 ms} from the 'by launch' block of the cost ledger's output (the first config in it)."""
    out, inside = {}, False
    with open(path) as f:
        for line in f:
            if line.startswith("by launch:"):
                inside = True
            elif inside and not line.strip():
                if out:
                    break
            elif inside and not line.strip().startswith("launch"):
                parts = line.split()
                if len(parts) >= 7:
                    out[parts[0]] = float(parts[-2])
    return out


def kernels(tool, path, steps, ledger_path, report, result):
    steps = int(steps)
    found = read_kernels(tool, path)
    if not found:
        sys.exit(f"{path}: no kernels")
    ledger = read_ledger(ledger_path)
    total = sum(t for _, t in found.values())
    top = sorted(found.items(), key=lambda kv: -kv[1][1])[:15]
    lines = [f"## Kernels: the 15 that take most GPU time ({tool}, {steps} training steps of the train step's config)",
             "", f"All kernels: {total / 1e6 / steps:.2f} ms of GPU time per step.", "",
             "| kernel | launches/step | ms/step | share | ledger launch | ledger H100 ms |", "|---|---|---|---|---|---|"]
    for name, (count, ns) in top:
        short = re.sub(r"\(.*", "", name)[:90]
        match = next((k for k in ledger if k in name), "")
        lines.append(f"| `{short}` | {count / steps:.1f} | {ns / 1e6 / steps:.3f} | {100 * ns / total:.1f}% | "
                     f"{match} | {ledger[match] if match else ''} |")
    lines += ["", "The ledger's rows are per micro-step at the same config (modelled on an H100 SXM); a name is "
              "matched where the ledger's launch name appears in the kernel's.", ""]
    with open(report, "a") as f:
        f.write("\n".join(lines) + "\n")
    with open(result, "w") as f:
        f.write(f"{len(found)} kernels, {total / 1e6 / steps:.2f} ms/step; top: {re.sub(r'[(<].*', '', top[0][0])}")
    print("\n".join(lines))


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    {"train": train, "kernels": kernels}[what](*args)
