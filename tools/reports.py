#!/usr/bin/env python3
"""Where the report paths of Project 5's multi-tier preset go wrong, against the ground truth.

Two tables over a generator trace's truth (truth.jsonl written by `causeway generate --preset
multi-tier`) and an `analyze --emit patterns,instances --format jsonl` output of it (joined by
the trace's data row):

1. For every true report task (the ten-message tracelet: ... ap>db, db>ap, ap>db, db>ap,
   ap>ws, ws>CLIENT), by the true gap from its second answer to its reply (0.5 ms buckets):
   the probability-weighted share of our instances that hold its reply with its true parent,
   its second query with its true parent, and the whole instance.
2. With PATTERN and NODE (a preorder index in that pattern's instances), the weight of our
   instances of PATTERN by whether NODE's parent is right and by the true tracelet and
   position of NODE and of the parent it was given, with the mean delay in each group.

    tools/reports.py truth.jsonl out.jsonl [PATTERN NODE]

Not part of the product or its tests.
"""
import collections
import json
import sys

if len(sys.argv) not in (3, 5):
    sys.exit(__doc__)
truth_path, ours_path = sys.argv[1], sys.argv[2]
TRACELETS = {10: "report", 8: "dynamic", 6: "login", 2: "static"}


def shape(messages):
    return tuple(sorted(
        (m["row"], messages[m["parent"]]["row"] if m["parent"] is not None else -1)
        for m in messages))


true_parent, role, true_shapes, reports = {}, {}, set(), []
for line in open(truth_path):
    o = json.loads(line)
    if o.get("kind") != "instance":
        continue
    m = o["messages"]
    name = TRACELETS.get(len(m), str(len(m)))
    true_shapes.add(shape(m))
    for i, x in enumerate(m):
        true_parent[x["row"]] = m[x["parent"]]["row"] if x["parent"] is not None else None
        role[x["row"]] = (name, i)
    if name == "report":
        gap = (m[8]["send_ns"] - m[7]["recv_ns"]) / 1e6
        reports.append((m[8]["row"], m[6]["row"], gap, shape(m)))

right = collections.defaultdict(float)
found = collections.defaultdict(float)
groups = collections.defaultdict(lambda: [0.0, 0.0])
for line in open(ours_path):
    o = json.loads(line)
    if o.get("kind") != "instance":
        continue
    m, p = o["messages"], o["probability"]
    for x in m:
        if x["parent"] is not None and true_parent.get(x["row"]) == m[x["parent"]]["row"]:
            right[x["row"]] += p
    s = shape(m)
    if s in true_shapes:
        found[s] += p
    if len(sys.argv) == 5 and o["pattern"] == sys.argv[3]:
        x = m[int(sys.argv[4])]
        parent = m[x["parent"]]
        ok = true_parent.get(x["row"]) == parent["row"]
        key = ("right" if ok else "wrong", role.get(x["row"]), role.get(parent["row"]))
        groups[key][0] += p
        groups[key][1] += p * (x["send_ns"] - parent["recv_ns"]) / 1e6

buckets = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
for reply, query, gap, s in reports:
    b = buckets[round(gap * 2) / 2]
    b[0] += 1
    b[1] += right[reply]
    b[2] += right[query]
    b[3] += found[s]
print("true reply gap ms, reports, reply right, second query right, whole instance found")
for gap in sorted(buckets):
    n, r, q, f = buckets[gap]
    print(f"{gap:5.1f} {n:6d} {r / n:5.2f} {q / n:5.2f} {f / n:5.2f}")
if groups:
    print("weight, mean delay ms: right/wrong, (tracelet, position) of the node, of its parent")
    for key, (w, d) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        print(f"{w:9.1f} {d / w:7.3f}  {key}")
