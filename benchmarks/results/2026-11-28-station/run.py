#!/usr/bin/env python3
"""BENCHMARKS 22: a scan scattered over four throttled disks, and wirespeed station against
jive5ab on the same disks and stream. Run as root from the repository root:

    python3 benchmarks/results/2026-11-28-station/run.py WIRESPEED JIVE5AB OUTDIR

Disks: four 3 GiB files under /var/tmp/wsb as loop devices (ext4, errors=remount-ro), mounted
at /mnt/wsb/diskN (off the root file system, as jive5ab requires), each throttled to 50 MB/s of
writes by the block layer (blkio.throttle.write_bps_device of the root cgroup, so direct and
buffered writes alike). A disk fails as a file system does: ext4's trigger_fs_error, after which
the kernel makes it read-only at once and every write in flight fails.

    python3 .../run.py WIRESPEED JIVE5AB OUTDIR [scatter,fail,station]   (the parts to run)
Everything runs in a network namespace made here, over its loopback. The recorder runs on CPU 1,
the sender on CPU 0. Everything made is removed at the end.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

WS, J5, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
NS = "wsbench22"
DISKS = [f"/mnt/wsb/disk{i}" for i in range(4)]
THROTTLE = 50_000_000  # bytes/s per disk
SUM = THROTTLE * len(DISKS)
VDIF = "vdif,frame=8032,threads=1,station=WS,bits=2,chans=4,complex=0,fps=32000,fill=counter"
PORT = 7148
loops = []
os.makedirs(OUT, exist_ok=True)
log = open(os.path.join(OUT, "log.txt"), "a")


def sh(*a, check=True, **kw):
    print("$", " ".join(a), file=log, flush=True)
    return subprocess.run(a, check=check, capture_output=True, text=True, **kw)


def ns(*a):
    return ["ip", "netns", "exec", NS, *a]


def setup():
    sh("ip", "netns", "add", NS)
    sh(*ns("ip", "link", "set", "lo", "up"))
    os.makedirs("/var/tmp/wsb", exist_ok=True)
    for i, d in enumerate(DISKS):
        img = f"/var/tmp/wsb/disk{i}.img"
        sh("truncate", "-s", "3G", img)
        dev = sh("losetup", "-f", "--show", img).stdout.strip()
        loops.append(dev)
        sh("mkfs.ext4", "-q", "-F", dev)
        os.makedirs(d, exist_ok=True)
        sh("mount", "-o", "errors=remount-ro", dev, d)
        mm = sh("lsblk", "-no", "MAJ:MIN", dev).stdout.strip()
        with open("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device", "w") as f:
            f.write(f"{mm} {THROTTLE}\n")


def teardown():
    subprocess.run(["pkill", "-f", "jive5ab -m 0 -p 2620"], capture_output=True)
    subprocess.run(["pkill", "-f", "station --control 127.0.0.1:2621"], capture_output=True)
    for dev, d in zip(loops, DISKS):
        mm = subprocess.run(["lsblk", "-no", "MAJ:MIN", dev], capture_output=True, text=True).stdout.strip()
        if mm:
            with open("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device", "w") as f:
                f.write(f"{mm} 0\n")
        subprocess.run(["umount", d], capture_output=True)
        subprocess.run(["losetup", "-d", dev], capture_output=True)
    for i, d in enumerate(DISKS):
        try:
            os.remove(f"/var/tmp/wsb/disk{i}.img")
        except FileNotFoundError:
            pass
        try:
            os.rmdir(d)
        except OSError:
            pass
    for d in ("/mnt/wsb", "/var/tmp/wsb"):
        try:
            os.rmdir(d)
        except OSError:
            pass
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def fail_disk(i):
    with open(f"/sys/fs/ext4/{os.path.basename(loops[i])}/trigger_fs_error", "w") as f:
        f.write("1")


def repair_disk(i):
    sh("umount", DISKS[i])
    sh("e2fsck", "-fy", loops[i], check=False)
    sh("mount", "-o", "errors=remount-ro", loops[i], DISKS[i])


def clear_disks():
    for d in DISKS:
        for e in os.listdir(d):
            if e != "lost+found":
                subprocess.run(["rm", "-rf", os.path.join(d, e)])
    subprocess.run(["sync"])


def sender(rate_bps, seconds, extra=()):
    return subprocess.Popen(
        ns("taskset", "-c", "0", WS, "send", f"127.0.0.1:{PORT}", "--preset", "vdif", "--rate", str(int(rate_bps)),
           "--duration", str(seconds), "--json", *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def verify(scan, disks=DISKS):
    r = subprocess.run([WS, "verify", "--scan", scan, "--json", *disks], capture_output=True, text=True)
    return json.loads(r.stdout) if r.stdout.strip() else {"error": r.stderr}


# ---------------------------------------------------------------- A: scatter over four disks
def scatter_run(name, frac, seconds=25, fail_at=None, disks_sum=SUM):
    clear_disks()
    rate = frac * disks_sum * 8
    args = ns("taskset", "-c", "1", WS, "record", f"0.0.0.0:{PORT}", "--format", VDIF, "--scan", name,
              "--chunk-size", "32M", "--buffer", "256M", "--once", "--json", "--duration", str(seconds + 30))
    for d in DISKS:
        args += ["-o", d]
    rec = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while "listening on" not in rec.stderr.readline():
        pass
    t0 = time.time()
    s = sender(rate, seconds)
    if fail_at is not None:
        time.sleep(fail_at)
        fail_disk(1)
    s.wait()
    out, err = rec.communicate(timeout=seconds + 120)
    wall = time.time() - t0
    rep = json.loads(out)
    v = verify(name)
    if fail_at is not None:
        repair_disk(1)
    cap = rep["capture"]
    w = rep["writer"]
    row = {
        "run": name, "offered_fraction_of_disks": frac, "offered_bps": rate,
        "received": cap["total"]["received"], "lost": cap["total"]["lost"], "ring_full": cap["ring_full"],
        "kernel_drops": cap.get("kernel", {}).get("socket_drops"),
        "written_bytes": w["bytes"], "disk_bytes_per_s": rep["disk_bytes_per_s"], "wall_s": wall,
        "ring_high_water": rep["ring"]["high_water_fraction"], "notes": w["notes"], "error": w["error"],
        "verify_received": v.get("total", {}).get("received"), "verify_lost": v.get("total", {}).get("lost"),
        "verify_problems": v.get("problems"),
        "dropped_lines": [l for l in err.splitlines() if "dropping disk" in l or "is full" in l],
    }
    json.dump(rep, open(os.path.join(OUT, f"record-{name}.json"), "w"), indent=1)
    print(json.dumps(row), file=log, flush=True)
    return row


# ------------------------------------------------------- B: wirespeed station against jive5ab
def enter_ns():
    """This process's sockets into the bench's namespace, where the recorders serve VSI-S."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/var/run/netns/{NS}", os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "setns")
    os.close(fd)


