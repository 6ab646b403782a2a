#!/usr/bin/env bash
# ferry_bench against UCX's ucx_perftest on Soft-RoCE, run INSIDE the VM:
#
#   apt-get install -y ucx-utils       # on the host: the VM's root is read-only
#   make build/ferry_bench
#   ../shared/softroce/vm-run --devices 2 --timeout 900 -- bench/compare-ucx.sh
#
# For each size (64K, 1M) and op: ferry_bench in two processes (--target on
# the first device, --connect from the second) and the ucx_perftest pair
# (server on the first device, client on the second), same size, same
# number of outstanding messages (ferry --batch N, ucx_perftest -O N):
# WRITE against ucp_put_bw, READ against ucp_get (UCX >= 1.13 names its get
# bandwidth test ucp_get; ucp_get_bw where a UCX has it).  Then latency:
# ferry_bench --lat --size 8 against ucp_put_lat -s 8.  Prints one table of
# ferry/ucx per size; the raw outputs stay in $COMPARE_LOGDIR.
#
# UCX on rxe, what it takes (UCX 1.13, Debian 12):
# - UCP needs a transport that can connect without an address exchange
#   for its wire-up messages next to rc_verbs: UCX_TLS=rc_verbs alone fails
#   with "no auxiliary transport ... Destination is unreachable"; ud_verbs
#   serves (UCX_TLS=rc, which pulls ud_verbs in as auxiliary, too).  The
#   puts and gets themselves go over rc_verbs.
# - ud_verbs drops every packet rxe delivers ("UD endpoint ...: unhandled
#   timeout error", after ~1.5 min): this UCX tells an IPv4 RoCE v2 packet
#   from an IPv6 one by the work completion's sl, which mlx5 fills and rxe
#   leaves 0, so it compares the wrong bytes of the GRH area with its GID
#   and drops the packet (fixed upstream by openucx/ucx PR #10209, Oct 2024,
#   which reads the IP version from the GRH area).  The destination GID check
#   is off here (UCX_UD_VERBS_ETH_DGID_CHECK=n); an IPv6 GID
#   (UCX_IB_GID_INDEX=0 on rxe) works too, but perftest and ferry use the
#   IPv4 one.
# - UCX_IB_GID_INDEX=$SOFTROCE_GID_INDEX (1, RoCE v2 IPv4), like perftest -x.
#
# ucx_perftest has no duration option: it runs a probe of DEPTH messages,
# then, when that took clearly less than the duration, a run sized from the
# probe's rate to last about the duration, which is the result (else the
# probe is).
# ucx_perftest prints MB/s as 2^20 bytes/s: the table converts to 10^6.
#
# Environment (all optional):
#   COMPARE_SIZES="64K 1M"   COMPARE_OPS="write read"   COMPARE_DURATION=5 (s)
#   COMPARE_DEPTH=128        outstanding messages: ucx -O, ferry --batch
#   COMPARE_LAT_ITERS=2000   COMPARE_LAT=1 (0: no latency pair)
#   COMPARE_ROUNDS=1         repeat everything; the table shows medians
#   COMPARE_VERIFY=1         ferry_bench --verify
#   COMPARE_UCX_TLS=rc_verbs,ud_verbs   UCX_TLS of both sides
#   COMPARE_UCX_DGID_CHECK=n UCX_UD_VERBS_ETH_DGID_CHECK (see above)
#   COMPARE_UCX_ITERS=N      fixed iterations for the ucx bw runs (no probe)
#   FERRY_BENCH_ARGS="..."   FERRY_TARGET_ARGS="..."   FERRY_BENCH=path
#   COMPARE_LOGDIR=build/compare-ucx   B=build   COMPARE_TIMEOUT=s
# Exit status: 0 when every run produced a number, 1 otherwise (with the
# reason when UCX itself cannot run).
set -u

cd "$(dirname "$0")/.." || exit 1
CMP_NAME=compare-ucx
# shellcheck source=bench/compare-lib.sh
. bench/compare-lib.sh
B=${B:-build}
BENCH=${FERRY_BENCH:-$B/ferry_bench}
SIZES=${COMPARE_SIZES:-64K 1M}
OPS=${COMPARE_OPS:-write read}
DUR=${COMPARE_DURATION:-5}
DEPTH=${COMPARE_DEPTH:-128}
LAT_ITERS=${COMPARE_LAT_ITERS:-2000}
LAT=${COMPARE_LAT:-1}
ROUNDS=${COMPARE_ROUNDS:-1}
LOGDIR=${COMPARE_LOGDIR:-$B/compare-ucx}
UCX_TLS_USE=${COMPARE_UCX_TLS:-rc_verbs,ud_verbs}
UCX_DGID=${COMPARE_UCX_DGID_CHECK:-n}
softroce_pair
TMO=${COMPARE_TIMEOUT:-$((DUR + 120))}
FERRY_PORT=18720
port=18640 # ucx_perftest: a fresh port per run
failed=0
UCX_DEBS=ucx-utils

