#!/usr/bin/env python3
"""Per-node delay error of chosen patterns by eighth of a generator trace, against its truth.

For a generator trace's truth (truth.jsonl of `causeway generate`) and an `analyze --emit
patterns,instances --format jsonl` output of it (joined by the trace's data row): for the
patterns PATTERNS (comma-separated ids) and the node NODE (a preorder index in their
instances), by eighth of the trace (the root's row), the true mean delay, our
probability-weighted mean and its error, and the share of our weight whose NODE has its true
parent. Shows whether an error is spread over the run or comes from its start, while the
learned densities are young.

    tools/bytime.py truth.jsonl out.jsonl PATTERNS NODE

Not part of the product or its tests.
"""
import collections
import json
import sys

if len(sys.argv) != 5:
    sys.exit(__doc__)
truth_path, ours_path = sys.argv[1], sys.argv[2]
patterns, node = set(sys.argv[3].split(",")), int(sys.argv[4])
EIGHTHS = 8

true_parent = {}
truth = collections.defaultdict(lambda: [0, 0.0])
rows = 0
instances = []
for line in open(truth_path):
    o = json.loads(line)
    if o.get("kind") != "instance":
        continue
    m = o["messages"]
    for x in m:
        true_parent[x["row"]] = m[x["parent"]]["row"] if x["parent"] is not None else None
        rows = max(rows, x["row"] + 1)
    if o["pattern"] in patterns:
        instances.append(m)
for m in instances:
    x = m[node]
    t = truth[m[0]["row"] * EIGHTHS // rows]
    t[0] += 1
    t[1] += (x["send_ns"] - m[x["parent"]]["recv_ns"]) / 1e6

ours = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
for line in open(ours_path):
    o = json.loads(line)
    if o.get("kind") != "instance" or o["pattern"] not in patterns:
        continue
    m, p = o["messages"], o["probability"]
    x = m[node]
    parent = m[x["parent"]]
    s = ours[m[0]["row"] * EIGHTHS // rows]
    s[0] += p
    s[1] += p * (x["send_ns"] - parent["recv_ns"]) / 1e6
    if true_parent.get(x["row"]) == parent["row"]:
        s[2] += p

print("eighth, true instances, true mean ms, our weight, our mean ms, error, right share")
for e in range(EIGHTHS):
    n, total = truth[e]
    w, dw, right = ours[e]
    if n == 0 or w == 0:
        print(f"{e} {n:6d} (none)")
        continue
    t, o = total / n, dw / w
    print(f"{e} {n:6d} {t:7.3f} {w:8.1f} {o:7.3f} {100 * (o - t) / t:6.1f}% {right / w:5.2f}")
