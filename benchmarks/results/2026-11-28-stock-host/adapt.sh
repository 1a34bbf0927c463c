#!/bin/bash
# capture-thread CPU per datagram (the report's cpu_ns_per_packet) on loopback, receiver pinned to
# CPU 1, sender on CPU 0, 32 MiB buffer: the gather rule alone (e417231), the measured policy, and
# blocking only (--coalesce 0), alternating
for point in "8800 1G" "1080 100M"; do
  set -- $point
  for i in 1 2 3; do
    for v in rule:/tmp/ws-new measured:/tmp/ws-adapt block:/tmp/ws-adapt; do
      name=${v%%:*}; bin=${v##*:}; extra=(); [ "$name" = block ] && extra=(--coalesce 0)
      taskset -c 1 $bin recv 127.0.0.1:47306 --once --rcvbuf 32M --cpu 1 --json "${extra[@]}" > /tmp/a.json 2>/dev/null &
      sleep 0.5
      taskset -c 0 /tmp/ws-new send 127.0.0.1:47306 --size $1 --rate $2 --duration 3 > /dev/null 2>&1
      wait
      python3 -c "import json;d=json.load(open('/tmp/a.json'));print('$1 $2 $name', d['datagrams'], d['total']['lost'], round(d['cpu_ns_per_packet']))"
    done
  done
done