# ucx_perftest, or install it (root, not in the VM: its root is the host's,
# read-only), or say what to run.
ensure_ucx() {
	command -v ucx_perftest >/dev/null && return 0
	if [ -z "${SOFTROCE_DEVICES:-}" ] && [ "$(id -u)" = 0 ]; then
		echo "$CMP_NAME: ucx_perftest missing; installing $UCX_DEBS (root)" >&2
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $UCX_DEBS) >&2 && command -v ucx_perftest >/dev/null &&
			return 0
	fi
	die "ucx_perftest is not installed (Debian package $UCX_DEBS); on the host, as root," \
		"before starting the VM (its root filesystem is the host's, read-only): apt-get update" \
		"&& apt-get install -y $UCX_DEBS"
}

ensure_ucx
[ -x "$BENCH" ] || die "$BENCH missing: run 'make $BENCH' on the host first"
ls /sys/class/infiniband/"$SRV_DEV" >/dev/null 2>&1 ||
	die "no RDMA device $SRV_DEV (run me in the Soft-RoCE VM: ../shared/softroce/vm-run" \
		"--devices 2 --timeout 900 -- $0)"
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
private_bench

# The bandwidth test for READs: ucp_get_bw where UCX has it, else ucp_get.
UCX_GET=ucp_get
ucx_perftest -h 2>&1 | grep -qw ucp_get_bw && UCX_GET=ucp_get_bw

# The UCX environment for device $1: env "$(ucx_env DEV)" ... (one word per
# variable; no value holds a space).
ucx_env() {
	echo "UCX_TLS=$UCX_TLS_USE UCX_NET_DEVICES=$1:1 UCX_IB_GID_INDEX=$GID" \
		"UCX_UD_VERBS_ETH_DGID_CHECK=$UCX_DGID UCX_WARN_UNUSED_ENV_VARS=n"
}

# One ucx_perftest pair: $1 = log name, rest = client flags.  The server
# (no host argument) takes its parameters from the client.  Client output in
# $LOGDIR/$1.client, server's in .server.
ucx_pair() {
	local name=$1 spid rc
	shift
	port=$((port + 1))
	# shellcheck disable=SC2046 # one word per variable
	timeout "$TMO" env $(ucx_env "$SRV_DEV") ucx_perftest -p "$port" \
		>"$LOGDIR/$name.server" 2>&1 &
	spid=$!
	pids+=("$spid")
	if ! wait_listen "$port" 300; then
		echo "$CMP_NAME: ucx_perftest server did not listen on $port" >&2
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		return 1
	fi
	# shellcheck disable=SC2046
	timeout "$TMO" env $(ucx_env "$CLI_DEV") ucx_perftest "$SRV_ADDR" -p "$port" "$@" \
		>"$LOGDIR/$name.client" 2>&1
	rc=$?
	# A client that failed leaves its server waiting.
	[ "$rc" != 0 ] && kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	timed_out $rc "ucx_perftest $name" "$LOGDIR/$name.client"
}

# The final line of a ucx_perftest -f client: iterations, latency/overhead
# (percentile, average, overall; usec), bandwidth (average, overall; MiB/s),
# message rate (average, overall).  Prints "iters pct_us avg_us mbps" with
# mbps in 10^6 bytes/s, or "- - - -".
ucx_final() {
	awk '{ sub(/^Final:/, "") }
		NF == 8 && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9.]+$/ { l = $1 " " $2 " " $3 " " sprintf("%.1f", $6 * 1.048576) }
		END { print (l == "" ? "- - - -" : l) }' "$1"
}

