#!/usr/bin/env python3
"""Summarise TCP evidence logs per connection (python3 standard library only).

Reads the logs that tests/tcp/faults.py writes (or any log of the same formats):

  SSLOG        `ss -tinm` output captured as
                   while sleep 0.25; do echo "### $(date +%s.%N)"; ss -tinm; done
               (blocks, each preceded by `### <unix time with fraction>`)
  --tcpinfo F  JSON lines from faults.py's netlink poller (one object per connection per
               poll, with fields ss 6.1 does not print, notably `total_rto`, the kernel's
               per-connection count of retransmission timeouts, tcpi_total_rto, Linux 6.7+)
  --labels F   faults.py's labels file: groups connections by scenario, names the expected
               SNAP classes and judges each connection (see CLASS RULES)

and prints, per connection, the deltas of the kernel's cumulative counters between the
first and the last block in which the connection appears, plus statistics of the
snapshot values (rtt, minrtt, backoff, send-queue occupancy).

Usage:
  tests/tcp/check_ss.py ss.log [--tcpinfo tcpinfo.jsonl] [--labels labels.json] [--json]
Exit status: 0 if every labelled connection shows its expected classes and nothing outside
its expected+possible classes (or no --labels given), 1 otherwise, 2 on bad input.

CLASS RULES (observed class of a connection over the whole run; SNAP Table 2 on Linux):
  fast_retransmit  d(retrans total) - d(dsack_dups) - d(total_rto) >= 1
                   (ss `retrans:a/B`, `dsack_dups:`; tcpinfo).  TLP probes and slow-start
                   retransmissions after an RTO also count (the counters cannot tell them
                   apart).  Retransmissions the receiver reported as duplicates (D-SACK) are
                   not counted: they repaired no loss.  On a busy machine a stall of the
                   host of ~10-50 ms makes the tail loss probe (2 srtt + 8 ms) fire before the
                   ACK is processed, on clean links too; the probe is then D-SACKed.
  timeout          d(total_rto) >= 1 (tcpinfo); without tcpinfo: a block with `backoff:` and
                   `unacked:` (a backoff with nothing in flight is the zero-window probe
                   timer, e.g. the slow scenario; ss samples every 0.25 s miss most short
                   RTO recoveries, so the ss-only rule under-reports)
  rwnd_limited     d(rwnd_limited) >= 50 ms                  (ss `rwnd_limited:Nms`)
  sndbuf_limited   d(sndbuf_limited) >= 50 ms                (ss `sndbuf_limited:Nms`)
  delayed_ack      mean over active blocks of (rtt - minrtt) >= 20 ms, minrtt < 5 ms
                   (Linux delayed-ACK timer: 40 ms minimum at HZ=250/1000; the links have no
                   other queueing; a 20 ms propagation delay raises minrtt, not rtt-minrtt)
  app_limited      none of the above
"""

import argparse
import json
import math
import re
import sys

# Cumulative counters whose first->last difference is reported.
CUMULATIVE = [
    "bytes_sent", "bytes_acked", "bytes_retrans", "bytes_received", "segs_out",
    "data_segs_out", "retrans_total", "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms",
    "dsack_dups", "reord_seen",
]

THRESH = {
    "limited_ms": 50.0,
    "delack_excess_ms": 20.0,
    "delack_minrtt_ms": 5.0,
}


def _num(s):
    try:
        if re.fullmatch(r"-?\d+", s):
            return int(s)
        return float(s)
    except ValueError:
        return None


def parse_info(text):
    """Parse the indented info line(s) of one `ss -tinm` entry into a dict."""
    out = {"flags": []}
    toks = text.split()
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if tok.startswith("skmem:("):
            body = tok[len("skmem:("):].rstrip(")")
            for item in body.split(","):
                m = re.fullmatch(r"([a-z]+)(\d+)", item)
                if m:
                    out["skmem_" + m.group(1)] = int(m.group(2))
            continue
        if tok in ("send", "pacing_rate", "delivery_rate", "max_pacing_rate") and i < len(toks):
            out[tok] = toks[i]
            i += 1
            continue
        if ":" not in tok:
            out["flags"].append(tok)
            continue
        k, v = tok.split(":", 1)
        if k == "rtt" and "/" in v:
            a, b = v.split("/", 1)
            out["rtt_ms"], out["rttvar_ms"] = _num(a), _num(b)
        elif k == "retrans" and "/" in v:
            a, b = v.split("/", 1)
            out["retrans_now"], out["retrans_total"] = _num(a), _num(b)
        elif k in ("rwnd_limited", "sndbuf_limited", "busy"):
            m = re.match(r"(\d+)ms", v)
            if m:
                out[k + "_ms"] = int(m.group(1))
        elif k == "minrtt":
            out["minrtt_ms"] = _num(v)
        elif k == "rto":
            out["rto_ms"] = _num(v)
        elif k == "ato":
            out["ato_ms"] = _num(v)
        else:
            n = _num(v)
            out[k] = n if n is not None else v
    return out


