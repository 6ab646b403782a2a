#!/usr/bin/env bash
# ferry over tcp and cma against the plain baselines, in one go, on this
# host's loopback (no VM, no RDMA):
#
#   make build/ferry_bench bench-tools      # ferry_bench, tcp_pingpong, memcpy_bw
#   .ci/install-deps bench                  # iperf3 (as root; else it prints the line)
#   [MOONCAKE_BENCH=/path/to/transfer_engine_bench] bench/compare-tcp.sh
#
# Each round, at each size (64 KiB, 1 MiB), one CPU per side (sender or
# initiator on CPU 0, receiver or target on CPU 1), WRITE:
#   iperf3       one stream, -l SIZE (iperf3 -c 127.0.0.1 -t D -l SIZE)
#   mooncake     Mooncake's transfer_engine_bench --protocol=tcp,
#                P2PHANDSHAKE metadata, --threads=1, --batch_size=32
#                (batch-synchronous); skipped when MOONCAKE_BENCH is unset
#   ferry tcp    ferry_bench --target / --connect --nics tcp, 32 in flight
#   memcpy       build/memcpy_bw: one thread copying SIZE blocks between two
#                256 MiB pools (cold buffers)
#   ferry cma    ferry_bench --nics cma, --batch so that the requests cover
#                256 MiB on each side (cold buffers, as memcpy's)
# and 8 bytes: build/tcp_pingpong (blocking reads, and --busy polling) against
# ferry_bench --pingpong --nics tcp (half round trips both), and ferry cma
# --lat (a whole request, submit to completion).  Then the ratios against
# the goals of issue 10:
#   ferry tcp >= 0.9x iperf3 one stream at 1 MiB, >= 2x Mooncake tcp at 64 KiB,
#   8-byte half round trip <= 1.5x the plain ping-pong's, cma >= 0.8x memcpy
#   (at >= 1 MiB), cma 8-byte latency <= 2 us.
# With several rounds (interleaved: every tool once per round) the table
# shows the median and the range.  Raw outputs stay in $COMPARE_LOGDIR.
#
# Environment (all optional):
#   COMPARE_SIZES="64K 1M"  COMPARE_DURATION=3 (s)  COMPARE_ROUNDS=1
#   COMPARE_PP_ITERS=20000 (8-byte round trips per run)
#   COMPARE_LAT_ARGS=--caller  ferry's 8-byte rows (both processes): idle
#                           policy caller, the waiting thread runs the passes
#                           (one thread per process, like the plain
#                           ping-pong's); "" for the cores' own threads
#   MOONCAKE_BENCH=path     MOONCAKE_BATCH=32
#   FERRY_BENCH=path  B=build  COMPARE_LOGDIR=$B/compare-tcp
#   FERRY_BENCH_ARGS="..."  FERRY_TARGET_ARGS="..."
#   COMPARE_HUGEPAGES=1     memcpy and ferry cma (both sides) on transparent
#                           huge pages (--hugepages), like for like; 4 KiB
#                           pages by default (bench/compare-cma.sh: both)
# Exit status: 0 when every run produced a number, 1 otherwise.  Goals not
# met are reported, not failed: this is a benchmark, not a test.
set -u

cd "$(dirname "$0")/.." || exit 1
CMP_NAME=compare-tcp
# shellcheck source=bench/compare-lib.sh
. bench/compare-lib.sh
# shellcheck source=bench/loopback-lib.sh
. bench/loopback-lib.sh
B=${B:-build}
BENCH=${FERRY_BENCH:-$B/ferry_bench}
PINGPONG=$B/tcp_pingpong
MEMCPY=$B/memcpy_bw
read -r -a SIZES <<<"${COMPARE_SIZES:-64K 1M}"
DUR=${COMPARE_DURATION:-3}
case $DUR in
'' | . | *[!0-9.]* | *.*.*) echo "${0##*/}: COMPARE_DURATION '$DUR': not a number of seconds" >&2; exit 2 ;;
esac
# Mooncake's bench takes whole seconds: with it, every tool runs the same whole number.
if [ -n "${MOONCAKE_BENCH:-}" ]; then
	case $DUR in
	*[!0-9]* | 0) echo "${0##*/}: COMPARE_DURATION '$DUR': a whole number of seconds, 1 or" \
		"more, with MOONCAKE_BENCH (its bench takes whole seconds)" >&2; exit 2 ;;
	esac
