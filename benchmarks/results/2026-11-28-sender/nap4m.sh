#!/bin/bash
# capture-thread CPU per datagram: the measured policy vs blocking only (--coalesce 0), 4 MiB, as nobody
R=$1; S=$2; N=${3:-3}
WS=/tmp/ws-plan
sysctl -qw net.core.rmem_max=4194304 net.core.wmem_max=4194304
U="setpriv --reuid=65534 --regid=65534 --clear-groups"
for i in $(seq $N); do
  for mode in default block; do
    X=""; [ $mode = block ] && X="--coalesce 0"
    $U taskset -c 1 $WS recv 127.0.0.1:47301 --once --rcvbuf 4194304 --json $X > /tmp/shape/n.json 2>/dev/null &
    sleep 0.4
    $U taskset -c 0 $WS send 127.0.0.1:47301 --size $S --rate $R --duration 3 >/dev/null 2>&1
    wait
    python3 -c "import json;d=json.load(open('/tmp/shape/n.json'));print('$mode', d['datagrams'], round(d['cpu_ns_per_packet']), d['total']['lost'])"
  done
done
