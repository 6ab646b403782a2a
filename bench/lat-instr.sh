#!/usr/bin/env bash
# User-space instructions per 8-byte READ on Soft-RoCE, ferry_bench --lat
# against ib_read_lat, counted by valgrind's callgrind INSIDE the VM:
#
#   make build/ferry_bench
#   ../shared/softroce/vm-run --devices 2 --timeout 900 -- bench/lat-instr.sh
#
# Why instructions: rxe runs a READ's whole round trip inside the post's
# write(2) on the posting CPU (requester, veth, bridge, responder, the
# response, the CQE), so when the post returns the completion is already
# there (ferry --lat shows one pass per request and no empty CQ poll).  What
# differs between the two programs is then the user-space instructions each
# runs per request, ~2 ns apiece in the emulated VM, against a ~40 us round
# trip.  Instruction counts do not swing with the VM's bimodal rounds.
#
# Each program runs twice, LAT_INSTR_N1 and LAT_INSTR_N2 iterations; per
# request = the difference of the two runs over N2 - N1, less the
# difference of the two runs' sorting of their samples (qsort, both sides),
# for perftest of its clock calibration (a loop that runs for a time) and,
# for ferry, of its 10 ms sweeps (valgrind makes a request ~20 times
# slower, so they would count ~20 times too often; printed beside).  The
# ferry target is not counted (a READ needs no CPU of it), nor the engine's
# other threads ("others", printed beside: see counted()).
# ~1 minute per repetition.  Environment: LAT_INSTR_REPS=2, LAT_INSTR_N1=200 LAT_INSTR_N2=1200,
# LAT_INSTR_ARGS=--caller (ferry's --lat flags), COMPARE_LOGDIR, B, FERRY_BENCH.
set -u

cd "$(dirname "$0")/.." || exit 1
CMP_NAME=lat-instr
# shellcheck source=bench/compare-lib.sh
. bench/compare-lib.sh
B=${B:-build}
BENCH=${FERRY_BENCH:-$B/ferry_bench}
N1=${LAT_INSTR_N1:-200}
N2=${LAT_INSTR_N2:-1200}
LAT_ARGS=${LAT_INSTR_ARGS---caller}
REPS=${LAT_INSTR_REPS:-2}
LOGDIR=${COMPARE_LOGDIR:-$B/lat-instr}
softroce_pair
TMO=600
FERRY_PORT=18750
BUFFER=$((1 << 20))
port=18650

command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install -y valgrind)"
command -v ib_read_lat >/dev/null || die "perftest is not installed"
ls /sys/class/infiniband/"$SRV_DEV" >/dev/null 2>&1 || die "no RDMA device $SRV_DEV (run me in the Soft-RoCE VM)"
[ "$N2" -gt "$N1" ] || die "LAT_INSTR_N2 must be larger than LAT_INSTR_N1"
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
private_bench

# counted NAME ARGS...: ARGS under callgrind, counted per thread (NAME.cg-NN);
# $LOGDIR/NAME.cg is the thread that runs the requests (the one that runs
# ferry_bench's port_main, else the busiest: perftest's only one), and
# NAME.all the instructions of all threads.  Why per thread: under valgrind
# a request takes ~1 ms, so the engine's other threads (the core's own,
# which takes the core back CALLER_FALLBACK_MS after the caller's last pass,
# the control and lease threads) run per request what they run once per
# ~25 requests at full speed: counted with the requests they would make the
# figure depend on the host's load (2,527 vs 2,743 in two runs).
counted() {
	local name=$1 f path= most=0 n all=0
	shift
	rm -f "$LOGDIR/$name".*.txt "$LOGDIR/$name".cg* # an earlier run's counts and listings
	timeout "$TMO" valgrind --tool=callgrind --separate-threads=yes \
		--callgrind-out-file="$LOGDIR/$name.cg" "$@" >"$LOGDIR/$name.out" 2>"$LOGDIR/$name.err"
	timed_out $? "$name" "$LOGDIR/$name.err" || return 1
	for f in "$LOGDIR/$name".cg-*; do
		n=$(sed -n 's/^summary: *//p' "$f")
		all=$((all + ${n:-0}))
		grep -q ' port_main$' "$f" && path=$f
		[ -z "$path" ] && [ "${n:-0}" -gt "$most" ] && most=$n && path=$f
	done
	[ -n "$path" ] || die "$name: no callgrind counts in $LOGDIR"
	cp "$path" "$LOGDIR/$name.cg"
	echo "$all" >"$LOGDIR/$name.all"
}

