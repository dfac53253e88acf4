#!/usr/bin/env python3
"""Re-rank the candidates of `strata eval locomo --per-question FILE` offline.

The default ranking of crates/strata/src/rank.rs (weighted fusion with the
similarity band spread over 0-1, the named time, the relevance floor,
session neighbours and the session's share) re-implemented over the
signals each line carries, so that a ranking idea can be tried in seconds
without rebuilding. Run without arguments beyond the file it prints the
default's figures, which must equal the eval's own (if they do not, this
file and rank.rs have drifted). An idea is a function added to IDEAS.

    strata eval locomo locomo10.json --dir D --per-question q.jsonl
    python3 crates/strata-bench/tools/rerank.py q.jsonl [--vectors FILE.npz]

`--check REPORT` compares the default's figures with the eval's own (its
`--json` report) and fails when they differ: CI runs it, so this file
follows rank.rs.

`--vectors` replaces each candidate's similarity with one from another
model: an .npz with arrays `keys` ("<conversation>|<dia_id>"), `D` (one
unit vector per key), `questions` and `conversations` (one per question
in the eval's order) and `Q` (unit query vectors).
"""
import argparse
import collections
import json
import sys


def passes(t, s, floor, best, band):
    """Relevance::passes: the similarity reaches the floor; a text match
    does, with half the floor's similarity when there is a vector; or the
    similarity is within `band` of the best, itself at least 3/4 of the
    floor."""
    if s is not None and s >= floor:
        return True
    if t is not None and t >= floor and (s is None or s >= floor / 2):
        return True
    return s is not None and best is not None and band > 0 and best >= 0.75 * floor and s >= best - band


def rank(line, vw=0.5, floor=0.3, wt=0.3, wn=0.3, ws=0.3, fuse=None, after=None, band=0.1):
    """The candidates' keys, best first, as the engine ranks them."""
    c = line["candidates"]
    bm = [x["bm25"] for x in c]
    sim = [x["similarity"] for x in c]
    best = max([b for b in bm if b is not None], default=0.0)
    text = [b / best if b is not None and best > 0 else None for b in bm]
    sims = [s for s in sim if s is not None]
    lo, hi = (min(sims), max(sims)) if sims else (0.0, 0.0)
    spread = [((s - lo) / (hi - lo) if hi > lo else 1.0) if s is not None else 0.0 for s in sim]
    if fuse:
        f = fuse(line, text, spread)
    elif sims:
        f = [(1 - vw) * (t or 0.0) + vw * s for t, s in zip(text, spread)]
    else:
        f = [t or 0.0 for t in text]
    top = max(f, default=0.0)
    f = [x / top for x in f] if top > 0 else f
    named = [x["in_named_time"] for x in c]
    if wt > 0 and any(n and x > 0 for n, x in zip(named, f)):
        f = [x * (1 + wt) if n and x > 0 else x for x, n in zip(f, named)]
        top = max(f)
        f = [x / top for x in f]
    best_sim = max(sims) if sims else None
    passed = [i for i in range(len(c)) if passes(text[i], sim[i], floor, best_sim, band)]
    rel = {i: f[i] for i in passed}
    sessions = collections.defaultdict(list)
    for i in passed:
        if c[i]["session"] is not None:
            sessions[c[i]["session"]].append(i)
    shares = []  # (candidate, best neighbour, best other of its session)
    for turns in sessions.values():
        turns.sort(key=lambda i: (c[i]["created_at"], c[i]["id"]))
        v = [rel[i] for i in turns]
        b = max(range(len(v)), key=lambda k: v[k])
        second = max((v[k] for k in range(len(v)) if k != b), default=0.0)
        for k, i in enumerate(turns):
            beside = max([v[k - 1]] if k > 0 else [], default=0.0)
            if k + 1 < len(v):
                beside = max(beside, v[k + 1])
            shares.append((i, beside, v[b] if b != k else second))
    g = dict(rel)
    if wn > 0:
        for i, beside, _ in shares:
            g[i] += wn * beside
    if ws > 0 and any(o > 0 for _, _, o in shares):
        before = max(g[i] for i, _, _ in shares)
        for i, _, other in shares:
            g[i] += ws * other
        after_ = max(g[i] for i, _, _ in shares)
        for i, _, _ in shares:
            g[i] *= before / after_
    if after:
        g = after(line, g)
    # Best first; ties go to the larger id (the newer), as in rank.rs.
    by_id = sorted(g, key=lambda i: c[i]["id"], reverse=True)
    return [c[i]["key"] for i in sorted(by_id, key=lambda i: -g[i])]


def figures(lines, **kw):
    """Means by group (0: all, else the category): R@1/5/10 (the fraction
    of evidence found) and MRR."""
    acc = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in lines:
        ranked = rank(line, **kw)[:200]
        ev = set(line["evidence"])
        for k in (1, 5, 10):
            found = len(ev & set(ranked[:k])) / len(ev)
            for g in (0, line["category"]):
                acc[g][k].append(found)
        rr = next((1 / (j + 1) for j, key in enumerate(ranked) if key in ev), 0.0)
        for g in (0, line["category"]):
            acc[g]["mrr"].append(rr)
    return {g: {k: sum(v) / len(v) for k, v in by.items()} for g, by in acc.items()}


def score(lines, **kw):
    """The figures as a line: overall, then R@5 / MRR by category."""
    f = figures(lines, **kw)
    out = "R@1 %.1f  R@5 %.1f  R@10 %.1f  MRR %.3f |" % (
        100 * f[0][1], 100 * f[0][5], 100 * f[0][10], f[0]["mrr"])
    for cat in sorted(k for k in f if k):
        out += "  c%d %.1f/%.3f" % (cat, 100 * f[cat][5], f[cat]["mrr"])
    return out


def with_vectors(lines, path):
    """The lines with each similarity taken from another model's vectors."""
    import numpy as np

    z = dict(np.load(path))  # an NpzFile reads an array at each access
    docs = {str(k): i for i, k in enumerate(z["keys"])}
    asked = {}
    for i, (q, conv) in enumerate(zip(z["questions"], z["conversations"])):
        asked.setdefault((int(conv), str(q)), i)
    for line in lines:
        q = z["Q"][asked[(line["conversation"], line["question"])]]
        rows = [docs["%d|%s" % (line["conversation"], c["key"])] for c in line["candidates"]]
        for c, s in zip(line["candidates"], z["D"][rows] @ q):
            c["similarity"] = float(s)
    return lines


IDEAS = {
    "default": {},
    "vector weight 0.6": {"vw": 0.6},
}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--vectors")
    ap.add_argument("--check", metavar="REPORT")
    a = ap.parse_args()
    lines = [json.loads(l) for l in open(a.file)]
    if a.check:
        overall = json.load(open(a.check))["overall"]
        f = figures(lines)[0]
        ours = {"1": f[1], "5": f[5], "10": f[10], "mrr": f["mrr"]}
        theirs = {k: overall["recall"][k] for k in ("1", "5", "10")} | {"mrr": overall["mrr"]}
        if len(lines) != overall["questions"] or any(abs(ours[k] - theirs[k]) > 1e-9 for k in ours):
            sys.exit("rerank.py and rank.rs differ: %d questions %s here, %d %s in the eval"
                     % (len(lines), ours, overall["questions"], theirs))
        print("rerank.py ranks as the eval does: %d questions, %s" % (len(lines), ours))
        sys.exit(0)
    if a.vectors:
        lines = with_vectors(lines, a.vectors)
    for name, kw in IDEAS.items():
        print("%-20s %s" % (name, score(lines, **kw)))
