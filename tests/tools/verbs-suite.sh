#!/usr/bin/env bash
# The verbs part of the suite: runs where RDMA devices exist, i.e. inside the
# Soft-RoCE VM that `make test-verbs` boots (4 rxe devices), or directly on a
# host with NICs (FERRY_VERBS_DEVS="dev0 dev1 dev2 dev3" to choose them).
# Prints each test binary's cmocka summary; exits non-zero if one failed.
set -u
B=${B:-build}
read -r -a devs <<<"${FERRY_VERBS_DEVS:-${SOFTROCE_DEVICES:-$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')}}"
if [ "${#devs[@]}" -lt 2 ]; then
	echo "verbs-suite: need at least 2 RDMA devices, found ${#devs[@]}" >&2
	exit 1
fi
fail=0
# verbs-vm.sh watches this from the host: a counter written every 10 s
# while the guest runs (its shared build directory is written through).
if [ -n "${FERRY_VERBS_BEAT:-}" ]; then
	(
		n=0
		while :; do
			n=$((n + 1))
			echo "$n" >"$FERRY_VERBS_BEAT"
			sleep 10
		done
	) &
	beat_pid=$!
	trap 'kill "$beat_pid" 2>/dev/null' EXIT
fi
# A step that has not ended after STEP_S seconds is stopped, after what it
# waits on is printed: each thread's state, kernel wait channel and kernel
# stack, then (within 60 s; a thread stuck in the kernel can hold gdb too)
# gdb's user-space stacks, and the kernel log's tail.  A hung step then
# fails with its reason instead of the VM's whole timeout (vm-run
# --timeout) ending the suite with nothing to go on.  If the dump does not
# come either, the VM itself stopped (vm-run's README has seen that once).
STEP_S=${FERRY_VERBS_STEP_S:-300}
step_dump() {
	local pid=$1 p t
	echo "verbs-suite: step still running after ${STEP_S} s: $(tr '\0' ' ' </proc/"$pid"/cmdline)"
	for p in $pid $(pgrep -P "$pid"); do
		for t in /proc/"$p"/task/*; do
			echo "-- pid $p task ${t##*/} ($(cat "$t"/comm)): state $(awk '{ print $3 }' "$t"/stat)," \
				"wchan $(cat "$t"/wchan)"
			cat "$t"/stack 2>/dev/null
		done
		if command -v gdb >/dev/null; then
			timeout 60 gdb -p "$p" -batch -ex "thread apply all bt" 2>/dev/null | grep -E "^Thread|^#"
		fi
	done
	dmesg 2>/dev/null | tail -30
}
# step_watch PID: after STEP_S seconds, dump PID and kill it (and its children).
step_watch() {
	local pid=$1 nap
	sleep "$STEP_S" &
	nap=$!
	trap 'kill "$nap" 2>/dev/null; exit 0' TERM # the step ended: no sleeper left behind
	wait "$nap"
	kill -0 "$pid" 2>/dev/null || exit 0
	trap '' TERM # the step may end meanwhile: the dump goes on to its end
	step_dump "$pid"
	# shellcheck disable=SC2046 # one word per pid
	kill -KILL "$pid" $(pgrep -P "$pid") # at once: a parent left alive could go on
}
run() {
	local pid watch rc
	echo "== $*"
	"$@" &
	pid=$!
	step_watch "$pid" &
	watch=$!
	wait "$pid"
	rc=$?
	kill "$watch" 2>/dev/null
	wait "$watch" 2>/dev/null
	[ "$rc" = 0 ] || { echo "FAILED: $* (status $rc)"; fail=1; }
}
# The VM is emulated (~15x slower) and rxe moves ~50 MB/s: smaller requests.
export FERRY_TEST_MAX_REQ=${FERRY_TEST_MAX_REQ:-$((4 << 20))}
# ... and its ACKs can take longer than a real NIC's 67 ms local ACK timeout:
# rxe's retransmissions then fail healthy QPs (see tests/tools/fault-vm.sh).
if [ -n "${SOFTROCE_DEVICES:-}" ]; then
	export FERRY_IB_TIMEOUT=${FERRY_IB_TIMEOUT:-18}
fi
if [ "${#devs[@]}" -ge 4 ]; then
	# Initiator cores on two local NICs: large requests stripe over both.
	init="${devs[0]},${devs[1]}" target="${devs[2]},${devs[3]}"
else
	init="${devs[0]}" target="${devs[1]}"
fi
run "$B/verbs_smoke" "${devs[0]}" "${devs[1]}"
# qp/post's depth, quota and signalling over the real device (~5 s).
run "$B/verbs_depth" "${devs[0]}" "${devs[1]}"
FERRY_TEST_INIT_NICS=$init FERRY_TEST_TARGET_NICS=$target run "$B/tests/integration/test_integration"
FERRY_TEST_INIT_NICS=${devs[0]} FERRY_TEST_TARGET_NICS=${devs[1]} run "$B/tests/integration/test_twoproc"
FERRY_TEST_INIT_NICS=${devs[0]} FERRY_TEST_TARGET_NICS=${devs[1]} run "$B/tests/integration/test_api"
# Notifications after WRITEs striped over the initiator's rails: the bytes are
# there when the notification is polled (only that test of test_notify).
FERRY_TEST_NOTIFY_ENV_ONLY=1 FERRY_TEST_INIT_NICS=$init FERRY_TEST_TARGET_NICS=$target \
	run "$B/tests/integration/test_notify"
# Idle policy caller over verbs: the waiting thread posts and polls (~6 s).
FERRY_TEST_IDLE=caller FERRY_TEST_INIT_NICS=$init FERRY_TEST_TARGET_NICS=$target \
	run "$B/tests/integration/test_integration"
FERRY_TEST_IDLE=caller FERRY_TEST_INIT_NICS=${devs[0]} FERRY_TEST_TARGET_NICS=${devs[1]} \
	run "$B/tests/integration/test_api"
# Faults on real RDMA, two processes (tests/tools/fault-vm.sh; needs 4 devices): a
# rail's link down and back, a peer killed and restarted (~40-70 s in the VM
# together).  FERRY_FAULT_TESTS picks some of them, FERRY_FAULT_VM=0 none.
if [ "${#devs[@]}" -ge 4 ] && [ "${FERRY_FAULT_VM:-1}" != 0 ]; then
	run env B="$B" tests/tools/fault-vm.sh
fi
# Peers of different IP families (IPv4 + IPv6 against IPv6 only): only in
# vm-run's VM, whose network this step rearranges for a while (~10 s).
if [ -n "${SOFTROCE_DEVICES:-}" ] && [ "${#devs[@]}" -ge 4 ]; then
	run env B="$B" tests/tools/gid-family-vm.sh 2 3
fi
exit $fail
