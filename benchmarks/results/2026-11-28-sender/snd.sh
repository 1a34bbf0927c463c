#!/bin/bash
# sender thread CPU per datagram (its own report), receiver = wirespeed recv on CPU 1
WS=${WS:-/tmp/ws-head}
for i in 1 2 3; do
  (taskset -c 1 $WS recv 127.0.0.1:47301 --once --json > r.json 2>/dev/null &) ; sleep 0.4
  taskset -c 0 $WS send 127.0.0.1:47301 --size $1 --rate $2 --duration 3 --json $3 > s.json 2>s.err; sleep 0.6
  python3 -c "import json;d=json.load(open('s.json'));print(d['cpu_ns_per_packet']//1, d['gaps']['count'], d['sent'], round(d['sent']/d['gaps']['count'],1), d['gaps']['p50_ns'])"
done
