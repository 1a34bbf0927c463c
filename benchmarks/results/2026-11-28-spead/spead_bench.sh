#!/bin/bash
# SPEAD receive CPU per datagram on one stream of spead2's defaults (sender on CPU 0, receiver on CPU 1):
# wirespeed recv (capture thread, and whole process by /usr/bin/time) vs spead2's receiver
# (all its threads, first heap to stop heap), alternately, ROUNDS rounds. Then the SPEAD check
# alone, this build vs OLD, by `bench formats`.
W=${W:-/work/main/target/release/wirespeed}
OLD=${OLD:-/work/before/wirespeed}
P=/work/main/crates/wirespeed-cli/tests/interop/spead2_peer.py
OUT=${OUT:-/tmp/spead-bench}; mkdir -p $OUT
SPEC="spead,heap=65542,payload=8208,lead=8192,first=0,step=1,addr=40,fill=any"
HEAPS=${HEAPS:-5000}; ROUNDS=${ROUNDS:-5}
for round in $(seq 1 $ROUNDS); do
  port=$((47100+round))
  /usr/bin/time -f '{"elapsed_s": %e, "user_s": %U, "sys_s": %S}' -o $OUT/w-time-$round.json \
    taskset -c 1 $W recv 127.0.0.1:$port --format $SPEC --json --rcvbuf 256M --duration 120 > $OUT/w-recv-$round.json 2>/dev/null &
  pid=$!; sleep 0.5
  taskset -c 0 python3 $P send-defaults $port $HEAPS > /dev/null
  kill -INT $(pgrep -f "recv 127.0.0.1:$port"); wait $pid
  port=$((47200+round))
  taskset -c 1 python3 $P recv-cpu $port > $OUT/s-recv-$round.json 2>/dev/null &
  pid=$!; sleep 2
  taskset -c 0 python3 $P send-defaults $port $HEAPS > /dev/null
  wait $pid
done
for r in 1 2 3; do
  taskset -c 1 $OLD bench formats --format spead,heap=65536,payload=8192,first=1,step=1,addr=48,fill=any --format spead,heap=65536,payload=8192,first=1,step=1,addr=48,fill=counter --reps 9 --json > $OUT/fmt-old-$r.json
  taskset -c 1 $W bench formats --format spead,heap=65536,payload=8192,first=1,step=1,addr=48,fill=any --format spead,heap=65536,payload=8192,first=1,step=1,addr=48,fill=counter --reps 9 --json > $OUT/fmt-new-$r.json
done
