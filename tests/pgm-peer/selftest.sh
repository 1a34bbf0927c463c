#!/usr/bin/env bash
# Self-test of the OpenPGM peer against itself (OpenPGM <-> OpenPGM), as root:
# two network namespaces joined by a veth pair 198.18.99.1/30 <-> 198.18.99.2/30 (MTU 9000),
# multicast 239.192.0.0/16 routed on the veth. Traffic never leaves the two namespaces.
#
#   tests/pgm-peer/selftest.sh            # builds the peer into a temp dir first
#   PGM_PEER=target/openpgm-peer tests/pgm-peer/selftest.sh
#   tests/pgm-peer/selftest.sh --list     # the test names, one a line (no root needed)
#
# Ends with a cargo-style line: test result: ok. N passed; M failed; 0 ignored; ...
set -uo pipefail

# Every test this script runs; one that does not report counts as failed.
TESTS=(clean_1080 clean_8800 odata_loss_1pct_1080 odata_loss_1pct_8800 all_types_loss_1pct_1080
    ws_counter_loss_1pct_8800 ws_counter_checks_every_byte ws_counter_expect_end_needs_the_end
    reflect_ping_10kpps)
if [ "${1:-}" = --list ]; then
    printf '%s\n' "${TESTS[@]}"
    exit 0
