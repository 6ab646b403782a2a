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
# N, kept in flight), same duration.  Then latency at 8 bytes: ib_write_lat
# (a half round trip) against ferry_bench --pingpong (a half round trip, served
# by a --target --pingpong on its own port), ferry's --lat (submit to
# completion) shown beside it; ib_read_lat against ferry --lat.  Prints one table; the raw outputs stay in
# $COMPARE_LOGDIR.  ~2.5 minutes in the emulated VM with the defaults (per round).
#
# Environment (all optional):
#   COMPARE_SIZES="64K 1M"   COMPARE_OPS="write read"   COMPARE_DURATION=5 (s)
#   COMPARE_DEPTH=128        outstanding messages: perftest -t, ferry --batch
#   COMPARE_LAT_ITERS=2000   COMPARE_LAT_OPS="write read" ("" for none)
#   COMPARE_LAT_ARGS=--caller  ferry's latency runs (initiator and ping-pong
#                            target): idle policy caller, the waiting thread
#                            runs the passes, one thread per process like
#                            perftest's; "" for the cores' own threads
#   COMPARE_BW_ARGS=--caller  ferry's throughput runs (the initiator): the
#                            same, one polling thread like perftest's (on the
#                            VM's 2 vCPUs the cores' own threads compete with
#                            rxe: 0.88-1.04x against 0.95-1.57x, README); ""
#                            for the cores' own threads
#   COMPARE_ROUNDS=1         repeat everything; the table shows medians
#   COMPARE_SAME_ADDR=1      ferry's throughput runs put every request of the
#                            batch at the same local and remote address
#                            (ferry_bench --same-addr), as perftest does with
#                            messages over half its 4 KiB cycle buffer; 0 for
#                            each request its own slot (batch x size of
#                            memory, cache- and TLB-colder; off with --verify)
#   COMPARE_VERIFY=1         ferry_bench --verify (WRITE then reads everything back)
#   FERRY_BENCH_ARGS="..."   extra flags for the ferry initiator (e.g. --spin)
#   FERRY_TARGET_ARGS="..."  extra flags for the ferry target
#   COMPARE_PT_LAT_CPUS=LIST taskset CPU list for both sides of perftest's
#                            latency runs (default: every online CPU but 0,
#                            where ferry_bench's port and ping-pong threads run
#                            when its engines have the default --cores 0, so
#                            each program's polling thread has the same CPUs;
#                            "" unpinned: give ferry --no-port-pin too)
#   COMPARE_PT_BW_CPUS=LIST  the same for perftest's throughput runs (default
#                            "", unpinned: pinned to one vCPU ib_write_bw and
#                            ib_read_bw ran 1 MiB at half their speed, README)
#   PERFTEST_ARGS="..."      extra flags for both perftest sides (e.g. "-u 17"
#                            with FERRY_IB_TIMEOUT=17: rxe in the emulated VM
#                            can take longer than the default 67 ms to ACK)
#   COMPARE_LOGDIR=build/compare-perftest   B=build
#   FERRY_BENCH=path         the ferry_bench binary (default $B/ferry_bench)
#   COMPARE_TIMEOUT=s        a run taking longer is killed as hung (default
#                            duration + 120: a 1M READ batch of 128 MiB takes
#                            over a minute on a loaded host)
# Exit status: 0 when every run produced a number, 1 otherwise.
set -u

