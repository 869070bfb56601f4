#!/bin/bash
# How long after its last message a followed capture directory's instance comes out: python's
# http.server and a curl loop (REQUESTS requests, 10 ms apart), both under `causeway capture`,
# with `causeway analyze --follow --emit instances` reading the directory as it grows. Prints
# the instances' lag (arrival in the output minus the instance's last send or receive) at the
# 50th, 90th and 99th percentile. Loopback only; every process is stopped at the end.
#
#   tools/follow-lag.sh target/fast/causeway 18090 [ANALYZE OPTIONS...]
#   tools/follow-lag.sh target/fast/causeway 18090 --max-delay 500ms
#
# The preload library is taken from next to the binary (`cargo build -p causeway-preload`
# with the same profile puts it there). docs/notes/2026-12-02-calls-held-and-reply-lookahead.md
# has the figures.
set -eu
bin=$(realpath "$1")
port=$2
shift 2
lib=$(dirname "$bin")/libcauseway_preload.so
requests=${REQUESTS:-300}
work=$(mktemp -d)
trap 'pkill -INT -f "http.server $port" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/www"
echo hi > "$work/www/index.html"
(cd "$work/www" && exec "$bin" capture -o "$work/cap" --preload "$lib" -- \
  python3 -m http.server "$port" --bind 127.0.0.1 > /dev/null 2>&1) &
sleep 1.5
timeout 120 "$bin" analyze "$@" --follow --emit instances --format jsonl -o - "$work/cap" \
  2> /dev/null | python3 -c '
import json, sys, time
lags = []
for line in sys.stdin:
    now = time.time_ns()
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("kind") != "instance":
        continue
    end = max((m.get("recv_ns") or m.get("send_ns") or 0) for m in d["messages"])
    lags.append((now - end) / 1e6)
lags.sort()
if not lags:
    sys.exit("no instances")
q = lambda p: lags[min(len(lags) - 1, int(len(lags) * p))]
print(f"instances {len(lags)}  lag ms p50 {q(0.5):.0f}  p90 {q(0.9):.0f}  p99 {q(0.99):.0f}")
' &
reader=$!
sleep 2
"$bin" capture -o "$work/cap" --preload "$lib" -- bash -c \
  "for i in \$(seq 1 $requests); do curl -s http://127.0.0.1:$port/index.html > /dev/null; sleep 0.01; done"
sleep 3
pkill -INT -f "http.server $port" || true
sleep 0.5
pkill -INT -f "follow --emit instances --format jsonl -o - $work/cap" || true
wait "$reader"
