#!/usr/bin/env bash
# GID choice across IP families, on Soft-RoCE in the VM of vm-run (rxeI on
# vethI, 10.99.0.(I+1)/24, one network namespace): device A keeps its IPv4
# address and gains an IPv6 one, device B has IPv6 only.  A picks its
# IPv4-mapped GID, B its IPv6 one; verbs_smoke A B must still connect and
# move data both ways (both ends use the IPv6 pair).  Needs root (the VM's
# guest is); puts the addresses back afterwards.
#   tests/tools/gid-family-vm.sh A B    (device indexes, e.g. 2 3)
set -u
B=${B:-build}
a=$1 b=$2
v4b=10.99.0.$((b + 1))/24
# Like vm-run's IPv4 rules: traffic between local addresses leaves
# through the veth it is bound to, not through lo.
setup() {
	ip addr del "$v4b" dev "veth$b" || return 1
	ip -6 rule add pref 1000 lookup local
	ip -6 rule del pref 0 lookup local
	for i in "$a" "$b"; do
		ip -6 addr add "fd00::$((i + 1))/64" dev "veth$i" nodad || return 1
		ip -6 route add fd00::/64 dev "veth$i" table $((100 + i))
		ip -6 rule add pref 99 from "fd00::$((i + 1))" to "fd00::$((i + 1))" lookup local
		ip -6 rule add pref 100 oif "veth$i" lookup $((100 + i))
		ip -6 rule add pref 101 from "fd00::$((i + 1))" iif lo lookup $((100 + i))
	done
	sleep 2 # rxe fills its GID table from the address events
}
restore() {
	for i in "$a" "$b"; do
		ip -6 addr del "fd00::$((i + 1))/64" dev "veth$i"
		ip -6 rule del pref 99 from "fd00::$((i + 1))" to "fd00::$((i + 1))" lookup local
		ip -6 rule del pref 100 oif "veth$i" lookup $((100 + i))
		ip -6 rule del pref 101 from "fd00::$((i + 1))" iif lo lookup $((100 + i))
		ip -6 route flush table $((100 + i))
	done
	ip -6 rule add pref 0 lookup local
	ip -6 rule del pref 1000 lookup local
	ip addr add "$v4b" dev "veth$b"
	sleep 2
} 2>/dev/null
setup || { echo "gid-family-vm: cannot set the addresses up (not root?)"; restore; exit 1; }
"$B/verbs_smoke" "rxe$a" "rxe$b"
rc=$?
restore
exit $rc
