"""Checks what a picture shows against its caption's facts, with simple image analysis.

Why: the default model is judged on held-out captions by what its pictures show, not by a loss. Each pixel
takes the nearest palette colour (scenes.COLOURS) if it is close enough; then, per caption:
  - background: its colour covers most of the image border;
  - each object: its colour forms a region of plausible area (against the drawn sizes);
  - shape: the region's fill of its bounding box (square ~0.81-1, circle ~0.785, triangle ~0.5);
  - relation: the first object's centre lies on the named side of the second's.
The same rules run on scenes.py's own renders, where every check passes (`python3 analyse.py`).
"""
import torch

import scenes

PALETTE = torch.tensor(list(scenes.COLOURS.values()))
NAMES = list(scenes.COLOURS)


def classify(img):
    """img float [3,H,W] in [0,1] -> palette index per pixel, -1 where no colour is within reach."""
    d = ((img.permute(1, 2, 0)[:, :, None, :] - PALETTE[None, None]) ** 2).sum(-1)
    best, idx = d.min(-1)
    return torch.where(best < 0.08, idx, torch.full_like(idx, -1))


def opened(mask):
    """morphological opening (3x3): drops the one-pixel seams that antialiasing between two colours leaves,
    e.g. purple-looking pixels where red meets blue"""
    m = mask.float()[None, None]
    m = -torch.nn.functional.max_pool2d(-m, 3, 1, 1)  # erode
    return torch.nn.functional.max_pool2d(m, 3, 1, 1)[0, 0] > 0.5


def shape_of(mask):
    ys, xs = mask.nonzero(as_tuple=True)
    h = (ys.max() - ys.min() + 1).item()
    w = (xs.max() - xs.min() + 1).item()
    fill = mask.sum().item() / (h * w)
    return "square" if fill > 0.88 else "circle" if fill > 0.66 else "triangle"


def check(img, facts):
    """dict of named checks -> bool, and 'all'."""
    lab = classify(img)
    n = lab.shape[0]
    out = {}
    border = torch.cat([lab[0], lab[-1], lab[:, 0], lab[:, -1]])
    out["background"] = (border == NAMES.index(facts["background"])).float().mean().item() > 0.6
    centres = []
    for k, (colour, shape) in enumerate(facts["objects"]):
        m = opened(lab == NAMES.index(colour))
        area = m.float().mean().item()
        out[f"object{k}_colour"] = 0.015 < area < 0.35
        if not out[f"object{k}_colour"]:
            centres.append(None)
            out[f"object{k}_shape"] = False
            continue
        out[f"object{k}_shape"] = shape_of(m) == shape
        ys, xs = m.nonzero(as_tuple=True)
        centres.append((xs.float().mean().item() / n, ys.float().mean().item() / n))
    if facts["relation"] is not None:
        a, b = centres
        if a is None or b is None:
            out["relation"] = False
        else:
            dx, dy = a[0] - b[0], a[1] - b[1]
            out["relation"] = {"above": dy < -0.1, "below": dy > 0.1, "left of": dx < -0.1,
                               "right of": dx > 0.1}[facts["relation"]]
    out["all"] = all(out.values())
    return out


def rate(imgs, facts_list):
    """fraction of pictures passing every check, and of each kind of check"""
    res = [check(i, f) for i, f in zip(imgs, facts_list)]
    kinds = {}
    for r in res:
        for k, v in r.items():
            kind = k.split("_")[-1] if k.startswith("object") else k
            kinds.setdefault(kind, []).append(v)
    return {k: sum(v) / len(v) for k, v in kinds.items()}


if __name__ == "__main__":
    x, caps, facts = scenes.batch(range(40_000_000, 40_000_200), 128, heldout=True)
    print("held-out renders:", rate(x, facts))
    x, caps, facts = scenes.batch(range(200), 128)
    print("training renders:", rate(x, facts))
