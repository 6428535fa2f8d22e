#!/usr/bin/env python3
# Writes the expected CLIP token ids of a prompt list, as transformers'
# CLIPTokenizer produces them, for tests/tokenizer/test_clip_tokenizer.c.
# Runs offline with transformers installed (the GPU machine has 5.17) on the
# diffusers fixtures' tokenizer folders: sd15/tokenizer (pad <|endoftext|>)
# and sd21v/tokenizer (pad "!"). For each prompt and folder it records the
# default (fast, `tokenizers`-backed) class's 77 input_ids (padding to
# max_length, truncation), the untruncated ids and the ids without special
# tokens; and, where transformers still has one, the slow Python class's, with
# whether ftfy was importable (the slow class cleans text with ftfy when it is,
# with BERT's BasicTokenizer otherwise). The C test compares the fast ids.
#
# usage: python3 tests/tokenizer/gen_clip_refs.py \
#          [--prompts tests/data/tokenizer/clip/prompts.json] \
#          [--fixtures ../shared/fixtures/diffusers] \
#          [--out tests/data/tokenizer/clip/clip_refs.json]
import argparse
import importlib
import json
import os
import platform
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFS = {"pad_eot": "pipelines/sd15/tokenizer", "pad_excl": "pipelines/sd21v/tokenizer"}


def ftfy_importable():
    try:
        importlib.import_module("ftfy")
        return True
    except ImportError:
        return False


def materialize(folder, tmp):
    """Copies a tokenizer folder into tmp, resolving the fixtures' symlink stubs
    (small text files holding the relative path of the shared real file)."""
    os.makedirs(tmp, exist_ok=True)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        src = os.path.join(folder, name)
        if not os.path.exists(src):
            continue
        with open(src, "rb") as f:
            data = f.read()
        if len(data) < 512 and data.startswith(b"../"):
            with open(os.path.normpath(os.path.join(folder, data.decode().strip())), "rb") as f:
                data = f.read()
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    return tmp


def load_fast(path):
    import transformers
    cls = getattr(transformers, "CLIPTokenizerFast", None) or transformers.CLIPTokenizer
    try:
        return cls.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - fall back to the class's vocab/merges constructor
        print(f"{cls.__name__}.from_pretrained({path}) failed ({e!r}); building from vocab.json/merges.txt",
              file=sys.stderr)
        vocab = json.load(open(os.path.join(path, "vocab.json"), encoding="utf-8"))
        merges = [tuple(m.split(" ")) for m in open(os.path.join(path, "merges.txt"), encoding="utf-8").read()
                  .split("\n") if m and not m.startswith("#version")]
        conf = json.load(open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8"))
        return cls(vocab=vocab, merges=merges, pad_token=conf["pad_token"], model_max_length=77)


def load_slow(path):
    """The pure-Python CLIP tokenizer if this transformers still ships one, else None."""
    import transformers
    tried = []
    for modname, clsname in (("transformers.models.clip.tokenization_clip", "CLIPTokenizer"),
                             ("transformers.models.clip.tokenization_clip_slow", "CLIPTokenizer"),
                             ("transformers.models.clip.tokenization_clip", "CLIPTokenizerSlow")):
        try:
            cls = getattr(importlib.import_module(modname), clsname)
        except (ImportError, AttributeError) as e:
            tried.append(f"{modname}.{clsname}: {e!r}")
            continue
        if getattr(cls, "is_fast", False) or "Fast" in cls.__name__ or "TokenizersBackend" in [
                b.__name__ for b in cls.__mro__]:
            tried.append(f"{modname}.{clsname}: backed by tokenizers")
            continue
        return cls.from_pretrained(path), f"{modname}.{clsname}"
    try:
        tok = transformers.AutoTokenizer.from_pretrained(path, use_fast=False)
        if not getattr(tok, "is_fast", True):
            return tok, "AutoTokenizer(use_fast=False) -> " + type(tok).__name__
        tried.append("AutoTokenizer(use_fast=False) returned a fast tokenizer: " + type(tok).__name__)
    except Exception as e:  # noqa: BLE001 - record why, do not fail
        tried.append(f"AutoTokenizer(use_fast=False): {e!r}")
    return None, "; ".join(tried)


def ids_of(tok, text):
    full = tok(text, padding="max_length", max_length=77, truncation=True)["input_ids"]
    untr = tok(text)["input_ids"]
    raw = tok(text, add_special_tokens=False)["input_ids"]
    return {"input_ids": list(full), "untruncated_ids": list(untr), "raw_ids": list(raw)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", default=os.path.join(ROOT, "tests/data/tokenizer/clip/prompts.json"))
    default_fx = next((d for d in (os.path.join(ROOT, "..", "shared", "fixtures", "diffusers"),
                                   os.path.join(ROOT, "shared", "fixtures", "diffusers")) if os.path.isdir(d)), None)
    ap.add_argument("--fixtures", default=default_fx, help="the diffusers fixtures folder")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/tokenizer/clip/clip_refs.json"))
    a = ap.parse_args()
    import transformers
    prompts = json.load(open(a.prompts, encoding="utf-8"))["prompts"]
    toks = {}
    info = {"transformers": transformers.__version__, "python": platform.python_version(),
            "ftfy_importable": ftfy_importable(), "folders": CONFS, "classes": {}}
    try:
        import tokenizers
        info["tokenizers"] = tokenizers.__version__
    except ImportError:
        info["tokenizers"] = None
    tmp = tempfile.mkdtemp(prefix="clip_refs_")
    for name, rel in CONFS.items():
        path = materialize(os.path.join(a.fixtures, rel), os.path.join(tmp, name))
        fast = load_fast(path)
        slow, how = load_slow(path)
        toks[name] = (fast, slow)
        info["classes"][name] = {"fast": type(fast).__module__ + "." + type(fast).__name__,
                                 "fast_is_fast": bool(getattr(fast, "is_fast", False)),
                                 "slow": how if slow is not None else None,
                                 "slow_unavailable_because": None if slow is not None else how,
                                 "pad_token": fast.pad_token, "pad_token_id": fast.pad_token_id}
    cases, n_slow_diff = [], 0
    for p in prompts:
        c = {"prompt": p}
        for name, (fast, slow) in toks.items():
            e = {"fast": ids_of(fast, p)}
            if slow is not None:
                e["slow"] = ids_of(slow, p)
                if e["slow"]["input_ids"] != e["fast"]["input_ids"]:
                    n_slow_diff += 1
            c[name] = e
        cases.append(c)
    shutil.rmtree(tmp, ignore_errors=True)
    info["slow_fast_differences"] = n_slow_diff
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"generator": info, "cases": cases}, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} prompts -> {a.out}; ftfy importable: {info['ftfy_importable']}; "
          f"slow/fast differences: {n_slow_diff}", file=sys.stderr)


if __name__ == "__main__":
    main()
