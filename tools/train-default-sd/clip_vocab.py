"""Derives CLIP's tokenizer files (HF `vocab.json` + `merges.txt`) from OpenAI's bpe_simple_vocab_16e6.txt.gz,
which the repo ships in models/clip/, so the default SD model's folder carries a tokenizer diffusers loads.

The vocabulary is the 256 byte symbols (GPT-2's byte-to-character map, printable bytes first), the same with "</w>", one
symbol per merge rule (the first 48,894 rules of the file), then <|startoftext|> and <|endoftext|>: 49,408.
"""
import gzip
import json
import os


def byte_symbols():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in keep] + [out[b] for b in range(256) if b not in keep]  # printable bytes first


def derive(gz_path):
    lines = gzip.open(gz_path, "rt", encoding="utf-8").read().split("\n")
    merges = [tuple(m.split()) for m in lines[1:49152 - 256 - 2 + 1]]
    symbols = byte_symbols()
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
    return {s: i for i, s in enumerate(vocab)}, merges


def write(gz_path, out_dir):
    vocab, merges = derive(gz_path)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    special = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
               "unk_token": "<|endoftext|>"}
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({**special, "add_prefix_space": False, "clean_up_tokenization_spaces": True, "do_lower_case": True,
                   "errors": "replace", "model_max_length": 77, "tokenizer_class": "CLIPTokenizer"}, f, indent=2)
    return vocab
