#!/usr/bin/env bash
# ferry_bench against Mooncake's transfer_engine_bench on Soft-RoCE, run
# INSIDE the VM (the peer is built locally from Mooncake's sources, never
# part of this repository; give its path):
#
#   make build/ferry_bench
#   MOONCAKE_BENCH=/path/to/transfer_engine_bench \
#     ../shared/softroce/vm-run --devices 2 --timeout 900 -- bench/compare-mooncake.sh
#
# Two processes each: target on the first device, initiator on the second,
# one submitting thread, same block size, same batch (Mooncake submits a
# batch and waits for all of it: ferry runs --sync --batch N, like for
# like, and its default in-flight mode with N outstanding), same duration,
# and as many threads moving the bytes: Mooncake's initiator runs
# MC_WORKERS_PER_CTX worker threads per device (its default 2, on any CPU
# of the device's NUMA node), ferry's one engine core per worker (--cores
# 0..W-1, at most one per CPU).  On Soft-RoCE that matters: rxe does both
# sides' work in softirq on the CPU that posted, so one posting thread
# gets one CPU's worth.
# Mooncake finds its peer through its P2P handshake (no metadata server);
# MC_GID_INDEX picks the RoCE GID as FERRY_GID_INDEX does for ferry.
#
# Environment (all optional but MOONCAKE_BENCH):
#   COMPARE_SIZES="64K 1M"  COMPARE_OPS="write read"  COMPARE_DURATION=5 (s, whole)
#   COMPARE_DEPTH=32        batch: Mooncake --batch_size, ferry --batch
#   COMPARE_ROUNDS=1        repeat everything; the table shows medians
#   MC_WORKERS_PER_CTX=2    Mooncake's worker threads per device (its default)
#   COMPARE_FERRY_CORES     ferry initiator's --cores (default: one per worker)
#   COMPARE_LOGDIR=build/compare-mooncake  B=build  FERRY_BENCH=path
# Exit status: 0 when every run produced a number, 1 otherwise.
set -u

cd "$(dirname "$0")/.." || exit 1
CMP_NAME=compare-mooncake
# shellcheck source=bench/compare-lib.sh
. bench/compare-lib.sh
B=${B:-build}
BENCH=${FERRY_BENCH:-$B/ferry_bench}
MC=${MOONCAKE_BENCH:-}
SIZES=${COMPARE_SIZES:-64K 1M}
OPS=${COMPARE_OPS-write read}
DUR=${COMPARE_DURATION:-5}
# Mooncake's bench takes whole seconds: every tool runs the same whole number.
case $DUR in
'' | *[!0-9]* | 0) echo "${0##*/}: COMPARE_DURATION '$DUR': a whole number of seconds, 1 or more" >&2; exit 2 ;;
esac
DEPTH=${COMPARE_DEPTH:-32}
ROUNDS=${COMPARE_ROUNDS:-1}
LOGDIR=${COMPARE_LOGDIR:-$B/compare-mooncake}
softroce_pair
TMO=${COMPARE_TIMEOUT:-$((DUR + 120))}
FERRY_PORT=18750
failed=0

[ -n "$MC" ] || die "set MOONCAKE_BENCH to a transfer_engine_bench built from Mooncake's sources"
[ -x "$MC" ] || die "MOONCAKE_BENCH=$MC is not an executable"
ls /sys/class/infiniband/"$SRV_DEV" >/dev/null 2>&1 || die "no RDMA device $SRV_DEV (run me in the Soft-RoCE VM)"
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
private_bench
# shellcheck disable=SC2086 # one word per size
BUFFER=$(($(max_bytes $SIZES) * DEPTH * 2))
[ "$BUFFER" -lt $((64 << 20)) ] && BUFFER=$((64 << 20))
export MC_GID_INDEX=$GID
MC_WORKERS=${MC_WORKERS_PER_CTX:-2} # Mooncake's workers_per_ctx default (its config.h)
case $MC_WORKERS in '' | *[!0-9]* | 0) die "MC_WORKERS_PER_CTX=$MC_WORKERS: expected a count of threads" ;; esac
export MC_WORKERS_PER_CTX=$MC_WORKERS
ncpu=$(nproc)
FERRY_CORES=${COMPARE_FERRY_CORES:-$(seq -s, 0 $((ncpu < MC_WORKERS ? ncpu - 1 : MC_WORKERS - 1)))}

