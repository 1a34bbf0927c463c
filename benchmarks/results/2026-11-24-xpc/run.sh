#!/bin/bash
# Issue 16's published figures, in the order they were run (release build, as root, machine idle).
set -u
W=${W:-/work/main/target/release/wirespeed}
D=$(cd "$(dirname "$0")" && pwd)
run() { # name, command...
  local name=$1; shift
  echo "== $name: $* (load: $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$D/commands.txt"
  /usr/bin/time -v "$@" > "$D/$name.out" 2> "$D/$name.err"
  echo "   exit $?" | tee -a "$D/commands.txt"
}
run table3 "$W" bench ttcp --table3 --over devices,pipe,unix --writes 1000 -o "$D/table3"
run table3-dev2 "$W" bench ttcp --table3 --over devices --devices 2 --writes 1000 -o "$D/table3-dev2"
run table3-dev4 "$W" bench ttcp --table3 --over devices --devices 4 --writes 1000 -o "$D/table3-dev4"
run xpc "$W" bench xpc --repeat 5 -o "$D/xpc"
run taps "$W" bench taps --repeat 11 -o "$D/taps"
run isolation "$W" bench isolation --repeat 5
