# shellcheck shell=bash
# Helpers for the two-process runs on this host's loopback
# (bench/main-job.sh, bench/compare-tcp.sh): sourced, not run, after
# bench/compare-lib.sh (die, pids, cleanup, json_num, median, ratio).
#
# The caller sets LOGDIR, BENCH and TMO.  Every port is ephemeral: the
# ferry target listens on 127.0.0.1:0 and prints the address it got;
# other servers get a port that nothing listens on (free_port).  Every
# process started is stopped by its pid (compare-lib's cleanup on exit).

# A string from ferry_bench --json: json_str_val FILE KEY ("-" when absent).
json_str_val() {
	local v
	v=$(sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p" "$1" | head -n 1)
	echo "${v:--}"
}

# A TCP port on 127.0.0.1 that nothing listens on now (from the range the
# kernel does not hand out as ephemeral ports, so that no outgoing
# connection takes it meanwhile).
free_port() {
	local p i lo
	lo=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
	lo=${lo:-32768}
	for ((i = 0; i < 100; i++)); do
		p=$((10000 + RANDOM % (lo - 10000)))
		[ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ] && echo "$p" && return 0
	done
	return 1
}

# Two CPUs to pin the two sides to: "0 1", or "0 0" on a single-CPU host.
cpu_pair() {
	if [ "$(nproc)" -ge 2 ]; then echo "0 1"; else echo "0 0"; fi
}

# ferry_bench --target on 127.0.0.1:0: $1 = log name, $2 = nics, $3 = cores,
# rest = more flags.  Sets TARGET_PID and TARGET_ADDR (host:port it got).
ferry_target_up() {
	local name=$1 nics=$2 cores=$3 log
	shift 3
	log=$LOGDIR/$name.log
	timeout $((TMO * 4)) "$BENCH" --target --nics "$nics" --cores "$cores" \
		--listen 127.0.0.1:0 "$@" >"$log" 2>&1 &
	TARGET_PID=$!
	pids+=("$TARGET_PID")
	# pids does not outlive a $(...) around the caller (compare-tcp's
	# run_ferry): a target that gave no address is stopped here.
	TARGET_ADDR=$(target_address "$log" "$TARGET_PID") || {
		kill "$TARGET_PID" 2>/dev/null
		wait "$TARGET_PID" 2>/dev/null
		return 1
	}
}

# Stop the target started last (SIGINT: it prints its CPU and counters).
ferry_target_down() {
	kill -INT "$TARGET_PID" 2>/dev/null
	wait "$TARGET_PID" 2>/dev/null
}

# ferry_bench --connect to the target up: $1 = log name, $2 = nics,
# $3 = cores, rest = flags.  JSON in $LOGDIR/$1.json, stderr in .err.
ferry_connect() {
	local name=$1 nics=$2 cores=$3
	shift 3
	timeout "$TMO" "$BENCH" --connect "$TARGET_ADDR" --nics "$nics" --cores "$cores" \
		--json "$@" >"$LOGDIR/$name.json" 2>"$LOGDIR/$name.err"
	timed_out $? "ferry_bench $name" "$LOGDIR/$name.err"
}

# One two-process ferry run: $1 = log name, $2 = target nics, $3 = initiator
# nics, rest = initiator flags; the array PAIR_TARGET_FLAGS (and
# $FERRY_TARGET_ARGS) go to the target.  The sides on the two CPUs of cpu_pair.
PAIR_TARGET_FLAGS=()
ferry_pair() {
	local name=$1 tn=$2 in=$3 rc ci ct
	shift 3
	read -r ci ct <<<"$(cpu_pair)"
	# shellcheck disable=SC2086 # FERRY_TARGET_ARGS: one word per flag
	ferry_target_up "$name-target" "$tn" "$ct" "${PAIR_TARGET_FLAGS[@]}" \
		${FERRY_TARGET_ARGS:-} || return 1
	# shellcheck disable=SC2086
	ferry_connect "$name" "$in" "$ci" ${FERRY_BENCH_ARGS:-} "$@"
	rc=$?
	ferry_target_down
	return $rc
}

# The load average now, for the logs and the table ("1-min 5-min 15-min").
loadavg() {
	cut -d' ' -f1-3 /proc/loadavg
}
