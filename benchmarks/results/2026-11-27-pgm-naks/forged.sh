#!/bin/bash
# BENCHMARKS.md 14f, forged NAKs: a PGM source sends 40,000 x 1000 B at 10 kpps to group
# 239.192.0.1 from partition A; from partition B (a receiver's address, 198.18.99.2) a forger
# that saw the session sends 2,000 NAKs of 63 in-window sequence numbers at 1,000/s
# (crates/wirespeed/examples/pgm_nak_flood.rs). What the source sends in answer, for
# wirespeed before (424e14b) and after, and for OpenPGM 5.3's source (tests/pgm-peer).
# Usage (root, from the source tree):
#   OLD=/path/to/old/wirespeed NEW=target/release/wirespeed \
#   FORGER=target/debug/examples/pgm_nak_flood PEER=target/openpgm-peer forged.sh OUTDIR [RUNS]
set -u
OUT=${1:?usage: forged.sh OUTDIR [RUNS]}
RUNS=${2:-2}
mkdir -p "$OUT"
A=wsnakA$$; B=wsnakB$$
ip netns add $A; ip netns add $B
trap 'ip netns del $A; ip netns del $B' EXIT
ip link add wsnk0 netns $A type veth peer name wsnk1 netns $B
ip -n $A addr add 198.18.99.1/30 dev wsnk0; ip -n $B addr add 198.18.99.2/30 dev wsnk1
for n in $A $B; do
  ip -n $n link set lo up
  d=wsnk0; [ $n = $B ] && d=wsnk1
  ip -n $n link set $d mtu 9000 up
  ip -n $n route add 239.192.0.0/16 dev $d
done
P=7900
for r in $(seq 1 "$RUNS"); do
  for who in before after after-share10 after-off openpgm; do
    tag=$who-$r
    case $who in
      before) ip netns exec $A "$OLD" send 239.192.0.1:$P --transport pgm --rate 10kpps --size 1000 --duration 4 --json > "$OUT/send-$tag.json" 2> "$OUT/send-$tag.err" & ;;
      after) ip netns exec $A "$NEW" send 239.192.0.1:$P --transport pgm --rate 10kpps --size 1000 --duration 4 --json > "$OUT/send-$tag.json" 2> "$OUT/send-$tag.err" & ;;
      after-share10) ip netns exec $A "$NEW" send 239.192.0.1:$P --transport pgm --rate 10kpps --size 1000 --duration 4 --pgm-repair-share 10 --json > "$OUT/send-$tag.json" 2> "$OUT/send-$tag.err" & ;;
      after-off) ip netns exec $A "$NEW" send 239.192.0.1:$P --transport pgm --rate 10kpps --size 1000 --duration 4 --pgm-repair-share off --json > "$OUT/send-$tag.json" 2> "$OUT/send-$tag.err" & ;;
      openpgm) ip netns exec $A "$PEER" send --network "198.18.99.1;239.192.0.1" --port $P --count 40000 --size 1000 --rate 10000 --linger-ms 3000 > "$OUT/send-$tag.json" 2> "$OUT/send-$tag.err" & ;;
    esac
    SP=$!
    ip netns exec $B "$FORGER" --listen 239.192.0.1:$P --iface 198.18.99.2 --naks-per-s 1000 --seconds 2 > "$OUT/forger-$tag.json" 2> "$OUT/forger-$tag.err"
    wait $SP
    echo "$tag: $(cat "$OUT/forger-$tag.json")"
  done
done
