#!/usr/bin/env python3
"""Write a T5-style tokenizer.json (Hugging Face `tokenizers` format) for a sentencepiece unigram model.

The SD3 test fixtures need a T5 tokenizer in both forms people have: `spiece.model` and `tokenizer.json`.
This reads the model's protobuf by hand (no protobuf package needed) and writes the JSON the way
transformers' converter lays out T5 tokenizers today: a Unigram model with the pieces and scores, the
model's precompiled normalization charsmap, right strip, runs of spaces to one "▁", Metaspace with a
prefix, and "$A </s>". The `tokenizers` library is the reference for what this file means: the fixture
generator records its ids for every test string (tools/sd3_fixtures/gen_sd3_fixtures.py).

Usage: spm_to_tokenizer_json.py spiece.model OUTDIR   (writes tokenizer.json, tokenizer_config.json,
       special_tokens_map.json)
"""
import base64
import json
import os
import struct
import sys


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def fields(b):
    """Yield (field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield f, wt, v


def read_spm(path):
    data = open(path, "rb").read()
    pieces, charsmap, unk_id = [], b"", 0
    for f, _, v in fields(data):
        if f == 1:  # SentencePiece {piece=1, score=2, type=3}
            p = dict(piece="", score=0.0, type=1)
            for ff, _, vv in fields(v):
                if ff == 1:
                    p["piece"] = vv.decode("utf-8")
                elif ff == 2:
                    p["score"] = struct.unpack("<f", vv)[0]
                elif ff == 3:
                    p["type"] = vv
            pieces.append(p)
        elif f == 2:  # TrainerSpec: unk_id = 40
            for ff, _, vv in fields(v):
                if ff == 40:
                    unk_id = vv
        elif f == 3:  # NormalizerSpec: precompiled_charsmap = 2
            for ff, _, vv in fields(v):
                if ff == 2:
                    charsmap = vv
    return pieces, charsmap, unk_id


def main():
    src, out = sys.argv[1], sys.argv[2]
    pieces, charsmap, unk_id = read_spm(src)
    os.makedirs(out, exist_ok=True)
    eos = next(i for i, p in enumerate(pieces) if p["piece"] == "</s>")
    added = [dict(id=i, content=p["piece"], single_word=False, lstrip=False, rstrip=False, normalized=False,
                  special=True) for i, p in enumerate(pieces) if p["type"] in (2, 3)]
    norm = [dict(type="Strip", strip_left=False, strip_right=True),
            dict(type="Replace", pattern=dict(Regex=" {2,}"), content="\u2581")]
    if charsmap:
        norm.insert(0, dict(type="Precompiled", precompiled_charsmap=base64.b64encode(charsmap).decode()))
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": dict(type="Sequence", normalizers=norm),
        "pre_tokenizer": dict(type="Metaspace", replacement="\u2581", prepend_scheme="always", split=True),
        "post_processor": dict(type="TemplateProcessing",
                               single=[dict(Sequence=dict(id="A", type_id=0)), dict(SpecialToken=dict(id="</s>", type_id=0))],
                               pair=[dict(Sequence=dict(id="A", type_id=0)), dict(SpecialToken=dict(id="</s>", type_id=0)),
                                     dict(Sequence=dict(id="B", type_id=0)), dict(SpecialToken=dict(id="</s>", type_id=0))],
                               special_tokens={"</s>": dict(id="</s>", ids=[eos], tokens=["</s>"])}),
        "decoder": dict(type="Metaspace", replacement="\u2581", prepend_scheme="always", split=True),
        "model": dict(type="Unigram", unk_id=unk_id, vocab=[[p["piece"], p["score"]] for p in pieces],
                      byte_fallback=False),
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    special = dict(eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(dict(special, tokenizer_class="T5Tokenizer", extra_ids=0, model_max_length=512), f, indent=2)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2)
    print(f"{len(pieces)} pieces, unk {unk_id}, eos {eos}, charsmap {len(charsmap)} bytes")


if __name__ == "__main__":
    main()
