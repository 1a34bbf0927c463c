#!/bin/bash
# Run every receive prototype against `wirespeed send` over a veth pair between two namespaces.
#   ./run.sh OUTFILE [REPS] [DURATION]
# Environment: RATES (default "100kpps 400kpps max"), SEND_ARGS (more `wirespeed send` options),
# WIRESPEED (the binary).
# Sender pinned to CPU 0 (taskset and --cpu 0), receiver to CPU 1. Points: 100 kpps, 400 kpps and
# flat out, 1080-byte counter datagrams, the sender using GSO (segmented in software before the
# veth, see netns.sh). One line per run: the receiver's RESULT line plus the sender's figures.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run.sh OUTFILE [REPS] [DURATION]}
reps=${2:-3}
dur=${3:-5}
ws=${WIRESPEED:-$here/../target/release/wirespeed}
export NS_TX=wsproto-tx-$$ NS_RX=wsproto-rx-$$
trap '"$here/netns.sh" down' EXIT
"$here/netns.sh" up
port=9000
# CPU ticks (1/100 s) of both ksoftirqd threads: softirq work that no thread of ours is charged for.
ksoft() {
	local t=0 p
	for p in $(pgrep -x 'ksoftirqd/[01]'); do
		t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat)))
	done
	echo $t
}
receivers=(
	"recvmmsg|$here/rx_recvmmsg -p $port -t $((dur + 2))"
	"uring|$here/rx_uring -p $port -t $((dur + 2))"
	"xdp-generic|$here/rx_xdp -p $port -t $((dur + 2)) -i wsp-rx0"
	"xdp-native|$here/rx_xdp -p $port -t $((dur + 2)) -i wsp-rx0 -N"
)
for rep in $(seq 1 "$reps"); do
	for rate in ${RATES:-100kpps 400kpps max}; do
		for r in "${receivers[@]}"; do
			name=${r%%|*}
			cmd=${r#*|}
			ip netns exec "$NS_RX" taskset -c 1 $cmd >"/tmp/rx.$$" 2>"/tmp/rx.$$.err" &
			rxpid=$!
			sleep 0.5
			load=$(cut -d' ' -f1 /proc/loadavg)
			k0=$(ksoft)
			ip netns exec "$NS_TX" taskset -c 0 "$ws" send 198.18.150.2:$port --size 1080 --rate "$rate" \
				--gso --duration "$dur" --cpu 0 ${SEND_ARGS:-} --json >"/tmp/tx.$$"
			wait $rxpid
			k1=$(ksoft)
			sent=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["sent"], round(d["achieved_pps"]), round(d["cpu_ns_per_packet"]))' "/tmp/tx.$$")
			set -- $sent
			echo "rep=$rep rate=$rate load1=$load $(grep RESULT "/tmp/rx.$$") tx_sent=$1 tx_pps=$2 tx_cpu_ns_per_dgram=$3 ksoftirqd_ms=$(((k1 - k0) * 10)) xskstats=\"$(grep -o 'rx_dropped.*' "/tmp/rx.$$.err")\"" | tee -a "$out"
		done
	done
done
rm -f "/tmp/rx.$$" "/tmp/rx.$$.err" "/tmp/tx.$$"
