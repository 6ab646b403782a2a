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
run() {
	echo "== $*"
	"$@" || { echo "FAILED: $*"; fail=1; }
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
exit $fail
