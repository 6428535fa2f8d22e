"""Writes tests/data/sd/scenes/: held-out scenes drawn by scenes.py as PNGs, with their captions and facts;
and tests/data/sd/default-sd-heldout.json: 24 other held-out captions and their facts (no pictures).

Why: the C check of what a generated picture shows (tests/sd/scene_check.h) is itself tested on pictures whose
content is known: every true caption must pass and every altered one fail. The default model's test draws
the 24 captions and judges its pictures with that check.

  python3 tools/train-default-sd/make_scene_fixtures.py [OUT_DIR]   (default tests/data/sd/scenes)
"""
import json
import os
import sys

import pngio
import scenes

HERE = os.path.dirname(os.path.abspath(__file__))


def balanced(first_seed, n):
    """n held-out scenes from first_seed on: half of one object, half of two with every relation equally."""
    items, seed = [], first_seed
    while len(items) < n:
        img, cap, f = scenes.make(seed, 128, heldout=True)
        seed += 1
        n2 = sum(1 for _, _, g in items if g["relation"])
        if (f["relation"] is None and len(items) - n2 >= n // 2) or (f["relation"] is not None and n2 >= n // 2):
            continue
        if f["relation"] is not None and sum(1 for _, _, g in items if g["relation"] == f["relation"]) >= n // 8:
            continue
        items.append((img, seed - 1, f))
    return items


def facts(seed, f):
    return {"seed": seed, "caption": scenes.caption(f), "background": f["background"],
            "objects": [list(o) for o in f["objects"]], "relation": f["relation"]}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "tests", "data", "sd", "scenes")
    os.makedirs(out, exist_ok=True)
    palette = {k: list(v) for k, v in scenes.COLOURS.items()}
    items = []
    for i, (img, seed, f) in enumerate(balanced(40_000_000, 16)):  # 8 of one object, 8 of two
        name = f"scene{i:02d}.png"
        pngio.write_png(os.path.join(out, name), img)
        items.append({"file": name, **facts(seed, f)})
    json.dump({"palette": palette, "scenes": items}, open(os.path.join(out, "scenes.json"), "w"), indent=1)
    heldout = [facts(seed, f) for _, seed, f in balanced(41_000_000, 24)]
    json.dump({"palette": palette, "scenes": heldout},
              open(os.path.join(out, "..", "default-sd-heldout.json"), "w"), indent=1)
    print(f"wrote {len(items)} scenes to {out} and {len(heldout)} captions to {out}/../default-sd-heldout.json")


if __name__ == "__main__":
    main()
