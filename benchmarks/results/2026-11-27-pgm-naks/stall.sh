#!/bin/bash
# BENCHMARKS.md 14f, honest loss: 14e's stalled receiver (SIGSTOP for 0.5 s, 1.5 s into
# 100,000 x 8800 B at 20 kpps over --transport pgm, window 32,768, in a namespace of its own),
# about 6,300 datagrams to repair at once. wirespeed before (424e14b: no budget), and after with
# the default budget (25 % + a quarter of the window: 8,192 datagrams), with a burst smaller
# than the loss (--pgm-repair-burst 2048), and with no budget (--pgm-repair-share off).
# Usage (root): OLD=/path/to/old/wirespeed NEW=target/release/wirespeed stall.sh OUTDIR [RUNS]
set -u
OUT=${1:?usage: stall.sh OUTDIR [RUNS]}
RUNS=${2:-2}
mkdir -p "$OUT"
NS=wsnakst$$
ip netns add $NS; trap 'ip netns del $NS' EXIT
ip netns exec $NS ip link set lo up
for r in $(seq 1 "$RUNS"); do
  for mode in before default burst2048 off; do
    W=$NEW; extra=""
    case $mode in
      before) W=$OLD ;;
      burst2048) extra="--pgm-repair-burst 2048" ;;
      off) extra="--pgm-repair-share off" ;;
    esac
    tag=$mode-$r
    ip netns exec $NS "$W" recv 127.0.0.2:7900 --transport pgm --pgm-window 32768 --count 100000 --size 8800 --duration 60 --json > "$OUT/recv-$tag.json" 2> "$OUT/recv-$tag.err" &
    RP=$!
    sleep 1
    ip netns exec $NS "$W" send 127.0.0.2:7900 --transport pgm --pgm-window 32768 --count 100000 --size 8800 --rate 20kpps --pgm-quiet 2s --pgm-linger 60s --json $extra > "$OUT/send-$tag.json" 2> "$OUT/send-$tag.err" &
    SP=$!
    sleep 1.5
    kill -STOP $RP; sleep 0.5; kill -CONT $RP
    wait $SP; wait $RP
    echo "$tag done"
  done
done