# Mooncake pair: $1 = log name, $2 = op, $3 = block bytes; prints MB/s.
mooncake_pair() {
	local name=$1 op=$2 size=$3 tpid seg i
	timeout "$TMO" "$MC" --mode=target --protocol=rdma --device_name="$SRV_DEV" \
		--metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1:$((FERRY_PORT + 10)) \
		--buffer_size="$BUFFER" >"$LOGDIR/$name.target" 2>&1 &
	tpid=$!
	pids+=("$tpid")
	if ! seg=$(mooncake_segment "$LOGDIR/$name.target" "$tpid" 600); then
		kill "$tpid" 2>/dev/null
		echo -
		return 1
	fi
	timeout "$TMO" "$MC" --mode=initiator --protocol=rdma --device_name="$CLI_DEV" \
		--metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1:$((FERRY_PORT + 11)) \
		--segment_id="$seg" --operation="$op" --threads=1 --batch_size="$DEPTH" \
		--block_size="$size" --buffer_size="$BUFFER" --duration="$DUR" --report_unit=MB --report_precision=1 >"$LOGDIR/$name.out" 2>&1
	kill -INT "$tpid" 2>/dev/null
	wait "$tpid" 2>/dev/null
	i=$(sed -n 's/.*Test completed:.*throughput \([0-9.]*\) MB\/s.*/\1/p' "$LOGDIR/$name.out" | tail -n 1)
	echo "${i:--}"
}

echo "$CMP_NAME: target $SRV_DEV, initiator $CLI_DEV, gid $GID, ${DUR}s per run," \
	"batch $DEPTH, Mooncake $MC_WORKERS worker(s), ferry cores $FERRY_CORES," \
	"$ROUNDS round(s), logs in $LOGDIR"
start_ferry_targets || exit 1
declare -A mc fs fl
for ((round = 1; round <= ROUNDS; round++)); do
	for s in $SIZES; do
		b=$(bytes "$s")
		for op in $OPS; do
			name=$op-$s.r$round
			v=$(mooncake_pair "$name.mooncake" "$op" "$b")
			mc[$s $op]+=" $v"
			[ "$v" = - ] && failed=1
			ferry_run "$name.ferry-sync" "$op" --cores "$FERRY_CORES" --sync --size "$b" \
				--batch "$DEPTH" -D "$DUR" || failed=1
			v=$(json_num "$LOGDIR/$name.ferry-sync.json" mbps)
			fs[$s $op]+=" $v"
			ferry_run "$name.ferry" "$op" --cores "$FERRY_CORES" --size "$b" --batch "$DEPTH" \
				-D "$DUR" || failed=1
			v=$(json_num "$LOGDIR/$name.ferry.json" mbps)
			fl[$s $op]+=" $v"
		done
	done
done
ferry_targets_stop

echo
printf "%-6s %-6s %12s %14s %10s %15s %10s\n" size op "mooncake_MB/s" "ferry_sync_MB/s" "sync/mc" \
	"ferry_infl_MB/s" "infl/mc"
for s in $SIZES; do
	for op in $OPS; do
		# shellcheck disable=SC2086 # word splitting of the value lists is the point
		m=$(median ${mc[$s $op]}) a=$(median ${fs[$s $op]}) c=$(median ${fl[$s $op]})
		printf "%-6s %-6s %12s %14s %10s %15s %10s\n" "$s" "$op" "$m" "$a" "$(ratio "$m" "$a")" \
			"$c" "$(ratio "$m" "$c")"
	done
done
echo
echo "(MB/s = 10^6 bytes/s, medians of $ROUNDS round(s); Mooncake: --protocol=rdma --threads=1" \
	"--batch_size=$DEPTH --duration=$DUR, P2PHANDSHAKE, MC_GID_INDEX=$GID," \
	"MC_WORKERS_PER_CTX=$MC_WORKERS; ferry: --cores $FERRY_CORES --batch $DEPTH -D $DUR," \
	"--sync = batch-synchronous like Mooncake, in flight = $DEPTH outstanding)"
[ "$failed" = 0 ] || echo "$CMP_NAME: some runs failed, see $LOGDIR" >&2
exit "$failed"
