#!/usr/bin/env bash
# BENCHMARKS section 21, receiver-bound: 1080-byte datagrams, where the receiver's core is the
# limit, searched in partitions and across two hosts over ssh, alternating, twice each.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export WIRESPEED=$PWD/target/release/wirespeed
R=benchmarks/results/2026-11-28-hosts
W=$WIRESPEED
MAX="bench max --size 1080 --duration 1s --repeat 3"
scripts/ssh-lab.sh down >/dev/null 2>&1 || true
scripts/ssh-lab.sh up 2
trap 'scripts/ssh-lab.sh down' EXIT
for round in 1 2; do
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" -o $R/part-max1080-$round.time $W $MAX --json > $R/part-max1080-$round.json 2> $R/part-max1080-$round.txt
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" -o $R/hosts-max1080-$round.time scripts/ssh-lab.sh run $MAX --tx lab1 --rx lab2 --json > $R/hosts-max1080-$round.json 2> $R/hosts-max1080-$round.txt
done
