#!/usr/bin/env python3
# The mean tokens/s of an Ember run's metrics.jsonl, leaving out its first WARMUP steps (the benchmark scripts' Ember
# figure). Usage: mean_tokens_per_s.py METRICS_JSONL WARMUP
import json
import sys

if len(sys.argv) != 3:
    sys.exit("usage: mean_tokens_per_s.py METRICS_JSONL WARMUP")
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
rows = sorted((r for r in rows if "tokens_per_s" in r), key=lambda r: r["step"])[int(sys.argv[2]):]
if not rows:
    sys.exit("error: no steps after the warm-up in " + sys.argv[1])
print(f"{sum(r['tokens_per_s'] for r in rows) / len(rows):.1f}")
