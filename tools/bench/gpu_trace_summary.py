#!/usr/bin/env python3
"""Summarises an RBEE_GPU_TRACE file (src/backends/gpu/gpu_trace.h): the
per-block timestamps of the decode products and attention of the last decode
step in it (a run of launches with no gap over --gap us), as where each
launch's time goes:

  start    first block resident, after the previous launch's last block ended
           (negative: it started while the previous one ran)
  release  first block past its dependency wait, after the previous launch ended
  quant    median time from a block's release to its activations quantized
           (attention: to thread 0's keys done, before the merges)
  work     last block ended, after the median release
  tail     last block ended, after the median block ended
  step     this launch's end after the previous launch's end: its share of the step
  smlag    on a multiprocessor that ran two or more of its blocks, how much later
           the block that started there last ended than the one that started
           first (median over those multiprocessors; traces that record where
           each block ran): the second block a multiprocessor takes starts
           only when a block ahead of it there ends
and, for attention, the median block's time from its release to the query and
position loaded (mark 4) and from there to its first keys scored (mark 5).

Usage: gpu_trace_summary.py TRACE [--gap US] [--launches]
"""
import argparse
import statistics
import sys

KINDS = {1: "product", 2: "attention"}
DTYPES = {0: "f32", 1: "f16", 2: "bf16"}


def read(path):
    launches = []
    cur = None
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "launch":
                cur = {"seq": int(w[1]), "kind": int(w[3]), "dt": int(w[5]), "flags": int(w[7]),
                       "n": int(w[9]), "k": int(w[11]), "blocks": int(w[13]), "ts": []}
                launches.append(cur)
            else:
                cur["ts"].append([int(x) for x in w])
    return launches


def describe(L):
    if L["kind"] == 2:
        return "attention %dx%d keys" % (L["n"], L["k"])
    fl = L["flags"]
    tags = [t for b, t in ((1, "norm"), (2, "add"), (4, "glu"), (8, "rope"), (16, "store")) if fl & b]
    return "product %dx%d%s" % (L["k"], L["n"], (" " + "+".join(tags)) if tags else "")


