#!/usr/bin/env bash
# BENCHMARKS section 21: the same sweep and the same search in partitions and across two hosts
# over ssh (sshd in partitions: scripts/ssh-lab.sh), alternating, twice each. As root, from the
# repository, with the release build: bash benchmarks/results/2026-11-28-hosts/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
export WIRESPEED=$PWD/target/release/wirespeed
R=benchmarks/results/2026-11-28-hosts
W=$WIRESPEED
SWEEP="bench sweep --rates 1G,2G,3G,4G,5G,6G --sizes 8800 --duration 1s --repeat 3"
MAX="bench max --duration 1s --repeat 3"
scripts/ssh-lab.sh down >/dev/null 2>&1 || true
scripts/ssh-lab.sh up 2
trap 'scripts/ssh-lab.sh down' EXIT
for round in 1 2; do
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" -o $R/part-sweep-$round.time $W $SWEEP -o $R/part-sweep-$round > $R/part-sweep-$round.txt 2>&1
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" -o $R/hosts-sweep-$round.time scripts/ssh-lab.sh run $SWEEP --tx lab1 --rx lab2 -o $R/hosts-sweep-$round > $R/hosts-sweep-$round.txt 2>&1
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" -o $R/part-max-$round.time $W $MAX --json > $R/part-max-$round.json 2> $R/part-max-$round.txt
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" -o $R/hosts-max-$round.time scripts/ssh-lab.sh run $MAX --tx lab1 --rx lab2 --json > $R/hosts-max-$round.json 2> $R/hosts-max-$round.txt
done
