#!/usr/bin/env python3
"""Trains the default model's byte-level BPE tokenizer on the training split (HF `tokenizers`).

Why: rbee-c's default model needs its own small vocabulary (4096 ids) fitted to its corpus, in the
same family as Llama 3 / GPT-2 (byte-level BPE, the GPT-2 byte-to-unicode map, a Llama-3 style
pre-tokenizer regex), so that the engine's byte-level BPE path is exercised by the bundled model.

Layout of the vocabulary: id 0 <|begin_of_text|>, id 1 <|end_of_text|>, ids 2..257 the 256 byte
symbols, then the merges. Writes tokenizer.json and tokenizer_config.json into --out-dir.
"""

import argparse
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
# The pre-tokenizer split used by Llama 3 (a published fact of that format): contractions,
# letter runs with one optional leading non-letter, 1-3 digit groups, punctuation runs, newlines.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_docs(path):
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    docs = [d for d in text.split("\n\n") if d.strip()]
    if not docs:
        raise SystemExit("train_tokenizer: no documents in %s" % path)
    return docs


def build(vocab_size):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single=BOS + " $A", pair=BOS + " $A " + BOS + " $B", special_tokens=[(BOS, 0)])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[BOS, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="train.txt from prepare_corpus.py")
    ap.add_argument("--check", nargs="*", default=[], help="texts that must round-trip exactly")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--max-length", type=int, default=512)
    args = ap.parse_args()

    docs = read_docs(args.train)
    tok, trainer = build(args.vocab_size)
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))

    if tok.get_vocab_size() != args.vocab_size:
        raise SystemExit("train_tokenizer: got %d ids, wanted %d" % (tok.get_vocab_size(), args.vocab_size))
    if tok.token_to_id(BOS) != 0 or tok.token_to_id(EOS) != 1:
        raise SystemExit("train_tokenizer: special tokens are not ids 0 and 1")

    # Every document of every split must survive encode -> decode unchanged.
    n_tok = 0
    for path in [args.train] + list(args.check):
        for d in read_docs(path):
            ids = tok.encode(d, add_special_tokens=False).ids
            n_tok += len(ids)
            if tok.decode(ids, skip_special_tokens=False) != d:
                raise SystemExit("train_tokenizer: round trip failed in %s: %r" % (path, d[:60]))
    extra = "caf\u00e9 \u00fcber \u2014 \U0001F41D 12345 don't\tX\r\n"
    if tok.decode(tok.encode(extra, add_special_tokens=False).ids) != extra:
        raise SystemExit("train_tokenizer: round trip of non-ASCII text failed")

    os.makedirs(args.out_dir, exist_ok=True)
    tok.save(os.path.join(args.out_dir, "tokenizer.json"), pretty=True)
    added = {}
    for tid, content in ((0, BOS), (1, EOS)):
        added[str(tid)] = {"content": content, "lstrip": False, "rstrip": False, "normalized": False,
                           "single_word": False, "special": True}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": args.max_length,
        "model_input_names": ["input_ids", "attention_mask"],
        "added_tokens_decoder": added,
    }
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print("tokenizer: %d ids, %d merges, %d documents, %d tokens over train+checks" % (
        tok.get_vocab_size(), tok.get_vocab_size() - 258, len(docs), n_tok))
    return 0


if __name__ == "__main__":
    sys.exit(main())
