#!/usr/bin/env bash
# The hub CPU that `agent-hub top` adds (docs/performance.md "The live view's cost").
#
#   scripts/top-cost.sh [INTERVAL_SECS (default 1)] [WINDOW_SECS (default 60)]
#
# Starts a demo hub (target/release, build first) on port 46931 in a temporary folder with one
# parked await and three queued envelopes, then reads the hub's utime+stime
# (/proc/PID/stat fields 14 and 15, in clock ticks) over WINDOW seconds without a view and
# over WINDOW seconds with `agent-hub top --interval INTERVAL` running (stdout to a file, so
# plain mode: the same one `activity` connection per refresh as the terminal view). Also
# prints what the audit and service logs grew by. Linux only.
set -euo pipefail
IV=${1:-1}
WIN=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/target/release
D=$(mktemp -d "${TMPDIR:-/tmp}/agent-hub-top-cost.XXXXXX")
PORT=46931
"$B/agent-hub-server" demo "$D/hub" --port "$PORT" >"$D/hub.out" 2>&1 &
HUB=$!
AW="" TOP=""
trap 'kill $TOP $AW $HUB 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$D"' EXIT
for _ in $(seq 100); do grep -q "hub ready" "$D/hub.out" 2>/dev/null && break; sleep 0.1; done
H=$D/hub
W=(--as worker --token-file "$H/tokens/worker.token" --port "$PORT")
O=(--as orchestrator --token-file "$H/tokens/orchestrator.token" --port "$PORT")
"$B/agent-hub" await "${W[@]}" --kind never >/dev/null &
AW=$!
for _ in 1 2 3; do "$B/agent-hub" send "${O[@]}" --to worker --kind task --body '{"n":1}' >/dev/null; done
ticks() { awk '{print $14 + $15}' "/proc/$HUB/stat"; }
size() { stat -c %s "$1"; }
echo "clock ticks per second: $(getconf CLK_TCK); window ${WIN}s"
a=$(ticks); sleep "$WIN"; b=$(ticks)
echo "without top: $((b - a)) ticks"
"$B/agent-hub" top "${O[@]}" --interval "$IV" >"$D/top.out" &
TOP=$!
sleep 2
a=$(ticks); al=$(size "$H/audit.jsonl"); sl=$(size "$H/service.log")
sleep "$WIN"
b=$(ticks); bl=$(size "$H/audit.jsonl"); tl=$(size "$H/service.log")
echo "with top --interval $IV: $((b - a)) ticks, audit log +$((bl - al)) bytes, service log +$((tl - sl)) bytes, $(grep -c '^agent-hub top' "$D/top.out") snapshots in all"
