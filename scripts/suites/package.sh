#!/usr/bin/env bash
# The Debian package, built and installed for real, without touching this host's system:
#   build      packaging/build-deb.sh makes target/debian/wirespeed_*.deb (cargo-deb)
#   contents   dpkg-deb -c lists every path the package promises (binary, one man page per
#              command, three completions, the schemas of schemas/, example, unit, sysusers)
#   install    dpkg --root installs it into an empty directory (maintainer scripts run inside
#              it: DPKG_ROOT), postinst creates user wirespeed there
#   run        the installed binary: --version, completions identical to the installed files
#   unit       systemd-analyze verify of the installed unit, its ExecStart pointing into the
#              root, the man pages it names found there
#   man        every installed page renders with groff without a warning; man -l reads one
#   service    the unit's command from the installed example config, run the way the unit runs it
#              (user nobody, exactly the unit's three capabilities ambient and bounding, no new
#              privileges, LimitMEMLOCK) in a private network namespace, fed by wirespeed send
#              over 127.0.0.1, stopped by SIGTERM: exit 0, every file finished, verify passes,
#              and no system call of the groups the unit forbids was made
#   purge      dpkg --purge removes every file it installed; this host's users and dpkg
#              database are as they were
#   lintian    when installed: its findings are shown, not counted
# Ends with a line like cargo's; exit code 1 when a test failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

passed=0
failed=0
names=(build contents install run unit man service purge)
pass() { echo "test package::$1 ... ok"; passed=$((passed + 1)); }
fail() {
    echo "test package::$1 ... FAILED"
    shift
    printf '    %s\n' "$@"
    failed=$((failed + 1))
}
summary() {
    if [ "$failed" = 0 ]; then
        echo "test result: ok. $passed passed; $failed failed; ${1:-0} ignored"
        exit 0
    fi
    echo "test result: FAILED. $passed passed; $failed failed; ${1:-0} ignored"
    exit 1
}

if [ "$(id -u)" != 0 ]; then
    echo "package suite: needs root (dpkg --root, setpriv, unshare); not run"
    summary "${#names[@]}"
fi