cd "$(dirname "$0")/.." || exit 1
CMP_NAME=compare-perftest
# shellcheck source=bench/compare-lib.sh
. bench/compare-lib.sh
B=${B:-build}
BENCH=${FERRY_BENCH:-$B/ferry_bench}
SIZES=${COMPARE_SIZES:-64K 1M}
OPS=${COMPARE_OPS-write read}
DUR=${COMPARE_DURATION:-5}
DEPTH=${COMPARE_DEPTH:-128}
LAT_ITERS=${COMPARE_LAT_ITERS:-2000}
LAT_OPS=${COMPARE_LAT_OPS-write read}
LAT_ARGS=${COMPARE_LAT_ARGS---caller}
BW_ARGS=${COMPARE_BW_ARGS---caller}
ROUNDS=${COMPARE_ROUNDS:-1}
LOGDIR=${COMPARE_LOGDIR:-$B/compare-perftest}
softroce_pair
# A run that takes longer than this is hung (a client that lost its server).
TMO=${COMPARE_TIMEOUT:-$((DUR + 120))}
FERRY_PORT=18700
# ferry_bench keeps its polling threads off its engines' cores (--cores,
# default 0); perftest's go where ferry's go (checked after each ferry run).
ncpu=$(nproc)
cpus_rest=1-$((ncpu - 1)) # as ferry_bench describes them ("1" for 1-1)
[ "$ncpu" = 2 ] && cpus_rest=1
[ "$ncpu" -lt 2 ] && cpus_rest=
PT_LAT_CPUS=${COMPARE_PT_LAT_CPUS-$cpus_rest}
PT_BW_CPUS=${COMPARE_PT_BW_CPUS-}
# pin_to LIST: perftest_pair's next runs under taskset -c LIST ("": unpinned).
pin_to() {
	pin=()
	[ -n "$1" ] && pin=(taskset -c "$1")
}
port=18600 # perftest: a fresh port per test
failed=0

[ -x "$BENCH" ] || die "$BENCH missing: run 'make $BENCH' on the host first"
command -v ib_write_bw >/dev/null || die "perftest is not installed"
ls /sys/class/infiniband/"$SRV_DEV" >/dev/null 2>&1 || die "no RDMA device $SRV_DEV (run me in the Soft-RoCE VM)"
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
private_bench

# perftest pair: $1 = program, $2 = log name, rest = flags for both sides.
# The server runs in the background on the first device; the client output
# goes to $LOGDIR/$2.client.
perftest_pair() {
	local prog=$1 name=$2 spid rc
	shift 2
	port=$((port + 1))
	# shellcheck disable=SC2086 # PERFTEST_ARGS: one word per flag
	timeout "$TMO" "${pin[@]}" "$prog" -d "$SRV_DEV" -x "$GID" -F -p "$port" "$@" \
		${PERFTEST_ARGS:-} >"$LOGDIR/$name.server" 2>&1 &
	spid=$!
	pids+=("$spid")
	if ! wait_listen "$port" 300; then
		echo "$CMP_NAME: $prog server did not listen on $port" >&2
		return 1
	fi
	# shellcheck disable=SC2086
	timeout "$TMO" "${pin[@]}" "$prog" -d "$CLI_DEV" -x "$GID" -F -p "$port" "$@" \
		${PERFTEST_ARGS:-} "$SRV_ADDR" >"$LOGDIR/$name.client" 2>&1
	rc=$?
	wait "$spid" 2>/dev/null
	timed_out $rc "$prog $name" "$LOGDIR/$name.client"
}

# MB/s (10^6 bytes/s) from a perftest bw client: BW average[Gb/sec] x 125 or
# MsgRate[Mpps] x size, whichever perftest printed with more precision (it
# prints 2 or 6 decimals depending on the value).
perftest_mbps() {
	awk -v size="$2" '
		function ulp(s) { return index(s, ".") ? 10 ^ -(length(s) - index(s, ".")) : 1 }
		/#bytes/ { hdr = 1; next }
		hdr && $1 ~ /^[0-9]+$/ {
			if (ulp($4) * 125 <= ulp($5) * size) printf "%.1f", $4 * 125
			else printf "%.1f", $5 * size
			found = 1; exit
		}
		END { if (!found) printf "-" }' "$1"
}

# typical, 99% and minimum latency (us) from a perftest lat client.
perftest_lat() {
	awk '/t_typical/ { hdr = 1; next }
		hdr && $1 ~ /^[0-9]+$/ { printf "%.2f %.2f %.2f", $5, $8, $3; found = 1; exit }
		END { if (!found) printf "- - -" }' "$1"
}

# pin_check JSON: say once when ferry's polling threads did not run on
# the CPUs perftest's latency runs were given (other --cores, or
# --no-port-pin).
pin_warned=0
pin_check() {
	local cpus
	cpus=$(sed -n 's/.*"port_cpus":"\([^"]*\)".*/\1/p' "$1" | head -n 1)
	if [ -z "$cpus" ] || [ "$cpus" = "${PT_LAT_CPUS:-any}" ] || [ "$pin_warned" = 1 ]; then
		return 0
	fi
	echo "$CMP_NAME: ferry's polling threads ran on CPUs $cpus, perftest's latency runs on" \
		"${PT_LAT_CPUS:-any} (set COMPARE_PT_LAT_CPUS)" >&2
	pin_warned=1
}

