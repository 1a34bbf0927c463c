#!/bin/bash
# capture-thread CPU per datagram (the report's cpu_ns_per_packet), 1 Gb/s of 8800 B on loopback,
# receiver on CPU 1, sender on CPU 0, 32 MiB buffer: default naps vs --coalesce 0 (block only)
for i in 1 2 3; do
  for c in default 0; do
    extra=(); [ "$c" = 0 ] && extra=(--coalesce 0)
    taskset -c 1 /tmp/ws-new recv 127.0.0.1:47305 --once --rcvbuf 32M --cpu 1 --json "${extra[@]}" > /tmp/n.json 2>/dev/null &
    sleep 0.5
    taskset -c 0 /tmp/ws-new send 127.0.0.1:47305 --size 8800 --rate 1G --duration 3 > /dev/null 2>&1
    wait
    python3 -c "import json;d=json.load(open('/tmp/n.json'));print('coalesce=$c', d['datagrams'], round(d['cpu_ns_per_packet']), 'nap_ns', d['coalesce_ns'])"
  done
done