# listing NAME KIND: callgrind_annotate's listing of NAME's counts, KIND
# incl (inclusive), self or caller (with each function's callers); made
# once per run and kind, kept beside the counts.
listing() {
	local out=$LOGDIR/$1.$2.txt
	[ -s "$out" ] || case $2 in
	incl) callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$LOGDIR/$1.cg" ;;
	self) callgrind_annotate --auto=no --threshold=100 "$LOGDIR/$1.cg" ;;
	caller) callgrind_annotate --tree=caller --auto=no --threshold=100 "$LOGDIR/$1.cg" ;;
	esac >"$out" 2>/dev/null
	cat "$out"
}

# incl NAME FUNCTION: FUNCTION's inclusive instructions in NAME's counts (0: none).
incl() {
	listing "$1" incl |
		awk -v f=":$2 " 'index($0, f) && !/=>/ { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}

# obj NAME OBJECT: the instructions run inside shared object OBJECT (a name's start).
obj() {
	listing "$1" self |
		awk -v o="/$2" 'index($0, o) && !/=>/ { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}

# clock_loops NAME: the inclusive instructions of the functions that read
# the time of day (perftest's clock calibration: a loop that runs for a time,
# so valgrind's slowdown changes its count from one run to the next).
clock_loops() {
	local c sum=0
	for c in $(listing "$1" caller | awk '/^ *[0-9,]+ .*< / { c = $0; sub(/.*< */, "", c); sub(/ .*/, "", c);
			callers[n++] = c; next }
		/\*  .*__gettimeofday_syscall/ { for (i = 0; i < n; i++) print callers[i] } !/< / { n = 0 }' |
		sed 's/.*://' | sort -u); do
		sum=$((sum + $(incl "$1" "$c")))
	done
	echo "$sum"
}

total() {
	sed -n 's/^summary: *//p' "$LOGDIR/$1.cg"
}

# all NAME: the instructions of all of NAME's threads.
all() {
	cat "$LOGDIR/$1.all"
}

# per VALUE2 VALUE1: (VALUE2 - VALUE1) / (N2 - N1), one decimal.
per() {
	awk -v a="$1" -v b="$2" -v n=$((N2 - N1)) 'BEGIN { printf "%.1f", (a - b) / n }'
}

# One repetition: both programs at N1 and N2 iterations, one line each.
rep() {
	local r=$1 n prog k spid
	declare -A f
	start_ferry_target "$FERRY_PORT" ferry-target || exit 1
	for n in "$N1" "$N2"; do
		# shellcheck disable=SC2086 # LAT_ARGS: one word per flag
		counted "ferry.$r.$n" "$BENCH" --connect "127.0.0.1:$FERRY_PORT" --nics "$CLI_DEV" \
			--buffer "$BUFFER" --json --op read --lat --size 8 -n "$n" $LAT_ARGS || exit 1
	done
	ferry_targets_stop
	for n in "$N1" "$N2"; do
		port=$((port + 1))
		timeout "$TMO" ib_read_lat -d "$SRV_DEV" -x "$GID" -F -p "$port" -s 8 -n "$n" \
			>"$LOGDIR/perftest.$r.$n.server" 2>&1 &
		spid=$!
		pids+=("$spid")
		wait_listen "$port" 300 || die "ib_read_lat server did not listen on $port"
		counted "perftest.$r.$n" ib_read_lat -d "$CLI_DEV" -x "$GID" -F -p "$port" -s 8 \
			-n "$n" "$SRV_ADDR" || exit 1
		wait "$spid" 2>/dev/null
	done
	# What a run counted per request, less its sorting (and sweeps).
	for prog in perftest ferry; do
		for k in total all rxe qsort clock core_sweep ferry_submit ferry_prep_submit ferry_batch_wait; do
			for n in "$N1" "$N2"; do
				case $k in
				total) f[$k $n]=$(total "$prog.$r.$n") ;;
				all) f[$k $n]=$(all "$prog.$r.$n") ;;
				rxe) f[$k $n]=$(obj "$prog.$r.$n" librxe) ;;
				clock) f[$k $n]=0 && [ "$prog" = perftest ] &&
					f[$k $n]=$(clock_loops "$prog.$r.$n") ;;
				*) f[$k $n]=$(incl "$prog.$r.$n" "$k") ;;
				esac
			done
			f[$k]=$(per "${f[$k $N2]}" "${f[$k $N1]}")
		done
		net=$(awk -v t="${f[total]}" -v q="${f[qsort]}" -v s="${f[core_sweep]}" -v c="${f[clock]}" \
			'BEGIN { printf "%.1f", t - q - s - c }')
		others=$(awk -v a="${f[all]}" -v t="${f[total]}" 'BEGIN { printf "%.1f", a - t }')
		sub=$(awk -v a="${f[ferry_submit]}" -v b="${f[ferry_prep_submit]}" \
			'BEGIN { printf "%.1f", a + b }')
		wt=${f[ferry_batch_wait]} empty=-
		if [ "$prog" = perftest ]; then
			sub=- wt=-
		else
			empty=$(($(json_sum "$LOGDIR/ferry.$r.$N2.out" empty_polls) -
				$(json_sum "$LOGDIR/ferry.$r.$N1.out" empty_polls)))
		fi
		low[$prog]=$(awk -v a="${low[$prog]:-}" -v b="$net" \
			'BEGIN { printf "%s", (a == "" || b + 0 < a + 0) ? b : a }')
		printf "%-4s %-10s %10s %10s %10s %12s %10s %10s %8s %10s\n" "$r" "$prog" "$net" "${f[rxe]}" \
			"$sub" "$wt" "${f[qsort]}" "${f[core_sweep]}" "$empty" "$others"
	done
}

