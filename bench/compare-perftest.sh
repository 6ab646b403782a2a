#!/usr/bin/env bash
# ferry_bench against perftest on Soft-RoCE, run INSIDE the VM:
#
#   make build/ferry_bench
#   ../shared/softroce/vm-run --devices 2 --timeout 900 -- bench/compare-perftest.sh
#
# For each size (64K, 1M) and op (write, read): perftest (ib_write_bw /
# ib_read_bw, server on the first device, client on the second) and ferry_bench
# in two processes (--target on the first device, --connect from the second),
# same size, same number of outstanding messages (perftest -t N, ferry --batch
# N), same duration.  Then latency: ib_write_lat -s 8 against ferry_bench --lat
# --size 8 (and the READ pair).  Prints one table; the raw outputs stay in
# $COMPARE_LOGDIR.  ~2 minutes in the emulated VM with the defaults.
#
# Environment (all optional):
#   COMPARE_SIZES="64K 1M"   COMPARE_OPS="write read"   COMPARE_DURATION=5 (s)
#   COMPARE_DEPTH=128        outstanding messages: perftest -t, ferry --batch
#   COMPARE_LAT_ITERS=2000   COMPARE_LAT_OPS="write read"
#   COMPARE_VERIFY=1         ferry_bench --verify (WRITE then reads everything back)
#   FERRY_BENCH_ARGS="..."   extra flags for the ferry initiator (e.g. --spin)
#   FERRY_TARGET_ARGS="..."  extra flags for the ferry target
#   COMPARE_LOGDIR=build/compare-perftest   B=build
# Exit status: 0 when every run produced a number, 1 otherwise.
set -u

cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
BENCH=$B/ferry_bench
SIZES=${COMPARE_SIZES:-64K 1M}
OPS=${COMPARE_OPS:-write read}
DUR=${COMPARE_DURATION:-5}
DEPTH=${COMPARE_DEPTH:-128}
LAT_ITERS=${COMPARE_LAT_ITERS:-2000}
LAT_OPS=${COMPARE_LAT_OPS:-write read}
LOGDIR=${COMPARE_LOGDIR:-$B/compare-perftest}
read -r -a DEVS <<<"${SOFTROCE_DEVICES:-rxe0 rxe1}"
read -r -a ADDRS <<<"${SOFTROCE_ADDRS:-10.99.0.1 10.99.0.2}"
GID=${SOFTROCE_GID_INDEX:-1}
SRV_DEV=${DEVS[0]} CLI_DEV=${DEVS[1]:-${DEVS[0]}} SRV_ADDR=${ADDRS[0]}
# A run that takes longer than this is hung (a client that lost its server).
TMO=$((DUR + 60))
FERRY_PORT=18700
port=18600 # perftest: a fresh port per test
failed=0
pids=()

die() { echo "compare-perftest: $*" >&2; exit 1; }
[ -x "$BENCH" ] || die "$BENCH missing: run 'make $BENCH' on the host first"
command -v ib_write_bw >/dev/null || die "perftest is not installed"
ls /sys/class/infiniband/"$SRV_DEV" >/dev/null 2>&1 || die "no RDMA device $SRV_DEV (run me in the Soft-RoCE VM)"
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"

cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null
	done
}
trap cleanup EXIT

# "64K" -> 65536
bytes() {
	local n=${1%[KkMmGg]} s=${1#"${1%[KkMmGg]}"}
	case $s in
	K | k) echo $((n << 10)) ;;
	M | m) echo $((n << 20)) ;;
	G | g) echo $((n << 30)) ;;
	*) echo "$n" ;;
	esac
}

# Wait until something listens on TCP port $1 (at most $2 tenths of a second).
wait_listen() {
	local i
	for ((i = 0; i < $2; i++)); do
		[ -n "$(ss -Htln "sport = :$1")" ] && return 0
		sleep 0.1
	done
	return 1
}

# perftest pair: $1 = program, $2 = log name, rest = flags for both sides.
# The server runs in the background on the first device; the client output
# goes to $LOGDIR/$2.client.
perftest_pair() {
	local prog=$1 name=$2 spid rc
	shift 2
	port=$((port + 1))
	timeout "$TMO" "$prog" -d "$SRV_DEV" -x "$GID" -F -p "$port" "$@" >"$LOGDIR/$name.server" 2>&1 &
	spid=$!
	pids+=("$spid")
	if ! wait_listen "$port" 300; then
		echo "compare-perftest: $prog server did not listen on $port" >&2
		return 1
	fi
	timeout "$TMO" "$prog" -d "$CLI_DEV" -x "$GID" -F -p "$port" "$@" "$SRV_ADDR" \
		>"$LOGDIR/$name.client" 2>&1
	rc=$?
	wait "$spid" 2>/dev/null
	return $rc
}

# MB/s (10^6 bytes) from a perftest bw client: MsgRate[Mpps] x size has six
# decimals where BW average[Gb/sec] has two.
perftest_mbps() {
	awk -v size="$2" '/#bytes/ { hdr = 1; next }
		hdr && $1 ~ /^[0-9]+$/ { printf "%.1f", $5 * size; found = 1; exit }
		END { if (!found) printf "-" }' "$1"
}

# typical and 99% latency (us) from a perftest lat client.
perftest_lat() {
	awk '/t_typical/ { hdr = 1; next }
		hdr && $1 ~ /^[0-9]+$/ { printf "%.2f %.2f", $5, $8; found = 1; exit }
		END { if (!found) printf "- -" }' "$1"
}

