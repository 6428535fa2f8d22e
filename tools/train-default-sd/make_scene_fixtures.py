"""Writes tests/data/sd/scenes/: held-out scenes drawn by scenes.py as PNGs, with their captions and facts.

Why: the C check of what a generated picture shows (tests/sd/scene_check.h) is itself tested on pictures whose
content is known: every true caption must pass and every altered one fail.

  python3 tools/train-default-sd/make_scene_fixtures.py [OUT_DIR]   (default tests/data/sd/scenes)
"""
import json
import os
import sys

import pngio
import scenes

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "tests", "data", "sd", "scenes")
    os.makedirs(out, exist_ok=True)
    items = []
    seed = 40_000_000
    while len(items) < 16:  # 8 of one object, 8 of two (every relation twice)
        img, cap, f = scenes.make(seed, 128, heldout=True)
        seed += 1
        n2 = sum(1 for i in items if i["relation"])
        if (f["relation"] is None and len(items) - n2 >= 8) or (f["relation"] is not None and n2 >= 8):
            continue
        if f["relation"] is not None and sum(1 for i in items if i["relation"] == f["relation"]) >= 2:
            continue
        name = f"scene{len(items):02d}.png"
        pngio.write_png(os.path.join(out, name), img)
        items.append({"file": name, "seed": seed - 1, "caption": cap, "background": f["background"],
                      "objects": [list(o) for o in f["objects"]], "relation": f["relation"]})
    json.dump({"palette": {k: list(v) for k, v in scenes.COLOURS.items()}, "scenes": items},
              open(os.path.join(out, "scenes.json"), "w"), indent=1)
    print(f"wrote {len(items)} scenes to {out}")


if __name__ == "__main__":
    main()
