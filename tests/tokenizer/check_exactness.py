# Checks that Ember's BPE tokenizer gives exactly the ids of Hugging Face tokenizers, transformers and tiktoken for
# a vocabulary `ember tokenizer train` wrote, on repository files, licence texts, generated Unicode and invalid UTF-8.
import argparse
import base64
import json
import os
import random
import subprocess
import sys
import unicodedata
from concurrent.futures import ThreadPoolExecutor

import tiktoken

# Only transformers' tokenizers are used: no "PyTorch not found" advice on stderr.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
import transformers  # noqa: E402
from tokenizers import Tokenizer

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"


def byte_to_unicode():
    """GPT-2's byte -> printable character map (its published definition)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


B2U = byte_to_unicode()
U2B = {c: b for b, c in B2U.items()}


def printable(data):
    return "".join(B2U[b] for b in data)


def segments(data):
    """Ember's convention for any bytes: maximal valid UTF-8 runs (str) and maximal invalid runs (bytes), in order."""
    out = []
    for ch in data.decode("utf-8", errors="surrogateescape"):
        bad = 0xDC80 <= ord(ch) <= 0xDCFF
        if out and isinstance(out[-1], bytes) == bad:
            out[-1] += bytes([ord(ch) - 0xDC00]) if bad else ch
        else:
            out.append(bytes([ord(ch) - 0xDC00]) if bad else ch)
    return out


