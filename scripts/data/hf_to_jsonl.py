#!/usr/bin/env python3
"""Streams a Hugging Face dataset to JSONL (one {"text": ...} object per line) for `ember prep`.

The dataset comes from the Hugging Face hub (on a machine with internet) or from local files: a folder saved with
`save_to_disk`, or parquet / JSON / CSV files. Records are streamed, so memory stays small whatever the dataset size.

Examples:
  # FineWeb-Edu's 10B-token sample, the first 100k documents (needs internet):
  python3 scripts/data/hf_to_jsonl.py --dataset HuggingFaceFW/fineweb-edu --name sample-10BT \\
      --split train --max-docs 100000 --output data/fineweb-edu.jsonl.zst
  # Local parquet files:
  python3 scripts/data/hf_to_jsonl.py --data-files 'downloads/*.parquet' --output data/local.jsonl
"""
import argparse
import io
import json
import os
import sys
import time


def fail(message, hint):
    print(f"error: {message}", file=sys.stderr)
    print(f"hint: {hint}", file=sys.stderr)
    sys.exit(1)


def open_output(path):
    """A text stream for `path`, compressed when it ends in .gz or .zst; written to a temp name, renamed at the end."""
    tmp = path + ".tmp"
    if path.endswith(".gz"):
        import gzip
        return tmp, gzip.open(tmp, "wt", encoding="utf-8", newline="\n")
    if path.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            fail(f"output {path}: writing .zst needs the zstandard module", "pip install zstandard, or write .jsonl / .jsonl.gz")
        raw = open(tmp, "wb")
        return tmp, io.TextIOWrapper(zstandard.ZstdCompressor(level=10).stream_writer(raw), encoding="utf-8", newline="\n")
    return tmp, open(tmp, "w", encoding="utf-8", newline="\n")


def load_records(args):
    try:
        import datasets
    except ImportError:
        fail("the `datasets` library is not installed", "run scripts/python_env.sh and use .venv/bin/python, or pip install datasets")
    if args.data_files:
        kind = args.file_format
        if kind is None:
            first = args.data_files[0].split("*")[0]
            kind = "parquet" if ".parquet" in args.data_files[0] else "json" if ".json" in first else "csv" if ".csv" in first else "parquet"
        return datasets.load_dataset(kind, data_files=args.data_files, split=args.split, streaming=True)
    if args.dataset and os.path.isdir(args.dataset) and os.path.exists(os.path.join(args.dataset, "dataset_info.json")):
        ds = datasets.load_from_disk(args.dataset)
        return ds[args.split] if isinstance(ds, datasets.DatasetDict) else ds
    if not args.dataset:
        fail("no dataset given", "pass --dataset NAME_OR_FOLDER or --data-files GLOB")
    return datasets.load_dataset(args.dataset, name=args.name, split=args.split, streaming=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", help="hub name (HuggingFaceFW/fineweb-edu) or a folder saved with save_to_disk")
    p.add_argument("--name", help="the dataset's configuration (e.g. sample-10BT)")
    p.add_argument("--data-files", nargs="+", help="local parquet/json/csv files or globs instead of --dataset")
    p.add_argument("--file-format", choices=["parquet", "json", "csv"], help="format of --data-files (default: from the name)")
    p.add_argument("--split", default="train")
    p.add_argument("--field", default="text", help="the record field holding the document text")
    p.add_argument("--max-docs", type=int, default=0, help="stop after this many documents (0: all)")
    p.add_argument("--output", required=True, help="a .jsonl file; .jsonl.gz or .jsonl.zst to compress")
    args = p.parse_args()
    if os.path.exists(args.output) and not os.path.isfile(args.output):
        fail(f"output {args.output} exists and is not a file", "pass a file path for --output")

    records = load_records(args)
    tmp, out = open_output(args.output)
    docs = chars = 0
    start = last = time.time()
    try:
        for record in records:
            if args.field not in record or not isinstance(record[args.field], str):
                fail(f"dataset record {docs} has no string field '{args.field}' (fields: {', '.join(record)})",
                     "pass --field with the name of the text field")
            text = record[args.field]
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            docs += 1
            chars += len(text)
            if time.time() - last > 5:
                last = time.time()
                print(f"hf_to_jsonl: {docs} documents, {chars / 1e6:.1f}M characters, {docs / (last - start):.0f} docs/s",
                      file=sys.stderr)
            if args.max_docs and docs >= args.max_docs:
                break
        out.close()
    except SystemExit:
        out.close()
        os.unlink(tmp)
        raise
    except Exception as e:  # the datasets library's own errors (bad files, schema mismatches, network)
        out.close()
        os.unlink(tmp)
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        fail(f"reading the dataset failed after {docs} documents: {first_line}",
             "check the dataset name, --name, --split and that local files share one schema")
    if docs == 0:
        os.unlink(tmp)
        fail("the dataset yielded no documents", "check --split and --data-files")
    os.replace(tmp, args.output)
    print(f"hf_to_jsonl: wrote {docs} documents ({chars / 1e6:.1f}M characters) to {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
