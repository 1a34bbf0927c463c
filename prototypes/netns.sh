#!/bin/sh
# Create (up) or remove (down) the two namespaces joined by a veth pair used by run.sh.
#   TX namespace $NS_TX: veth $VE_TX 198.18.150.1/30   RX namespace $NS_RX: veth $VE_RX 198.18.150.2/30
# IPv6 is off on both ends (no ND/MLD frames), and the sender has a permanent neighbour entry for
# the receiver, so no ARP is needed even when an XDP program owns the receiving end.
set -e
NS_TX=${NS_TX:-wsproto-tx}
NS_RX=${NS_RX:-wsproto-rx}
VE_TX=${VE_TX:-wsp-tx0}
VE_RX=${VE_RX:-wsp-rx0}
case "$1" in
up)
	ip netns add "$NS_TX"
	ip netns add "$NS_RX"
	ip link add "$VE_TX" netns "$NS_TX" type veth peer name "$VE_RX" netns "$NS_RX"
	for ns in "$NS_TX" "$NS_RX"; do
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
		ip -n "$ns" link set lo up
	done
	ip -n "$NS_TX" addr add 198.18.150.1/30 dev "$VE_TX"
	ip -n "$NS_RX" addr add 198.18.150.2/30 dev "$VE_RX"
	ip -n "$NS_TX" link set "$VE_TX" up
	ip -n "$NS_RX" link set "$VE_RX" up
	# A real NIC segments UDP GSO trains in hardware; make veth hand over single frames too, so
	# every receiver (socket or XDP) is offered the same 1080-byte frames.
	ip netns exec "$NS_TX" ethtool -K "$VE_TX" tx-udp-segmentation off
	mac=$(ip -n "$NS_RX" -br link show "$VE_RX" | awk '{print $3}')
	ip -n "$NS_TX" neigh replace 198.18.150.2 lladdr "$mac" dev "$VE_TX" nud permanent
	;;
down)
	ip netns del "$NS_TX" 2>/dev/null || true
	ip netns del "$NS_RX" 2>/dev/null || true
	;;
*)
	echo "usage: $0 up|down" >&2
	exit 2
	;;
esac
