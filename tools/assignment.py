#!/usr/bin/env python3
"""How well can a server's calls be assigned to the requests (tasks) they serve?

An offline measurement over a generator trace's ground truth (truth.jsonl written by
`causeway generate`), for the design of `link` at high parallelism (Project 5's multi-tier
preset at parallelism 45). Not part of the product or its tests.

For one node it builds, from the truth:
  - tasks: each request from a client, with its receive time and the send time of its reply
    (the message back to the request's source endpoint: a connection, no truth needed);
  - calls: each message the node sends to another server, with the receive time of its answer
    (the message back to the call's source endpoint);
and fits a Gaussian to each gap type (request->call, answer->call, answer->reply,
request->reply) from the true chains: an oracle for what `link` learns as its causal
densities.

It then reports the share of calls given their true task by
  1. greedy, in time order: each call takes the open task whose gap fits best, a task taking at
     most one call at each step (what a one-call-at-a-time rule can do);
  2. layered global matching: the first calls (from a request) are assigned to requests by one
     min-cost bipartite matching over the whole trace, each weighed by its gap and by the best
     way its task could still end (its reply right after the call's answer, or after one more
     call); then the second calls to the first calls' answers by another matching, weighed by
     both their gaps and the gap to the task's reply. Each request and each answer causes at
     most one call.
and how many tasks end up with exactly their true calls, and with the true shape (the
sequence of callee types).

With a third argument CHUNK_MS, the first calls are matched in chunks of that many
milliseconds of send time, one chunk after another (what a streaming operator that waits that
long could do); the whole trace at once otherwise.

Needs numpy and scipy (`pip install numpy scipy`).

    tools/assignment.py target/bench-data/accuracy-multi-tier@45-100000/truth.jsonl ws1
    tools/assignment.py target/bench-data/accuracy-multi-tier@45-100000/truth.jsonl ws1 500
"""

import bisect
import collections
import json
import math
import sys

from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import min_weight_full_bipartite_matching


def load(path):
    """Every message of every true instance, with the global index of its parent."""
    msgs = []
    for line in open(path):
        o = json.loads(line)
        if o.get("kind") != "instance":
            continue
        base = len(msgs)
        for m in o["messages"]:
            p = m["parent"]
            msgs.append(dict(src=m["src"], dst=m["dst"], send=m["send_ns"], recv=m["recv_ns"],
                             sep=m["src_endpoint"], dep=m["dst_endpoint"],
                             parent=None if p is None else base + p))
    return msgs


def first_after(candidates, t, key):
    later = [j for j in candidates if key(j) > t]
    return min(later, key=key) if later else None


