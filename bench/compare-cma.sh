#!/usr/bin/env bash
# cma against its ceilings, on this host (no VM, no network):
#
#   make -j2 build/ferry_bench bench-tools   # ferry_bench, memcpy_bw, pvm_bw
#   bench/compare-cma.sh
#
# Each round, at each size and each kind of page (4 KiB, and transparent
# huge pages: --hugepages on every tool, both sides), the copying thread
# on CPU 0 (the target, idle, on CPU 1):
#   memcpy      build/memcpy_bw: one thread copying SIZE blocks between two
#               256 MiB pools (both touched first)
#   pvm         build/pvm_bw: one process_vm_writev (readv) of SIZE per call
#               from a 256 MiB pool into a fork()ed child's 256 MiB pool:
#               the system call's own ceiling, without ferry
#   ferry cma   ferry_bench --target / --connect --nics cma, one core,
#               --batch so that the requests cover 256 MiB on each side
# WRITE and READ.  Two numbers each: GB/s of wall time, and GB/s per
# second of the copying thread's CPU time (ferry: its core's; what a core
# costs whatever else runs on the CPU: the number to read on a shared
# host).  Then ferry / memcpy and ferry / pvm, and issue 10's goal: cma
# >= 0.8x one thread's memcpy at >= 1 MiB.  Medians over the rounds (every
# tool once per round, interleaved); raw outputs in $COMPARE_LOGDIR.
#
# Environment (all optional):
#   COMPARE_SIZES="64K 1M 4M"  COMPARE_DURATION=2 (s)  COMPARE_ROUNDS=3
#   COMPARE_PAGES="4k thp"     COMPARE_OPS="write read"
#   FERRY_BENCH=path  B=build  COMPARE_LOGDIR=$B/compare-cma
# Exit status: 0 when every run produced a number, 1 otherwise.
set -u

cd "$(dirname "$0")/.." || exit 1
CMP_NAME=compare-cma
# shellcheck source=bench/compare-lib.sh
. bench/compare-lib.sh
# shellcheck source=bench/loopback-lib.sh
. bench/loopback-lib.sh
B=${B:-build}
BENCH=${FERRY_BENCH:-$B/ferry_bench}
MEMCPY=$B/memcpy_bw
PVM=$B/pvm_bw
read -r -a SIZES <<<"${COMPARE_SIZES:-64K 1M 4M}"
read -r -a PAGES <<<"${COMPARE_PAGES:-4k thp}"
read -r -a OPS <<<"${COMPARE_OPS:-write read}"
DUR=${COMPARE_DURATION:-2}
ROUNDS=${COMPARE_ROUNDS:-3}
LOGDIR=${COMPARE_LOGDIR:-$B/compare-cma}
TMO=$((${DUR%.*} + 90))
POOL=$((256 << 20))
read -r CPU_I CPU_T <<<"$(cpu_pair)"
failed=0

for f in "$BENCH" "$MEMCPY" "$PVM"; do
	[ -x "$f" ] || die "$f missing: run 'make -j2 $BENCH bench-tools' first"
done
mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
private_bench

# The value after word $2 in the one-line output of a tool ($1), or "-".
word_after() {
	local v
	v=$(awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$1" | head -n 1)
	echo "${v:--}"
}

# One tool run: $1 key, $2 log name, rest the command.  Notes "KEY wall"
# and "KEY cpu".
tool() {
	local key=$1 log=$LOGDIR/$2.out
	shift 2
	timeout "$TMO" taskset -c "$CPU_I" "$@" >"$log" 2>&1
	note "$key wall" "$(word_after "$log" gbps)"
	note "$key cpu" "$(word_after "$log" cpu_gbps)"
}

# One ferry cma pair: $1 key, $2 log name, $3 op, $4 size, $5 page flag.
ferry() {
	local key=$1 name=$2 op=$3 s=$4 hp=$5
	PAIR_TARGET_FLAGS=(--buffer "$POOL" ${hp:+"$hp"})
	if ferry_pair "$name" cma cma --op "$op" --size "$s" --batch $((POOL / $(bytes "$s"))) \
		--buffer "$POOL" --duration "$DUR" ${hp:+"$hp"}; then
		note "$key wall" "$(json_num "$LOGDIR/$name.json" gbps)"
		note "$key cpu" "$(json_num "$LOGDIR/$name.json" gbps_per_core_cpu)"
	else
		note "$key wall" -
		note "$key cpu" -
	fi
	PAIR_TARGET_FLAGS=()
}

echo "# $CMP_NAME: copying thread on CPU $CPU_I, target on CPU $CPU_T, ${DUR}s per run," \
	"$ROUNDS round(s), logs in $LOGDIR"
echo "# load average at start: $(loadavg) ($(nproc) CPUs);" \
	"THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo none)"
for ((r = 1; r <= ROUNDS; r++)); do
	echo "# round $r/$ROUNDS (load $(loadavg))" >&2
	for pg in "${PAGES[@]}"; do
		hp=
		[ "$pg" = thp ] && hp=--hugepages
		for s in "${SIZES[@]}"; do
			tool "memcpy $pg $s" "r$r-memcpy-$pg-$s" "$MEMCPY" --size "$s" \
				--pool "$POOL" --duration "$DUR" $hp
			for op in "${OPS[@]}"; do
				tool "pvm $op $pg $s" "r$r-pvm-$op-$pg-$s" "$PVM" --op "$op" \
					--size "$s" --pool "$POOL" --duration "$DUR" $hp
				ferry "ferry $op $pg $s" "r$r-ferry-$op-$pg-$s" "$op" "$s" "$hp"
			done
		done
	done
done
echo "# load average at end: $(loadavg)"

for kind in cpu wall; do
	echo
	if [ "$kind" = cpu ]; then
		echo "GB/s per second of the copying thread's CPU (median, range):"
	else
		echo "GB/s of wall time (median, range):"
	fi
	echo
	echo "| pages | size | op | memcpy | process_vm_{writev,readv} alone | ferry cma | ferry / memcpy | ferry / pvm |"
	echo "|---|---|---|---|---|---|---|---|"
	for pg in "${PAGES[@]}"; do
		for s in "${SIZES[@]}"; do
			for op in "${OPS[@]}"; do
				m=$(med "memcpy $pg $s $kind")
				p=$(med "pvm $op $pg $s $kind")
				f=$(med "ferry $op $pg $s $kind")
				echo "| $pg | $s | $op | $(show "memcpy $pg $s $kind") |" \
					"$(show "pvm $op $pg $s $kind") | $(show "ferry $op $pg $s $kind") |" \
					"$(ratio "$m" "$f") | $(ratio "$p" "$f") |"
			done
		done
	done
done
exit $failed
