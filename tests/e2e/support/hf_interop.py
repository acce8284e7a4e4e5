"""Hugging Face transformers and tokenizers against ember's export and import (run by hf_export_import.sh).

  check-export DIR LOGITS EVAL_JSON GEN_TXT PROMPT NEW TOKENS_TXT IDS_TXT TOL
      transformers loads DIR with AutoModelForCausalLM/AutoTokenizer; on ember's first eval batch (LOGITS and the
      .inputs/.targets files beside it) its logits are within TOL of ember's and its loss equals eval's; greedy
      generate of NEW tokens after PROMPT decodes to GEN_TXT; the tokenizer gives ember's ids (IDS_TXT) for TOKENS_TXT.
  make-random DIR VOCAB TOKDIR   a GPT2LMHeadModel from a random GPT2Config, saved with save_pretrained, plus the
                                 tokenizer files of TOKDIR (when given)
  check-import DIR LOGITS EVAL_JSON TOL   transformers' logits and loss on ember's batch equal ember's
  break DIR KIND               damage a saved folder: missing, shape, arch, header, untied
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)


def batch(logits_path):
    stem = logits_path[:-4]
    return (np.load(logits_path), np.load(stem + ".inputs.npy"), np.load(stem + ".targets.npy"))


def compare(model, logits_path, eval_json, tol):
    ember_logits, inputs, targets = batch(logits_path)
    with torch.no_grad():
        hf = model(torch.from_numpy(inputs.astype(np.int64))).logits.float().numpy()
    scale = np.abs(ember_logits).max()
    diff = np.abs(hf - ember_logits).max()
    lp = torch.log_softmax(torch.from_numpy(hf).double(), dim=-1)
    loss = -lp.gather(-1, torch.from_numpy(targets.astype(np.int64))[..., None]).mean().item()
    ember_loss = json.load(open(eval_json))["loss"]
    print(f"max |logit diff| {diff:.3g} ({diff / scale:.3g} of max |logit| {scale:.3g}); "
          f"loss transformers {loss:.7f} ember {ember_loss:.7f}")
    assert diff <= tol * scale, f"logits differ by {diff} > {tol} * {scale}"
    assert abs(loss - ember_loss) <= max(tol, 1e-6) * max(1.0, ember_loss), (loss, ember_loss)


def check_export(d, logits, eval_json, gen_txt, prompt, new, tokens_txt, ids_txt, tol):
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    tok = AutoTokenizer.from_pretrained(d)
    assert type(model).__name__ == "GPT2LMHeadModel", type(model)
    compare(model.float(), logits, eval_json, float(tol))
    text = open(tokens_txt, "rb").read().decode("utf-8")
    ids = json.loads(open(ids_txt).read())  # `ember tokenizer encode` prints a JSON list
    got = tok(text)["input_ids"]
    assert got == ids, f"tokenizer ids differ from ember's:\n{got}\n{ids}"
    assert tok.decode(ids) == text
    if gen_txt != "-":
        enc = tok(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.float().generate(enc, max_new_tokens=int(new), do_sample=False,
                                         pad_token_id=model.config.eos_token_id or 0)
        hf_text = tok.decode(out[0], skip_special_tokens=True)
        ember_text = open(gen_txt, "rb").read().decode("utf-8")[:-1]  # ember ends its output with a newline
        assert hf_text == ember_text, f"greedy generate differs:\ntransformers {hf_text!r}\nember        {ember_text!r}"
    print("export", d, "checked:", len(ids), "token ids equal, greedy text equal" if gen_txt != "-" else "")


def make_random(d, vocab, tokdir):
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=int(vocab),
                     bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # larger weights than GPT-2's init, so logits spread and a wrong tensor shows
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(d, safe_serialization=True)
    if tokdir != "-":
        for f in os.listdir(tokdir):
            shutil.copy(os.path.join(tokdir, f), d)


def check_import(d, logits, eval_json, tol):
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    compare(model, logits, eval_json, float(tol))


def damage(d, kind):
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    cfg_path = os.path.join(d, "config.json")
    if kind in ("missing", "shape", "untied"):
        t = load_file(path)
        key = next(k for k in t if k.endswith("h.0.ln_1.weight"))
        if kind == "missing":
            del t[key]
        elif kind == "shape":
            t[key] = torch.zeros(t[key].shape[0] + 1)
        else:
            wte = next(k for k in t if k.endswith("wte.weight"))
            t["lm_head.weight"] = t[wte] + 1.0
        save_file(t, path, metadata={"format": "pt"})
    elif kind == "arch":
        c = json.load(open(cfg_path))
        c["activation_function"] = "relu"
        json.dump(c, open(cfg_path, "w"))
    elif kind == "header":
        with open(path, "r+b") as f:
            f.write((10 ** 12).to_bytes(8, "little"))
    else:
        raise SystemExit("unknown damage " + kind)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"check-export": check_export, "make-random": make_random, "check-import": check_import,
     "break": damage}[cmd](*args)