fi
[ $# -eq 0 ] || { echo "selftest.sh: unknown argument '$1' (only --list)" >&2; exit 2; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "$(id -u)" -ne 0 ]; then
    echo "selftest.sh: needs root (creates network namespaces); run it with sudo" >&2
    exit 2
fi
for tool in ip nft python3 timeout; do
    command -v "$tool" >/dev/null || { echo "selftest.sh: '$tool' not found; apt-get install iproute2 nftables python3 coreutils" >&2; exit 2; }
done

A="pgmst-a-$$"
B="pgmst-b-$$"
VA="pgst${$}a"
VB="pgst${$}b"
ADDR_A=198.18.99.1
ADDR_B=198.18.99.2
work="$(mktemp -d /tmp/pgm-selftest.XXXXXX)"
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

peer="${PGM_PEER:-}"
if [ -z "$peer" ]; then
    peer="$work/openpgm-peer"
    "$here/build.sh" "$peer" >/dev/null || exit 1
fi
[ -x "$peer" ] || { echo "selftest.sh: peer binary '$peer' is not executable" >&2; exit 2; }

ip netns add "$A" && ip netns add "$B" || { echo "selftest.sh: cannot create namespaces" >&2; exit 1; }
ip link add "$VA" type veth peer name "$VB" || exit 1
ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" || exit 1
ip -n "$A" addr add "$ADDR_A/30" dev "$VA"
ip -n "$B" addr add "$ADDR_B/30" dev "$VB"
ip -n "$A" link set "$VA" mtu 9000 up
ip -n "$B" link set "$VB" mtu 9000 up
ip -n "$A" link set lo up
ip -n "$B" link set lo up
ip -n "$A" route add 239.192.0.0/16 dev "$VA"
ip -n "$B" route add 239.192.0.0/16 dev "$VB"

passed=0
failed=0

# json FILE KEY -> value (empty if missing)
json() { python3 -c 'import json,sys
try:
    d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    v=d
    for k in sys.argv[2].split("."): v=v[k]
    print(json.dumps(v) if isinstance(v,(bool,dict,list)) else v)
except Exception: print("")' "$1" "$2"; }

# nft_count NS TABLE COMMENT -> packets counted by the rule with that comment
nft_count() { ip netns exec "$1" nft list table inet "$2" 2>/dev/null |
    sed -n "s/.*counter packets \([0-9]*\) bytes [0-9]* .*comment \"$3\".*/\1/p" | head -1; }

# Loss rule: in B's input, drop PCT % of the PGM packets of type TYPES to UDP port PORT.
# The PGM type is byte 4 of the UDP payload: @th,96,8 (transport header + 64 bits of UDP
# header + 32 bits of PGM sport/dport).
add_loss() { # NS PORT PCT TYPES_SET
    ip netns exec "$1" nft -f - <<EOF
table inet pgmloss {
  chain input {
    type filter hook input priority raw; policy accept;
    udp dport $2 @th,96,8 $4 numgen random mod 100 < $3 counter drop comment "dropped"
    udp dport $2 @th,96,8 0x04 counter comment "odata"
    udp dport $2 @th,96,8 0x05 counter comment "rdata"
    udp dport $2 @th,96,8 0x0a counter comment "ncf"
    udp dport $2 @th,96,8 0x08 counter comment "nak"
    udp dport $2 @th,96,8 0x00 counter comment "spm"
  }
}
EOF
}
del_loss() { ip netns exec "$1" nft delete table inet pgmloss 2>/dev/null; }

ok() { echo "test $1 ... ok${2:+ ($2)}"; passed=$((passed + 1)); }
fail() { echo "test $1 ... FAILED: $2"; failed=$((failed + 1)); }

port=7700
# transfer NAME SIZE COUNT EXPECT_REPAIRS(0/1) [extra send args...]; RECV_ARGS: extra recv args
transfer() {
    local name="$1" size="$2" count="$3" expect_repairs="$4"
    shift 4
    port=$((port + 1))
    local group="239.192.0.$((port % 250 + 1))"
    [ "$expect_repairs" = 1 ] && add_loss "$B" "$port" "$LOSS_PCT" "$LOSS_TYPES"
    [ "$expect_repairs" = 1 ] && [ -n "${LOSS_A:-}" ] && add_loss "$A" "$port" "$LOSS_PCT" "$LOSS_TYPES"
    timeout 120 ip netns exec "$B" "$peer" recv --network "$ADDR_B;$group" --port "$port" \
        --count "$count" --timeout-ms 60000 ${RECV_ARGS:-} >"$work/$name.recv" 2>"$work/$name.recv.err" &
    local rpid=$!
    pids+=("$rpid")
    sleep 0.5   # the receiver must have joined before the first SPM/ODATA
    # The source lingers up to 3 s to answer NAKs for its tail; once the receiver has every
    # packet there is nothing left to repair, so SIGTERM ends the linger (exit 0 when all was sent).
    timeout 120 ip netns exec "$A" "$peer" send --network "$ADDR_A;$group" --port "$port" \
        --count "$count" --size "$size" --linger-ms 3000 "$@" >"$work/$name.send" 2>"$work/$name.send.err" &
    local spid=$!
    pids+=("$spid")
    wait "$rpid"
    local rrc=$?
    kill -TERM "$spid" 2>/dev/null
    wait "$spid"
    local src=$?
    local dropped
    dropped="$(nft_count "$B" pgmloss dropped)"
    local dropped_a=""
    [ -n "${LOSS_A:-}" ] && dropped_a="$(nft_count "$A" pgmloss dropped)"
    del_loss "$B"
    del_loss "$A"
    echo "  send: $(cat "$work/$name.send")"
    echo "  recv: $(cat "$work/$name.recv")"
    [ -n "$dropped" ] && echo "  nft dropped in B: $dropped${dropped_a:+, in A: $dropped_a}"
    if [ "$rrc" -ne 0 ]; then fail "$name" "recv exited $rrc: $(head -c 300 "$work/$name.recv.err")"; return; fi
    if [ "$src" -ne 0 ]; then fail "$name" "send exited $src: $(head -c 300 "$work/$name.send.err")"; return; fi
    local got in_order first last corrupt resets rdata
    got="$(json "$work/$name.recv" received)"
    in_order="$(json "$work/$name.recv" in_order)"
    first="$(json "$work/$name.recv" first)"
    last="$(json "$work/$name.recv" last)"
    corrupt="$(json "$work/$name.recv" corrupt)"
    resets="$(json "$work/$name.recv" resets)"
    rdata="$(json "$work/$name.recv" rdata_received)"
    if [ "$got" != "$count" ] || [ "$in_order" != true ] || [ "$first" != 0 ] || [ "$last" != $((count - 1)) ] \
        || [ "$corrupt" != 0 ] || [ "$resets" != 0 ]; then
        fail "$name" "received=$got in_order=$in_order first=$first last=$last corrupt=$corrupt resets=$resets"
        return
    fi
    if [ "$expect_repairs" = 1 ]; then
        if [ -z "$dropped" ] || [ "$dropped" -eq 0 ]; then fail "$name" "the loss rule dropped nothing"; return; fi
        if [ "$rdata" = "" ] || [ "$rdata" = 0 ]; then fail "$name" "no RDATA seen although $dropped packets were dropped"; return; fi
    fi
    ok "$name" "$got/$count in order${dropped:+, $dropped dropped by nft, $rdata RDATA, $(json "$work/$name.recv" naks_sent) NAKs}"
}

echo "running OpenPGM peer self-test in namespaces $A / $B"
transfer clean_1080 1080 20000 0
transfer clean_8800 8800 20000 0

LOSS_PCT=1
LOSS_TYPES=0x04          # ODATA only
transfer odata_loss_1pct_1080 1080 20000 1
transfer odata_loss_1pct_8800 8800 20000 1

LOSS_TYPES="{ 0x00, 0x04, 0x05, 0x08, 0x0a }"   # SPM, ODATA, RDATA, NAK, NCF
LOSS_A=1                 # also drop NAKs arriving at the source in A
transfer all_types_loss_1pct_1080 1080 20000 1
unset LOSS_A

# --format wirespeed-counter (what the interop tests with wirespeed use), both ends
LOSS_TYPES=0x04
RECV_ARGS="--format wirespeed-counter"
transfer ws_counter_loss_1pct_8800 8800 20000 1 --format wirespeed-counter
unset RECV_ARGS

# The checks can fail: the peer's own payload is not wirespeed's counter (every message
# corrupt), and --expect-end without a wirespeed sender times out without the end message.
# expect_refusal NAME RECV_ARGS SEND_ARGS CHECK (a python expression over the recv JSON d)
expect_refusal() {
    local name="$1" rargs="$2" sargs="$3" check="$4"
    port=$((port + 1))
    local group="239.192.0.$((port % 250 + 1))"
    # shellcheck disable=SC2086
    timeout 60 ip netns exec "$B" "$peer" recv --network "$ADDR_B;$group" --port "$port" \
        --count 2000 $rargs >"$work/$name.recv" 2>"$work/$name.recv.err" &
    local rpid=$!
    pids+=("$rpid")
    sleep 0.5
    # shellcheck disable=SC2086
    timeout 60 ip netns exec "$A" "$peer" send --network "$ADDR_A;$group" --port "$port" \
        --count 2000 --size 1080 --linger-ms 500 $sargs >"$work/$name.send" 2>"$work/$name.send.err"
    local src=$?
    wait "$rpid"
    local rrc=$?
    echo "  recv: $(cat "$work/$name.recv")"
    if [ "$src" -ne 0 ]; then fail "$name" "send exited $src: $(head -c 300 "$work/$name.send.err")"; return; fi
    if [ "$rrc" -ne 1 ]; then fail "$name" "recv exited $rrc, not 1: $(head -c 300 "$work/$name.recv.err")"; return; fi
    if python3 -c 'import json,sys
d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.exit(0 if eval(sys.argv[2]) else 1)' "$work/$name.recv" "$check"; then
        ok "$name" "refused as it must be"
    else
        fail "$name" "recv JSON does not satisfy: $check"
    fi
}
expect_refusal ws_counter_checks_every_byte "--format wirespeed-counter" "" \
    'd["received"] == 2000 and d["corrupt"] == 2000 and not d["in_order"] and d["resets"] == 0'
expect_refusal ws_counter_expect_end_needs_the_end "--format wirespeed-counter --expect-end --timeout-ms 5000" \
    "--format wirespeed-counter" \
    'd["received"] == 2000 and d["corrupt"] == 0 and d["in_order"] and d["timed_out"] and d["end_of_stream"] is None and not d["end_ok"]'

# reflect + ping: 10,000 pps for 2 s across the pair
port=$((port + 1)); rport=$((port + 1))
group="239.192.0.200"
ip netns exec "$B" "$peer" reflect --network "$ADDR_B;$group" --port "$port" --reply-port "$rport" \
    --linger-ms 500 >"$work/reflect.out" 2>"$work/reflect.err" &
fpid=$!
pids+=("$fpid")
sleep 0.5
timeout 120 ip netns exec "$A" "$peer" ping --network "$ADDR_A;$group" --port "$port" --reply-port "$rport" \
    --rate 10000 --count 20000 --size 1080 --wait-ms 5000 --rtt-out "$work/rtt.txt" >"$work/ping.out" 2>"$work/ping.err"
prc=$?
kill -TERM "$fpid" 2>/dev/null
wait "$fpid"
frc=$?
echo "  ping: $(cat "$work/ping.out")"
echo "  reflect: $(cat "$work/reflect.out")"
lines="$(wc -l <"$work/rtt.txt" 2>/dev/null || echo 0)"
if [ "$prc" -ne 0 ]; then
    fail reflect_ping_10kpps "ping exited $prc: $(head -c 300 "$work/ping.err")"
elif [ "$frc" -ne 0 ]; then
    fail reflect_ping_10kpps "reflect exited $frc: $(head -c 300 "$work/reflect.err")"
elif [ "$(json "$work/ping.out" received)" != 20000 ] || [ "$(json "$work/reflect.out" reflected)" != 20000 ] || [ "$lines" != 20000 ]; then
    fail reflect_ping_10kpps "received=$(json "$work/ping.out" received) reflected=$(json "$work/reflect.out" reflected) rtt lines=$lines"
else
    ok reflect_ping_10kpps "20000/20000 reflected, p50 $(json "$work/ping.out" rtt_ns.p50) ns, p99 $(json "$work/ping.out" rtt_ns.p99) ns"
fi

ran=$((passed + failed))
if [ "$ran" -lt "${#TESTS[@]}" ]; then
    echo "test selftest_ran_every_test ... FAILED: $ran of ${#TESTS[@]} tests reported"
    failed=$((failed + ${#TESTS[@]} - ran))
elif [ "$ran" -gt "${#TESTS[@]}" ]; then
    echo "test selftest_ran_every_test ... FAILED: $ran tests reported, TESTS names ${#TESTS[@]}"
    failed=$((failed + 1))
fi
if [ "$failed" -eq 0 ]; then
    echo "test result: ok. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out"
    exit 0
fi
echo "test result: FAILED. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out"
exit 1