echo "$CMP_NAME: server/target $SRV_DEV ($SRV_ADDR), client/initiator $CLI_DEV," \
	"gid $GID, ${DUR}s per run, $DEPTH outstanding, $ROUNDS round(s), logs in $LOGDIR"
# shellcheck disable=SC2086 # one word per size
maxsize=$(max_bytes $SIZES)
BUFFER=$((maxsize * DEPTH))
[ "$BUFFER" -lt $((1 << 20)) ] && BUFFER=$((1 << 20))
[ "${COMPARE_VERIFY:-0}" = 1 ] && verify=(--verify)
same_addr=()
[ "${COMPARE_SAME_ADDR:-1}" = 1 ] && [ ${#verify[@]} -eq 0 ] && same_addr=(--same-addr)
start_ferry_targets || exit 1
if [[ " $LAT_OPS " == *" write "* ]]; then
	FERRY_TARGET_ARGS="${FERRY_TARGET_ARGS:-} --pingpong $LAT_ARGS" \
		start_ferry_target $((FERRY_PORT + 2)) ferry-target-pingpong || exit 1
fi

# Each round runs every pair once, perftest then ferry, so that load from
# elsewhere on a shared host hits both alike; the table shows medians.
# Also per round: the VM's rounds are bimodal (~40 or ~70 us for both
# programs' latency; throughput swings alike), so the median of each side's
# rounds can pair a fast round of one with a slow round of the other; the
# median of the rounds' own ratios (perftest and ferry back to back) and,
# for latency, of their minima do not.
declare -A pt_bw fe_bw fe_err bw_pair pt_typ pt_p99 fe_typ fe_p99 fe_lat lat_pair lat_min
for ((round = 1; round <= ROUNDS; round++)); do
	for s in $SIZES; do
		b=$(bytes "$s")
		pin_to "$PT_BW_CPUS"
		for op in $OPS; do
			name=bw-$op-$s.r$round
			perftest_pair "ib_${op}_bw" "$name.perftest" -s "$b" -D "$DUR" -t "$DEPTH" \
				--report_gbits || failed=1
			v=$(perftest_mbps "$LOGDIR/$name.perftest.client" "$b")
			pt_bw[$s $op]+=" $v"
			pt_round=$v
			[ "$v" = - ] && failed=1
			# shellcheck disable=SC2086 # BW_ARGS: one word per flag
			ferry_run "$name.ferry" "$op" --size "$b" --batch "$DEPTH" -D "$DUR" $BW_ARGS \
				"${same_addr[@]}" ||
				failed=1
			v=$(json_num "$LOGDIR/$name.ferry.json" mbps)
			fe_bw[$s $op]+=" $v"
			bw_pair[$s $op]+=" $(ratio "$pt_round" "$v")"
			[ "$v" = - ] && failed=1
			fe_err[$s $op]=$((${fe_err[$s $op]:-0} + $(json_sum "$LOGDIR/$name.ferry.json" wr_errors)))
		done
	done
	pin_to "$PT_LAT_CPUS"
	for op in $LAT_OPS; do
		name=lat-$op-8.r$round
		perftest_pair "ib_${op}_lat" "$name.perftest" -s 8 -n "$LAT_ITERS" || failed=1
		read -r a c m <<<"$(perftest_lat "$LOGDIR/$name.perftest.client")"
		pt_typ[$op]+=" $a" pt_p99[$op]+=" $c"
		pt_round=$a pt_min=$m
		# shellcheck disable=SC2086 # LAT_ARGS: one word per flag
		ferry_run "$name.ferry" "$op" --lat --size 8 -n "$LAT_ITERS" $LAT_ARGS || failed=1
		pin_check "$LOGDIR/$name.ferry.json"
		a=$(json_num "$LOGDIR/$name.ferry.json" p50)
		c=$(json_num "$LOGDIR/$name.ferry.json" p99)
		m=$(json_num "$LOGDIR/$name.ferry.json" min)
		[ "$a" = - ] && failed=1
		if [ "$op" = read ]; then
			lat_pair[$op]+=" $(ratio "$pt_round" "$a")" lat_min[$op]+=" $(ratio "$pt_min" "$m")"
		fi
		if [ "$op" = write ]; then
			# ib_write_lat reports half round trips: so does --pingpong.
			fe_lat[$op]+=" $a"
			# shellcheck disable=SC2086
			FERRY_PORT=$((FERRY_PORT + 2)) ferry_run "$name.ferry-pp" write --pingpong \
				--size 8 -n "$LAT_ITERS" $LAT_ARGS || failed=1
			a=$(json_num "$LOGDIR/$name.ferry-pp.json" p50)
			c=$(json_num "$LOGDIR/$name.ferry-pp.json" p99)
			[ "$a" = - ] && failed=1
		fi
		fe_typ[$op]+=" $a" fe_p99[$op]+=" $c"
	done
done

ferry_targets_stop
save_dmesg

# A table only for what ran (COMPARE_OPS="" or COMPARE_LAT_OPS="" skip one).
[ -n "${OPS// /}" ] && echo &&
	printf "%-6s %-6s %14s %12s %8s %7s %13s\n" size op "perftest_MB/s" "ferry_MB/s" "ferry/pt" \
		"paired" "ferry_wr_err"
for s in $SIZES; do
	for op in $OPS; do
		# shellcheck disable=SC2086 # word splitting of the value lists is the point
		pt=$(median ${pt_bw[$s $op]}) fe=$(median ${fe_bw[$s $op]})
		# shellcheck disable=SC2086
		printf "%-6s %-6s %14s %12s %8s %7s %13s\n" "$s" "$op" "$pt" "$fe" "$(ratio "$pt" "$fe")" \
			"$(median ${bw_pair[$s $op]})" "${fe_err[$s $op]}"
	done
done
[ -n "${LAT_OPS// /}" ] && echo &&
	printf "%-6s %-6s %10s %10s %10s %10s %8s %7s %7s  %s\n" size op "pt_typ_us" "pt_p99_us" \
		"fe_typ_us" "fe_p99_us" "ferry/pt" "paired" "min" "what"
for op in $LAT_OPS; do
	# shellcheck disable=SC2086
	a=$(median ${pt_typ[$op]}) c=$(median ${fe_typ[$op]})
	what="ib_read_lat vs ferry --lat"
	# shellcheck disable=SC2086
	[ "$op" = write ] && what="ib_write_lat vs ferry --pingpong (half RTT; --lat p50 $(median ${fe_lat[$op]}))"
	# shellcheck disable=SC2086
	printf "%-6s %-6s %10s %10s %10s %10s %8s %7s %7s  %s\n" 8 "$op" "$a" "$(median ${pt_p99[$op]})" "$c" \
		"$(median ${fe_p99[$op]})" "$(ratio "$a" "$c")" "$(median ${lat_pair[$op]:--})" \
		"$(median ${lat_min[$op]:--})" "$what"
done
echo
echo "(paired: median of the rounds' own ferry/pt ratios; min: of the ratios of their latency minima (READ);"
echo " MB/s = 10^6 bytes/s, medians of $ROUNDS round(s); perftest: -x $GID -F -t $DEPTH -D $DUR${PERFTEST_ARGS:+ $PERFTEST_ARGS} on CPUs ${PT_BW_CPUS:-any}, lat on ${PT_LAT_CPUS:-any}," \
	"lat -n $LAT_ITERS; ferry: --batch $DEPTH -D $DUR --buffer $BUFFER${BW_ARGS:+ $BW_ARGS}${same_addr[*]:+ ${same_addr[*]}}${FERRY_BENCH_ARGS:+ $FERRY_BENCH_ARGS}${FERRY_IB_TIMEOUT:+ FERRY_IB_TIMEOUT=$FERRY_IB_TIMEOUT}," \
	"lat -n $LAT_ITERS${LAT_ARGS:+ $LAT_ARGS}; ferry_wr_err = failed work requests, retried)"
if [ "$failed" != 0 ]; then
	echo "$CMP_NAME: some runs failed, see $LOGDIR" >&2
	ferry_complaints
fi
exit "$failed"
