#!/usr/bin/env bash
# The verbs part of the suite in the Soft-RoCE VM, for a host without RDMA
# devices (make test-verbs): boots it with 4 rxe devices and runs
# tests/tools/verbs-suite.sh there.
#
# The guest has stopped for good mid-suite twice in CI (about 1 run in 10:
# no more output, the in-guest step watchdog silent for 13 minutes, both
# vCPUs busy on the host), at different steps -- below ferry, whose own
# hangs verbs-suite.sh's step watchdog reports and fails.  vm-run's README
# has seen the same.  So the suite in the guest writes a counter to a beat
# file in the shared build directory every 10 s; when it stops changing for
# FERRY_VM_BEAT_S (120) seconds (or none comes that long after the start),
# the VM is stopped and the VM part runs once
# more, said on stderr.  A second stop fails (status 1).
set -u
B=${B:-build}
SOFTROCE=${SOFTROCE:-../shared/softroce}
BEAT=$B/verbs-suite.beat
BEAT_S=${FERRY_VM_BEAT_S:-120}

# One VM; its status, or 200 when the guest stopped beating.
run_vm() {
	local pid last="" now same=0

	rm -f "$BEAT"
	"$SOFTROCE/vm-run" --devices 4 --timeout 900 -- \
		env B="$B" FERRY_VERBS_BEAT="$BEAT" tests/tools/verbs-suite.sh &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 2
		# Booting (a few seconds) counts as silence too: a guest that
		# stops before the suite starts never beats.
		now=$(cat "$BEAT" 2>/dev/null) || now=booting
		if [ "$now" != "$last" ]; then
			last=$now same=0
			continue
		fi
		same=$((same + 2))
		if [ "$same" -ge "$BEAT_S" ]; then
			echo "verbs-vm: the guest has not beaten for $same s (last beat $now):" \
				"stopping the VM" >&2
			kill -TERM "$pid" 2>/dev/null
			wait "$pid"
			return 200
		fi
	done
	wait "$pid"
}

for try in 1 2; do
	run_vm
	rc=$?
	rm -f "$BEAT"
	[ "$rc" = 200 ] || exit "$rc"
	[ "$try" = 2 ] && break
	echo "verbs-vm: the Soft-RoCE guest stopped (no beat, no step watchdog): running the" \
		"VM part once more" >&2
done
echo "verbs-vm: the guest stopped twice: VM part FAILED" >&2
exit 1