work=$(mktemp -d /tmp/wirespeed-package.XXXXXX)
chmod 755 "$work" # the service run is user nobody: it must reach the root and its output
root="$work/root"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    [ -n "${KEEP_PACKAGE_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# --- what the build and the checks need (CI installs them here; a developer may have them) ---
need=()
command -v dpkg-shlibdeps >/dev/null 2>&1 || need+=(dpkg-dev) # the package's library Depends
command -v strace >/dev/null 2>&1 || need+=(strace)            # the service run's system calls
command -v man >/dev/null 2>&1 || need+=(man-db)                # man -l, man -w
command -v groff >/dev/null 2>&1 || need+=(groff-base)          # every page rendered
command -v pgrep >/dev/null 2>&1 || need+=(procps)
if [ ${#need[@]} -gt 0 ]; then
    echo "package suite: installing ${need[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/dev/null ||
        echo "package suite: could not install ${need[*]}; the checks that need them fail and say so" >&2
fi
if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "package suite: installing cargo-deb (cargo install cargo-deb --locked: a few minutes, once)"
    cargo install cargo-deb --locked --quiet
fi

# --- build ---
deb=$(packaging/build-deb.sh 2>"$work/build.err" | grep '\.deb$' | tail -1)
if [ -n "$deb" ] && [ -f "$deb" ]; then
    pass build
else
    fail build "packaging/build-deb.sh made no .deb:" "$(tail -5 "$work/build.err")"
    summary
fi
bin="${CARGO_TARGET_DIR:-target}/${WIRESPEED_PROFILE:-release}/wirespeed"
echo "package suite: $deb ($(du -h "$deb" | cut -f1))"

# --- contents ---
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$work/list"
"$bin" man --out "$work/man-expected" | sed 's|.*/||; s|$|.gz|' | sort >"$work/pages-expected"
want=(/usr/bin/wirespeed
    /usr/share/bash-completion/completions/wirespeed
    /usr/share/zsh/vendor-completions/_wirespeed
    /usr/share/fish/vendor_completions.d/wirespeed.fish
    /usr/share/doc/wirespeed/examples/record-NAME.conf
    /usr/share/doc/wirespeed/copyright
    /lib/systemd/system/wirespeed-record@.service
    /lib/systemd/system/wirespeed-station.service
    /usr/lib/sysusers.d/wirespeed.conf)
while read -r page; do want+=("/usr/share/man/man1/$page"); done <"$work/pages-expected"
schemas=0
for f in schemas/*.json; do
    [ -f "$f" ] || continue
    want+=("/usr/share/wirespeed/schemas/$(basename "$f")")
    schemas=$((schemas + 1))
done
missing=()
for p in "${want[@]}"; do grep -qxF "$p" "$work/list" || missing+=("$p"); done
grep '^/usr/share/man/man1/.' "$work/list" | sed 's|.*/||' | sort >"$work/pages-packed"
extra_pages=$(comm -13 "$work/pages-expected" "$work/pages-packed")
bin_line=$(dpkg-deb -c "$deb" | awk '$6 == "./usr/bin/wirespeed" {print $1, $2}')
depends=$(dpkg-deb -f "$deb" Depends)
if [ ${#missing[@]} = 0 ] && [ -z "$extra_pages" ] && [[ "$bin_line" =~ ^-rwxr-xr-x\ (root/root|0/0)$ ]] &&
    [[ "$depends" == *libc6* ]]; then
    pass contents
    echo "    $(wc -l <"$work/pages-packed") man pages (one per command), $schemas schemas from schemas/, Depends: $depends"
else
    fail contents "missing: ${missing[*]:-none}" "pages not matching a command: ${extra_pages:-none}" \
        "binary: $bin_line" "Depends: $depends"
fi

# --- install into an empty root, with the maintainer scripts ---
host_before=$(sha256sum /etc/passwd /etc/group; dpkg -s wirespeed 2>&1 | head -2)
mkdir -p "$root/etc" "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
: >"$root/var/lib/dpkg/status"
# --force-depends: the empty root has no libc6; --force-script-chrootless: the scripts run here
# with DPKG_ROOT=$root, and act inside it.
# --path-include: a host whose dpkg leaves out documentation (slim images) still installs all here.
dpkg_root=(dpkg --root="$root" --force-script-chrootless --log=/dev/null --path-include='/*')
if "${dpkg_root[@]}" --force-depends -i "$deb" >"$work/install.log" 2>&1 &&
    [ "$(dpkg-query --root="$root" -W -f='${Status}' wirespeed)" = "install ok installed" ] &&
    grep -q '^wirespeed:x:[0-9]*:[0-9]*:wirespeed recorder:/var/lib/wirespeed:/usr/sbin/nologin$' "$root/etc/passwd" &&
    grep -q '^wirespeed:x:' "$root/etc/group"; then
    pass install
else
    fail install "dpkg --root -i or postinst failed:" "$(tail -5 "$work/install.log")" \
        "passwd in root: $(cat "$root/etc/passwd" 2>&1)"
fi
inst="$root/usr/bin/wirespeed"

# --- the installed binary ---
version=$(dpkg-deb -f "$deb" Version)
got=$("$inst" --version 2>&1)
bad=()
[ "$got" = "wirespeed ${version%-*}" ] || bad+=("--version said '$got', package version $version")
for sh in bash zsh fish; do
    case $sh in
        bash) f=usr/share/bash-completion/completions/wirespeed ;;
        zsh) f=usr/share/zsh/vendor-completions/_wirespeed ;;
        fish) f=usr/share/fish/vendor_completions.d/wirespeed.fish ;;
    esac
    "$inst" completions "$sh" | cmp -s - "$root/$f" || bad+=("installed $f differs from completions $sh")
done
"$inst" completions bash | bash -n || bad+=("bash -n refuses the bash completions")
bash --norc --noprofile -c "source '$root/usr/share/bash-completion/completions/wirespeed'
    COMP_WORDS=(wirespeed rec); COMP_CWORD=1; _wirespeed wirespeed rec wirespeed; echo \"\${COMPREPLY[*]}\"" \
    >"$work/compl" 2>&1
[ "$(cat "$work/compl")" = "recv record recordings" ] || bad+=("installed bash completion of 'wirespeed rec': $(cat "$work/compl")")
for f in schemas/*.json; do
    [ -f "$f" ] || continue
    cmp -s "$f" "$root/usr/share/wirespeed/schemas/$(basename "$f")" || bad+=("installed schema $(basename "$f") differs from $f")
done
if [ ${#bad[@]} = 0 ]; then pass run; else fail run "${bad[@]}"; fi

# --- the units, as systemd reads them ---
mkdir -p "$work/unit"
units_ok=1
for name in wirespeed-record@.service wirespeed-station.service; do
    unit="$root/lib/systemd/system/$name"
    # systemd-analyze verify checks that ExecStart's program exists: point it at the installed one.
    sed "s|^ExecStart=/usr/bin/wirespeed |ExecStart=$inst |" "$unit" >"$work/unit/$name"
    changed=$(diff "$unit" "$work/unit/$name" | grep -c '^>')
    if [ "$changed" = 1 ] &&
        MANPATH="$root/usr/share/man" systemd-analyze verify "$work/unit/$name" >"$work/verify" 2>&1 &&
        [ ! -s "$work/verify" ]; then
        :
    else
        units_ok=0
        fail unit "$name: lines changed for the installed path: $changed (1 expected)" "$(cat "$work/verify")"
    fi
done
[ "$units_ok" = 1 ] && pass unit

# --- man pages ---
bad=()
for page in "$root"/usr/share/man/man1/*.1.gz; do
    warn=$(zcat "$page" | groff -man -Tutf8 -ww -z 2>&1) || bad+=("$(basename "$page"): groff failed")
    [ -z "$warn" ] || bad+=("$(basename "$page"): $warn")
done
head=$(MANWIDTH=80 man -l "$root/usr/share/man/man1/wirespeed-bench-max.1.gz" 2>/dev/null | head -1)
[[ "$head" == wirespeed-bench-max\(1\)* ]] || bad+=("man -l wirespeed-bench-max.1.gz begins: '$head'")
MANPATH="$root/usr/share/man" man -w wirespeed-record >/dev/null 2>&1 || bad+=("man -w wirespeed-record finds no page")
if [ ${#bad[@]} = 0 ]; then pass man; else fail man "${bad[@]}"; fi

# --- the service's command, run as the unit runs it ---
conf="$root/usr/share/doc/wirespeed/examples/record-NAME.conf"
declare -A env=()
while IFS= read -r line; do
    [[ "$line" =~ ^([A-Z_]+)=(.*)$ ]] && env[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done <"$conf"
out="$work/rec"
mkdir -p "$out"
chown 65534:65534 "$out"
caps="-all,+net_admin,+ipc_lock,+sys_nice"
# LimitMEMLOCK=infinity, where this host lets root raise the limit (a container without
# CAP_SYS_RESOURCE does not; CAP_IPC_LOCK makes mlock ignore the limit anyway).
memlock=(prlimit --memlock=unlimited --)
if ! prlimit --memlock=unlimited -- true 2>/dev/null; then
    memlock=()
    echo "package suite: cannot raise RLIMIT_MEMLOCK here (no CAP_SYS_RESOURCE); the service run keeps $(ulimit -l) KiB"
fi
# As systemd builds ExecStart: ${WIRESPEED_LISTEN} one word, $WIRESPEED_ARGS split at spaces.
# shellcheck disable=SC2206
cmd=("$inst" record "${env[WIRESPEED_LISTEN]}" --out "$out" ${env[WIRESPEED_ARGS]})
port=${env[WIRESPEED_LISTEN]##*:}
cat >"$work/service.sh" <<EOF
set -u
ip link set lo up
strace -f -c -o '$work/syscalls' -- ${memlock[*]} \
    setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=$caps --ambient-caps=$caps \
    --bounding-set=$caps --no-new-privs -- $(printf '%q ' "${cmd[@]}") >'$work/rec.out' 2>'$work/rec.err' &
tracer=\$!
# Each step waits for the event it needs, however long a busy host takes (the whole run is
# bounded by the timeout around it), and says which event never came.
until grep -q 'listening on' '$work/rec.err'; do
    kill -0 \$tracer 2>/dev/null || { echo "the recorder ended before listening"; exit 1; }
    sleep 0.1
done
rec=\$(pgrep -P \$tracer)
'$inst' send 127.0.0.1:$port --size 8800 --rate 200M --duration 3600 >'$work/send.out' 2>&1 &
sender=\$!
# SIGTERM mid-stream, once records have reached the disk (the first flush, within --flush 1s):
# so the recorder is stopped with data in its ring and a file open, not after a guessed delay.
while :; do
    # The data file, not the sidecar (.NAME.raw.json.part), which has bytes from the start.
    part=\$(find '$out' -name '*.part' ! -name '.*' | head -1)
    [ -n "\$part" ] && [ "\$(head -c 65536 "\$part" | tr -d '\\000' | wc -c)" -gt 0 ] && break
    kill -0 \$sender 2>/dev/null || { echo "the sender ended before a record reached the disk: \$(tail -2 '$work/send.out')"; break; }
    sleep 0.1
done
kill -TERM \$rec
wait \$tracer
echo "record exit \$?"
kill -TERM \$sender
wait \$sender
EOF
timeout 900 unshare --net -- bash "$work/service.sh" >"$work/service.out" 2>&1 &
pids+=($!)
wait "${pids[0]}"
bad=()
grep -qx 'record exit 0' "$work/service.out" || bad+=("recorder: $(cat "$work/service.out") $(tail -3 "$work/rec.err")")
grep -q 'stopped by signal 15' "$work/rec.out" || bad+=("the summary does not say SIGTERM stopped it: $(head -3 "$work/rec.out")")
grep -q 'ring: 1.0 GiB locked' "$work/rec.out" || bad+=("ring not locked (CAP_IPC_LOCK): $(grep 'ring:' "$work/rec.out")")
grep -q 'rcvbuf 256.0 MiB' "$work/rec.out" || bad+=("rcvbuf not 256 MiB (CAP_NET_ADMIN): $(grep rcvbuf "$work/rec.out")")
files=$(find "$out" -name '*.raw' | wc -l)
sidecars=$(find "$out" -name '*.raw.json' | wc -l)
parts=$(find "$out" -name '*.part' | wc -l)
owners=$(find "$out" -mindepth 1 ! -user 65534 | wc -l)
[ "$files" -ge 1 ] && [ "$files" = "$sidecars" ] && [ "$parts" = 0 ] && [ "$owners" = 0 ] ||
    bad+=("files: $files raw, $sidecars sidecars, $parts .part, $owners not owned by the service user")
"$inst" verify "$out" >"$work/verify.out" 2>&1 || bad+=("verify: exit $?: $(tail -3 "$work/verify.out")")
grep -q 'matching their sidecar' "$work/verify.out" || bad+=("verify: $(tail -2 "$work/verify.out")")
records=$(sed -n 's/^ *=> \([0-9,]*\) records in .*/\1/p' "$work/verify.out" | tr -d ,)
[ "${records:-0}" -gt 0 ] || bad+=("no records were recorded: $(grep -m1 received "$work/rec.out"); $(cat "$work/service.out"); sender: $(tail -2 "$work/send.out")")
# The unit forbids these groups (SystemCallFilter=~...): the recorder must not need them.
forbidden=$(sed -n 's/^SystemCallFilter=~//p' "$unit")
if [ -z "$forbidden" ] || [ ! -s "$work/syscalls" ]; then
    bad+=("no SystemCallFilter in the unit or no strace summary")
else
    # shellcheck disable=SC2086
    systemd-analyze syscall-filter $forbidden | awk '/^ +[a-z_0-9]+$/ {print $1}' | sort -u >"$work/forbidden"
    awk 'NR > 2 && $NF ~ /^[a-z_0-9]+$/ && $NF != "total" {print $NF}' "$work/syscalls" | sort -u >"$work/used"
    hit=$(comm -12 "$work/forbidden" "$work/used" | tr '\n' ' ')
    [ -z "$hit" ] || bad+=("the recorder called system calls the unit forbids: $hit")
fi
if [ ${#bad[@]} = 0 ]; then
    pass service
    echo "    $(grep -c . "$work/used") distinct system calls, none of the $(wc -l <"$work/forbidden") forbidden; $(grep -m1 'records in' "$work/verify.out" | sed 's/^ *=> //')"
else
    fail service "${bad[@]}"
fi

# --- purge: every file of the package goes (the root keeps the user and dpkg's own files);
# this host's users and dpkg database are as they were ---
if "${dpkg_root[@]}" --purge wirespeed >"$work/purge.log" 2>&1; then
    left=$(find "$root" -mindepth 1 ! -path "$root/var/lib/dpkg*" ! -path "$root/etc*" ! -type d | head -5)
    state=$(dpkg-query --root="$root" -W -f='${Status}' wirespeed 2>&1)
    host_after=$(sha256sum /etc/passwd /etc/group; dpkg -s wirespeed 2>&1 | head -2)
    if [ -z "$left" ] && [ "$state" != "install ok installed" ] && [ "$host_before" = "$host_after" ]; then
        pass purge
    else
        fail purge "left in the root: ${left:-nothing}" "dpkg status: $state" \
            "this host's users and dpkg database unchanged: $([ "$host_before" = "$host_after" ] && echo yes || echo NO)"
    fi
else
    fail purge "dpkg --purge failed: $(tail -3 "$work/purge.log")"
fi

# --- lintian (optional) ---
if command -v lintian >/dev/null 2>&1; then
    echo "package suite: lintian (shown, not counted):"
    lintian --tag-display-limit 0 "$deb" 2>&1 | sed 's/^/    /'
else
    echo "package suite: lintian not installed; not run"
fi
summary
