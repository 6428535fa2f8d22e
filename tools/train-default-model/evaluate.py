#!/usr/bin/env python3
"""Evaluates the trained default model with transformers in float32 and writes rbee-c's references.

Why: rbee-c must be able to check that its own loader, tokenizer and forward pass reproduce this
model. This script loads the saved HF folder exactly as a user would (AutoModelForCausalLM, on the
CPU, float32, no TF32), then records: train / validation / test loss, the test perplexity over
models/default/heldout.txt (window methods in textdata.py), greedy continuations of fixed prompts as
text and ids, float64 logits of the first prompt, and token ids of a few tokenizer probe strings.
"""

import argparse
import copy
import json
import math
import os
import platform
import sys
import time

import torch
from tokenizers import Tokenizer

import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

import textdata

BOS_ID = 0
EOS_ID = 1
PROMPTS = ["And God said", "The LORD is my shepherd", "The king went up to the city"]
NEW_TOKENS = 40
TOKENIZER_PROBES = [
    "And God said, Let there be light: and there was light.",
    "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void;",
    "Jesus wept.",
    "thou shalt not; I'll be there, they're 3 or 12345 men!",
    "  two leading spaces\n\n\nthree newlines\tand a tab",
    "caf\u00e9 na\u00efve \u2014 \U0001F41D",
]


def log(msg):
    print(msg, flush=True)


def load_model(hf_dir):
    try:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    model = model.to("cpu", dtype=torch.float32).eval()
    for n, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise SystemExit("evaluate: %s is %s" % (n, p.dtype))
    return model


def logits_fn_for(model):
    def fn(x):
        return model(input_ids=x, use_cache=False).logits
    return fn


