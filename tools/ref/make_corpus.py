#!/usr/bin/env python3
# Writes tests/data/tokenizer/corpus.json: the hard strings every tokenizer
# reference is computed over. Kept as a script so the long and invisible
# strings (3000-char word, emoji runs, odd whitespace) are reproducible and
# reviewable; the JSON is what tests and gen_tokenizer_refs.py read.
import json
import os
import sys

ZWJ = "\u200d"


def corpus():
    s = []
    add = s.append
    # --- empty / whitespace
    add("")
    add(" ")
    add("   ")
    add("\t")
    add("\n")
    add("\n\n\n")
    add("\r\n")
    add("  leading spaces")
    add("trailing spaces   ")
    add("a  b   c    d     e")
    add("tabs\tand\t\tmore\ttabs")
    add("line one\nline two\r\nline three\n\n  indented\n")
    add(" \t \n \r\n  mixed whitespace run \u00a0\u3000 end")
    # --- plain English, contractions
    add("Hello world")
    add("Hello, world! How are you today?")
    add("It's the cat's toy; they're here, we've got it, I'm sure you'll see, he'd know.")
    add("IT'S THE CAT'S TOY; THEY'RE HERE, WE'VE GOT IT, I'M SURE YOU'LL SEE, HE'D KNOW.")
    add("don't Don't DON'T won't can't shan't y'all o'clock rock 'n' roll")
    add("'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D")
    # --- digits / numbers
    add("0 1 2 3 4 5 6 7 8 9")
    add("12345678901234567890123456789")
    add("3.14159265358979 -42 +7 1e-10 0x1F 1,000,000 10_000")
    add("Call 555-0199 on 2024-02-29 at 23:59:59.")
    # --- unicode: accents, combining marks, RTL, CJK, Thai, others
    add("caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u00df \u00e6\u00f8\u00e5")
    add("cafe\u0301 nai\u0308ve A\u030a e\u0301\u0302\u0303 Z\u0335\u0321\u0358a\u0336\u0351l\u0337go")
    add("\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 (Arabic RTL) \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd")
    add("mixed \u202eRTL override\u202c and \u200fmark\u200e done")
    add("\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002")
    add("\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca\u3001\u3072\u3089\u304c\u306a")
    add("\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4")
    add("\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07")
    add("\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0939\u093f\u0928\u094d\u0926\u0940 \u0926\u0947\u0935\u0928\u093e\u0917\u0930\u0940")
    add("Mixed: English, \u4e2d\u6587, \u0627\u0644\u0639\u0631\u0628\u064a\u0629, \u0440\u0443\u0441\u0441\u043a\u0438\u0439, \u0e44\u0e17\u0e22, \ud55c\uad6d\uc5b4 and 123")
    add("\U0001d400\U0001d401\U0001d402 math bold, \u2460\u2461\u2462 circled, \uff21\uff22\uff23 fullwidth, \ufb01 ligature")
    add("zero\u200bwidth\u200cjoiner\u200dtest\ufeffbom")
    # --- emoji
    add("I love \U0001f355 and \U0001f389!")
    add("family \U0001f468" + ZWJ + "\U0001f469" + ZWJ + "\U0001f467" + ZWJ + "\U0001f466 done")
    add("\U0001f44d\U0001f3fd \U0001f469\U0001f3fe" + ZWJ + "\U0001f4bb \u2764\ufe0f \U0001f3f3\ufe0f" + ZWJ + "\U0001f308")
    add("flags \U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f")
    add("\U0001f600\U0001f601\U0001f602\U0001f923\U0001f603 1\ufe0f\u20e3 #\ufe0f\u20e3")
    # --- code, URLs
    add("def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n")
    add("int main(void) {\n\tfor (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }\n\treturn 0;\n}")
    add("if (a && b || !c) { x += y >> 2; } else { z = a[i] != b[j]; } // comment /* block */")
    add("https://example.com/path/to/page?query=value&x=1#anchor and mailto:user@example.org")
    add("{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}")
    add("<html><body class=\"main\"><p>Hello &amp; welcome</p></body></html>")
    add("$ ls -la | grep '\\.txt$' > out.log 2>&1 && echo \"done\"")
    # --- special-token literals of each family
    add("<s>")
    add("</s>")
    add("<s> Hello</s>")
    add("text<s>inside</s>text")
    add("<|begin_of_text|>Hello<|eot_id|>")
    add("<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>")
    add(" <|begin_of_text|> spaced <|end_of_text|> ")
    add("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    add("a<|im_start|>b <|im_end|> c<|endoftext|>d")
    add("<think>\nreasoning\n</think>\n\nanswer")
    add("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")
    add("<bos>text<eos> <pad> <unk> <mask>")
    add("almost special: <|im_start| <s <|eot_id> < s> <|EOT_ID|>")
    # --- long words
    add("supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis")
    add("".join("abcdefghijklmnopqrstuvwxyz"[(i * 7 + i // 26) % 26] for i in range(3000)))
    add("\U0001f600" * 2000)
    add("a" * 1000 + " " + "b" * 500)
    add(" " * 100 + "x" + "\n" * 50)
    return s


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests/data/tokenizer/corpus.json")
    strings = corpus()
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"description": "hard strings for tokenizer reference tests (tools/ref/make_corpus.py)",
                   "strings": strings}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"make_corpus: {len(strings)} strings -> {out}")


if __name__ == "__main__":
    main()
