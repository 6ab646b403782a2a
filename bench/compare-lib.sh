# shellcheck shell=bash
# Helpers shared by the compare scripts (bench/compare-*.sh) and
# bench/main-job.sh: sourced, not run.  The ferry target helpers
# (start_ferry_target...) run INSIDE the Soft-RoCE VM.
#
# The caller sets, before sourcing:
#   CMP_NAME     prefix of messages ("compare-perftest")
# and before using the ferry helpers:
#   LOGDIR TMO BENCH BUFFER CLI_DEV SRV_DEV FERRY_PORT, the array verify
# Every background process goes into pids (killed on exit); ferry targets
# also into target_pids (stopped by ferry_targets_stop).

pids=()
target_pids=()
verify=()

die() {
	echo "$CMP_NAME: $*" >&2
	exit 1
}

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

# Pass status $1 on; when it is timeout(1)'s 124, say so on stderr and in $3.
timed_out() {
	if [ "$1" = 124 ]; then
		echo "$CMP_NAME: $2 killed after ${TMO}s" | tee -a "$3" >&2
	fi
	return "$1"
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

# b / a with two decimals, "-" when either is missing.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b != "-") printf "%.2f", b / a; else printf "-" }'
}

# The median of the numbers given ("-" are skipped; "-" when none).
median() {
	printf "%s\n" "$@" | grep -v '^-$' | sort -g |
		awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
			else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The Soft-RoCE pair every compare script runs on (vm-run's SOFTROCE_*):
# SRV_DEV and SRV_ADDR serve, CLI_DEV (the second device, else the first)
# initiates, GID is the RoCE v2 IPv4 GID index.
# shellcheck disable=SC2034 # set for the sourcing script
softroce_pair() {
	local -a devs addrs
	read -r -a devs <<<"${SOFTROCE_DEVICES:-rxe0 rxe1}"
	read -r -a addrs <<<"${SOFTROCE_ADDRS:-10.99.0.1 10.99.0.2}"
	GID=${SOFTROCE_GID_INDEX:-1}
	SRV_DEV=${devs[0]} CLI_DEV=${devs[1]:-${devs[0]}} SRV_ADDR=${addrs[0]}
	# The tools send to SRV_ADDR: only to an address of this machine (the
	# VM's vethI), never out to a network that happens to have an rxe0.
	if ! ip -o -4 addr show 2>/dev/null | awk '{ sub("/.*", "", $4); print $4 }' |
		grep -qxF "$SRV_ADDR"; then
		echo "${0##*/}: $SRV_ADDR is not an address of this machine: run it where" \
			"vm-run set up the Soft-RoCE pair (../shared/softroce/vm-run -- $0)" >&2
		exit 2
	fi
}

# ---- rounds: every tool once per round, the table shows medians ----------

# KEY -> the rounds' numbers, space-separated ("-" for a run that failed).
declare -A val

# Note a number for KEY ("-" when the run gave none: the run failed, and
# failed=1).
# shellcheck disable=SC2034 # failed: the caller's exit status
note() {
	local v=$2
	[ "$v" != - ] && v=$(awk -v x="$v" 'BEGIN { printf "%.3f", x }')
	val[$1]="${val[$1]:-} $v"
	[ "$v" = - ] && failed=1
	return 0
}

# "min-max" of the numbers given ("-" are skipped).
range() {
	printf "%s\n" "$@" | grep -v '^-$' | sort -g | sed -n '1p;$p' | paste -sd- -
}

# The median of KEY's rounds, "-" when it has none.
med() {
	local -a v
	read -r -a v <<<"${val[$1]:-}"
	[ ${#v[@]} -eq 0 ] && { echo -; return; }
	median "${v[@]}"
}

# KEY's rounds as "median UNIT (min-max)", or the one value and UNIT ($2,
# may be empty); "skipped" when KEY has none.
show() {
	local -a v
	read -r -a v <<<"${val[$1]:-}"
	[ ${#v[@]} -eq 0 ] && { echo "skipped"; return; }
	if [ ${#v[@]} -eq 1 ]; then
		echo "${v[0]}${2:+ $2}"
	else
		echo "$(median "${v[@]}")${2:+ $2} ($(range "${v[@]}"))"
	fi
}

# A number from ferry_bench --json: json_num FILE KEY.
json_num() {
	local v
	v=$(sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1" | head -n 1)
	echo "${v:--}"
}

# Sum of a counter over the cores of a ferry_bench --json output.
json_sum() {
	grep -o "\"$2\":[0-9]*" "$1" 2>/dev/null | awk -F: '{ s += $2 } END { print s + 0 }'
}

# Largest of the sizes given ("64K 1M"), in bytes.
max_bytes() {
	local s b max=0
	for s in "$@"; do
		b=$(bytes "$s")
		[ "$b" -gt "$max" ] && max=$b
	done
	echo "$max"
}

# Run a private copy of $BENCH from $LOGDIR: a concurrent `make` on the host
# (the tree is shared) must not relink it under a run, and the target and
# the initiators must be the same build.
private_bench() {
	[ -x "$BENCH" ] || die "$BENCH missing: run 'make $BENCH' on the host first"
	cp "$BENCH" "$LOGDIR/ferry_bench.run" || die "cannot copy $BENCH to $LOGDIR"
	BENCH=$LOGDIR/ferry_bench.run
}

# Wait (60 s at most) for the line of the ferry_bench --target logging to
# $1 while pid $2 lives, and print the address it listens on; on failure
# say so with its log on stderr.  The line comes after the buffer is
# registered: listening alone is too early.
target_address() {
	local log=$1 pid=$2 addr i
	for ((i = 0; i < 600; i++)); do
		addr=$(sed -n 's/^ferry_bench target: listening on \([^ ]*\) .*/\1/p' "$log" 2>/dev/null)
		[ -n "$addr" ] && echo "$addr" && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "$CMP_NAME: ferry_bench --target did not come up:" >&2
	cat "$log" >&2
	return 1
}

# ferry_bench --target on TCP port $1, log $2.log; waits for its line.
start_ferry_target() {
	local port=$1 log=$LOGDIR/$2.log pid
	# shellcheck disable=SC2086
	timeout $((TMO * 20)) "$BENCH" --target --nics "$SRV_DEV" --listen "127.0.0.1:$port" \
		--buffer "$BUFFER" ${FERRY_TARGET_ARGS:-} >"$log" 2>&1 &
	pid=$!
	pids+=("$pid")
	target_pids+=("$pid")
	target_address "$log" "$pid" >/dev/null
}

# The ferry target(s): one, plus one for READs under --verify (WRITEs
# overwrite the pattern READs check).
start_ferry_targets() {
	start_ferry_target "$FERRY_PORT" ferry-target || return 1
	if [ ${#verify[@]} -gt 0 ]; then
		start_ferry_target $((FERRY_PORT + 1)) ferry-target-read || return 1
	fi
}

ferry_targets_stop() {
	local pid
	for pid in "${target_pids[@]}"; do
		kill -INT "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	target_pids=()
}

# ferry_bench initiator: $1 = log name, $2 = op, rest = flags.  READs go to
# their own target under --verify.
ferry_run() {
	local name=$1 op=$2 port=$FERRY_PORT
	shift 2
	[ "$op" = read ] && [ ${#verify[@]} -gt 0 ] && port=$((FERRY_PORT + 1))
	# shellcheck disable=SC2086
	timeout "$TMO" "$BENCH" --connect "127.0.0.1:$port" --nics "$CLI_DEV" \
		--buffer "$BUFFER" --json ${FERRY_BENCH_ARGS:-} --op "$op" "$@" "${verify[@]}" \
		>"$LOGDIR/$name.json" 2>"$LOGDIR/$name.err"
	timed_out $? "ferry_bench $name" "$LOGDIR/$name.err"
}

# Wait (at most $3 tenths of a second) for Mooncake's transfer_engine_bench
# --mode=target, pid $2, logging to $1, and print its segment: with
# P2PHANDSHAKE the RPC address it logs ("listening on HOST:PORT", a port of
# its own choosing), not its --local_server_name.  Up once it has
# registered its buffer (the line after the transport's).  When it does not
# come up, says so on stderr and fails.
mooncake_segment() {
	local log=$1 pid=$2 seg i
	for ((i = 0; i < $3; i++)); do
		seg=$(sed -n 's/.*P2P handshake, listening on \([0-9.]*:[0-9]*\).*/\1/p' \
			"$log" 2>/dev/null | head -n 1)
		[ -n "$seg" ] && grep -qs "DRAM is used\|VRAM is used" "$log" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if [ -z "$seg" ]; then
		echo "$CMP_NAME: Mooncake's target did not come up (see $log)" >&2
		return 1
	fi
	echo "$seg"
}

# rxe's complaints, if any, for the logs.
save_dmesg() {
	dmesg 2>/dev/null | grep -iE "rxe|infiniband" >"$LOGDIR/dmesg.txt"
}

# The most frequent ferry_bench complaints of a failed run, on stderr.
ferry_complaints() {
	grep -h "ferry_bench:" "$LOGDIR"/*.err 2>/dev/null | sort | uniq -c | sort -rn |
		head -n 20 >&2
}
