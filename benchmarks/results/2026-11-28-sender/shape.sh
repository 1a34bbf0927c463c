#!/bin/bash
# whole-process CPU per datagram of wirespeed recv and iperf3 -s, same traffic shape, receivers CPU 1, as nobody
# usage: shape.sh RATE SIZE WSBURST IPERF_PACING_US
R=$1; S=$2; B=$3; P=$4
WS=${WS:-/tmp/ws-head}
sysctl -qw net.core.rmem_max=212992 net.core.wmem_max=212992
U="setpriv --reuid=65534 --regid=65534 --clear-groups"
for i in 1 2 3; do
  $U taskset -c 1 /usr/bin/time -f "ws %U %S" $WS recv 127.0.0.1:47301 --once --rcvbuf 212992 --json > /tmp/shape/w.json 2>/tmp/shape/w.err &
  sleep 0.5
  $U taskset -c 0 /usr/bin/time -f "wss %U %S" ${WSS:-$WS} send 127.0.0.1:47301 --size $S --rate $R --duration 3 $B >/dev/null 2>/tmp/shape/ws.err
  wait
  n=$(python3 -c "import json;print(json.load(open('/tmp/shape/w.json'))['datagrams'])")
  t=$(tail -1 /tmp/shape/w.err); ts=$(tail -1 /tmp/shape/ws.err)
  python3 -c "u,s='$t'.split()[1:];u2,s2='$ts'.split()[1:];print('wirespeed rx', $n, round((float(u)+float(s))*1e9/$n), 'tx', round((float(u2)+float(s2))*1e9/$n))"
  $U taskset -c 1 /usr/bin/time -f "ip %U %S" iperf3 -s -1 -p 47302 -J > /tmp/shape/i.json 2>/tmp/shape/i.err &
  sleep 0.5
  $U taskset -c 0 /usr/bin/time -f "ipc %U %S" iperf3 -c 127.0.0.1 -p 47302 -u -b $R -l $S -t 3 -w 212992 $P > /dev/null 2>/tmp/shape/ic.err
  wait
  n=$(python3 -c "import json;d=json.load(open('/tmp/shape/i.json'));print(d['end']['sum']['packets']-d['end']['sum']['lost_packets'])")
  t=$(tail -1 /tmp/shape/i.err); ts=$(tail -1 /tmp/shape/ic.err)
  python3 -c "u,s='$t'.split()[1:];u2,s2='$ts'.split()[1:];print('iperf3    rx', $n, round((float(u)+float(s))*1e9/$n), 'tx', round((float(u2)+float(s2))*1e9/$n))"
done
sysctl -qw net.core.rmem_max=4194304 net.core.wmem_max=4194304