def ember(args, cmd, tokenizer, stdin, extra=()):
    p = subprocess.run([args.ember, "tokenizer", cmd, "--tokenizer", tokenizer, *extra], input=stdin,
                       capture_output=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: ember tokenizer {cmd} exited {p.returncode}: {p.stderr.decode(errors='replace')}")
    return p.stdout


def ember_encode(args, tokenizer, data, special=False):
    return json.loads(ember(args, "encode", tokenizer, data, ["--special"] if special else []))


def compare(name, expected, got, what):
    if expected == got:
        return
    p = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    lo = max(0, p - 3)
    sys.exit(f"FAIL: {what} differ on text '{name}' at id position {p} (lengths {len(expected)} vs {len(got)}):\n"
             f"  expected[{lo}:{p + 5}] = {expected[lo:p + 5]}\n  ember   [{lo}:{p + 5}] = {got[lo:p + 5]}")


def generated_texts(seed, count):
    """Random text from many scripts, combining marks, emoji, CJK, odd white space, digits and punctuation."""
    rng = random.Random(seed)
    assigned = [c for c in range(0x20, 0x30000) if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
    marks = [c for c in assigned if unicodedata.category(chr(c)).startswith("M")]
    spaces = ["\u3000", "\u0085", "\u2028", "\u2029", "\u180e", "\u200b", "\u00a0", "\t", "\r\n", "\n\n", "\x0b"]
    emoji = [chr(c) for c in range(0x1F300, 0x1FAFF) if unicodedata.category(chr(c)) == "So"]
    blocks = [(0x0041, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x06FF), (0x0900, 0x097F),
              (0x0E00, 0x0E7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1D400, 0x1D7FF)]
    texts = []
    for i in range(count):
        parts = []
        for _ in range(rng.randint(20, 400)):
            r = rng.random()
            if r < 0.25:
                parts.append(rng.choice(["the", " cat", "'s", "'ll", " 42", "x=1;", " -- ", "...", "I'm", "DON'T"]))
            elif r < 0.45:
                lo, hi = rng.choice(blocks)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
            elif r < 0.55:
                parts.append(chr(rng.choice(assigned)))
            elif r < 0.62:
                parts.append(chr(rng.choice(marks)))
            elif r < 0.70:
                parts.append(rng.choice(emoji) + rng.choice(["", "\u200d", "\ufe0f"]))
            elif r < 0.82:
                parts.append(rng.choice(spaces) * rng.randint(1, 4))
            elif r < 0.90:
                parts.append(" " * rng.randint(1, 40) + rng.choice(["", "a", "\n", "1"]))
            elif r < 0.95:
                parts.append(str(rng.randint(0, 10**12)) + rng.choice(["", " ", "\u0663\u0664"]))
            else:
                parts.append("".join(rng.choice("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") for _ in range(rng.randint(1, 6))))
        texts.append((f"generated-{i}", "".join(parts).encode("utf-8")))
    fixed = [" " * 1000, "\n" * 300, " \n" * 200 + "x", "1234567890" * 100, "!!!???..." * 50, "\t \u3000 " * 80,
             "a" * 5000, "'s's'S'LL 've'", ""]
    texts += [(f"fixed-{i}", t.encode("utf-8")) for i, t in enumerate(fixed)]
    for i in range(count // 2):  # random bytes: mostly invalid UTF-8, some valid runs between
        data = bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 300)))
        texts.append((f"bytes-{i}", data + b" tail " + data[: rng.randint(0, 5)]))
    texts.append(("bytes-truncated", "caf\u00e9 \u4e2d\u6587".encode()[:-1] + b"\xed\xa0\x80 ok \xf4\x90\x80\x80"))
    return texts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", required=True)
    ap.add_argument("--tokenizer", required=True, help="folder ember tokenizer train wrote")
    ap.add_argument("--ember-tokenizer", help="the folder Ember loads instead (a check that the test can fail)")
    ap.add_argument("--tiktoken-dir", required=True, help="folder to write the .tiktoken rank file into")
    ap.add_argument("--texts", nargs="+", required=True, help="files or folders of texts")
    ap.add_argument("--generated", type=int, default=60)
    args = ap.parse_args()
    ember_dir = args.ember_tokenizer or args.tokenizer
    transformers.logging.set_verbosity_error()  # texts longer than model_max_length are fine here

    hf = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    hf_plain = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    hf_plain.encode_special_tokens = True  # "<|endoftext|>" in ordinary text is text, as in encode_ordinary
    tf = transformers.AutoTokenizer.from_pretrained(args.tokenizer)
    vocab = json.load(open(os.path.join(args.tokenizer, "vocab.json"), encoding="utf-8"))
    eot = vocab[EOT]
    ranks = {bytes(U2B[c] for c in tok): i for tok, i in vocab.items() if tok != EOT}
    enc = tiktoken.Encoding("ember-check", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={EOT: eot})
    os.makedirs(args.tiktoken_dir, exist_ok=True)
    with open(os.path.join(args.tiktoken_dir, "ember.tiktoken"), "w") as f:
        for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(b).decode() + " " + str(r) + "\n")

    texts = []
    for root in args.texts:
        paths = [root] if os.path.isfile(root) else sorted(
            os.path.join(d, f) for d, dirs, files in os.walk(root) for f in files if not f.startswith("."))
        for path in paths:
            data = open(path, "rb").read()
            if b"\0" not in data[:8192]:
                texts.append((path, data))
    texts += generated_texts(1234, args.generated)

    # Each ember call pays for process and MPI start-up (about 0.4 s, mostly waiting), so they run several at once.
    pool = ThreadPoolExecutor(max_workers=8)
    got_hf = list(pool.map(lambda t: ember_encode(args, ember_dir, t[1]), texts))
    got_tt = list(pool.map(lambda t: ember_encode(args, args.tiktoken_dir, t[1]), texts))
    backs = list(pool.map(lambda ids: ember(args, "decode", ember_dir, json.dumps(ids).encode()), got_hf))
    n_bytes = n_tokens = n_invalid = n_tf = 0
    for (name, data), got, got_tiktoken, back in zip(texts, got_hf, got_tt, backs):
        expected_tt, expected_hf = [], []
        for seg in segments(data):
            if isinstance(seg, bytes):
                n_invalid += 1
                expected_tt += enc._encode_single_piece(seg)
                expected_hf += [t.id for t in hf.model.tokenize(printable(seg))]
            else:
                expected_tt += enc.encode_ordinary(seg)
                expected_hf += hf_plain.encode(seg, add_special_tokens=False).ids
        compare(name, expected_tt, expected_hf, "tiktoken and Hugging Face tokenizers (reference mismatch)")
        if EOT not in data.decode("utf-8", errors="replace") and all(isinstance(s, str) for s in segments(data)):
            compare(name, expected_tt, tf.encode(data.decode("utf-8"), add_special_tokens=False), "transformers")
            n_tf += 1
        compare(name, expected_tt, got, "Hugging Face files: tiktoken/tokenizers ids and Ember's")
        compare(name, expected_tt, got_tiktoken, ".tiktoken file: tiktoken and Ember")
        if back != data:
            p = next((i for i, (a, b) in enumerate(zip(back, data)) if a != b), min(len(back), len(data)))
            sys.exit(f"FAIL: decode(encode(text)) differs from text '{name}' at byte {p}: "
                     f"{data[p:p + 16]!r} vs {back[p:p + 16]!r}")
        n_bytes += len(data)
        n_tokens += len(got)

    # Special tokens: "<|endoftext|>" between texts becomes its id with --special, as tiktoken and tokenizers do.
    rng = random.Random(7)
    valid = [d.decode() for _, d in texts if all(isinstance(s, str) for s in segments(d))]
    specials = []
    for i in range(40):
        text = EOT.join(rng.choice(valid)[: rng.randint(0, 400)] for _ in range(rng.randint(1, 4)))
        specials.append(rng.choice(["", EOT, " ", "\n"]) + text + rng.choice(["", EOT, EOT + EOT]))
    got_special = list(pool.map(lambda t: ember_encode(args, ember_dir, t.encode(), True), specials))
    n_special = 0
    for i, (text, got) in enumerate(zip(specials, got_special)):
        expected = enc.encode(text, allowed_special="all")
        compare(f"special-{i}", expected, hf.encode(text, add_special_tokens=False).ids, "tiktoken and tokenizers")
        compare(f"special-{i}", expected, tf.encode(text, add_special_tokens=False), "transformers")
        compare(f"special-{i}", expected, got, "--special ids")
        n_special += text.count(EOT)
    print(f"exactness: {len(texts)} texts, {n_bytes} bytes, {n_tokens} tokens equal in Ember, tokenizers and "
          f"tiktoken (both file forms); {n_tf} also in transformers; {n_invalid} invalid UTF-8 runs; "
          f"40 texts with {n_special} special tokens; decode gave back every text")


if __name__ == "__main__":
    main()
