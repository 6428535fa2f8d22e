"""Synthetic captioned scenes for the default SD model: one or two flat shapes on a plain background.

Why: the default model must be the project's own, so its data is made here from a seed: every image is
drawn from its caption's facts (colours, shapes, where they sit), and the facts are returned with it, so a
test can check what a generated image shows. Held-out combinations (`is_heldout`) never appear in training.

Captions (all words are whole-word tokens of the CLIP vocabulary):
  "a red circle on a yellow background"
  "a red circle above an orange square on a yellow background"   (above / below / left of / right of)
"""
import random

import torch
import torch.nn.functional as F

COLOURS = {
    "red": (0.90, 0.10, 0.10), "green": (0.10, 0.70, 0.20), "blue": (0.10, 0.25, 0.90),
    "yellow": (0.95, 0.85, 0.10), "purple": (0.55, 0.15, 0.70), "orange": (1.00, 0.55, 0.05),
    "white": (0.95, 0.95, 0.95), "black": (0.05, 0.05, 0.05),
}
SHAPES = ("circle", "square", "triangle")
RELATIONS = ("above", "below", "left of", "right of")


def is_heldout(colour, shape, background):
    """A fixed quarter of (colour, shape, background) triples, never shown in training."""
    ci, si, bi = list(COLOURS).index(colour), SHAPES.index(shape), list(COLOURS).index(background)
    return (ci * 3 + si * 5 + bi * 7) % 4 == 1


def sample_facts(rng, heldout):
    """Draws a scene description; heldout=True draws only held-out first objects, False only seen ones."""
    while True:
        bg = rng.choice(list(COLOURS))
        objs = []
        n = rng.choice((1, 2))
        for _ in range(n):
            c = rng.choice([k for k in COLOURS if k != bg and all(k != o[0] for o in objs)])
            s = rng.choice(SHAPES)
            objs.append((c, s))
        first_held = is_heldout(objs[0][0], objs[0][1], bg)
        if any(is_heldout(c, s, bg) for c, s in objs[1:]) and not heldout:
            continue
        if first_held != heldout:
            continue
        rel = rng.choice(RELATIONS) if n == 2 else None
        return {"background": bg, "objects": objs, "relation": rel}


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def caption(f):
    (c1, s1), bg = f["objects"][0], f["background"]
    if f["relation"] is None:
        return f"{article(c1)} {c1} {s1} on {article(bg)} {bg} background"
    (c2, s2) = f["objects"][1]
    return f"{article(c1)} {c1} {s1} {f['relation']} {article(c2)} {c2} {s2} on {article(bg)} {bg} background"


def layout(f, rng):
    """Centres (x, y in [0,1], y down) and radius of each object, from the relation."""
    r = rng.uniform(0.13, 0.19)
    if f["relation"] is None:
        return [(rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.16, 0.26))]
    a = rng.uniform(0.27, 0.33)  # along the relation's axis: first at a or 1 - a
    b = rng.uniform(0.4, 0.6)    # across it
    first, second = (a, 1 - a) if f["relation"] in ("above", "left of") else (1 - a, a)
    if f["relation"] in ("above", "below"):
        return [(b, first, r), (b + rng.uniform(-0.05, 0.05), second, r)]
    return [(first, b, r), (second, b + rng.uniform(-0.05, 0.05), r)]


def shape_masks(shapes, cx, cy, r, xs, ys):
    """Masks [B, n, n] of one object per picture; shapes a list of names, cx, cy, r tensors [B, 1, 1]."""
    circle = ((xs - cx) ** 2 + (ys - cy) ** 2 <= r * r)
    s = r * 0.9
    square = ((xs - cx).abs() <= s) & ((ys - cy).abs() <= s)
    # upright triangle: apex at the top, base at the bottom, inside three half-planes
    top, bottom, half = cy - r, cy + r * 0.8, r * 1.05
    t = ((ys - top) / (bottom - top)).clamp(0, 1)
    triangle = (ys >= top) & (ys <= bottom) & ((xs - cx).abs() <= t * half)
    kind = torch.tensor([SHAPES.index(k) for k in shapes], device=xs.device).view(-1, 1, 1)
    return torch.where(kind == 0, circle, torch.where(kind == 1, square, triangle)).float()


def render_many(facts, size, supersample=2, device="cpu"):
    """float32 [B, 3, size, size] in [0, 1], one picture per facts (with places); edges antialiased by
    supersampling. All pictures at once: per-picture drawing made the training set's rendering the slowest
    part of a GPU run (on the CPU, small batches are faster)."""
    n, b = size * supersample, len(facts)
    coords = (torch.arange(n, dtype=torch.float32, device=device) + 0.5) / n
    ys, xs = torch.meshgrid(coords, coords, indexing="ij")
    col = lambda names: torch.tensor([COLOURS[c] for c in names], device=device).view(-1, 3, 1, 1)  # noqa: E731
    img = col([f["background"] for f in facts]).expand(b, 3, n, n).clone()
    for k in range(max(len(f["objects"]) for f in facts)):
        idx = [i for i, f in enumerate(facts) if len(f["objects"]) > k]
        places = torch.tensor([facts[i]["places"][k] for i in idx], dtype=torch.float32, device=device)
        cx, cy, r = (places[:, j].view(-1, 1, 1) for j in range(3))
        m = shape_masks([facts[i]["objects"][k][1] for i in idx], cx, cy, r, xs, ys)[:, None]
        sel = torch.tensor(idx, device=device)
        img[sel] = img[sel] * (1 - m) + col([facts[i]["objects"][k][0] for i in idx]) * m
    return F.avg_pool2d(img, supersample)


def make(seed, size, heldout=False, device="cpu"):
    """(image [3,size,size] in [0,1], caption, facts with places) for one seed."""
    x, caps, facts = batch([seed], size, heldout, device)
    return x[0], caps[0], facts[0]


def batch(seeds, size, heldout=False, device="cpu"):
    """(images [B,3,size,size], captions, facts) for seeds."""
    facts = []
    for s in seeds:
        rng = random.Random(s)
        f = sample_facts(rng, heldout)
        f["places"] = layout(f, rng)
        facts.append(f)
    x = torch.cat([render_many(facts[i:i + 64], size, device=device) for i in range(0, len(facts), 64)])
    return x, [caption(f) for f in facts], facts


def dataset(seeds, size, device, chunk=256):
    """The training set rendered once: uint8 images [N, 3, size, size] on device, and the captions."""
    imgs, caps = [], []
    seeds = list(seeds)
    for i in range(0, len(seeds), chunk):
        x, c, _ = batch(seeds[i:i + chunk], size, device=device)
        imgs.append((x * 255).round().to(torch.uint8))
        caps += c
    return torch.cat(imgs), caps


def clip_ids(captions, vocab, length=77):
    """CLIP token ids for captions made of whole-word vocabulary entries: BOS, words, EOS, EOS padding."""
    out = []
    for c in captions:
        ids = [49406] + [vocab[w + "</w>"] for w in c.split()] + [49407]
        assert len(ids) <= length, c
        out.append(ids + [49407] * (length - len(ids)))
    return torch.tensor(out, dtype=torch.long)