def main(path, node, chunk_ms=0.0):
    msgs = load(path)
    sent_to = collections.defaultdict(list)  # destination endpoint -> messages node sent there
    into = collections.defaultdict(list)  # destination endpoint -> server answers into node
    for i, m in enumerate(msgs):
        if m["src"] == node:
            sent_to[m["dep"]].append(i)
        if m["dst"] == node and m["src"] != "CLIENT":
            into[m["dep"]].append(i)
    tasks, task_of_request = [], {}
    for i, m in enumerate(msgs):
        if m["dst"] == node and m["src"] == "CLIENT":
            reply = first_after(sent_to[m["sep"]], m["recv"], lambda j: msgs[j]["send"])
            if reply is not None:
                task_of_request[i] = len(tasks)
                tasks.append((m["recv"], msgs[reply]["send"]))
    calls = []  # (send, answer receive, message, callee)
    for i, m in enumerate(msgs):
        if m["src"] == node and m["dst"] != "CLIENT":
            a = first_after(into[m["sep"]], m["send"], lambda j: msgs[j]["recv"])
            if a is not None:
                calls.append((m["send"], msgs[a]["recv"], i, m["dst"]))

    def request_of(i):
        while msgs[i]["parent"] is not None:
            i = msgs[i]["parent"]
            if i in task_of_request:
                return i
        return None

    truth = [task_of_request.get(request_of(c[2])) for c in calls]
    chains = collections.defaultdict(list)
    for ci, t in enumerate(truth):
        chains[t].append(ci)

    # Per gap type, a Gaussian fitted to the true chains (the oracle densities).
    gaps = collections.defaultdict(list)
    for t, (start, end) in enumerate(tasks):
        prev, kind = start, "req"
        for ci in sorted(chains[t], key=lambda c: calls[c][0]):
            gaps[(kind, calls[ci][3])].append(calls[ci][0] - prev)
            prev, kind = calls[ci][1], calls[ci][3]
        gaps[(kind, "reply")].append(end - prev)
    model = {}
    for k, v in gaps.items():
        mu = sum(v) / len(v)
        sd = max(1e4, (sum((x - mu) ** 2 for x in v) / len(v)) ** 0.5)
        model[k] = (mu, sd)

    def cost(gap, kind):
        """Negative log density of a gap of this type (a large constant if never seen)."""
        if gap <= 0 or kind not in model:
            return 1e3
        mu, sd = model[kind]
        return 0.5 * ((gap - mu) / sd) ** 2 + math.log(sd / 1e5)

    print(f"{node}: {len(tasks)} tasks, {len(calls)} calls")
    for k, (mu, sd) in sorted(model.items()):
        print(f"  gap {k[0]:>5} -> {k[1]:<6} {mu / 1e6:.2f} ± {sd / 1e6:.2f} ms ({len(gaps[k])})")

    by_start = sorted(range(len(tasks)), key=lambda t: tasks[t][0])
    starts = [tasks[t][0] for t in by_start]
    window = 8_000_000  # a call's task started at most 8 ms before it
    first_kinds = {k[1] for k in model if k[0] == "req" and k[1] != "reply"}
    firsts = [ci for ci in range(len(calls)) if calls[ci][3] in first_kinds]
    first_set = set(firsts)
    seconds = [ci for ci in range(len(calls)) if ci not in first_set]
    second_by_send = sorted(seconds, key=lambda c: calls[c][0])
    second_sends = [calls[c][0] for c in second_by_send]

    def open_tasks(ci):
        send, answer = calls[ci][0], calls[ci][1]
        lo = bisect.bisect_left(starts, send - window)
        hi = bisect.bisect_left(starts, send)
        return [by_start[k] for k in range(lo, hi) if tasks[by_start[k]][1] > answer]

    # 1. Greedy in time order, gap only, a task taking at most one first call.
    taken, right = set(), 0
    for ci in sorted(firsts, key=lambda c: calls[c][0]):
        options = [(cost(calls[ci][0] - tasks[t][0], ("req", calls[ci][3])), t)
                   for t in open_tasks(ci) if t not in taken]
        if options:
            t = min(options)[1]
            taken.add(t)
            right += t == truth[ci]
    print(f"greedy, first calls: {right / len(firsts):.1%} right")

    # 2a. First calls to requests, one matching; a task left without a first call replies
    # directly. Edge: its gap, plus the best ending, minus the direct reply's cost.
    def best_ending(ci, end):
        kind, answer = calls[ci][3], calls[ci][1]
        best = cost(end - answer, (kind, "reply"))
        for k in range(bisect.bisect_left(second_sends, answer),
                       bisect.bisect_left(second_sends, end)):
            c2 = second_by_send[k]
            if calls[c2][1] < end:
                best = min(best, cost(calls[c2][0] - answer, (kind, calls[c2][3]))
                           + cost(end - calls[c2][1], (calls[c2][3], "reply")))
        return best

    rows, cols, vals = [], [], []
    for r, ci in enumerate(firsts):
        for t in open_tasks(ci):
            start, end = tasks[t]
            g = cost(calls[ci][0] - start, ("req", calls[ci][3]))
            if g > 30:
                continue
            rows.append(r)
            cols.append(t)
            vals.append(100 + g + best_ending(ci, end) - cost(end - start, ("req", "reply")))
    for r in range(len(firsts)):  # a way out, so that a full matching exists
        rows.append(r)
        cols.append(len(tasks) + r)
        vals.append(1e6)
    if chunk_ms:
        # Streaming: the first calls in chunks of chunk_ms by send time, each chunk matched
        # on its own, in order; a task taken by an earlier chunk stays taken.
        CH = chunk_ms * 1e6
        edges = collections.defaultdict(list)
        for r, t, v in zip(rows, cols, vals):
            edges[r].append((t, v))
        t0 = min(calls[ci][0] for ci in firsts)
        chunk = collections.defaultdict(list)
        for r, ci in enumerate(firsts):
            chunk[int((calls[ci][0] - t0) // CH)].append(r)
        task_of = {}
        taken = set()
        for k in sorted(chunk):
            rs = chunk[k]
            colmap = {}
            R2, C2, V2 = [], [], []
            for i, r in enumerate(rs):
                for t, v in edges[r]:
                    if t < len(tasks) and t in taken:
                        continue
                    key = t if t < len(tasks) else ('out', r)
                    j = colmap.setdefault(key, len(colmap))
                    R2.append(i); C2.append(j); V2.append(v)
            m = csr_matrix((V2, (R2, C2)), shape=(len(rs), len(colmap)))
            rr, cc = min_weight_full_bipartite_matching(m)
            inv = {j: key for key, j in colmap.items()}
            for i, j in zip(rr, cc):
                key = inv[j]
                t = key if not isinstance(key, tuple) else None
                task_of[firsts[rs[i]]] = t
                if t is not None:
                    taken.add(t)
    else:
        m = csr_matrix((vals, (rows, cols)), shape=(len(firsts), len(tasks) + len(firsts)))
        rr, cc = min_weight_full_bipartite_matching(m)
        task_of = {firsts[r]: (t if t < len(tasks) else None) for r, t in zip(rr, cc)}
    right = sum(task_of[ci] == truth[ci] for ci in firsts)
    print(f"layered matching, first calls: {right / len(firsts):.1%} right")

    # 2b. Second calls to the first calls' answers, one matching.
    placed = [(ci, t) for ci, t in task_of.items() if t is not None]
    placed.sort(key=lambda p: calls[p[0]][1])
    answers = [calls[ci][1] for ci, _ in placed]
    rows, cols, vals = [], [], []
    for r, c2 in enumerate(seconds):
        send, answer, _, kind = calls[c2]
        for j in range(bisect.bisect_left(answers, send - window), bisect.bisect_left(answers, send)):
            c1, t = placed[j]
            end = tasks[t][1]
            if end <= answer:
                continue
            g = cost(send - calls[c1][1], (calls[c1][3], kind))
            if g > 30:
                continue
            rows.append(r)
            cols.append(j)
            vals.append(100 + g + cost(end - answer, (kind, "reply"))
                        - cost(end - calls[c1][1], (calls[c1][3], "reply")))
    for r in range(len(seconds)):
        rows.append(r)
        cols.append(len(placed) + r)
        vals.append(1e6)
    if seconds:
        m = csr_matrix((vals, (rows, cols)), shape=(len(seconds), len(placed) + len(seconds)))
        rr, cc = min_weight_full_bipartite_matching(m)
        for r, j in zip(rr, cc):
            task_of[seconds[r]] = placed[j][1] if j < len(placed) else None
        right = sum(task_of[ci] == truth[ci] for ci in seconds)
        print(f"layered matching, second calls: {right / len(seconds):.1%} right")

    got = collections.defaultdict(set)
    for ci, t in task_of.items():
        if t is not None:
            got[t].add(ci)
    shape = lambda s: sorted(calls[c][3] for c in s)
    exact = sum(got[t] == set(chains[t]) for t in range(len(tasks)))
    shaped = sum(shape(got[t]) == shape(chains[t]) for t in range(len(tasks)))
    busy = [t for t in range(len(tasks)) if chains[t]]
    busy_exact = sum(got[t] == set(chains[t]) for t in busy)
    print(f"tasks with exactly their calls: {exact / len(tasks):.1%} "
          f"(of those that make calls: {busy_exact / len(busy):.1%}); "
          f"with their true shape: {shaped / len(tasks):.1%}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) == 4 else 0.0)