@torch.no_grad()
def spread_windows_loss(model, stream, window, count):
    """Mean -log p over `count` full windows spread evenly over a (long) stream."""
    hi = stream.numel() - window - 1
    starts = [k * hi // (count - 1) for k in range(count)]
    total, n = 0.0, 0
    for i in range(0, count, 16):
        group = starts[i:i + 16]
        x = torch.stack([stream[s:s + window] for s in group])
        y = torch.stack([stream[s + 1:s + window + 1] for s in group])
        logits = model(input_ids=x, use_cache=False).logits.double()
        total += float(torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
        n += y.numel()
    return total / n


@torch.no_grad()
def greedy(model, ids, n_new):
    """Greedy decoding by full recomputation (no cache), exactly n_new tokens, EOS not special."""
    ids = list(ids)
    out, margins = [], []
    for _ in range(n_new):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        top2 = torch.topk(logits, 2)
        nxt = int(top2.indices[0])
        margins.append(float(top2.values[0] - top2.values[1]))
        out.append(nxt)
        ids.append(nxt)
    return out, margins


@torch.no_grad()
def hf_generate(model, ids, n_new):
    x = torch.tensor([ids])
    y = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                       max_new_tokens=n_new, pad_token_id=EOS_ID)
    return [int(t) for t in y[0, len(ids):]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-dir", required=True)
    ap.add_argument("--data-dir", required=True, help="folder with train.txt, valid.txt, test.txt")
    ap.add_argument("--heldout", required=True, help="models/default/heldout.txt (== test.txt)")
    ap.add_argument("--out-dir", required=True, help="where reference.json and the logits go")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--stride", type=int, default=256)
    a = ap.parse_args()

    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with open(a.heldout, "rb") as f1, open(os.path.join(a.data_dir, "test.txt"), "rb") as f2:
        if f1.read() != f2.read():
            raise SystemExit("evaluate: %s differs from the prepared test split" % a.heldout)

    tok = Tokenizer.from_file(os.path.join(a.hf_dir, "tokenizer.json"))
    model = load_model(a.hf_dir)
    n_params = sum(p.numel() for p in model.parameters())
    try:
        from safetensors import safe_open
        with safe_open(os.path.join(a.hf_dir, "model.safetensors"), framework="pt") as st:
            names = sorted(st.keys())
            dtypes = sorted({st.get_slice(k).get_dtype() for k in names})
        log("model.safetensors: %d tensors, dtypes %s, lm_head stored: %s" % (
            len(names), dtypes, "lm_head.weight" in names))
    except Exception as e:
        log("WARNING: could not list model.safetensors: %r" % (e,))
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    log("evaluate: torch %s, transformers %s, %d params, tied %s, attn %s, threads %d" % (
        torch.__version__, transformers.__version__, n_params, tied,
        getattr(model.config, "_attn_implementation", "?"), torch.get_num_threads()))

    # Tokenizer: the transformers wrapper must agree with the raw tokenizers object.
    try:
        hf_tok = AutoTokenizer.from_pretrained(a.hf_dir)
    except Exception as e:  # the raw tokenizer stays the reference; this is a cross-check
        hf_tok = None
        log("WARNING: AutoTokenizer.from_pretrained failed: %r" % (e,))
    probes = []
    for text in TOKENIZER_PROBES + PROMPTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        with_bos = list(hf_tok(text)["input_ids"]) if hf_tok is not None else None
        if with_bos != [BOS_ID] + ids:
            log("WARNING: AutoTokenizer gives %r, tokenizers %r for %r" % (with_bos, [BOS_ID] + ids, text))
        if tok.decode(ids) != text:
            log("WARNING: round trip failed for %r" % text)
        probes.append({"text": text, "ids": ids, "pieces": [tok.id_to_token(i) for i in ids],
                       "autotokenizer_ids_with_specials": with_bos})

    streams = {s: textdata.build_stream(tok, os.path.join(a.data_dir, s + ".txt"), BOS_ID, EOS_ID)
               for s in ("train", "valid")}
    streams["test"] = textdata.build_stream(tok, a.heldout, BOS_ID, EOS_ID)
    fn = logits_fn_for(model)
    train_loss = spread_windows_loss(model, streams["train"], a.window, 64)
    vt, vc = textdata.score_nonoverlapping(fn, streams["valid"], a.window)
    nt, nc = textdata.score_nonoverlapping(fn, streams["test"], a.window)
    st, sc = textdata.score_sliding(fn, streams["test"], a.window, a.stride)
    first = textdata.nonoverlapping_windows(streams["test"].numel(), a.window)[0]
    ft, fc = textdata.score_nonoverlapping(fn, streams["test"][:first[1] + 1], a.window)
    log("loss (float32, CPU): train %.4f (64 spread windows of %d), valid %.4f, test %.4f" % (
        train_loss, a.window, vt / vc, nt / nc))
    log("test perplexity over heldout.txt (%d tokens): non-overlapping W=%d: %.3f; "
        "sliding W=%d S=%d: %.3f" % (streams["test"].numel(), a.window, math.exp(nt / nc),
                                     a.window, a.stride, math.exp(st / sc)))

    gens = []
    for prompt in PROMPTS:
        ids = [BOS_ID] + tok.encode(prompt, add_special_tokens=False).ids
        new, margins = greedy(model, ids, NEW_TOKENS)
        try:
            hf_new = hf_generate(model, ids, NEW_TOKENS)
            agree = hf_new == new[:len(hf_new)]
        except Exception as e:  # the manual loop is the reference; generate() is a cross-check
            hf_new, agree = None, None
            log("generate() failed: %r" % (e,))
        with torch.no_grad():
            last = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        top = torch.topk(last, 5)
        g = {"prompt": prompt, "prompt_ids": ids, "new_ids": new,
             "new_text": tok.decode(new, skip_special_tokens=False),
             "min_top2_logit_margin": min(margins), "generate_agrees": agree,
             "generate_new_ids": hf_new,
             "top5_after_prompt": [[int(i), float(v)] for i, v in zip(top.indices, top.values)]}
        gens.append(g)
        log("greedy %r -> %r" % (prompt, g["new_text"]))
        log("  ids %s + %s (min margin %.3f, generate() agrees: %s)" % (ids, new, min(margins), agree))

    # float64 logits of the first prompt and its greedy continuation, for forward-pass tests.
    seq = gens[0]["prompt_ids"] + gens[0]["new_ids"][:11]
    m64 = copy.deepcopy(model).double()
    with torch.no_grad():
        l64 = m64(input_ids=torch.tensor([seq]), use_cache=False).logits[0]
        l32 = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].double()
    rel = float(torch.linalg.norm(l32 - l64) / torch.linalg.norm(l64))
    os.makedirs(a.out_dir, exist_ok=True)
    logits_path = os.path.join(a.out_dir, "reference_logits.f32")
    l64.to(torch.float32).contiguous().numpy().astype("<f4").tofile(logits_path)
    log("reference logits: %d x %d, float32 vs float64 relative L2 %.2e" % (
        l64.shape[0], l64.shape[1], rel))

    ref = {
        "about": "Reference outputs of models/default/hf computed by transformers on the CPU in float32 "
                 "(logits file: float64 forward pass stored as float32). See MODEL_CARD.md.",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "n_params": n_params,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
        "greedy": {"method": "prompt_ids = [<|begin_of_text|>] + encode(prompt); argmax of the last "
                             "position's logits, appended, repeated exactly %d times (EOS not treated "
                             "specially, full recomputation, float32)" % NEW_TOKENS,
                   "results": gens},
        "perplexity": {
            "file": "models/default/heldout.txt",
            "tokenization": "split the file on \"\\n\\n\" into chapters (drop empty ones); stream = for "
                            "each chapter: [0] + encode(chapter, no special tokens) + [1], concatenated",
            "n_tokens": streams["test"].numel(),
            "non_overlapping": {"window": a.window, "stride": a.window,
                                "method": "for s = 0, W, 2W, .. while s < N-1: read t[s:min(s+W,N-1)] "
                                          "from an empty cache; position i predicts t[s+i+1]",
                                "nll_sum": nt, "n_scored": nc, "mean_nll": nt / nc,
                                "ppl": math.exp(nt / nc),
                                "first_window": {"n_scored": fc, "nll_sum": ft, "mean_nll": ft / fc}},
            "sliding": {"window": a.window, "stride": a.stride,
                        "method": "for b = 0, S, 2S, ..: read t[b:e], e = min(b+W, N), from an empty "
                                  "cache; score tokens j in [max(prev_e, 1), e); stop once e == N",
                        "nll_sum": st, "n_scored": sc, "mean_nll": st / sc, "ppl": math.exp(st / sc)},
        },
        "losses": {"train_64_spread_windows": train_loss, "valid": vt / vc, "test": nt / nc},
        "logits_file": {"path": "models/default/reference_logits.f32", "ids": seq,
                        "rows": len(seq), "cols": int(l64.shape[1]),
                        "layout": "raw little-endian float32, row i = logits after reading ids[0..i]",
                        "float32_vs_float64_rel_l2": rel},
        "tokenizer_probes": probes,
    }
    with open(os.path.join(a.out_dir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    log("evaluate: done in %.1fs" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
