#!/usr/bin/env bash
# The main job (`make bench-run`, after `make bench` installed what is
# missing): two ferry_bench processes on this host's loopback, a --target
# and an initiator --connect'ed to it, WRITE then READ at each size:
#
#   best  both sides --nics auto: the segment picks the best transport
#         between them (cma on one host when the kernel allows it, else
#         verbs between RDMA devices, else tcp); the table says which
#   tcp   both sides --nics tcp
#   verbs both sides on the first RDMA device, only when this host has one
#         (auto prefers cma on one host)
#
# One core each side (the initiator on CPU 0, the target on CPU 1), ports
# from the kernel (the target listens on 127.0.0.1:0), each target stopped
# by its pid.  Prints one table: transport, op, size, GB/s, req/s, p50 us.
#
#   bench/main-job.sh [ferry_bench flags for the initiators]
#
# Environment (optional): MAIN_SIZES="64K 1M"  MAIN_OPS="write read"
#   MAIN_DURATION=2 (s)  FERRY_BENCH=path  B=build  MAIN_LOGDIR=$B/main-job
#   FERRY_TARGET_ARGS="..."  (FERRY_BENCH_ARGS="..." as well as the arguments)
# Exit status: 0 when every run worked, 1 otherwise.
set -u

cd "$(dirname "$0")/.." || exit 1
CMP_NAME=main-job
# shellcheck source=bench/compare-lib.sh
. bench/compare-lib.sh
# shellcheck source=bench/loopback-lib.sh
. bench/loopback-lib.sh
B=${B:-build}
BENCH=${FERRY_BENCH:-$B/ferry_bench}
read -r -a SIZES <<<"${MAIN_SIZES:-64K 1M}"
read -r -a OPS <<<"${MAIN_OPS:-write read}"
DUR=${MAIN_DURATION:-2}
LOGDIR=${MAIN_LOGDIR:-$B/main-job}
TMO=$((${DUR%.*} + 60))
failed=0

[ -x "$BENCH" ] || die "$BENCH missing: run 'make $BENCH' first"
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
private_bench

# p50 of the per-request latency of a ferry_bench --json ("-" when absent).
lat_p50() {
	local v
	v=$(sed -n 's/.*"lat_us":{[^}]*"p50":\([0-9.]*\).*/\1/p' "$1" | head -n 1)
	echo "${v:--}"
}

runs=("best auto" "tcp tcp")
dev=$(find /sys/class/infiniband -mindepth 1 -maxdepth 1 -printf "%f\n" 2>/dev/null | sort | head -n 1)
[ -n "$dev" ] && runs+=("verbs $dev")

echo "# ferry main job: two processes on loopback, initiator CPU $(cpu_pair | cut -d' ' -f1)," \
	"target CPU $(cpu_pair | cut -d' ' -f2), ${DUR}s per run, load $(loadavg)" \
	"(logs in $LOGDIR)"
printf "%-6s %-10s %-6s %9s %8s %10s %9s\n" run transport op size GB/s req/s p50_us
for r in "${runs[@]}"; do
	read -r name nics <<<"$r"
	for op in "${OPS[@]}"; do
		for s in "${SIZES[@]}"; do
			log=$name-$op-$s
			if ! ferry_pair "$log" "$nics" "$nics" --op "$op" --size "$s" \
				--duration "$DUR" "$@"; then
				failed=1
				printf "%-6s %-10s %-6s %9s %8s %10s %9s  (failed: %s)\n" "$name" - "$op" \
					"$s" - - - "$(grep -m1 ferry_bench: "$LOGDIR/$log.err")"
				continue
			fi
			printf "%-6s %-10s %-6s %9s %8.2f %10.0f %9s\n" "$name" \
				"$(json_str_val "$LOGDIR/$log.json" transport)" "$op" "$s" \
				"$(json_num "$LOGDIR/$log.json" gbps)" \
				"$(json_num "$LOGDIR/$log.json" req_per_s)" \
				"$(lat_p50 "$LOGDIR/$log.json")"
		done
	done
done
if grep -qs '"transport":"tcp"' "$LOGDIR"/best-*.json; then
	echo "# 'best' went over tcp: cma was refused or the peer is not on this host;" \
		"the reason is in $LOGDIR/best-*.err (README \"cma\": what the target must allow)"
fi
exit $failed
