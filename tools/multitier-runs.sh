#!/bin/bash
# Runs tests/multitier/system.py RUNS times (default 10), each a fresh system of 1,300
# requests under the preload library and tcpdump, analyses its socket-call logs and its
# captures, scores both against the programs' logs (tests/multitier/score.py) and prints a
# line per run. Needs root. docs/notes/2026-11-30-multitier.md has the figures.
#
#   RUNS=10 tools/multitier-runs.sh target/release
set -u
dir=$(realpath "${1:-target/release}")
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq 1 "${RUNS:-10}"); do
  d=$work/$r
  mkdir -p "$d"
  if ! python3 tests/multitier/system.py --requests 1300 --preload "$dir/libcauseway_preload.so" \
      --capture-dir "$d/cap" --pcap-dir "$d/pcap" --truth "$d/truth.jsonl" \
      --workdir "$d/work" >"$d/system.txt" 2>&1; then
    echo "run $r: system.py failed: $(tail -1 "$d/system.txt")"
    continue
  fi
  "$dir/causeway" -q analyze "$d/cap" --emit patterns,instances,messages,stats,nat \
    --format jsonl -o "$d/cap.jsonl"
  "$dir/causeway" -q analyze "$d"/pcap/*.pcap --emit patterns,instances,messages,stats,nat \
    --format jsonl -o "$d/pcap.jsonl"
  for f in cap pcap; do
    python3 tests/multitier/score.py "$d/truth.jsonl" "$d/$f.jsonl" >"$d/$f.score"
  done
  python3 - "$d" "$r" <<'PY'
import json, sys
d, r = sys.argv[1], sys.argv[2]
out = []
for f, name in (("cap", "socket logs"), ("pcap", "captures")):
    s = json.load(open(f"{d}/{f}.score"))
    errs = {k: (v["inferred"] - v["truth"]) / v["truth"] for k, v in s["patterns"].items()}
    worst = max(errs.items(), key=lambda kv: abs(kv[1]))
    likely = {k: (v["likeliest"] - v["truth"]) / v["truth"] for k, v in s["patterns"].items()}
    worst_likely = max(likely.items(), key=lambda kv: abs(kv[1]))
    app = [abs(v["app_inferred_ms"] - v["app_log_ms"]) / v["app_log_ms"]
           for k, v in s["patterns"].items()
           if not k.endswith("static") and v["app_inferred_ms"]]
    # From packets the application's time is its host's, which its log cannot see.
    app_error = f"app time error {100 * max(app):.1f}%, " if f == "cap" else ""
    out.append(f"{name}: exact {100 * s['correct'] / s['requests']:.1f}%, "
               f"worst count {worst[0]} {100 * worst[1]:+.1f}%, "
               f"worst likeliest {worst_likely[0]} {100 * worst_likely[1]:+.1f}%, {app_error}"
               f"nginx-app p99 {s['bridge_ms']['p99']:.3f} ms, "
               f"nat {len(s['nat'])}, unnamed {s['skipped'].get('unnamed_socket', 0)}")
# The two sources against each other (likeliest counts).
cap, pcap = (json.load(open(f"{d}/{f}.score"))["patterns"] for f in ("cap", "pcap"))
gap = max(((k, (pcap[k]["likeliest"] - v["likeliest"]) / max(v["likeliest"], 1))
           for k, v in cap.items() if k in pcap), key=lambda kv: abs(kv[1]))
out.append(f"captures vs logs {gap[0]} {100 * gap[1]:+.1f}%")
print(f"run {r}: " + " | ".join(out))
PY
done
