#!/bin/bash
# whole-process CPU per datagram of wirespeed recv and iperf3 -s, same stream rate, CPU 1, as nobody
sysctl -qw net.core.rmem_max=212992 net.core.wmem_max=212992
U="setpriv --reuid=65534 --regid=65534 --clear-groups"
for i in 1 2 3; do
  # wirespeed
  $U taskset -c 1 /usr/bin/time -f "ws %U %S" /tmp/ws-new recv 127.0.0.1:47301 --once --rcvbuf 212992 --json > /tmp/w.json 2>/tmp/w.err &
  sleep 0.5
  $U taskset -c 0 /tmp/ws-new send 127.0.0.1:47301 --size 8800 --rate 1G --duration 3 $WSX >/dev/null 2>&1
  wait
  n=$(python3 -c "import json;print(json.load(open('/tmp/w.json'))['datagrams'])")
  t=$(tail -1 /tmp/w.err)
  python3 -c "u,s='$t'.split()[1:];print('wirespeed', $n, round((float(u)+float(s))*1e9/$n))"
  # iperf3
  $U taskset -c 1 /usr/bin/time -f "ip %U %S" iperf3 -s -1 -p 47302 -J > /tmp/i.json 2>/tmp/i.err &
  sleep 0.5
  $U taskset -c 0 iperf3 -c 127.0.0.1 -p 47302 -u -b 1G -l 8800 -t 3 -w 212992 > /dev/null 2>&1
  wait
  n=$(python3 -c "import json;d=json.load(open('/tmp/i.json'));print(d['end']['sum']['packets']-d['end']['sum']['lost_packets'])")
  t=$(tail -1 /tmp/i.err)
  python3 -c "u,s='$t'.split()[1:];print('iperf3', $n, round((float(u)+float(s))*1e9/$n))"
done
sysctl -qw net.core.rmem_max=4194304 net.core.wmem_max=4194304