fi
ROUNDS=${COMPARE_ROUNDS:-1}
PP_ITERS=${COMPARE_PP_ITERS:-20000}
read -r -a LAT_ARGS <<<"${COMPARE_LAT_ARGS---caller}"
MC=${MOONCAKE_BENCH:-}
MC_BATCH=${MOONCAKE_BATCH:-32}
LOGDIR=${COMPARE_LOGDIR:-$B/compare-tcp}
TMO=$((10#${DUR%.*}0 / 10 + 90)) # whole seconds (".5" is 0, "08" is 8)
POOL=$((256 << 20))
HP=()
[ "${COMPARE_HUGEPAGES:-0}" = 1 ] && HP=(--hugepages)
read -r CPU_I CPU_T <<<"$(cpu_pair)"
failed=0

for f in "$BENCH" "$PINGPONG" "$MEMCPY"; do
	[ -x "$f" ] || die "$f missing: run 'make -j2 $BENCH bench-tools' first"
done
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
private_bench
HAVE_IPERF=1
command -v iperf3 >/dev/null || {
	HAVE_IPERF=0
	echo "$CMP_NAME: iperf3 missing (Debian iperf3: .ci/install-deps bench): its rows skipped" >&2
}
[ -z "$MC" ] && echo "$CMP_NAME: MOONCAKE_BENCH unset: Mooncake's rows skipped" \
	"(set it to a transfer_engine_bench built from Mooncake's sources)" >&2
[ -n "$MC" ] && [ ! -x "$MC" ] && die "MOONCAKE_BENCH=$MC is not an executable"

# Start "$@" in the background pinned to CPU $1, output in $LOGDIR/$2; sets BG_PID.
bg_pinned() {
	local cpu=$1 log=$LOGDIR/$2
	shift 2
	timeout "$TMO" taskset -c "$cpu" "$@" >"$log" 2>&1 &
	BG_PID=$!
	pids+=("$BG_PID")
}

stop_pid() {
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# iperf3, one stream of SIZE writes: GB/s the receiver got.
run_iperf() {
	local s=$1 name=$2 port
	port=$(free_port) || return 1
	bg_pinned "$CPU_T" "$name.server" iperf3 -s -1 -p "$port"
	wait_listen "$port" 50 || { stop_pid "$BG_PID"; return 1; }
	timeout "$TMO" taskset -c "$CPU_I" iperf3 -c 127.0.0.1 -p "$port" -t "$DUR" \
		-l "$(bytes "$s")" -J >"$LOGDIR/$name.json" 2>&1
	wait "$BG_PID" 2>/dev/null
	# "sum_received": { ..., "bits_per_second": X, ... }
	awk '/"sum_received"/ { r = 1 } r && /"bits_per_second"/ { gsub(/[^0-9.e+]/, "", $2);
		printf "%.3f\n", $2 / 8e9; exit }' "$LOGDIR/$name.json"
}

# The plain 8-byte ping-pong: p50 half round trip in us ($2: --busy or "").
run_pingpong() {
	local name=$1 busy=$2 port
	# shellcheck disable=SC2086
	bg_pinned "$CPU_T" "$name.server" "$PINGPONG" --server $busy
	for ((i = 0; i < 50; i++)); do
		port=$(sed -n 's/^tcp_pingpong: port //p' "$LOGDIR/$name.server" 2>/dev/null)
		[ -n "$port" ] && break
		sleep 0.1
	done
	[ -n "$port" ] || { stop_pid "$BG_PID"; return 1; }
	# shellcheck disable=SC2086
	timeout "$TMO" taskset -c "$CPU_I" "$PINGPONG" --connect "127.0.0.1:$port" --size 8 \
		--iters "$PP_ITERS" $busy >"$LOGDIR/$name.out" 2>&1
	wait "$BG_PID" 2>/dev/null
	sed -n 's/.* p50_us \([0-9.]*\) .*/\1/p' "$LOGDIR/$name.out"
}

# Mooncake's transfer_engine_bench over its TCP transport: GB/s.
run_mooncake() {
	local s=$1 name=$2 seg
	bg_pinned "$CPU_T" "$name.target" "$MC" --mode=target --protocol=tcp \
		--metadata_server=P2PHANDSHAKE --local_server_name="127.0.0.1:$(free_port)" \
		--buffer_size="$POOL"
	seg=$(mooncake_segment "$LOGDIR/$name.target" "$BG_PID" 300) || {
		stop_pid "$BG_PID"
		return 1
	}
	timeout "$TMO" taskset -c "$CPU_I" "$MC" --mode=initiator --protocol=tcp \
		--metadata_server=P2PHANDSHAKE --local_server_name="127.0.0.1:$(free_port)" \
		--segment_id="$seg" --operation=write --threads=1 \
		--batch_size="$MC_BATCH" --block_size="$(bytes "$s")" --buffer_size="$POOL" \
		--duration="$DUR" >"$LOGDIR/$name.out" 2>&1
	kill -INT "$BG_PID" 2>/dev/null
	wait "$BG_PID" 2>/dev/null
	sed -n 's/.*Test completed:.*throughput \([0-9.]*\) GB\/s.*/\1/p' "$LOGDIR/$name.out" | tail -n 1
}

# A ferry pair over nics $1, log $2, more flags: the JSON's KEY $3 ("gbps")
# or the latency p50 ("p50").
run_ferry() {
	local nics=$1 name=$2 key=$3
	shift 3
	ferry_pair "$name" "$nics" "$nics" "$@" || return 1
	if [ "$key" = p50 ]; then
		sed -n 's/.*"lat_us":{[^}]*"p50":\([0-9.]*\).*/\1/p' "$LOGDIR/$name.json" | head -n 1
	else
		json_num "$LOGDIR/$name.json" "$key"
	fi
}

# A number or "-" from a run's output: or_dash VALUE.
or_dash() {
	[ -n "$1" ] && echo "$1" || echo -
}

echo "# $CMP_NAME: loopback, initiator/sender CPU $CPU_I, target/receiver CPU $CPU_T," \
	"${DUR}s per run, $ROUNDS round(s), logs in $LOGDIR"
echo "# load average at start: $(loadavg) ($(nproc) CPUs)"
for ((r = 1; r <= ROUNDS; r++)); do
	echo "# round $r/$ROUNDS (load $(loadavg))" >&2
	for s in "${SIZES[@]}"; do
		if [ "$HAVE_IPERF" = 1 ]; then
			note "iperf3 $s" "$(or_dash "$(run_iperf "$s" "r$r-iperf3-$s")")"
		fi
		if [ -n "$MC" ]; then
			note "mooncake $s" "$(or_dash "$(run_mooncake "$s" "r$r-mooncake-$s")")"
		fi
		note "ferry-tcp $s" "$(or_dash "$(run_ferry tcp "r$r-ferry-tcp-$s" gbps \
			--op write --size "$s" --duration "$DUR")")"
		note "memcpy $s" "$(or_dash "$(taskset -c "$CPU_I" "$MEMCPY" --size "$s" \
			--pool "$POOL" --duration "$DUR" "${HP[@]}" 2>&1 | tee "$LOGDIR/r$r-memcpy-$s.out" |
			sed -n 's/.* gbps \([0-9.]*\).*/\1/p')")"
		PAIR_TARGET_FLAGS=(--buffer "$POOL" "${HP[@]}")
		note "ferry-cma $s" "$(or_dash "$(run_ferry cma "r$r-ferry-cma-$s" gbps \
			--op write --size "$s" --batch $((POOL / $(bytes "$s"))) --buffer "$POOL" \
			--duration "$DUR" "${HP[@]}")")"
		PAIR_TARGET_FLAGS=()
	done
	note "pingpong 8" "$(or_dash "$(run_pingpong "r$r-pingpong" "")")"
	note "pingpong-busy 8" "$(or_dash "$(run_pingpong "r$r-pingpong-busy" --busy)")"
	PAIR_TARGET_FLAGS=(--pingpong "${LAT_ARGS[@]}")
	note "ferry-tcp-pp 8" "$(or_dash "$(run_ferry tcp "r$r-ferry-tcp-pp" p50 --pingpong \
		--size 8 --iters "$PP_ITERS" "${LAT_ARGS[@]}")")"
	PAIR_TARGET_FLAGS=()
	note "ferry-cma-lat 8" "$(or_dash "$(run_ferry cma "r$r-ferry-cma-lat" p50 --lat \
		--size 8 --iters "$PP_ITERS" "${LAT_ARGS[@]}")")"
done
echo "# load average at end: $(loadavg)"

# goal RATIO OP LIMIT: "met" when RATIO OP LIMIT.
goal() {
	awk -v r="$1" -v op="$2" -v l="$3" 'BEGIN { if (r == "-") print "-";
		else if ((op == ">=" && r + 0 >= l) || (op == "<=" && r + 0 <= l)) print "met";
		else print "NOT met" }'
}

echo
echo "| what | size | GB/s or us (median, range) |"
echo "|---|---|---|"
for s in "${SIZES[@]}"; do
	echo "| iperf3, one stream, -l $s | $s | $(show "iperf3 $s" GB/s) |"
	echo "| Mooncake transfer_engine_bench --protocol=tcp, batch $MC_BATCH | $s | $(show "mooncake $s" GB/s) |"
	echo "| ferry tcp, WRITE, 32 in flight | $s | $(show "ferry-tcp $s" GB/s) |"
	echo "| memcpy, one thread, 256 MiB pools${HP[*]:+, THP} | $s | $(show "memcpy $s" GB/s) |"
	echo "| ferry cma, WRITE, 256 MiB in flight${HP[*]:+, THP} | $s | $(show "ferry-cma $s" GB/s) |"
done
echo "| plain TCP ping-pong, blocking, half round trip p50 | 8 B | $(show "pingpong 8" us) |"
echo "| plain TCP ping-pong, busy-polled, half round trip p50 | 8 B | $(show "pingpong-busy 8" us) |"
echo "| ferry tcp --pingpong ${LAT_ARGS[*]}, half round trip p50 | 8 B | $(show "ferry-tcp-pp 8" us) |"
echo "| ferry cma --lat ${LAT_ARGS[*]}, request p50 | 8 B | $(show "ferry-cma-lat 8" us) |"

echo
echo "| goal | ratio (medians) | |"
echo "|---|---|---|"
big=${SIZES[${#SIZES[@]} - 1]} small=${SIZES[0]}
x=$(ratio "$(med "iperf3 $big")" "$(med "ferry-tcp $big")")
echo "| ferry tcp / iperf3 at $big >= 0.9 | $x | $(goal "$x" ">=" 0.9) |"
x=$(ratio "$(med "mooncake $small")" "$(med "ferry-tcp $small")")
echo "| ferry tcp / Mooncake tcp at $small >= 2 | $x | $(goal "$x" ">=" 2) |"
x=$(ratio "$(med "pingpong 8")" "$(med "ferry-tcp-pp 8")")
echo "| ferry tcp 8 B / plain ping-pong (blocking) <= 1.5 | $x | $(goal "$x" "<=" 1.5) |"
x=$(ratio "$(med "pingpong-busy 8")" "$(med "ferry-tcp-pp 8")")
echo "| ferry tcp 8 B / plain ping-pong (busy-polled) <= 1.5 | $x | $(goal "$x" "<=" 1.5) |"
for s in "${SIZES[@]}"; do
	x=$(ratio "$(med "memcpy $s")" "$(med "ferry-cma $s")")
	echo "| ferry cma / memcpy at $s >= 0.8 | $x | $(goal "$x" ">=" 0.8) |"
done
x=$(med "ferry-cma-lat 8")
echo "| ferry cma 8 B latency <= 2 us | $x us | $(goal "$x" "<=" 2) |"
exit $failed