echo "$CMP_NAME: user-space instructions per 8-byte READ (runs of $N1 and $N2, logs in $LOGDIR)"
printf "%-4s %-10s %10s %10s %10s %12s %10s %10s %8s %10s\n" rep program "per_req" "rxe" "submit" \
	"wait" "sorting" "sweeps" "empty" "others"
declare -A low
for ((r = 1; r <= REPS; r++)); do
	rep "$r"
done
echo "lowest per_req: perftest ${low[perftest]}, ferry ${low[ferry]}" \
	"($(awk -v a="${low[perftest]}" -v b="${low[ferry]}" 'BEGIN { printf "%.0f", b - a }') more for ferry)"
echo "(per_req: the instructions per request of the thread that runs the requests,"
echo " its sorting and sweeps left out; others: the other threads' (under valgrind"
echo " a request is ~20 times slower, so their timed work counts ~20 times too often);"
echo " rxe: inside the rxe provider library (post, poll; the same work on both sides);"
echo " submit/wait: ferry_submit (or ferry_prep_submit), ferry_batch_wait, inclusive;"
echo " empty: ferry's CQ polls that found nothing, over the N2 - N1 requests: a poll loop's"
echo " spins count in per_req, on both sides, when rxe deferred its work; perftest's clock"
echo " calibration, a loop that runs for a time, is left out)"
