#!/bin/bash
# One process with two workers against two processes with one worker each, on the same
# captures: wall time of each, whether the final patterns and stats are the same, and the
# bytes exchanged between the two processes (tcpdump on the loopback ports of the host
# file; needs root for tcpdump). docs/scale-out.md has the figures.
#
#   causeway generate --preset multi-tier --parallelism 5 --sniffers per-host \
#       --messages 150000 -o /tmp/scale
#   tools/scale-out.sh target/release/causeway /tmp/scale
set -eu
bin=$(realpath "$1")
dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$dir"
inputs=$(ls ./*.pcap | sort)
common=(analyze --names names.txt --emit patterns,stats --format jsonl --emit-every 100000s)
final() {
  python3 - "$1" <<'PY'
import json, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "pattern" and r.get("cumulative"):
        last[r["id"]] = (r["count"], round(r["expected"], 3))
    if r.get("kind") == "stats" and r.get("final"):
        last["stats:" + r["origin"]] = (r["records"], r["late"])
for k, v in sorted(last.items()):
    if k.startswith("stats:") or v[0] > 0:
        print(k, v)
PY
}
now() { date +%s.%N; }
s=$(now)
"$bin" "${common[@]}" --workers 2 -o "$work/one.jsonl" $inputs 2>"$work/one.err"
e=$(now)
echo "1 process x 2 workers: $(echo "$e - $s" | bc) s"
port=$((20000 + RANDOM % 20000))
printf '127.0.0.1:%d\n127.0.0.1:%d\n' $port $((port + 1)) >"$work/hosts.txt"
tcpdump -i lo -w "$work/x.pcap" -s 96 "tcp port $port or tcp port $((port + 1))" 2>/dev/null &
dump=$!
sleep 1
s=$(now)
"$bin" "${common[@]}" --workers 1 --processes 2 --process 1 --hostfile "$work/hosts.txt" \
  $inputs 2>"$work/p1.err" >/dev/null &
other=$!
"$bin" "${common[@]}" --workers 1 --processes 2 --process 0 --hostfile "$work/hosts.txt" \
  -o "$work/two.jsonl" $inputs 2>"$work/p0.err"
wait $other
e=$(now)
echo "2 processes x 1 worker: $(echo "$e - $s" | bc) s"
sleep 1
kill $dump
wait $dump || true
final "$work/one.jsonl" >"$work/one.txt"
final "$work/two.jsonl" >"$work/two.txt"
echo "final pattern and stats lines: $(wc -l <"$work/one.txt") and $(wc -l <"$work/two.txt"), differing: $(diff "$work/one.txt" "$work/two.txt" | grep -c '^[<>]' || true)"
tshark -r "$work/x.pcap" -T fields -e tcp.len 2>/dev/null |
  awk '{s += $1; n++} END {print "TCP payload bytes between the processes:", s, "in", n, "segments"}'
