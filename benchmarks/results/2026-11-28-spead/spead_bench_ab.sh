#!/bin/bash
# The same spead2 stream (SPEAD-64-48, 64 KiB heaps, 8232-byte packets: 9 per heap) received by
# the build before (424e14b), this build, and spead2's receiver, alternately, ROUNDS rounds.
W=${W:-/work/main/target/release/wirespeed}
OLD=${OLD:-/work/before/wirespeed}
P=/work/main/crates/wirespeed-cli/tests/interop/spead2_peer.py
OUT=${OUT:-/tmp/spead-ab}; mkdir -p $OUT
SPEC="spead,heap=65536,payload=8192,first=1,step=1,addr=48,fill=any"
HEAPS=${HEAPS:-5000}; ROUNDS=${ROUNDS:-5}
for round in $(seq 1 $ROUNDS); do
  for b in old new; do
    bin=$W; [ $b = old ] && bin=$OLD
    port=$((47300+round*2)); [ $b = new ] && port=$((port+1))
    taskset -c 1 $bin recv 127.0.0.1:$port --format $SPEC --json --rcvbuf 256M --duration 120 > $OUT/$b-recv-$round.json 2>/dev/null &
    pid=$!; sleep 0.5
    taskset -c 0 python3 $P send $port $HEAPS 65536 8232 > /dev/null
    kill -INT $pid; wait $pid
  done
  port=$((47400+round))
  taskset -c 1 python3 $P recv-cpu $port > $OUT/s-recv-$round.json 2>/dev/null &
  pid=$!; sleep 2
  taskset -c 0 python3 $P send $port $HEAPS 65536 8232 > /dev/null
  wait $pid
done