def parse_ss_log(path):
    """-> {(local, peer): [(ts, state, fields), ...]} in time order."""
    conns = {}
    ts = None
    cur = None  # [key, state, info_text]

    def flush():
        if cur is not None and ts is not None:
            key, state, info = cur
            f = parse_info(info)
            f["state"] = state
            conns.setdefault(key, []).append((ts, state, f))

    with open(path, "r", errors="replace") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("### "):
                flush()
                cur = None
                ts = _num(line[4:].strip())
                continue
            if not line.strip() or line.startswith("State ") or line.startswith("Netid "):
                continue
            if line[0] in " \t":
                if cur is not None:
                    cur[2] += " " + line.strip()
                continue
            flush()
            parts = line.split()
            if len(parts) >= 5:
                cur = [(parts[3], parts[4]), parts[0], ""]
            else:
                cur = None
    flush()
    return conns


def parse_tcpinfo_log(path):
    """-> {(local, peer): [record, ...]} in time order."""
    conns = {}
    with open(path, "r") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a torn last line
            conns.setdefault((r["local"], r["peer"]), []).append(r)
    return conns


def _d(first, last, key, zero_default=False):
    a, b = first.get(key), last.get(key)
    if zero_default:  # ss leaves out counters that are still zero
        a, b = a or 0, b or 0
    if a is None or b is None:
        return None
    return b - a


def _has_info(f):
    """A block entry with tcp_info (TIME-WAIT and SYN entries have none)."""
    return "skmem_tb" in f or "rtt_ms" in f


def summarize_ss(samples):
    """Summary of one connection's ss blocks (those with tcp_info), or None."""
    samples = [x for x in samples if _has_info(x[2])]
    if not samples:
        return None
    first, last = samples[0][2], samples[-1][2]
    s = {
        "blocks": len(samples),
        "t_first": samples[0][0],
        "t_last": samples[-1][0],
        "state_last": samples[-1][1],
    }
    for k in CUMULATIVE:
        s["d_" + k] = _d(first, last, k, zero_default=True)
    rtts = [f["rtt_ms"] for _, _, f in samples if f.get("rtt_ms") is not None]
    mins = [f["minrtt_ms"] for _, _, f in samples if f.get("minrtt_ms") is not None]
    s["rtt_mean_ms"] = round(sum(rtts) / len(rtts), 3) if rtts else None
    s["rtt_max_ms"] = max(rtts) if rtts else None
    s["minrtt_ms"] = min(mins) if mins else None
    # rtt - minrtt over blocks where the connection sent something since the last block
    ex = []
    prev = None
    for _, _, f in samples:
        if prev is not None and f.get("rtt_ms") is not None and f.get("minrtt_ms") is not None:
            if (f.get("bytes_sent") or 0) > (prev.get("bytes_sent") or 0):
                ex.append(f["rtt_ms"] - f["minrtt_ms"])
        prev = f
    s["rtt_excess_mean_ms"] = round(sum(ex) / len(ex), 3) if ex else None
    s["active_blocks"] = len(ex)
    # tcpi_backoff also counts zero-window probes (persist timer, nothing in flight), so
    # only a backoff with unacknowledged data is a retransmission timeout
    bo = [f.get("backoff", 0) or 0 for _, _, f in samples if (f.get("unacked") or 0) > 0]
    s["backoff_max"] = max(bo) if bo else 0
    s["backoff_blocks"] = sum(1 for b in bo if b > 0)
    s["persist_blocks"] = sum(1 for _, _, f in samples
                              if (f.get("backoff") or 0) > 0 and not f.get("unacked"))
    full = [1 for _, _, f in samples
            if f.get("skmem_tb") and f.get("skmem_w") is not None
            and f["skmem_w"] >= 0.8 * f["skmem_tb"]]
    s["wqueue_full_blocks"] = len(full)  # SNAP: CurAppWQueue ~ MaxAppWQueue
    s["skmem_tb_last"] = last.get("skmem_tb")
    s["skmem_w_max"] = max((f.get("skmem_w") or 0) for _, _, f in samples)
    s["app_limited_blocks"] = sum(1 for _, _, f in samples if "app_limited" in f["flags"])
    return s