def stats(L):
    ts = [t for t in L["ts"] if t[0] and t[3]]
    if not ts:
        return None
    s0 = min(t[0] for t in ts)
    rel = sorted(t[1] for t in ts if t[1])
    q = [t[2] - t[1] for t in ts if t[2] and t[1]]
    ends = sorted(t[3] for t in ts)
    # attention's marks 4 (query and position loaded) and 5 (first keys scored), when the file has them
    att = L["kind"] == 2  # products use marks 4 and 5 for other points (gpu_trace.h)
    qp = [t[4] - t[1] for t in ts if att and len(t) > 5 and t[4] and t[1]]
    k1 = [t[5] - t[4] for t in ts if att and len(t) > 5 and t[5] and t[4]]
    # the last reading, where the trace has it: the block's multiprocessor + 1
    by_sm = {}
    for t in ts:
        if len(t) > 6 and t[6]:
            by_sm.setdefault(t[6], []).append(t)
    lags = [max(b, key=lambda t: t[0])[3] - min(b, key=lambda t: t[0])[3] for b in by_sm.values() if len(b) > 1]
    return {"smlag": statistics.median(lags) if lags else None,
            "s0": s0, "rel_min": rel[0] if rel else s0, "rel_med": statistics.median(rel) if rel else s0,
            "quant": statistics.median(q) if q else 0.0, "end": ends[-1], "end_med": statistics.median(ends),
            "blocks": len(ts), "qpos": statistics.median(qp) if qp else None,
            "keys1": statistics.median(k1) if k1 else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--gap", type=float, default=30.0, help="us between launches that ends a step")
    ap.add_argument("--launches", action="store_true", help="print every launch of the step")
    ap.add_argument("--marks", action="store_true",
                    help="per shape, every mark's quartiles (blocks that reached it) after the previous launch's end")
    a = ap.parse_args()
    ls = [(L, stats(L)) for L in read(a.trace)]
    ls = [(L, s) for L, s in ls if s]
    if not ls:
        sys.exit("no traced launch with timestamps")
    ls.sort(key=lambda x: x[1]["s0"])
    # the last step: walk back from the last launch while launches follow closely
    i = len(ls) - 1
    while i > 0 and ls[i][1]["s0"] - ls[i - 1][1]["end"] < a.gap * 1000:
        i -= 1
    step = ls[i:]
    t_first, t_last = step[0][1]["s0"], max(s["end"] for _, s in step)
    print("last step: %d launches, %.1f us from the first block's start to the last block's end" %
          (len(step), (t_last - t_first) / 1000))
    rows = []
    prev_end = None
    for L, s in step:
        r = {"what": describe(L), "blocks": s["blocks"]}
        pe = prev_end if prev_end is not None else s["s0"]
        r["start"] = (s["s0"] - pe) / 1000
        r["release"] = (s["rel_min"] - pe) / 1000
        r["quant"] = s["quant"] / 1000
        r["work"] = (s["end"] - s["rel_med"]) / 1000
        r["tail"] = (s["end"] - s["end_med"]) / 1000
        r["step"] = (s["end"] - pe) / 1000
        r["qpos"], r["keys1"] = s["qpos"], s["keys1"]
        r["smlag"] = s["smlag"] / 1000 if s["smlag"] is not None else float("nan")
        prev_end = s["end"]
        rows.append(r)
    cols = ("start", "release", "quant", "work", "tail", "step", "smlag")
    if a.launches:
        print("%-44s %6s " % ("launch", "blocks") + " ".join("%8s" % c for c in cols))
        for r in rows:
            print("%-44s %6d " % (r["what"], r["blocks"]) + " ".join("%8.2f" % r[c] for c in cols))
    groups = {}
    for r in rows:
        groups.setdefault(r["what"], []).append(r)
    print("\nmean over launches of the same shape (us):")
    print("%-44s %5s " % ("launch", "count") + " ".join("%8s" % c for c in cols) + " %9s" % "sum step")
    total = 0.0
    for w, rs in sorted(groups.items(), key=lambda x: -sum(r["step"] for r in x[1])):
        m = {c: statistics.mean(r[c] for r in rs) for c in cols}
        ssum = sum(r["step"] for r in rs)
        total += ssum
        print("%-44s %5d " % (w, len(rs)) + " ".join("%8.2f" % m[c] for c in cols) + " %9.1f" % ssum)
    print("%-44s %5s %s %9.1f" % ("all", "", " " * 53, total))
    if a.marks:
        print("\nmarks after the previous launch's end, us (25th / 50th / 75th / max over blocks, means over launches):")
        byw = {}
        pe = None
        for L, s in step:
            base = pe if pe is not None else s["s0"]
            pe = s["end"]
            ts = [t for t in L["ts"] if t[0] and t[3]]
            for mk in range(min(len(ts[0]), 6) if ts else 0):  # the 7th reading is no time
                v = sorted((t[mk] - base) / 1000 for t in ts if len(t) > mk and t[mk])
                if not v:
                    continue
                q = (v[len(v) // 4], v[len(v) // 2], v[(3 * len(v)) // 4], v[-1])
                byw.setdefault(describe(L), {}).setdefault(mk, []).append(q)
        for w, d in byw.items():
            print("  " + w)
            for mk in sorted(d):
                qs = d[mk]
                print("    mark %d: %s" % (mk, " / ".join("%7.2f" % statistics.mean(q[j] for q in qs) for j in range(4))))
    att = [r for r in rows if r["qpos"] is not None and r["keys1"] is not None]
    if att:
        print("\nattention, median block (us): release to query and position loaded %.2f, then to the first keys"
              " scored %.2f (means over %d launches)" % (statistics.mean(r["qpos"] for r in att) / 1000,
                                                         statistics.mean(r["keys1"] for r in att) / 1000, len(att)))


if __name__ == "__main__":
    main()
