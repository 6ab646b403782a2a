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
#  Idle passes (core_pass calls that found no ring part and no completion)
#  are left out of the per-request figures: callgrind dumps its counts
#  before and after every core_pass and before every core_idle, which the
#  core's thread calls after a pass that did no work, so an idle pass is a
#  dump "after core_pass" followed by one "before core_idle".  The sweeps
#  (core_sweep, every 10 ms of wall time: QP timeouts, repairs, rail pauses)
#  are left out too: under valgrind (and its dumps) a run takes ~100 times
#  longer, so their share per request would be ~100 times what it is
#  natively; the figure with them is printed beside.
#   bench/callgrind.sh [ferry_bench binary] [iters]
set -euo pipefail
BENCH=${1:-build/ferry_bench}
ITERS=${2:-200}
command -v valgrind >/dev/null || { echo "callgrind: apt-get install -y valgrind" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME TOGGLES... -- BENCH-ARGS...: the bench under callgrind, JSON in
# $out/NAME.json; $DUMPS (valgrind options) may add dumps
run() {
	local name=$1 toggles=()
	shift
	while [ "$1" != -- ]; do
		toggles+=(--toggle-collect="$1")
		shift
	done
	shift
	valgrind --tool=callgrind --callgrind-out-file="$out/$name.%p" --collect-atstart=no \
		"${toggles[@]}" ${DUMPS:-} "$BENCH" "$@" --json >"$out/$name.json" 2>"$out/$name.log" ||
		{ cat "$out/$name.log" >&2; exit 1; }
}

# total NAME: instructions counted
total() {
	grep -h "^summary:" "$out/$1".[0-9]* | awk '{s += $2} END {print s + 0}'
}

# field NAME KEY: the first number of "KEY": in NAME's JSON
field() {
	grep -o "\"$2\":[ ]*[0-9]*" "$out/$1.json" | head -1 | grep -o '[0-9]*$' || true
}

# idle_files NAME: the idle passes' dumps, those after core_pass that a
# dump before core_idle follows (in dump order, "part:")
idle_files() {
	for f in "$out/$1".[0-9]*; do
		awk -v f="$f" '/^part:/ { p = $2 } /^desc: Trigger:/ { t = $NF }
		END { print p + 0, t, f }' "$f"
	done | sort -n | awk '
	{ t[NR] = $2; f[NR] = $3 }
	END { for (i = 1; i < NR; i++)
		if (t[i] == "--dump-after=core_pass" && t[i + 1] == "--dump-before=core_idle")
			print f[i] }'
}

# sum FILES...: instructions counted in them
sum() {
	[ $# -gt 0 ] || { echo 0; return; }
	grep -h "^summary:" "$@" | awk '{s += $2} END {print s + 0}'
}

# inclusive FUNCTION FILES...: instructions of the calls to FUNCTION (the
# cost lines that follow its calls; names are compressed to "(id)" after
# the first mention, in fn= and cfn= alike)
inclusive() {
	local fn=$1
	shift
	[ $# -gt 0 ] || { echo 0; return; }
	awk -v fn="$fn" '
	/^c?fn=/ { s = $0; sub(/^c?fn=/, "", s); id = s; sub(/\).*/, ")", id)
		nm = s; sub(/^\([0-9]+\) ?/, "", nm); if (nm != "") name[id] = nm
		if ($0 ~ /^cfn=/) callee = name[id]; next }
	/^calls=/ { grab = 1; next }
	grab { if (callee == fn) t += $2; grab = 0 }
	END { print t + 0 }' "$@"
}

# nic NAME: inclusive instructions of loop_post and loop_poll
nic() {
	echo $(($(inclusive loop_post "$out/$1".[0-9]*) + $(inclusive loop_poll "$out/$1".[0-9]*)))
}

# busy NAME: instructions counted with the idle passes and the sweeps left
# out, and the sweeps of the passes that are left
busy() {
	local idle sw_all sw_idle
	mapfile -t idle < <(idle_files "$1")
	sw_all=$(inclusive core_sweep "$out/$1".[0-9]*)
	sw_idle=$(inclusive core_sweep "${idle[@]}")
	echo $(($(total "$1") - $(sum "${idle[@]}") - sw_all + sw_idle)) $((sw_all - sw_idle))
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
DUMPS="--dump-before=core_pass --dump-after=core_pass --dump-before=core_idle"
run req ferry_submit core_pass ferry_req_status -- "${req_args[@]}"
run prep ferry_prep_submit core_pass ferry_req_status -- "${req_args[@]}" --prep
n=$(field req requests)
np=$(field prep requests)
need requests "$n"
need requests "$np"
read -r busy sw < <(busy req)
read -r pbusy psw < <(busy prep)
awk -v b="$busy" -v sw="$sw" -v ir="$(total req)" -v nic="$(nic req)" -v n="$n" \
	-v pb="$pbusy" -v pnic="$(nic prep)" -v pn="$np" 'BEGIN {
	r = b / n; p = pb / pn
	printf "callgrind: %.0f instructions per one-slice request (submit + core + completion seen; idle passes and 10 ms sweeps left out), %.0f of them the software NIC'"'"'s (loop_post + loop_poll); %.0f with the sweeps, %.0f with idle passes too\n", r, nic / n, r + sw / n, ir / n
	printf "callgrind: %.0f instructions per one-slice request with ferry_prep_submit (the same left out), %.0f of them the software NIC'"'"'s: %.0f %s per request\n", p, pnic / pn, (r > p ? r - p : p - r), (r > p ? "fewer" : "more") }'