# Why a ucx_perftest run failed, from its client and server logs: what UCX
# said, and what it means on rxe when we know.
ucx_why() {
	local f=$1 line
	local -a logs=("$f".client "$f".server "$f".probe.client "$f".probe.server)
	line=$(grep -shiE "error|failed|unreachable|no such|not supported|fatal|killed" \
		"${logs[@]}" | grep -vE '^\+|^ *[0-9]+ +/|backtrace' | sed -E 's/.*UCX +(ERROR|WARN) +//; s/.* Fatal: /Fatal: /' |
		sort -u | head -n 4 | paste -sd ';' | sed 's/;/; /g')
	echo "${line:-no output; see $f.client}"
	if grep -qs "no auxiliary transport" "${logs[@]}"; then
		echo "  => UCP has no transport for its wire-up next to the RC one: add ud_verbs" \
			"(COMPARE_UCX_TLS=rc_verbs,ud_verbs or rc)"
	fi
	if grep -qs "UD endpoint.*unhandled timeout" "${logs[@]}"; then
		echo "  => UCX's UD transport got no packet through: on rxe with an IPv4 GID," \
			"UCX without openucx/ucx PR #10209 drops every UD packet in its destination" \
			"GID check (rxe leaves wc.sl 0, UCX reads the packet type from it); run with" \
			"COMPARE_UCX_DGID_CHECK=n (the default) or an IPv6 GID"
	fi
}

# A ucx bandwidth pair for test $1, size $2 bytes, log $3: the probe, then a
# run sized for the duration.  Prints the MB/s (10^6) or "-".
ucx_bw() {
	local test=$1 size=$2 name=$3 n mbps
	local -a f=(-t "$test" -s "$size" -O "$DEPTH" -w 16 -f)
	if [ -n "${COMPARE_UCX_ITERS:-}" ]; then
		ucx_pair "$name" "${f[@]}" -n "$COMPARE_UCX_ITERS" || return 1
		read -r _ _ _ mbps <<<"$(ucx_final "$LOGDIR/$name.client")"
		echo "$mbps"
		return 0
	fi
	ucx_pair "$name.probe" "${f[@]}" -n "$DEPTH" || return 1
	read -r _ _ _ mbps <<<"$(ucx_final "$LOGDIR/$name.probe.client")"
	[ "$mbps" = - ] && return 1
	n=$(awk -v r="$mbps" -v d="$DUR" -v s="$size" 'BEGIN { printf "%d", r * 1e6 * d / s }')
	if [ "$n" -le $((DEPTH * 3 / 2)) ]; then
		echo "$mbps" # the probe lasted about the duration already
		return 0
	fi
	[ "$n" -gt 1000000 ] && n=1000000
	ucx_pair "$name" "${f[@]}" -n "$n" || return 1
	read -r _ _ _ mbps <<<"$(ucx_final "$LOGDIR/$name.client")"
	echo "$mbps"
}

echo "$CMP_NAME: server/target $SRV_DEV ($SRV_ADDR), client/initiator $CLI_DEV, UCX_TLS" \
	"$UCX_TLS_USE, gid $GID, ${DUR}s per run, $DEPTH outstanding, $ROUNDS round(s)," \
	"logs in $LOGDIR"
ucx_info -v 2>/dev/null | sed -n "s/^# //p" | head -n 1 >"$LOGDIR/ucx-version.txt"
# shellcheck disable=SC2046
env $(ucx_env "$CLI_DEV") ucx_info -d >"$LOGDIR/ucx_info-d.txt" 2>&1

# First a small put: when UCX cannot work on these devices at all, say why
# and stop before the long runs.
if ! ucx_pair preflight -t ucp_put_bw -s 4096 -n 16 -w 1 -f ||
	[ "$(ucx_final "$LOGDIR/preflight.client" | cut -d' ' -f1)" = - ]; then
	echo "$CMP_NAME: UCX cannot run a put from $CLI_DEV to $SRV_DEV ($(ucx_env "$CLI_DEV")):" \
		"$(ucx_why "$LOGDIR/preflight")" >&2
	echo "$CMP_NAME: transports UCX sees on $CLI_DEV (ucx_info -d):" >&2
	grep -E "Transport|Device" "$LOGDIR/ucx_info-d.txt" | paste - - | sed 's/^/  /' >&2
	save_dmesg
	exit 1
fi

# shellcheck disable=SC2086 # one word per size
maxsize=$(max_bytes $SIZES)
BUFFER=$((maxsize * DEPTH))
[ "$BUFFER" -lt $((1 << 20)) ] && BUFFER=$((1 << 20))
[ "${COMPARE_VERIFY:-0}" = 1 ] && verify=(--verify)
start_ferry_targets || exit 1