# A number from ferry_bench --json: json_num FILE KEY.
json_num() {
	local v
	v=$(sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1" | head -n 1)
	echo "${v:--}"
}

start_ferry_target() {
	local maxsize=0 s b i
	for s in $SIZES; do
		b=$(bytes "$s")
		[ "$b" -gt "$maxsize" ] && maxsize=$b
	done
	BUFFER=$((maxsize * DEPTH))
	[ "$BUFFER" -lt $((1 << 20)) ] && BUFFER=$((1 << 20))
	# shellcheck disable=SC2086
	timeout $((TMO * 20)) "$BENCH" --target --nics "$SRV_DEV" --listen "127.0.0.1:$FERRY_PORT" \
		--buffer "$BUFFER" ${FERRY_TARGET_ARGS:-} >"$LOGDIR/ferry-target.log" 2>&1 &
	FERRY_TARGET_PID=$!
	pids+=("$FERRY_TARGET_PID")
	# Its line comes after the buffer is registered: listening alone is too early.
	for ((i = 0; i < 600; i++)); do
		grep -q "^ferry_bench target: listening on" "$LOGDIR/ferry-target.log" && return 0
		kill -0 "$FERRY_TARGET_PID" 2>/dev/null || break
		sleep 0.1
	done
	echo "compare-perftest: ferry_bench --target did not come up:" >&2
	cat "$LOGDIR/ferry-target.log" >&2
	return 1
}

# ferry_bench initiator: $1 = log name, rest = flags.
ferry_run() {
	local name=$1
	shift
	# shellcheck disable=SC2086
	timeout "$TMO" "$BENCH" --connect "127.0.0.1:$FERRY_PORT" --nics "$CLI_DEV" \
		--buffer "$BUFFER" --json ${FERRY_BENCH_ARGS:-} "$@" >"$LOGDIR/$name.json" \
		2>"$LOGDIR/$name.err"
}

ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b != "-") printf "%.2f", b / a; else printf "-" }'
}

echo "compare-perftest: server/target $SRV_DEV ($SRV_ADDR), client/initiator $CLI_DEV," \
	"gid $GID, ${DUR}s per run, $DEPTH outstanding, logs in $LOGDIR"
start_ferry_target || exit 1
verify=()
[ "${COMPARE_VERIFY:-0}" = 1 ] && verify=(--verify)

bw_rows=()
for s in $SIZES; do
	b=$(bytes "$s")
	for op in $OPS; do
		name=bw-$op-$s
		perftest_pair "ib_${op}_bw" "$name.perftest" -s "$b" -D "$DUR" -t "$DEPTH" \
			--report_gbits || failed=1
		pt=$(perftest_mbps "$LOGDIR/$name.perftest.client" "$b")
		ferry_run "$name.ferry" --op "$op" --size "$b" --batch "$DEPTH" -D "$DUR" \
			"${verify[@]}" || failed=1
		fe=$(json_num "$LOGDIR/$name.ferry.json" mbps)
		[ "$pt" = - ] || [ "$fe" = - ] && failed=1
		bw_rows+=("$(printf "%-6s %-6s %14s %12s %8s" "$s" "$op" "$pt" "$fe" "$(ratio "$pt" "$fe")")")
	done
done

lat_rows=()
for op in $LAT_OPS; do
	name=lat-$op-8
	perftest_pair "ib_${op}_lat" "$name.perftest" -s 8 -n "$LAT_ITERS" || failed=1
	read -r pt_typ pt_p99 <<<"$(perftest_lat "$LOGDIR/$name.perftest.client")"
	ferry_run "$name.ferry" --lat --op "$op" --size 8 -n "$LAT_ITERS" || failed=1
	fe_typ=$(json_num "$LOGDIR/$name.ferry.json" p50)
	fe_p99=$(json_num "$LOGDIR/$name.ferry.json" p99)
	[ "$pt_typ" = - ] || [ "$fe_typ" = - ] && failed=1
	lat_rows+=("$(printf "%-6s %-6s %10s %10s %10s %10s %8s" 8 "$op" "$pt_typ" "$pt_p99" \
		"$fe_typ" "$fe_p99" "$(ratio "$pt_typ" "$fe_typ")")")
done

kill -INT "$FERRY_TARGET_PID" 2>/dev/null
wait "$FERRY_TARGET_PID" 2>/dev/null

echo
printf "%-6s %-6s %14s %12s %8s\n" size op "perftest_MB/s" "ferry_MB/s" "ferry/pt"
printf "%s\n" "${bw_rows[@]}"
echo
printf "%-6s %-6s %10s %10s %10s %10s %8s\n" size op "pt_typ_us" "pt_p99_us" "fe_typ_us" \
	"fe_p99_us" "ferry/pt"
printf "%s\n" "${lat_rows[@]}"
echo
echo "(MB/s = 10^6 bytes/s; perftest: -x $GID -F -t $DEPTH -D $DUR, lat -n $LAT_ITERS;" \
	"ferry: --batch $DEPTH, --buffer $BUFFER${FERRY_BENCH_ARGS:+, $FERRY_BENCH_ARGS})"
if [ "$failed" != 0 ]; then
	echo "compare-perftest: some runs failed, see $LOGDIR" >&2
	grep -h "ferry_bench:" "$LOGDIR"/*.err >&2
fi
exit "$failed"
