#!/usr/bin/env bash
# Instructions of the data plane, counted by valgrind's callgrind
# (instruction counts are stable on a noisy, shared machine; seconds are not).
#  1. Per slice: ferry_bench on the copy-free software NIC with 16 MiB
#     requests, counting only what the worker core executes inside
#     core_pass() (ring dequeue, cutting, posting, polling, accounting, and
#     the software NIC's own work), divided by the work requests it retired.
#  2. Per one-slice request: 4 KiB requests, batch-synchronous (--sync, so
#     that the bench's own waiting is in ferry_batch_wait, which is not
#     counted) and each request's status read once (--status-once):
#     ferry_submit + core_pass + ferry_req_status, divided by the requests;
#     the software NIC's share is the inclusive cost of loop_post and
#     loop_poll (what a real NIC does in hardware).  Then the same with
#     --prep, ferry_prep_submit instead of ferry_submit: the validation a
#     prepared set saves per request.
#   bench/callgrind.sh [ferry_bench binary] [iters]
set -euo pipefail
BENCH=${1:-build/ferry_bench}
ITERS=${2:-200}
command -v valgrind >/dev/null || { echo "callgrind: apt-get install -y valgrind" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME TOGGLES... -- BENCH-ARGS...: the bench under callgrind, JSON in $out/NAME.json
run() {
	local name=$1 toggles=()
	shift
	while [ "$1" != -- ]; do
		toggles+=(--toggle-collect="$1")
		shift
	done
	shift
	valgrind --tool=callgrind --callgrind-out-file="$out/$name.%p" --collect-atstart=no \
		"${toggles[@]}" "$BENCH" "$@" --json >"$out/$name.json" 2>"$out/$name.log" ||
		{ cat "$out/$name.log" >&2; exit 1; }
}

# total NAME: instructions counted
total() {
	grep -h "^summary:" "$out/$1".[0-9]* | awk '{s += $2} END {print s + 0}'
}

# nic NAME: inclusive instructions of loop_post and loop_poll (the cost
# lines that follow their calls; names are compressed to "(id)" after the
# first mention, in fn= and cfn= alike)
nic() {
	awk '
	/^c?fn=/ { s = $0; sub(/^c?fn=/, "", s); id = s; sub(/\).*/, ")", id)
		nm = s; sub(/^\([0-9]+\) ?/, "", nm); if (nm != "") name[id] = nm
		if ($0 ~ /^cfn=/) callee = name[id]; next }
	/^calls=/ { grab = 1; next }
	grab { if (callee == "loop_post" || callee == "loop_poll") t += $2; grab = 0 }
	END { print t + 0 }' "$out/$1".[0-9]*
}

# field NAME KEY: the first number of "KEY": in NAME's JSON
field() {
	grep -o "\"$2\":[ ]*[0-9]*" "$out/$1.json" | head -1 | grep -o '[0-9]*$' || true
}

need() {
	if [ -z "$2" ] || [ "$2" = 0 ]; then
		echo "callgrind: no $1 reported by the bench" >&2
		cat "$out"/*.json >&2
		exit 1
	fi
}

# 1. Per slice: 16 MiB requests in 64 KiB slices, 256 per request keep the core busy.
run slice core_pass -- --nics loop --nocopy --size 16M --batch 4 --sync --iters "$ITERS"
ir=$(total slice)
wrs=$(field slice completions)
need completions "$wrs"
awk -v ir="$ir" -v w="$wrs" 'BEGIN {
	printf "callgrind: %d instructions in core_pass for %d work requests: %.1f instructions per slice\n", ir, w, ir / w }'

# 2. Per one-slice request, submitted as requests and as a prepared set.
req_args=(--nics loop --nocopy --size 4K --batch 64 --sync --status-once --iters "$ITERS" ${CALLGRIND_ARGS:-})
run req ferry_submit core_pass ferry_req_status -- "${req_args[@]}"
run prep ferry_prep_submit core_pass ferry_req_status -- "${req_args[@]}" --prep
n=$(field req requests)
np=$(field prep requests)
need requests "$n"
need requests "$np"
awk -v ir="$(total req)" -v nic="$(nic req)" -v n="$n" \
	-v pir="$(total prep)" -v pnic="$(nic prep)" -v pn="$np" 'BEGIN {
	r = ir / n; p = pir / pn
	printf "callgrind: %.0f instructions per one-slice request (submit + core + completion seen), %.0f of them the software NIC'"'"'s (loop_post + loop_poll)\n", r, nic / n
	printf "callgrind: %.0f instructions per one-slice request with ferry_prep_submit, %.0f of them the software NIC'"'"'s: %.0f fewer per request\n", p, pnic / pn, r - p }'
