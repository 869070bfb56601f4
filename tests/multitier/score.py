#!/usr/bin/env python3
"""score.py: Causeway's paths of a tests/multitier/system.py run, against the programs' own logs.

USAGE
  tests/multitier/score.py TRUTH.jsonl ANALYSIS.jsonl [--net 10.78]

TRUTH is system.py's --truth file (one line per request: its kind, the nginx that served it
(`via`), the client's port and times, the app's times). ANALYSIS is `causeway analyze ...
--format jsonl --emit patterns,instances,messages,nat,stats` of the run's socket-call logs or
packet captures. Hosts are told by address (system.py's plan), so node names (processes or
addresses) do not matter.

Prints one JSON object:
  requests        ok requests in the truth
  found           requests whose client message roots an inferred instance
  correct         ... whose instance is exactly the request's true path (hops in time order)
  patterns        per true pattern (`web1/db`, ...): truth count, the count of the inferred
                  pattern with that path (every instance, a try-both decision's both), its
                  `likeliest` count (requests whose likeliest instance it is), the app's
                  mean time per request from its log
                  (request line read to answer written) and from the inferred instances
                  (send of its answer minus receipt of the request)
  top             the inferred patterns by count (path as hosts, count)
  nat             final address translations (public -> private)
  bridge_ms       one-way latency of messages between web and app (both ends traced): p50, p99
  app_end         of the correct instances, how many have their request's arrival at the app
                  and its answer's departure within 1 ms of the app's own log (`agree`), of
                  how many (`n`): a message paired with the wrong request of a keep-alive
                  connection is a whole request or more away
  skipped         the stats' skipped counts
Standard library only.
"""

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict


def roles(net):
    return {f"{net}.1.2": "client", f"{net}.1.100": "vip", f"{net}.2.11": "web1",
            f"{net}.2.12": "web2", f"{net}.2.20": "app", f"{net}.2.30": "redis",
            f"{net}.2.40": "pg"}


def split(endpoint):
    ip, _, port = endpoint.rpartition(":")
    return ip, int(port) if port.isdigit() else None


def expected(via, kind):
    hops = [("client", via), (via, "app")]
    if kind in ("cache", "both"):
        hops += [("app", "redis"), ("redis", "app")]
    if kind in ("db", "both"):
        hops += [("app", "pg"), ("pg", "app")]
    return tuple(hops + [("app", via), (via, "client")])


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("truth")
    ap.add_argument("analysis")
    ap.add_argument("--net", default="10.78")
    a = ap.parse_args()
    role = roles(a.net)

    truth = [json.loads(l) for l in open(a.truth) if l.strip()]
    truth = [t for t in truth if t.get("ok")]
    instances, patterns, nat, bridge, skipped = [], {}, set(), [], Counter()
    for line in open(a.analysis):
        d = json.loads(line)
        k = d.get("kind")
        if k == "instance":
            instances.append(d)
        elif k == "pattern" and d.get("cumulative"):
            patterns[d["id"]] = d  # the last cumulative record of each pattern
        elif k == "nat_mapping" and d.get("final"):
            nat.add(f"{d['public']} -> {d['private']}")
        elif k == "message" and d.get("network_ms") is not None:
            s, t = (role.get(split(d[e])[0]) for e in ("src_endpoint", "dst_endpoint"))
            if {s, t} in ({"web1", "app"}, {"web2", "app"}):
                bridge.append(d["network_ms"])
        elif k == "stats" and d.get("final"):
            skipped.update(d.get("skipped") or {})

    def shape(inst):
        ms = sorted(inst["messages"], key=lambda m: m["send_ns"] or m["recv_ns"] or 0)
        return tuple((role.get(split(m["src_endpoint"])[0], "?"),
                      role.get(split(m["dst_endpoint"])[0], "?")) for m in ms)

    # Instances by the client port of their root message.
    by_port = defaultdict(list)
    shape_of_pattern = {}
    for inst in instances:
        shape_of_pattern.setdefault(inst["pattern"], shape(inst))
        root = next((m for m in inst["messages"] if m["parent"] is None), None)
        if root is None:
            continue
        ip, port = split(root["src_endpoint"])
        if role.get(ip) == "client":
            by_port[port].append((root["send_ns"] or root["recv_ns"] or 0, inst))

    found = correct = 0
    app_end = {"n": 0, "agree": 0}
    per = defaultdict(lambda: {"truth": 0, "correct": 0, "app_log_ms": [], "app_inferred_ms": []})
    for t in truth:
        key = f"{t['via']}/{t['kind']}"
        p = per[key]
        p["truth"] += 1
        p["app_log_ms"].append((t["t_send"] - t.get("t_read", t["t_recv"])) / 1e6)
        hit = [i for ts, i in by_port.get(t.get("port"), [])
               if t["client_t0"] - 1_000_000 <= ts <= t["client_t1"] + 1_000_000]
        if not hit:
            continue
        found += 1
        inst = hit[0]
        if shape(inst) != expected(t["via"], t["kind"]):
            continue
        correct += 1
        p["correct"] += 1
        ms = inst["messages"]
        into = next(m for m in ms if role.get(split(m["dst_endpoint"])[0]) == "app"
                    and role.get(split(m["src_endpoint"])[0]) == t["via"])
        out = next(m for m in ms if role.get(split(m["src_endpoint"])[0]) == "app"
                   and role.get(split(m["dst_endpoint"])[0]) == t["via"])
        if into["recv_ns"] and out["send_ns"]:
            p["app_inferred_ms"].append((out["send_ns"] - into["recv_ns"]) / 1e6)
            app_end["n"] += 1
            app_end["agree"] += (abs(into["recv_ns"] - t.get("t_read", t["t_recv"])) <= 1_000_000
                                 and abs(out["send_ns"] - t["t_send"]) <= 1_000_000)

    count_of_shape, likeliest_of_shape = Counter(), Counter()
    for pid, d in patterns.items():
        if pid in shape_of_pattern:
            count_of_shape[shape_of_pattern[pid]] += d["count"]
            likeliest_of_shape[shape_of_pattern[pid]] += d.get("likeliest", 0)
    result = {"requests": len(truth), "found": found, "correct": correct, "patterns": {}}
    for key in sorted(per):
        p = per[key]
        via, kind = key.split("/")
        result["patterns"][key] = {
            "truth": p["truth"],
            "correct": p["correct"],
            "inferred": count_of_shape.get(expected(via, kind), 0),
            "likeliest": likeliest_of_shape.get(expected(via, kind), 0),
            "app_log_ms": round(statistics.mean(p["app_log_ms"]), 4),
            "app_inferred_ms": round(statistics.mean(p["app_inferred_ms"]), 4)
            if p["app_inferred_ms"] else None,
        }
    result["top"] = [[" ".join(f"{s}>{d}" for s, d in sh), n]
                     for sh, n in count_of_shape.most_common(12)]
    result["nat"] = sorted(nat)
    result["bridge_ms"] = {"n": len(bridge), "p50": pct(bridge, 0.5), "p99": pct(bridge, 0.99)}
    result["app_end"] = app_end
    result["skipped"] = dict(skipped)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
