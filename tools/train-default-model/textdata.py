"""Token streams and perplexity windows shared by the default model's trainer and evaluator.

Why: training, checkpoint selection and the published held-out perplexity must cut text into tokens
and windows in exactly one way, and that way must be simple enough for rbee-c's C tests to repeat:

  stream(text) = for each document (split on "\n\n", empty ones dropped):
                   <|begin_of_text|> + encode(document, no special tokens) + <|end_of_text|>
                 concatenated in file order.

  Non-overlapping windows (window W): for s = 0, W, 2W, ... while s < N-1: the model reads
  t[s : min(s+W, N-1)] from an empty cache and position i predicts t[s+i+1]. Every token but the
  first is scored exactly once.

  Sliding windows (window W, stride S < W): for b = 0, S, 2S, ...: the model reads t[b : e] with
  e = min(b+W, N) from an empty cache and scores only tokens j with max(prev_e, 1) <= j < e
  (prev_e = the previous window's e, 0 at first); stops after the window with e == N. Every token
  but the first is scored exactly once, with at least W-S tokens of context after the first window.
"""

import math

import torch


def read_docs(path):
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    docs = [d for d in text.split("\n\n") if d.strip()]
    if not docs:
        raise SystemExit("no documents in %s" % path)
    return docs


def build_stream(tokenizer, path, bos_id, eos_id):
    """The token stream of a split file, as a 1-D int64 tensor (see module doc)."""
    docs = read_docs(path)
    ids = []
    for enc in tokenizer.encode_batch(docs, add_special_tokens=False):
        ids.append(bos_id)
        ids.extend(enc.ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.long)


def nonoverlapping_windows(n, window):
    """(start, end) of the inputs; position i of t[start:end] predicts t[start+i+1]."""
    out = []
    s = 0
    while s < n - 1:
        out.append((s, min(s + window, n - 1)))
        s += window
    return out


def sliding_windows(n, window, stride):
    """(begin, end, first_scored): read t[begin:end], score tokens first_scored..end-1."""
    if not 0 < stride < window:  # with stride == window a window's first token has no predictor
        raise ValueError("stride must be in (0, window)")
    out = []
    prev_end = 0
    b = 0
    while True:
        e = min(b + window, n)
        first = max(prev_end, 1)
        if first < e:
            out.append((b, e, first))
        prev_end = e
        if e == n:
            break
        b += stride
    return out


@torch.no_grad()
def score_nonoverlapping(logits_fn, stream, window, batch=16):
    """Sum of -log p and count over the non-overlapping windows. logits_fn maps [B, T] ids to
    [B, T, V] logits. Full windows are batched; the last, shorter one runs alone."""
    n = stream.numel()
    wins = nonoverlapping_windows(n, window)
    total = 0.0
    count = 0
    full = [w for w in wins if w[1] - w[0] == window]
    rest = [w for w in wins if w[1] - w[0] != window]
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[w] for w in rest]
    for group in groups:
        x = torch.stack([stream[s:e] for (s, e) in group])
        y = torch.stack([stream[s + 1:e + 1] for (s, e) in group])
        logits = logits_fn(x).double()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                y.to(logits.device).reshape(-1), reduction="sum")
        total += float(nll)
        count += y.numel()
    return total, count


@torch.no_grad()
def score_sliding(logits_fn, stream, window, stride):
    """Sum of -log p and count with the sliding-window method (one window at a time)."""
    n = stream.numel()
    total = 0.0
    count = 0
    for (b, e, first) in sliding_windows(n, window, stride):
        x = stream[b:e].unsqueeze(0)
        logits = logits_fn(x)[0].double()
        # position p of the window predicts token b+p+1; token j is predicted at p = j-b-1.
        pos = torch.arange(first - b - 1, e - b - 1)
        tgt = stream[first:e].to(logits.device)
        nll = torch.nn.functional.cross_entropy(logits[pos.to(logits.device)], tgt, reduction="sum")
        total += float(nll)
        count += tgt.numel()
    return total, count


def ppl(total, count):
    return math.exp(total / count)