def summarize_tcpinfo(recs):
    """Summary of one connection's polls (those with tcp_info), or None."""
    recs = [r for r in recs if "total_retrans" in r]
    if not recs:
        return None
    first, last = recs[0], recs[-1]
    s = {"polls": len(recs)}
    for k in ("total_rto", "total_rto_recoveries", "total_rto_time_ms", "total_retrans",
              "bytes_sent", "bytes_retrans", "busy_us", "rwnd_limited_us",
              "sndbuf_limited_us", "delivered", "dsack_dups"):
        s["d_" + k] = _d(first, last, k)
    s["backoff_max"] = max((r.get("backoff") or 0) for r in recs)
    # tcpi_ca_state snapshots: 3 = fast recovery (after dupacks/SACK), 4 = loss (after RTO)
    s["polls_recovery"] = sum(1 for r in recs if r.get("ca_state") == 3)
    s["polls_loss"] = sum(1 for r in recs if r.get("ca_state") == 4)
    return s


def observed_classes(ss, ti):
    """Classes per CLASS RULES from an ss summary (may be None) and a tcpinfo summary
    (may be None). -> (set, evidence dict)."""
    obs = set()
    ev = {}
    rto = ti.get("d_total_rto") if ti else None
    retr = dup = None
    if ti and ti.get("d_total_retrans") is not None:
        retr, dup = ti["d_total_retrans"], ti.get("d_dsack_dups")
    elif ss:
        retr = ss.get("d_retrans_total")
    if dup is None and ss:
        dup = ss.get("d_dsack_dups")
    ev["retrans"] = retr
    ev["dsack_dups"] = dup
    ev["rto"] = rto
    if retr is not None and retr - (dup or 0) - (rto or 0) >= 1:
        obs.add("fast_retransmit")
    if rto is not None:
        if rto >= 1:
            obs.add("timeout")
    elif ss and ss.get("backoff_blocks", 0) > 0:
        obs.add("timeout")
    if ss:
        rw = ss.get("d_rwnd_limited_ms") or 0
        sb = ss.get("d_sndbuf_limited_ms") or 0
    else:
        rw = (ti.get("d_rwnd_limited_us") or 0) / 1000.0
        sb = (ti.get("d_sndbuf_limited_us") or 0) / 1000.0
    ev["rwnd_limited_ms"], ev["sndbuf_limited_ms"] = rw, sb
    if rw >= THRESH["limited_ms"]:
        obs.add("rwnd_limited")
    if sb >= THRESH["limited_ms"]:
        obs.add("sndbuf_limited")
    if ss and ss.get("rtt_excess_mean_ms") is not None and ss.get("minrtt_ms") is not None:
        ev["rtt_excess_mean_ms"] = ss["rtt_excess_mean_ms"]
        ev["minrtt_ms"] = ss["minrtt_ms"]
        if (ss["rtt_excess_mean_ms"] >= THRESH["delack_excess_ms"]
                and ss["minrtt_ms"] < THRESH["delack_minrtt_ms"]):
            obs.add("delayed_ack")
    if not obs:
        obs.add("app_limited")
    return obs, ev


def evaluate(labels, ss_conns, ti_conns):
    """-> list of per-scenario dicts with per-connection verdicts."""
    out = []
    for sc in labels["scenarios"]:
        rows = []
        for c in sc["connections"]:
            key = (c["local"], c["peer"])
            ss = summarize_ss(ss_conns[key]) if ss_conns and key in ss_conns else None
            ti = summarize_tcpinfo(ti_conns[key]) if ti_conns and key in ti_conns else None
            if ss is None and ti is None:
                rows.append({"conn": c, "ok": False, "why": "not seen in any log",
                             "observed": [], "ss": None, "tcpinfo": None})
                continue
            obs, ev = observed_classes(ss, ti)
            exp = set(c["expected"])
            allowed = exp | set(c.get("possible", []))
            missing = sorted(exp - obs)
            extra = sorted(obs - allowed)
            ok = not missing and not extra
            why = []
            if missing:
                why.append("missing " + ",".join(missing))
            if extra:
                why.append("unexpected " + ",".join(extra))
            rows.append({"conn": c, "ok": ok, "why": "; ".join(why), "observed": sorted(obs),
                         "evidence": ev, "ss": ss, "tcpinfo": ti})
        out.append({"scenario": sc["name"], "ok": all(r["ok"] for r in rows), "rows": rows})
    return out


def _fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


FMT = ("{:<19} {:<17} {:>6} {:>5} {:>4} {:>4} {:>5} {:>6} {:>7} {:>7} {:>7} {:>7} {:>6} "
       "{:>5} {:>5}")
HEADER = FMT.format("local", "peer", "sentKB", "retr", "dsk", "rto", "bo", "rec/ls", "busy",
                    "rwndlim", "sndblim", "rtt", "minrtt", "wqful", "appl")


