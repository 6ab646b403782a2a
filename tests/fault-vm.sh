#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Faults on real RDMA, two processes (tests/fault_peer.c), run by
# tests/verbs-suite.sh inside the Soft-RoCE VM (4 rxe devices over veth0..3):
#
#  rail_down  initiator on rxe0,rxe1 (cores 0-1), target on rxe2,rxe3; while
#             it streams, veth1 (rxe1's link, core 1's rail) goes down for
#             3 s: every request must still end DONE with its bytes right,
#             and core 1's rail must post and move data again once the link
#             is back.
#  peer_kill  the target is killed (-9) mid-stream: the initiator's requests
#             must end FAILED/TIMEOUT within timeout_ms (2000) + slack, new
#             ones fail fast, nothing hangs; the target restarts on the same
#             address and the initiator's close + open reaches the new
#             incarnation: data verified again.
#
# The link test takes a network device down, so it only runs where vm-run
# says which devices are its own (SOFTROCE_NETDEVS); never on a host's NICs.
# FERRY_FAULT_TESTS="peer_kill" runs a subset.  Prints each program's output
# and "fault-vm: N passed, M failed".
set -u
B=${B:-build}
FP=$B/fault_peer
PORT=${FERRY_FAULT_PORT:-18600}
PEER=127.0.0.1:$PORT
read -r -a devs <<<"${FERRY_VERBS_DEVS:-${SOFTROCE_DEVICES:-$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')}}"
read -r -a nets <<<"${SOFTROCE_NETDEVS:-}"
tmp=$(mktemp -d)
passed=0 failed=0 tpid= spid=

if [ "${#devs[@]}" -lt 4 ]; then
	echo "fault-vm: need 4 RDMA devices, found ${#devs[@]}: NOT run"
	exit 1
fi
INIT="${devs[0]},${devs[1]}" TARGET="${devs[2]},${devs[3]}"

cleanup() {
	[ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null
	[ -n "$tpid" ] && kill -KILL "$tpid" 2>/dev/null
	[ "${#nets[@]}" -ge 2 ] && ip link set "${nets[1]}" up 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

log() { echo "fault-vm: $(date +%T.%N | cut -c1-12) $*"; }

# Wait (up to $2 s) until file $1 contains $3.
wait_for_line() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		grep -q -- "$3" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# The target on rxe2,rxe3, serving PEER; its output goes to $1.
start_target() {
	"$FP" target --nics "$TARGET" --cores 0-1 --listen "$PEER" >>"$1" 2>&1 &
	tpid=$!
	if ! wait_for_line "$1" 60 "target ready"; then
		log "the target did not start:"; cat "$1"
		return 1
	fi
}

stop_target() {
	kill -TERM "$tpid" 2>/dev/null
	wait "$tpid" 2>/dev/null
	tpid=
}

result() { # name status output
	cat "$3"
	if [ "$2" -eq 0 ]; then
		passed=$((passed + 1))
		echo "[       OK ] fault-vm $1"
	else
		failed=$((failed + 1))
		echo "[  FAILED  ] fault-vm $1 (exit $2)"
		echo "--- target output"; cat "$tmp/target.log"
	fi
	: >"$tmp/target.log"
}

rail_down() {
	local out=$tmp/rail_down.log rc
	if [ "${#nets[@]}" -lt 2 ]; then
		echo "fault-vm: rail_down skipped: no netdevs of our own (SOFTROCE_NETDEVS unset)"
		return
	fi
	echo "[ RUN      ] fault-vm rail_down: ${nets[1]} (${devs[1]}) down for 3 s"
	start_target "$tmp/target.log" || { result rail_down 2 /dev/null; return; }
	# Appending (O_APPEND): the script's own lines go into the same file.
	: >"$out"
	"$FP" stream --nics "$INIT" --cores 0-1 --peer "$PEER" --expect all-done \
		--duration 90 --after 8 --timeout-ms 2000 --watch-core 1 >>"$out" 2>&1 &
	spid=$!
	wait_for_line "$out" 60 "RUN" && sleep 2
	# The program times what follows from the marks (the shell's own
	# timestamps lag under the emulated CPU's load).
	ip link set "${nets[1]}" down && kill -USR1 "$spid"
	log "${nets[1]} down" >>"$out"
	sleep 3
	ip link set "${nets[1]}" up && kill -USR2 "$spid"
	log "${nets[1]} up" >>"$out"
	wait "$spid"
	rc=$?
	spid=
	stop_target
	result rail_down $rc "$out"
}

peer_kill() {
	local out=$tmp/peer_kill.log rc
	echo "[ RUN      ] fault-vm peer_kill: target killed mid-stream, then restarted"
	start_target "$tmp/target.log" || { result peer_kill 2 /dev/null; return; }
	: >"$out"
	"$FP" stream --nics "$INIT" --cores 0-1 --peer "$PEER" --expect peer-kill \
		--duration 30 --after 3 --timeout-ms 2000 --slack-ms 3000 >>"$out" 2>&1 &
	spid=$!
	wait_for_line "$out" 60 "RUN" && sleep 2
	kill -KILL "$tpid" && kill -USR1 "$spid"
	log "target killed" >>"$out"
	wait "$tpid" 2>/dev/null
	tpid=
	# Restart only once the initiator has seen the death: a target back too
	# early would just be another way of failing the old QPs.
	if wait_for_line "$out" 60 "waiting for the restarted target"; then
		start_target "$tmp/target.log"
		log "target restarted" >>"$out"
	fi
	wait "$spid"
	rc=$?
	spid=
	[ -n "$tpid" ] && stop_target
	result peer_kill $rc "$out"
}

for t in ${FERRY_FAULT_TESTS:-rail_down peer_kill}; do
	case $t in
	rail_down | peer_kill) $t ;;
	*) echo "fault-vm: unknown test $t"; failed=$((failed + 1)) ;;
	esac
done
echo "fault-vm: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
