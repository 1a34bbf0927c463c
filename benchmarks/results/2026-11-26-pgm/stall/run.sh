#!/bin/bash
# BENCHMARKS.md 14e: a receiver stalled (SIGSTOP) for 0.5 s, 1.5 s into a 20 kpps stream of
# 100,000 x 8800 B over --transport pgm, in a namespace of its own (lo only). Repairs unpaced
# (the default) against --pgm-repair-rate 20kpps (capped at the data's rate), with the
# receiver's socket buffer as wirespeed asks for it and with --rcvbuf 2M.
# Usage (root): run.sh OUTDIR
set -u
W=${W:-wirespeed}
OUT=${1:?usage: run.sh OUTDIR}
mkdir -p "$OUT"
NS=wsstall$$
ip netns add $NS; trap 'ip netns del $NS' EXIT
ip netns exec $NS ip link set lo up
for buf in default 2M; do
  for r in 1 2; do
    for mode in unpaced cap; do
      rb=""; [ $buf = 2M ] && rb="--rcvbuf 2M"
      cap=""; [ $mode = cap ] && cap="--pgm-repair-rate 20kpps"
      tag=$buf-$mode-$r
      ip netns exec $NS $W recv 127.0.0.2:7900 --transport pgm --pgm-window 32768 --count 100000 --size 8800 --duration 60 $rb --json > "$OUT/recv-$tag.json" 2> "$OUT/recv-$tag.err" &
      RP=$!
      sleep 1
      ip netns exec $NS $W send 127.0.0.2:7900 --transport pgm --pgm-window 32768 --count 100000 --size 8800 --rate 20kpps --pgm-quiet 2s --pgm-linger 60s --json $cap > "$OUT/send-$tag.json" 2> "$OUT/send-$tag.err" &
      SP=$!
      sleep 1.5
      kill -STOP $RP; sleep 0.5; kill -CONT $RP
      wait $SP; wait $RP
      echo "$tag done"
    done
  done
done
