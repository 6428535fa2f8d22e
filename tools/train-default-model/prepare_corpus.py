#!/usr/bin/env python3
"""Builds the training corpus of rbee-c's bundled default model from Debian's King James Bible.

Why: the default model must be reproducible from a public-domain text that any Debian machine can
install (`apt-get install bible-kjv`, which pulls in the data package `bible-kjv-text`). This script
dumps the whole text with the package's own `bible` reader, strips the verse references, and writes
the three splits the trainer needs. Everything is deterministic: same package version, same bytes.

Text format (the same for every split): one chapter is one document; its verses are joined by "\n"
(one verse a line, no references); documents are separated by one blank line ("\n\n"); the file
ends with "\n".

Split, by 0-based index c of the chapter in canonical order (Genesis 1 = 0 ... Revelation 22 = 1188):
  c % 50 == 24   -> validation (used during training to pick the checkpoint)
  c % 100 == 49  -> test (models/default/heldout.txt, never seen in training or selection)
  otherwise      -> train
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

EXPECTED_VERSES = 31102
EXPECTED_CHAPTERS = 1189
EXPECTED_BOOKS = 66
REF_RE = re.compile(r"^([1-3]?[A-Za-z]+)([0-9]+):([0-9]+) (.+)$")


def fail(msg):
    sys.stderr.write("prepare_corpus: error: " + msg + "\n")
    sys.exit(1)


def package_version(name):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name],
                             check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def dump_bible(bible_cmd):
    """Returns the raw dump, one verse a line, each starting with its reference (e.g. 'Ge1:1 ')."""
    try:
        # -f turns pretty-printing off: one verse per line, prefixed by its reference.
        out = subprocess.run([bible_cmd, "-f", "Gen1:1-Rev22:21"], check=True,
                             capture_output=True, stdin=subprocess.DEVNULL)
    except OSError as e:
        fail("cannot run '%s' (%s); install it with: apt-get install bible-kjv" % (bible_cmd, e))
    except subprocess.CalledProcessError as e:
        fail("'%s' exited with %d: %s" % (bible_cmd, e.returncode, e.stderr.decode(errors="replace")))
    try:
        return out.stdout.decode("ascii")
    except UnicodeDecodeError as e:
        fail("bible dump is not ASCII: %s" % e)


def parse_chapters(raw):
    """Groups verses into chapters, in order. Returns a list of (book, chapter, [verse texts])."""
    chapters = []
    books = []
    n_verses = 0
    for lineno, line in enumerate(raw.split("\n"), 1):
        if not line.strip():
            continue
        m = REF_RE.match(line)
        if not m:
            fail("line %d is not '<Book><chapter>:<verse> <text>': %r" % (lineno, line[:80]))
        book, chap, verse, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        text = " ".join(text.split())  # collapse the few double spaces, trim
        if not text:
            fail("empty verse text at line %d" % lineno)
        if not books or books[-1] != book:
            if book in books:
                fail("book %s appears twice" % book)
            books.append(book)
        if not chapters or chapters[-1][0] != book or chapters[-1][1] != chap:
            if verse != 1:
                fail("chapter %s %d does not start at verse 1" % (book, chap))
            chapters.append((book, chap, []))
        elif verse != len(chapters[-1][2]) + 1:
            fail("verse numbers out of order at %s %d:%d" % (book, chap, verse))
        chapters[-1][2].append(text)
        n_verses += 1
    if n_verses != EXPECTED_VERSES or len(chapters) != EXPECTED_CHAPTERS or len(books) != EXPECTED_BOOKS:
        fail("unexpected counts: %d verses, %d chapters, %d books (want %d, %d, %d)" % (
            n_verses, len(chapters), len(books), EXPECTED_VERSES, EXPECTED_CHAPTERS, EXPECTED_BOOKS))
    return chapters


def split_of(index):
    if index % 50 == 24:
        return "valid"
    if index % 100 == 49:
        return "test"
    return "train"


def join_docs(chapters):
    return "\n\n".join("\n".join(verses) for (_, _, verses) in chapters) + "\n"


def write_text(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    os.replace(tmp, path)


def sha256(text):
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bible", default="bible", help="the bible-kjv reader program")
    ap.add_argument("--out-dir", default=os.path.join(root, ".cache", "train"),
                    help="where train.txt, valid.txt and corpus.json go (not committed)")
    ap.add_argument("--heldout", default=os.path.join(root, "models", "default", "heldout.txt"),
                    help="where the committed test split goes")
    args = ap.parse_args()

    chapters = parse_chapters(dump_bible(args.bible))
    parts = {"train": [], "valid": [], "test": []}
    names = {"train": [], "valid": [], "test": []}
    for i, ch in enumerate(chapters):
        s = split_of(i)
        parts[s].append(ch)
        names[s].append("%s %d" % (ch[0], ch[1]))

    texts = {s: join_docs(parts[s]) for s in parts}
    write_text(os.path.join(args.out_dir, "train.txt"), texts["train"])
    write_text(os.path.join(args.out_dir, "valid.txt"), texts["valid"])
    write_text(args.heldout, texts["test"])
    # The trainer reads the test split from the cache folder too, so the device run needs one carry.
    write_text(os.path.join(args.out_dir, "test.txt"), texts["test"])

    manifest = {
        "source": "Debian package bible-kjv-text (King James Version, public domain), "
                  "dumped with `bible -f Gen1:1-Rev22:21` from package bible-kjv",
        "bible-kjv-text_version": package_version("bible-kjv-text"),
        "bible-kjv_version": package_version("bible-kjv"),
        "format": "chapter = verses joined by \\n (references stripped); chapters joined by \\n\\n; "
                  "trailing \\n",
        "split_rule": "0-based chapter index c: c%50==24 valid, c%100==49 test, else train",
        "splits": {s: {"chapters": len(parts[s]), "verses": sum(len(v) for (_, _, v) in parts[s]),
                       "bytes": len(texts[s]), "sha256": sha256(texts[s])} for s in parts},
        "valid_chapters": names["valid"],
        "test_chapters": names["test"],
    }
    with open(os.path.join(args.out_dir, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    for s in ("train", "valid", "test"):
        m = manifest["splits"][s]
        print("%-5s %4d chapters %5d verses %8d bytes sha256 %s" % (
            s, m["chapters"], m["verses"], m["bytes"], m["sha256"][:16]))


if __name__ == "__main__":
    main()
