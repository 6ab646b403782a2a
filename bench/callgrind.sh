#!/usr/bin/env bash
# Instructions per slice of the data plane, counted by valgrind's callgrind
# (instruction counts are stable on a noisy, shared machine; seconds are not).
# Runs ferry_bench on the copy-free software NIC and counts only what the
# worker core executes inside core_pass() (ring dequeue, cutting, posting,
# polling, accounting, and the software NIC's own work), then divides by the
# work requests the core retired.
#   bench/callgrind.sh [ferry_bench binary] [iters]
set -euo pipefail
BENCH=${1:-build/ferry_bench}
ITERS=${2:-200}
command -v valgrind >/dev/null || { echo "callgrind: apt-get install -y valgrind" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# 16 MiB requests in 64 KiB slices: 256 slices per request keep the core busy.
valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" --collect-atstart=no \
	--toggle-collect=core_pass "$BENCH" --nics loop --nocopy --size 16M --batch 4 --iters "$ITERS" \
	--json >"$out/bench.json" 2>"$out/valgrind.log" || { cat "$out/valgrind.log" >&2; exit 1; }
ir=$(grep -h "^summary:" "$out"/cg.* | awk '{s += $2} END {print s + 0}')
wrs=$(grep -o '"completions":[ ]*[0-9]*' "$out/bench.json" | head -1 | grep -o '[0-9]*$')
if [ -z "$wrs" ] || [ "$wrs" = 0 ]; then
	echo "callgrind: no completions reported by the bench" >&2
	cat "$out/bench.json" >&2
	exit 1
fi
awk -v ir="$ir" -v w="$wrs" 'BEGIN {
	printf "callgrind: %d instructions in core_pass for %d work requests: %.1f instructions per slice\n", ir, w, ir / w }'
