#!/usr/bin/env bash
# Real hosts on one box, for trying or measuring runs across hosts: partitions 1..N each run an
# OpenSSH server (own host key, an authorized key and a known_hosts made here, port 2222 on
# 198.19.0.I), and partition N+1 is the controller. Needs root and openssh-server.
#
#   sudo scripts/ssh-lab.sh up 2          # hosts lab1, lab2 and the controller, partition 3
#   sudo scripts/ssh-lab.sh run bench max --tx lab1 --rx lab2 --duration 300ms --repeat 1
#   sudo scripts/ssh-lab.sh down          # stop the servers, remove the partitions and keys
#
# `run` runs `wirespeed ARGS --ssh-config ... --remote-wirespeed ...` in the controller's
# partition, so lab1..labN resolve through the lab's ssh config. WIRESPEED names the binary
# (default: the one on PATH). Everything lives in $LAB (default /run/wirespeed-ssh-lab).
set -euo pipefail
LAB=${LAB:-/run/wirespeed-ssh-lab}
PREFIX=${PREFIX:-wslab}
W=${WIRESPEED:-$(command -v wirespeed || true)}
[ -n "$W" ] || { echo "ssh-lab: no wirespeed on PATH: set WIRESPEED=/path/to/wirespeed" >&2; exit 2; }
W=$(readlink -f "$W")

up() {
  local n=${1:-2}
  [ -x /usr/sbin/sshd ] || { echo "ssh-lab: /usr/sbin/sshd missing: apt-get install openssh-server" >&2; exit 1; }
  [ -e "$LAB/hosts" ] && { echo "ssh-lab: a lab is up in $LAB: run '$0 down' first" >&2; exit 1; }
  mkdir -p "$LAB" /run/sshd
  local args=() i
  for i in $(seq 1 $((n + 1))); do args+=(-p "$i" -c $(((i - 1) % 2))); done
  local said
  said=$("$W" partition create --prefix "$PREFIX" "${args[@]}" --share-cpus --mtu 9000 --no-daemons 2>&1) ||
    { echo "$said" >&2; exit 1; }
  ssh-keygen -q -t ed25519 -N '' -C ssh-lab -f "$LAB/host_key"
  ssh-keygen -q -t ed25519 -N '' -C ssh-lab -f "$LAB/client_key"
  cp "$LAB/client_key.pub" "$LAB/authorized_keys"
  : >"$LAB/known_hosts"
  : >"$LAB/ssh.conf"
  for i in $(seq 1 "$n"); do
    cat >"$LAB/sshd$i.conf" <<EOF
Port 2222
ListenAddress 198.19.0.$i
HostKey $LAB/host_key
PidFile $LAB/sshd$i.pid
AuthorizedKeysFile $LAB/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
EOF
    echo "[198.19.0.$i]:2222 $(cat "$LAB/host_key.pub")" >>"$LAB/known_hosts"
    printf 'Host lab%s\n  HostName 198.19.0.%s\n  Port 2222\n' "$i" "$i" >>"$LAB/ssh.conf"
    "$W" partition --prefix "$PREFIX" exec "$i" -- /usr/sbin/sshd -f "$LAB/sshd$i.conf"
  done
  cat >>"$LAB/ssh.conf" <<EOF
Host *
  User root
  IdentityFile $LAB/client_key
  IdentitiesOnly yes
  UserKnownHostsFile $LAB/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
EOF
  echo "$n" >"$LAB/hosts"
  echo "ssh-lab: hosts lab1..lab$n (sshd on 198.19.0.I:2222), controller in partition $((n + 1)) of '$PREFIX'"
}

down() {
  local f
  for f in "$LAB"/sshd*.pid; do [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  "$W" partition init --prefix "$PREFIX" >/dev/null 2>&1 || true
  rm -rf "$LAB"
}

run() {
  [ -e "$LAB/hosts" ] || { echo "ssh-lab: no lab is up: run '$0 up N' first" >&2; exit 1; }
  local ctl=$(($(cat "$LAB/hosts") + 1))
  exec "$W" partition --prefix "$PREFIX" exec "$ctl" -- "$W" "$@" --ssh-config "$LAB/ssh.conf" --remote-wirespeed "$W"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 up [N] | run WIRESPEED-ARGS... | down" >&2; exit 2 ;;
esac
