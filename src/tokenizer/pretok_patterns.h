/* The pre-tokenizer split regexes of the supported byte-level tokenizers,
 * exactly as they appear in their tokenizer.json, keyed by the GGUF
 * tokenizer.ggml.pre name llama.cpp uses for them. Shared by the GGUF loader
 * (name -> pipeline) and the GGUF exporter (pipeline -> name). */
#ifndef RBEE_TOKENIZER_PRETOK_PATTERNS_H
#define RBEE_TOKENIZER_PRETOK_PATTERNS_H

/* GPT-2 (ByteLevel pre-tokenizer with use_regex) */
#define TOK_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3 ("llama-bpe") */
#define TOK_RE_LLAMA3                                                                                            \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
    "\\s+(?!\\S)|\\s+"
/* Qwen2 / Qwen3 ("qwen2"): single digits */
#define TOK_RE_QWEN2                                                                                             \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"     \
    "\\s+(?!\\S)|\\s+"

/* GPT-4o / gpt-oss ("gpt-4o", the o200k pattern): case-aware words, digits in threes */
#define TOK_RE_GPT4O                                                                                             \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#endif
