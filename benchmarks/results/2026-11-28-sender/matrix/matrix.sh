#!/bin/bash
# receiver CPU per datagram matrix: wirespeed vs iperf3 vs bare; rmem_max = the buffer asked
WS=${WS:-/tmp/ws-plan}
MODE=$1   # nobody | root
U=""; [ "$MODE" = nobody ] && U="setpriv --reuid=65534 --regid=65534 --clear-groups"
for R in 212992 4194304 33554432; do
  sysctl -qw net.core.rmem_max=$R net.core.wmem_max=$R
  $U $WS bench compare --loopback --tools wirespeed,iperf3,bare --rates 100M,1G,3G,max --sizes 1080,8800 --duration 3 --repeat 3 --rcvbuf $R -o /tmp/mx/$MODE-$R > /tmp/mx/$MODE-$R.stdout 2>&1
  echo "$MODE $R rc=$? $(date +%T)"
done
sysctl -qw net.core.rmem_max=4194304 net.core.wmem_max=4194304