# Each round runs every pair once, ferry then UCX, so that load from
# elsewhere on a shared host hits both alike; the table shows medians.
declare -A ux_bw fe_bw fe_err
ux_typ="" ux_avg="" fe_typ="" fe_p99=""
for ((round = 1; round <= ROUNDS; round++)); do
	for s in $SIZES; do
		b=$(bytes "$s")
		for op in $OPS; do
			name=bw-$op-$s.r$round
			ferry_run "$name.ferry" "$op" --size "$b" --batch "$DEPTH" -D "$DUR" || failed=1
			v=$(json_num "$LOGDIR/$name.ferry.json" mbps)
			fe_bw[$s $op]+=" $v"
			[ "$v" = - ] && failed=1
			fe_err[$s $op]=$((${fe_err[$s $op]:-0} + $(json_sum "$LOGDIR/$name.ferry.json" wr_errors)))
			test=ucp_put_bw
			[ "$op" = read ] && test=$UCX_GET
			v=$(ucx_bw "$test" "$b" "$name.ucx") || {
				echo "$CMP_NAME: $test $s: $(ucx_why "$LOGDIR/$name.ucx")" >&2
				v=-
			}
			ux_bw[$s $op]+=" ${v:--}"
			[ "${v:--}" = - ] && failed=1
		done
	done
	if [ "$LAT" = 1 ]; then
		name=lat-write-8.r$round
		ferry_run "$name.ferry" write --lat --size 8 -n "$LAT_ITERS" || failed=1
		a=$(json_num "$LOGDIR/$name.ferry.json" p50)
		fe_typ+=" $a" fe_p99+=" $(json_num "$LOGDIR/$name.ferry.json" p99)"
		[ "$a" = - ] && failed=1
		ucx_pair "$name.ucx" -t ucp_put_lat -s 8 -n "$LAT_ITERS" -w 100 -f || failed=1
		read -r _ a c _ <<<"$(ucx_final "$LOGDIR/$name.ucx.client")"
		ux_typ+=" $a" ux_avg+=" $c"
		[ "$a" = - ] && failed=1
	fi
done

ferry_targets_stop
save_dmesg

echo
printf "%-6s %-6s %-12s %10s %12s %9s %13s\n" size op ucx_test "ucx_MB/s" "ferry_MB/s" \
	"ferry/ucx" "ferry_wr_err"
for s in $SIZES; do
	for op in $OPS; do
		test=ucp_put_bw
		[ "$op" = read ] && test=$UCX_GET
		# shellcheck disable=SC2086 # word splitting of the value lists is the point
		u=$(median ${ux_bw[$s $op]}) fe=$(median ${fe_bw[$s $op]})
		printf "%-6s %-6s %-12s %10s %12s %9s %13s\n" "$s" "$op" "$test" "$u" "$fe" \
			"$(ratio "$u" "$fe")" "${fe_err[$s $op]}"
	done
done
if [ "$LAT" = 1 ]; then
	echo
	printf "%-6s %-6s %-12s %10s %10s %10s %10s %9s\n" size op ucx_test "ucx_p50_us" \
		"ucx_avg_us" "fe_typ_us" "fe_p99_us" "ferry/ucx"
	# shellcheck disable=SC2086
	a=$(median $ux_typ) c=$(median $fe_typ)
	# shellcheck disable=SC2086
	printf "%-6s %-6s %-12s %10s %10s %10s %10s %9s\n" 8 write ucp_put_lat "$a" \
		"$(median $ux_avg)" "$c" "$(median $fe_p99)" "$(ratio "$a" "$c")"
fi
echo
echo "(MB/s = 10^6 bytes/s, medians of $ROUNDS round(s); UCX $(cat "$LOGDIR/ucx-version.txt" 2>/dev/null);" \
	"ucx_perftest: UCX_TLS=$UCX_TLS_USE UCX_IB_GID_INDEX=$GID UCX_UD_VERBS_ETH_DGID_CHECK=$UCX_DGID" \
	"-O $DEPTH -w 16, iterations" \
	"for ~${DUR}s, lat -n $LAT_ITERS -w 100 (half a put ping-pong round trip, like" \
	"ib_write_lat); ferry: --batch $DEPTH -D $DUR --buffer $BUFFER${FERRY_BENCH_ARGS:+ $FERRY_BENCH_ARGS}${FERRY_IB_TIMEOUT:+ FERRY_IB_TIMEOUT=$FERRY_IB_TIMEOUT}," \
	"lat -n $LAT_ITERS (a whole WRITE request, submit to completion))"
if [ "$failed" != 0 ]; then
	echo "$CMP_NAME: some runs failed, see $LOGDIR" >&2
	ferry_complaints
fi
exit "$failed"