def row_line(local, peer, ss, ti):
    sent = None
    if ss and ss.get("d_bytes_sent") is not None:
        sent = ss["d_bytes_sent"] // 1024
    retr = ti.get("d_total_retrans") if ti else (ss or {}).get("d_retrans_total")
    dsk = (ti or {}).get("d_dsack_dups")
    if dsk is None:
        dsk = (ss or {}).get("d_dsack_dups")
    rto = ti.get("d_total_rto") if ti else None
    bo = f"{(ss or {}).get('backoff_blocks', '-')}/{(ss or {}).get('backoff_max', '-')}"
    ca = f"{ti['polls_recovery']}/{ti['polls_loss']}" if ti else "-"
    ss = ss or {}
    return FMT.format(
        local, peer, _fmt(sent), _fmt(retr), _fmt(dsk), _fmt(rto), bo, ca,
        _fmt(ss.get("d_busy_ms")),
        _fmt(ss.get("d_rwnd_limited_ms")), _fmt(ss.get("d_sndbuf_limited_ms")),
        _fmt(ss.get("rtt_mean_ms"), 2), _fmt(ss.get("minrtt_ms"), 3),
        _fmt(ss.get("wqueue_full_blocks")), _fmt(ss.get("app_limited_blocks")))


LEGEND = ("columns: sentKB=d(bytes_sent)/1024; retr=d(retrans total); dsk=d(dsack_dups) "
          "(retransmissions the peer reported as duplicates); rto=d(tcpi_total_rto) "
          "(tcpinfo only);\n bo=ss blocks with backoff>0 and unacked>0 / max backoff; rec/ls=tcpinfo polls in "
          "fast recovery / in RTO loss state (ca_state 3/4);\n busy,rwndlim,sndblim=d(ms); "
          "rtt=mean srtt over blocks (ms); minrtt=min (ms); wqful=blocks with skmem w>=0.8*tb; "
          "appl=blocks flagged app_limited")


def report_text(results, mib=None):
    lines = [LEGEND]
    for sc in results:
        lines.append("")
        lines.append(f"== {sc['scenario']}: {'PASS' if sc['ok'] else 'FAIL'}")
        lines.append("   " + HEADER + "  role        expected -> observed")
        for r in sc["rows"]:
            c = r["conn"]
            verdict = "ok" if r["ok"] else "BAD (" + r["why"] + ")"
            lines.append("   " + row_line(c["local"], c["peer"], r.get("ss"), r.get("tcpinfo"))
                         + f"  {c.get('role', ''):<11} {','.join(c['expected'])} -> "
                         + f"{','.join(r['observed'])} {verdict}")
    if mib:
        lines.append("")
        lines.append("per-namespace TcpExt/Tcp deltas (before -> after traffic):")
        for ns, d in mib.items():
            items = " ".join(f"{k}={v}" for k, v in d.items())
            lines.append(f"   {ns}: {items}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("Usage:"):])
    ap.add_argument("sslog", nargs="?", help="ss -tinm log with ### <time> blocks")
    ap.add_argument("--tcpinfo", help="JSON-lines log of faults.py's netlink poller")
    ap.add_argument("--labels", help="faults.py labels JSON")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)
    if not a.sslog and not a.tcpinfo:
        ap.error("need an ss log and/or --tcpinfo")
    try:
        ssc = parse_ss_log(a.sslog) if a.sslog else {}
        tic = parse_tcpinfo_log(a.tcpinfo) if a.tcpinfo else {}
    except OSError as e:
        print(f"check_ss: {e}", file=sys.stderr)
        return 2
    if a.labels:
        with open(a.labels) as fh:
            labels = json.load(fh)
        res = evaluate(labels, ssc, tic)
        if a.json:
            print(json.dumps(res, indent=1, default=str))
        else:
            print(report_text(res))
        return 0 if all(s["ok"] for s in res) else 1
    # no labels: every connection seen
    keys = sorted(set(ssc) | set(tic))
    if a.json:
        print(json.dumps([{"local": k[0], "peer": k[1],
                           "ss": summarize_ss(ssc[k]) if k in ssc else None,
                           "tcpinfo": summarize_tcpinfo(tic[k]) if k in tic else None,
                           "observed": sorted(observed_classes(
                               summarize_ss(ssc[k]) if k in ssc else None,
                               summarize_tcpinfo(tic[k]) if k in tic else None)[0])}
                          for k in keys], indent=1))
        return 0
    print(LEGEND)
    print(HEADER + "  observed")
    for k in keys:
        ss = summarize_ss(ssc[k]) if k in ssc else None
        ti = summarize_tcpinfo(tic[k]) if k in tic else None
        print(row_line(k[0], k[1], ss, ti) + "  " + ",".join(sorted(observed_classes(ss, ti)[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