class Vsis:
    def __init__(self, port):
        for _ in range(100):
            try:
                self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"no VSI-S on {port}")

    def ask(self, cmd):
        self.s.sendall((cmd + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            data += self.s.recv(65536)
        return data.decode()


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def recorder(kind):
    if kind == "jive5ab":
        p = subprocess.Popen(ns("taskset", "-c", "1", J5, "-m", "0", "-p", "2620"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        return p, 2620
    p = subprocess.Popen(ns("taskset", "-c", "1", WS, "station", "--control", "127.0.0.1:2621", "--buffer", "1G",
                            "--json"), stdout=open(os.path.join(OUT, "station.json"), "a"),
                         stderr=open(os.path.join(OUT, "station.err"), "a"))
    return p, 2621


def pid_in_ns(p, name):
    # The recorder's own pid (ip netns exec and taskset exec it, so it is the child's).
    return p.pid


def station_run(kind, scan, rate_bps, seconds=20, drop_every=None):
    clear_disks()
    p, port = recorder(kind)
    c = Vsis(port)
    c.ask("mode=vdif_8000-2048-4-2;")
    # jive5ab cuts each datagram to its MTU (1500 by default) and records the pieces.
    c.ask("mtu=9000;")
    c.ask("net_protocol=pudp:32M:32M:8;")
    c.ask(f"net_port={PORT};")
    setd = c.ask("set_disks=" + ":".join(DISKS) + ";")
    if drop_every:
        sh(*ns("nft", "add", "table", "inet", "wsb"))
        sh(*ns("nft", "add", "chain", "inet", "wsb", "in", "{ type filter hook input priority -300 ; }"))
        sh(*ns("nft", "add", "rule", "inet", "wsb", "in", "udp", "dport", str(PORT), "numgen", "inc", "mod",
               str(drop_every), "0", "counter", "drop"))
    pid = pid_in_ns(p, kind)
    t = time.time()
    on = c.ask(f"record=on:{scan};")
    on_s = time.time() - t
    ticks0 = cpu_ticks(pid)
    s = sender(rate_bps, seconds)
    sout, _ = s.communicate()
    time.sleep(1.0)
    ticks1 = cpu_ticks(pid)
    ev = c.ask("evlbi?;")
    off = c.ask("record=off;")
    for _ in range(600):
        if "off" in c.ask("record?;"):
            break
        time.sleep(0.1)
    time.sleep(2)
    ev_after = c.ask("evlbi?;")
    nft_dropped = None
    if drop_every:
        listing = sh(*ns("nft", "list", "table", "inet", "wsb")).stdout
        m = re.search(r"packets (\d+)", listing)
        nft_dropped = int(m.group(1)) if m else None
        sh(*ns("nft", "delete", "table", "inet", "wsb"))
    p.terminate()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
    sent = json.loads(sout)
    v = verify(scan)
    datagrams = sent["sent"]
    cpu_s = (ticks1 - ticks0) / os.sysconf("SC_CLK_TCK")
    m = re.search(r"total : (\d+) : loss : (\d+)", ev_after)
    row = {
        "recorder": kind, "scan": scan, "offered_bps": rate_bps, "drop_every": drop_every,
        "record_on_reply": on.strip(), "record_on_s": on_s, "set_disks": setd.strip(),
        "sent": datagrams, "nft_dropped": nft_dropped,
        "evlbi_total": int(m.group(1)) if m else None, "evlbi_loss": int(m.group(2)) if m else None,
        "evlbi_raw": ev_after.strip(), "record_off_reply": off.strip(),
        "verify_received": v.get("total", {}).get("received"), "verify_lost": v.get("total", {}).get("lost"),
        "verify_first_seq": (v.get("streams") or [{}])[0].get("first_seq"),
        "recorder_cpu_s": cpu_s,
        "cpu_us_per_datagram": cpu_s * 1e6 / datagrams if datagrams else None,
    }
    json.dump({"row": row, "send": sent, "verify": v}, open(os.path.join(OUT, f"station-{scan}.json"), "w"), indent=1)
    print(json.dumps(row), file=log, flush=True)
    return row


def main():
    parts = (sys.argv[4] if len(sys.argv) > 4 else "scatter,fail,station").split(",")
    rows_path = os.path.join(OUT, "rows.json")
    rows = json.load(open(rows_path)) if os.path.exists(rows_path) else {"scatter": [], "station": []}
    teardown()
    setup()
    try:
        if "scatter" in parts:
            for frac in (0.9, 0.95, 1.0, 1.1):
                rows["scatter"].append(scatter_run(f"a{int(frac * 100)}", frac))
        if "fail" in parts:
            # One disk fails 8 s in: the three left take 0.9 of their sum.
            rows["scatter"].append(scatter_run("fail90", 0.9, fail_at=8, disks_sum=3 * THROTTLE))
        if "station" in parts:
            enter_ns()
            kinds = (sys.argv[5] if len(sys.argv) > 5 else "wirespeed,jive5ab").split(",")
            rows["station"] = [r for r in rows["station"] if r["recorder"] not in kinds]
            for kind in kinds:
                for gbps in (0.8, 1.4):
                    rows["station"].append(station_run(kind, f"{kind[:2]}{int(gbps * 10)}", gbps * 1e9))
                rows["station"].append(station_run(kind, f"{kind[:2]}drop", 0.8e9, drop_every=1000))
    finally:
        json.dump(rows, open(rows_path, "w"), indent=1)
        teardown()


if __name__ == "__main__":
    main()
