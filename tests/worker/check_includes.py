#!/usr/bin/env python3
"""Layering check of the worker folders, from their #include lines.

usage: check_includes.py SRC_DIR

- src/worker (the layer every worker shares) includes only its own headers
  and librbee's public ones (rbee/...): nothing of a worker (worker_llm/, the
  SD worker), of the models, tokenizers or runtime.
- src/worker_llm includes nothing of another worker; src/worker_sd (the SD
  worker) only its own headers, the worker layer's and librbee's public ones
  (the SD engine is reached through rbee/sd_pipeline.h alone).
- Within each folder no files include each other in a circle: modules (a .c
  file with its .h, an X_internal.h counted with X) form an acyclic graph.
Exits 1 and prints what is wrong otherwise."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
RULES = {
    "worker": ("worker/", "rbee/"),
    "worker_llm": ("worker_llm/", "worker/", "rbee/", "runtime/", "models/", "tokenizer/", "chat/", "formats/"),
    "worker_sd": ("worker_sd/", "worker/", "rbee/"),
}


def module(name):
    base = os.path.splitext(os.path.basename(name))[0]
    return base[: -len("_internal")] if base.endswith("_internal") else base


def check(src, folder, allowed):
    errors, graph = [], {}
    path = os.path.join(src, folder)
    files = sorted(f for f in os.listdir(path) if f.endswith((".c", ".h")))
    if not files:
        return [f"{folder}: no source files found in {path}"]
    for f in files:
        text = open(os.path.join(path, f), encoding="utf-8").read()
        mod = graph.setdefault(module(f), set())
        for inc in INCLUDE.findall(text):
            if not inc.startswith(allowed):
                errors.append(f"{folder}/{f} includes \"{inc}\": {folder} may include only {', '.join(allowed)}")
            if inc.startswith(folder + "/"):
                target = module(inc)
                if not os.path.exists(os.path.join(src, inc)):
                    errors.append(f"{folder}/{f} includes \"{inc}\", which does not exist")
                elif target != module(f):
                    mod.add(target)
    # cycles: depth-first search with colours
    colour, stack = {}, []

    def visit(m):
        colour[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if colour.get(n, 0) == 1:
                cyc = stack[stack.index(n):] + [n]
                errors.append(f"{folder}: include circle " + " -> ".join(cyc))
            elif colour.get(n, 0) == 0:
                visit(n)
        stack.pop()
        colour[m] = 2

    for m in sorted(graph):
        if colour.get(m, 0) == 0:
            visit(m)
    return errors


def main():
    src = sys.argv[1]
    errors = []
    for folder, allowed in RULES.items():
        errors += check(src, folder, allowed)
    for e in errors:
        print(e)
    if not errors:
        print("ok: " + ", ".join(RULES) + " follow the layering rules, with no include circles")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
