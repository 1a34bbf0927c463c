#!/usr/bin/env python3
"""record_max.py: the highest zero-loss recording rate of wirespeed record, beside tcpdump -w and
netsniff-ng, with the disk's own O_DIRECT write rate as the ceiling (issue #4).

Two namespaces made here (and always deleted), joined by a veth pair with MTU 9000: the sender
(`wirespeed send --gso`) in A, the recorder in B. For every payload size and recorder it binary
searches (on a log scale) the highest sender-achieved rate at which a D-second probe stores every
datagram sent, repeats the search R times and reports the median. The recorders take turns probe
by probe, so that the host's noise hits all of them alike. Before and after the sweep it measures
the disk with `dd oflag=direct` (large blocks) and `wirespeed disk-test`. At one fixed rate every
recorder sustains it also measures CPU time per recorded packet. See benchmarks/README.md.

Stdlib only. Run as root. Traffic goes only to an address in 198.18.0.0/15 inside the namespace
pair made here; recordings go to a scratch directory (default /var/tmp/wsbench-PID) that is
emptied after every probe and removed at exit.
"""

import argparse
import atexit
import datetime
import hashlib
import ipaddress
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

SCHEMA = "wirespeed.bench.record_max/1"
TOOLS = ("wirespeed", "tcpdump", "netsniff-ng")
VETH_NET = ipaddress.ip_network("198.18.0.0/15")
SEND_ADDR = "198.18.2.1"
RECV_ADDR = "198.18.2.2"
RMEM_MAX = 64 << 20  # net.core.rmem_max for the run (restored at exit)
GB = 1e9


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------
# Cleanup: child processes, namespaces, the scratch directory and sysctls are undone on any exit
# (normal, exception, Ctrl-C, SIGTERM/SIGHUP), by try/finally in main() and again by atexit.
# --------------------------------------------------------------------------------------------


class Cleanup:
    def __init__(self):
        self.children = []
        self.namespaces = []
        self.sysctls = {}
        self.dirs = []
        self.done = False

    def track(self, proc):
        self.children.append(proc)
        return proc

    def kill_children(self):
        for p in self.children:
            if p.returncode is not None:
                continue
            try:
                if p.poll() is not None:
                    continue
            except ChildProcessError:
                continue
            for sig, wait in ((signal.SIGINT, 3.0), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
                except ChildProcessError:
                    break
        self.children = [p for p in self.children if p.returncode is None]

    def delete_namespaces(self):
        for ns in list(self.namespaces):
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode == 0 or ns not in list_namespaces():
                self.namespaces.remove(ns)
            else:
                log(f"cleanup: could not delete namespace {ns}: {r.stderr.strip()}")

    def restore_sysctls(self):
        for name, value in list(self.sysctls.items()):
            r = subprocess.run(["sysctl", "-q", "-w", f"{name}={value}"], capture_output=True, text=True)
            if r.returncode == 0:
                del self.sysctls[name]
            else:
                log(f"cleanup: could not restore {name}={value}: {r.stderr.strip()}")

    def remove_dirs(self):
        for d in list(self.dirs):
            shutil.rmtree(d, ignore_errors=True)
            if not os.path.exists(d):
                self.dirs.remove(d)
            else:
                log(f"cleanup: could not remove {d}")

    def run(self):
        if self.done:
            return
        self.kill_children()
        self.delete_namespaces()
        self.remove_dirs()
        self.restore_sysctls()
        self.done = not (self.namespaces or self.sysctls or self.dirs)


CLEANUP = Cleanup()
atexit.register(CLEANUP.run)


def _raise_exit(sig, _frame):
    raise SystemExit(128 + sig)


def list_namespaces():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def sh(argv, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {shlex.join(argv)}\n{r.stderr.strip()}")
    return r


def read_sysctl(name):
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            return f.read().strip()
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# Network: two namespaces and a veth pair
# --------------------------------------------------------------------------------------------


class Net:
    def __init__(self):
        pid = os.getpid()
        self.ns_a, self.ns_b = f"wsrb-a-{pid}", f"wsrb-b-{pid}"
        self.if_a, self.if_b = f"wsrb{pid}a", f"wsrb{pid}b"  # <= 15 characters
        self.send_addr, self.recv_addr = SEND_ADDR, RECV_ADDR
        for a in (self.send_addr, self.recv_addr):
            assert ipaddress.ip_address(a) in VETH_NET
        self._port = random.randint(20000, 40000)
        self.setup = []

    def create(self):
        existing = list_namespaces()
        for ns in (self.ns_a, self.ns_b):
            if ns in existing:
                raise RuntimeError(f"namespace {ns} already exists: check it and `ip netns del {ns}`")
        a, b = self.ns_a, self.ns_b
        cmds = [
            ["ip", "netns", "add", a],
            ["ip", "netns", "add", b],
            ["ip", "-n", a, "link", "add", self.if_a, "type", "veth", "peer", "name", self.if_b, "netns", b],
            ["ip", "-n", a, "link", "set", self.if_a, "mtu", "9000"],
            ["ip", "-n", b, "link", "set", self.if_b, "mtu", "9000"],
            ["ip", "-n", a, "addr", "add", f"{self.send_addr}/30", "dev", self.if_a],
            ["ip", "-n", b, "addr", "add", f"{self.recv_addr}/30", "dev", self.if_b],
            ["ip", "-n", a, "link", "set", "lo", "up"],
            ["ip", "-n", b, "link", "set", "lo", "up"],
            # Segment the sender's GSO batches in software as they leave A (on the sender's core),
            # so every datagram crosses the veth as its own Ethernet frame, as from a real NIC.
            # Left on, veth hands 64 KB GSO super-packets across whole: a packet-socket capture
            # (tcpdump, netsniff-ng) would see one frame per 5-60 datagrams.
            ["ip", "netns", "exec", a, "ethtool", "-K", self.if_a, "tx-udp-segmentation", "off"],
            ["ip", "-n", a, "link", "set", self.if_a, "up"],
            ["ip", "-n", b, "link", "set", self.if_b, "up"],
        ]
        for c in cmds:
            sh(c)
            if c[:3] == ["ip", "netns", "add"]:
                CLEANUP.namespaces.append(c[3])
            self.setup.append(shlex.join(c))
        route = sh(["ip", "-n", a, "route", "get", self.recv_addr]).stdout
        if self.if_a not in route:
            raise RuntimeError(f"unexpected route to {self.recv_addr} in {a}: {route}")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = sh(["ip", "-n", b, "-o", "link", "show", self.if_b]).stdout
            if "LOWER_UP" in st and ",UP" in st:
                break
            time.sleep(0.05)
        feats = sh(["ip", "netns", "exec", a, "ethtool", "-k", self.if_a]).stdout
        if "tx-udp-segmentation: off" not in feats:
            raise RuntimeError(f"could not turn tx-udp-segmentation off on {self.if_a}")

    def next_port(self):
        self._port += 1
        if self._port > 60000:
            self._port = 20000
        return self._port

    def in_a(self):
        return ["ip", "netns", "exec", self.ns_a]

    def in_b(self):
        return ["ip", "netns", "exec", self.ns_b]

    def snmp_udp_b(self):
        text = sh(self.in_b() + ["cat", "/proc/net/snmp"]).stdout
        rows = [line.split() for line in text.splitlines() if line.startswith("Udp:")]
        return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:])} if len(rows) >= 2 else {}

    def describe(self):
        return {"sender_namespace": self.ns_a, "recorder_namespace": self.ns_b, "sender_if": self.if_a,
                "recorder_if": self.if_b, "sender_address": self.send_addr, "recorder_address": self.recv_addr,
                "mtu": 9000, "setup": self.setup}


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def wait4_timeout(proc, timeout):
    """Reap proc with os.wait4 (for its rusage); None if it is still running after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def stop_and_reap(proc, sigs=((signal.SIGINT, 20.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))):
    """Stop proc with each signal in turn until it exits; returns (rusage or None, signal names sent)."""
    sent = []
    for s, t in sigs:
        try:
            os.kill(proc.pid, s)
            sent.append(signal.Signals(s).name)
        except ProcessLookupError:
            pass
        ru = wait4_timeout(proc, t)
        if ru is not None:
            return ru, sent
    return None, sent


def socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
    return inodes


def udp_bound(pid, port):
    """True once process pid holds a UDP socket bound to port."""
    mine = socket_inodes(pid)
    if not mine:
        return False
    for table in ("udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) >= 10 and int(cols[1].rsplit(":", 1)[1], 16) == port and cols[9] in mine:
                        return True
        except OSError:
            continue
    return False


def packet_bound(pid):
    """True once process pid holds a packet socket bound to an interface (/proc/PID/net/packet)."""
    mine = socket_inodes(pid)
    if not mine:
        return False
    try:
        with open(f"/proc/{pid}/net/packet") as f:
            next(f)
            for line in f:
                cols = line.split()
                if len(cols) >= 9 and cols[8] in mine and cols[4] != "0":
                    return True
    except OSError:
        pass
    return False


def tail(path, n=2000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def ru_dict(ru):
    if ru is None:
        return None
    return {"utime_s": ru.ru_utime, "stime_s": ru.ru_stime, "cpu_s": ru.ru_utime + ru.ru_stime,
            "maxrss_kib": ru.ru_maxrss, "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw}


def meminfo_dirty():
    """Dirty + Writeback page cache, bytes (what buffered writers have not yet put on disk)."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                if k in ("Dirty", "Writeback"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out.get("Dirty", 0) + out.get("Writeback", 0)


def cpu_times():
    res = []
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3] != " ":
                v = [int(x) for x in line.split()[1:]]
                res.append((sum(v[:8]), v[3] + v[4]))
    return res


def busy_fractions(interval=0.3):
    a = cpu_times()
    time.sleep(interval)
    b = cpu_times()
    return [round(1 - (bi[1] - ai[1]) / max(1, bi[0] - ai[0]), 3) for ai, bi in zip(a, b)]


def proc_cpu_ns(pid):
    """CPU time of all threads of pid so far, ns (/proc/PID/task/*/schedstat); None if gone."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    except OSError:
        return None
    return total


def proc_status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)i?B?\s*", text, re.I)
    if not m:
        raise ValueError(text)
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()])


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class ProbeError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------------


SINK_CODE = ("import socket,sys,time\n"
             "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
             "s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,4096)\n"
             "s.bind((sys.argv[1],int(sys.argv[2])))\n"
             "time.sleep(3600)\n")


class Bench:
    def __init__(self, args, out_dir, wirespeed, net, scratch):
        self.args = args
        self.out_dir = out_dir
        self.tmp = os.path.join(out_dir, "tmp")
        os.makedirs(self.tmp, exist_ok=True)
        self.wirespeed = wirespeed
        self.net = net
        self.scratch = scratch
        self.probes = []
        self.warmups = []
        self.searches = []
        self.results = []
        self.cpu = []
        self.ceilings = []
        self.failures = []
        self.notes = []

    # -- command lines ------------------------------------------------------------------------

    def recorder_cmd(self, tool, size, port, outdir):
        a = self.args
        pin = ["taskset", "-c", str(a.recv_cpu)]
        if tool == "wirespeed":
            safety = a.duration + 60  # only a safety stop: --once ends it at the sender's end messages
            cmd = [self.wirespeed, "record", f"{self.net.recv_addr}:{port}", "--size", str(size), "-o", outdir,
                   "--once", "--json", "--buffer", a.ws_buffer, "--cpu", str(a.recv_cpu),
                   "--duration", f"{safety:g}"]
        elif tool == "tcpdump":
            cmd = ["tcpdump", "-i", self.net.if_b, "-w", os.path.join(outdir, "capture.pcap"), "-B",
                   str(a.tcpdump_buffer_kib), "udp", "port", str(port)]
        else:
            cmd = ["netsniff-ng", "--in", self.net.if_b, "--out", os.path.join(outdir, "capture.pcap"), "-s",
                   "-A", "-Q", "-S", a.netsniff_ring, "-b", str(a.recv_cpu), "-f", f"udp port {port}"]
        return self.net.in_b() + pin + cmd

    def sender_cmd(self, size, port, rate_pps, duration):
        a = self.args
        rate = "max" if rate_pps is None else f"{rate_pps:.1f}pps"
        return self.net.in_a() + ["taskset", "-c", str(a.send_cpu), self.wirespeed, "send",
                                  f"{self.net.recv_addr}:{port}", "--size", str(size), "--rate", rate,
                                  "--duration", f"{duration:g}", "--gso", "--cpu", str(a.send_cpu), "--json"]

    # -- helpers --------------------------------------------------------------------------------

    def wait_quiet(self):
        """Wait (up to --quiet-wait s) until no CPU is busier than --quiet-threshold: the other
        engineer's compiles, a previous probe's writeback. Returns (waited s, last busy fractions)."""
        a = self.args
        t0 = time.monotonic()
        while True:
            busy = busy_fractions(0.3)
            if max(busy) <= a.quiet_threshold or time.monotonic() - t0 > a.quiet_wait:
                return round(time.monotonic() - t0, 2), busy
            time.sleep(1.0)

    def check_space(self):
        free = shutil.disk_usage(self.scratch).free
        if free < self.args.min_free_gb * GB:
            raise SystemExit(f"only {free / GB:.1f} GB free under {self.scratch}: stopping "
                             f"(--min-free-gb {self.args.min_free_gb})")
        return free

    def verify(self, target, size, pcap):
        argv = [self.wirespeed, "verify", target, "--json"]
        if pcap:
            argv[3:3] = ["--format", f"counter,size={size}"]
        r = subprocess.run(argv, capture_output=True, text=True)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            raise ProbeError(f"verify printed no JSON ({r.returncode}): {shlex.join(argv)}\n{r.stderr[-1500:]}")
        return {"cmd": shlex.join(argv), "exit": r.returncode, "total": doc.get("total"),
                "problems": doc.get("problems"),
                "files": [{k: f.get(k) for k in ("path", "bytes", "records", "complete", "problems",
                                                  "invalid_by_reason", "trailing_bytes", "unreadable")}
                          for f in doc.get("files", [])]}

    # -- one probe ----------------------------------------------------------------------------

    def probe(self, tool, size, rate_pps, duration, kind, search_id=None, record=True):
        a = self.args
        self.check_space()
        waited, busy = self.wait_quiet()
        port = self.net.next_port()
        tag = f"{len(self.probes) + len(self.warmups)}-{tool}-{size}-{port}"
        outdir = os.path.join(self.scratch, tag)
        os.makedirs(outdir)
        rec_argv = self.recorder_cmd(tool, size, port, outdir)
        send_argv = self.sender_cmd(size, port, rate_pps, duration)
        for argv in (rec_argv, send_argv):  # belt and braces: the only destination is ours
            for word in argv:
                m = re.fullmatch(r"(\d+\.\d+\.\d+\.\d+):\d+", word)
                if m:
                    assert m.group(1) == self.net.recv_addr, word
        files = {k: os.path.join(self.tmp, f"{tag}.{k}") for k in ("rout", "rerr", "sout", "serr", "kout", "kerr")}
        started = now_iso()
        load0 = os.getloadavg()[0]
        snmp0 = self.net.snmp_udp_b()
        t0 = time.monotonic()
        sink = None
        rproc = None
        try:
            if tool != "wirespeed":
                # Something must own the port in B, or every datagram draws an ICMP port-unreachable
                # and the sender sees ECONNREFUSED. This socket is never read (4 KB buffer): the
                # kernel drops there, after the packet taps the capture tools read from.
                with open(files["kout"], "wb") as ko, open(files["kerr"], "wb") as ke:
                    sink = CLEANUP.track(subprocess.Popen(
                        self.net.in_b() + [sys.executable, "-c", SINK_CODE, self.net.recv_addr, str(port)],
                        stdout=ko, stderr=ke, stdin=subprocess.DEVNULL, start_new_session=True))
                deadline = time.monotonic() + 10
                while not udp_bound(sink.pid, port):
                    if sink.poll() is not None or time.monotonic() > deadline:
                        raise ProbeError(f"port sink did not bind {port}: {tail(files['kerr'])}")
                    time.sleep(0.02)
            with open(files["rout"], "wb") as ro, open(files["rerr"], "wb") as re_:
                rproc = CLEANUP.track(subprocess.Popen(rec_argv, stdout=ro, stderr=re_, stdin=subprocess.DEVNULL,
                                                       start_new_session=True))
            deadline = time.monotonic() + 15
            while not (udp_bound(rproc.pid, port) if tool == "wirespeed" else packet_bound(rproc.pid)):
                if rproc.poll() is not None or time.monotonic() > deadline:
                    raise ProbeError(f"{tool} did not start: {shlex.join(rec_argv)}\n{tail(files['rerr'])}")
                time.sleep(0.02)
            t_bound = time.monotonic()
            if tool == "wirespeed":
                # `wirespeed record` binds its socket first and then allocates, pre-faults and locks
                # its RAM ring; only then does the capture thread read. Datagrams that arrive
                # meanwhile wait in the socket buffer (64 MiB: ~35,000 of 1080 B), and at a high
                # rate overflow it: a start-up loss that says nothing about the sustained rate. So
                # the sender starts once the ring is resident (VmRSS), plus 0.3 s.
                want = parse_size(a.ws_buffer) // 1024 * 0.95
                deadline = time.monotonic() + 15
                while (proc_status_kib(rproc.pid, "VmRSS") or 0) < want:
                    if rproc.poll() is not None or time.monotonic() > deadline:
                        raise ProbeError(f"wirespeed's ring did not become resident: {tail(files['rerr'])}")
                    time.sleep(0.02)
                time.sleep(0.3)
            else:
                time.sleep(0.5)  # the packet socket is bound; give the ring and filter time to be set up
            ready_s = round(time.monotonic() - t_bound, 3)
            cpu_at_send_start = proc_cpu_ns(rproc.pid)
            with open(files["sout"], "wb") as so, open(files["serr"], "wb") as se:
                sproc = CLEANUP.track(subprocess.Popen(send_argv, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                                       start_new_session=True))
            sru = wait4_timeout(sproc, duration + 30)
            if sru is None:
                sru, _ = stop_and_reap(sproc, ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)))
            t_send_end = time.monotonic()
            cpu_at_send_end = proc_cpu_ns(rproc.pid)
            dirty_at_send_end = meminfo_dirty()
            stop_signals = []
            if tool == "wirespeed":
                # It ends by itself at the end-of-stream messages, after draining its ring to disk.
                rru = wait4_timeout(rproc, a.drain_wait)
                if rru is None:
                    rru, stop_signals = stop_and_reap(rproc)
            else:
                # Let the tool drain its ring: stop it once its file has not grown for --settle s
                # (longer than a TPACKET_V3 block's retire timeout), at most --drain-wait s.
                path = os.path.join(outdir, "capture.pcap")
                last, last_change = file_size(path), time.monotonic()
                while time.monotonic() - t_send_end < a.drain_wait:
                    time.sleep(0.2)
                    cur = file_size(path)
                    if cur != last:
                        last, last_change = cur, time.monotonic()
                    elif time.monotonic() - last_change >= a.settle and time.monotonic() - t_send_end >= a.settle:
                        break
                rru, stop_signals = stop_and_reap(rproc)
            t_rec_end = time.monotonic()
            dirty_at_rec_end = meminfo_dirty()
            if sink is not None:
                stop_and_reap(sink, ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)))
            snmp1 = self.net.snmp_udp_b()

            rec = {
                "id": len(self.probes) if record else None, "kind": kind, "search": search_id, "tool": tool,
                "size": size, "port": port, "started": started, "duration_s": duration,
                "quiet_wait_s": waited, "cpu_busy_before": busy, "loadavg_1m_before": load0,
                "requested_pps": rate_pps, "requested": "max" if rate_pps is None else f"{rate_pps:.1f} pps",
                "recorder_cmd": shlex.join(rec_argv), "sender_cmd": shlex.join(send_argv),
                "recorder_ready_after_bind_s": ready_s, "recorder_exit": rproc.returncode, "sender_exit": sproc.returncode,
                "recorder_stop_signals": stop_signals,
                "recorder_tail_s": round(t_rec_end - t_send_end, 2),
                "recorder_rusage": ru_dict(rru),
                "recorder_cpu_ns_while_sending": (cpu_at_send_end - cpu_at_send_start
                                                  if cpu_at_send_start is not None and cpu_at_send_end is not None
                                                  else None), "sender_rusage": ru_dict(sru),
                "page_cache_dirty_bytes": {"at_sender_end": dirty_at_send_end, "at_recorder_end": dirty_at_rec_end},
                "udp_b_delta": {k: snmp1.get(k, 0) - snmp0.get(k, 0) for k in ("InDatagrams", "RcvbufErrors", "NoPorts")},
            }
            s = self._load(files["sout"], "wirespeed send")
            rec["sender"] = s
            rec["sent"] = int(s["sent"])
            rec["achieved_pps"] = float(s["achieved_pps"])
            if rec["sent"] <= 0:
                raise ProbeError("the sender sent nothing")
            if tool == "wirespeed":
                self._parse_wirespeed(rec, files, outdir, size)
            else:
                self._parse_peer(tool, rec, files, outdir, size)
        finally:
            if sink is not None and sink.returncode is None:
                stop_and_reap(sink, ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)))
            if rproc is not None and rproc.returncode is None:
                stop_and_reap(rproc)
            shutil.rmtree(outdir, ignore_errors=True)
            os.sync()
            if not a.keep_raw:
                for f in files.values():
                    try:
                        os.remove(f)
                    except OSError:
                        pass
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        rec["achieved_gbps"] = rec["achieved_pps"] * size * 8 / 1e9
        rec["achieved_payload_GBps"] = rec["achieved_pps"] * size / GB
        rec["lost"] = max(rec["sent"] - rec["stored"], 0)
        rec["lossy"] = rec["lost"] > 0 or bool(rec.get("problem"))
        cpu = (rec["recorder_rusage"] or {}).get("cpu_s")
        rec["recorder_process_cpu_ns_per_packet"] = cpu * 1e9 / rec["stored"] if cpu and rec["stored"] else None
        # The figure compared: the recorder's CPU (all threads) while the sender ran, per datagram
        # sent; start-up (e.g. pre-faulting wirespeed's ring) and the final drain are left out.
        w = rec["recorder_cpu_ns_while_sending"]
        rec["recorder_cpu_ns_per_packet"] = w / rec["sent"] if w and rec["sent"] else None
        (self.probes if record else self.warmups).append(rec)
        req = "max" if rate_pps is None else f"{rate_pps / 1e3:.1f}k"
        log(f"  {kind:7s} {size:5d} B {tool:11s} req {req:>8s} pps  achieved {rec['achieved_pps'] / 1e3:7.1f} kpps "
            f"{rec['achieved_gbps']:6.2f} Gb/s  sent {rec['sent']:>9d} stored {rec['stored']:>9d}"
            f"{'  LOSSY (' + rec['loss_kind'] + ')' if rec['lossy'] else ''}"
            f"{'  [' + rec['problem'] + ']' if rec.get('problem') else ''}"
            f"{'  (waited ' + str(waited) + ' s for a quiet host)' if waited > 0.5 else ''}")
        return rec

    def _load(self, path, what):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise ProbeError(f"cannot read the {what} JSON: {e}\n{tail(path)}") from None

    def _parse_wirespeed(self, rec, files, outdir, size):
        r = self._load(files["rout"], "wirespeed record")
        rec["recorder"] = r
        c = r.get("capture", {})
        w = r.get("writer", {})
        total = c.get("total", {})
        kern = c.get("kernel", {})
        rec["stored"] = int(w.get("records", 0))
        rec["ledger_lost"] = int(total.get("lost", 0))
        rec["ring_full"] = int(c.get("ring_full", 0))
        rec["socket_drops"] = int(kern.get("socket_drops_proc") or 0)
        rec["rcvbuf_errors"] = (kern.get("namespace_delta") or {}).get("rcvbuf_errors")
        rec["capture_cpu_ns_per_packet"] = c.get("cpu_ns_per_packet")
        rec["disk_bytes_per_s"] = r.get("disk_bytes_per_s")
        rec["ring_high_water_fraction"] = (r.get("ring") or {}).get("high_water_fraction")
        problems = []
        if rec["ledger_lost"]:
            problems.append(f"ledger lost {rec['ledger_lost']}")
        if c.get("streams_without_end"):
            problems.append(f"{c['streams_without_end']} stream(s) without end message")
        if w.get("error"):
            problems.append(f"writer error: {w['error']}")
        kinds, classes = [], []
        if rec["ring_full"]:
            kinds.append(f"ring-full {rec['ring_full']}")
            classes.append("ring-full")
        if rec["socket_drops"] or rec["rcvbuf_errors"]:
            kinds.append(f"socket drops {max(rec['socket_drops'], rec['rcvbuf_errors'] or 0)}")
            classes.append("socket drops")
        rec["loss_classes"] = classes
        # Re-read what is on disk when the recorder says it lost nothing: that is the figure quoted.
        if self.args.verify and not rec["ledger_lost"] and rec["stored"] == rec["sent"] and not problems:
            v = self.verify(outdir, size, pcap=False)
            rec["verify"] = v
            vt = v.get("total") or {}
            if v["exit"] != 0 or vt.get("received") != rec["sent"] or vt.get("lost"):
                problems.append(f"verify: exit {v['exit']}, received {vt.get('received')}, lost {vt.get('lost')}")
                rec["stored"] = min(rec["stored"], int(vt.get("received") or 0))
        rec["loss_kind"] = ", ".join(kinds) or ("-" if not problems else "other")
        if problems:
            rec["problem"] = "; ".join(problems)

    def _parse_peer(self, tool, rec, files, outdir, size):
        out = tail(files["rout"], 20000) + "\n" + tail(files["rerr"], 20000)
        stats = {}
        if tool == "tcpdump":
            for key, pat in (("captured", r"(\d+) packets? captured"), ("received_by_filter", r"(\d+) packets? received by filter"),
                             ("dropped_by_kernel", r"(\d+) packets? dropped by kernel")):
                m = re.search(pat, out)
                stats[key] = int(m.group(1)) if m else None
            kdrop = stats.get("dropped_by_kernel")
        else:
            for key, pat in (("incoming", r"(\d+)\s+packets incoming"), ("unread_on_exit", r"\((\d+) unread on exit\)"),
                             ("passed_filter", r"(\d+)\s+packets passed filter"),
                             ("failed_out_of_space", r"(\d+)\s+packets failed filter \(out of space\)")):
                m = re.search(pat, out)
                stats[key] = int(m.group(1)) if m else None
            kdrop = (stats.get("failed_out_of_space") or 0) + (stats.get("unread_on_exit") or 0)
        rec["recorder"] = {"tool_report": stats, "stdout_stderr_tail": out.strip()[-600:]}
        rec["tool_reported_drops"] = kdrop
        path = os.path.join(outdir, "capture.pcap")
        rec["file_bytes"] = file_size(path)
        if not os.path.exists(path):
            raise ProbeError(f"{tool} wrote no file: {rec['recorder_cmd']}\n{out[-1500:]}")
        v = self.verify(path, size, pcap=True)
        rec["verify"] = v
        vt = v.get("total") or {}
        rec["stored"] = int(vt.get("received") or 0)
        problems = []
        bad = (v["files"][0].get("invalid_by_reason") or {}) if v["files"] else {}
        if bad.get("header") or bad.get("payload"):
            problems.append(f"verify: damaged records {bad}")
        kinds, classes = [], []
        if kdrop:
            kinds.append(f"tool-reported drops {kdrop}")
            classes.append("tool-reported drops")
        if rec["stored"] < rec["sent"] and not kdrop:
            kinds.append("missing from file, not reported by the tool")
            classes.append("missing, unreported")
        rec["loss_classes"] = classes
        rec["loss_kind"] = ", ".join(kinds) or "-"
        if problems:
            rec["problem"] = "; ".join(problems)

    def probe_retry(self, *a, **kw):
        try:
            return self.probe(*a, **kw)
        except ProbeError as e:
            log(f"  probe failed, retrying once: {str(e).splitlines()[0]}")
            self.failures.append({"when": now_iso(), "error": str(e)})
            return self.probe(*a, **kw)


class Search:
    """Log-scale bisection over sender-achieved rates: the highest lossless achieved rate below
    the lowest lossy one. The first probe is the sender unpaced (its ceiling)."""

    def __init__(self, bench, tool, size, repeat):
        self.bench, self.tool, self.size, self.repeat = bench, tool, size, repeat
        a = bench.args
        self.id = len(bench.searches)
        self.doc = {"id": self.id, "tool": tool, "size": size, "repeat": repeat, "probes": []}
        bench.searches.append(self.doc)
        self.lossless, self.lossy = [], []
        self.best = {}
        self.n = 0
        self.stalled = 0
        self.prev = None
        self.done = False
        self.precision, self.max_probes, self.min_rate = a.precision, a.max_probes, a.min_rate_pps

    def bracket(self):
        hi = min(self.lossy)
        below = [x for x in self.lossless if x < hi]
        return (max(below) if below else 0.0), hi

    def step(self):
        """Run the next probe; sets self.done when the search has its answer."""
        b = self.bench
        if not self.lossy and not self.lossless:
            p = b.probe_retry(self.tool, self.size, None, b.args.duration, "ceiling", self.id)
            self.doc["probes"].append(p["id"])
            self.doc["sender_ceiling_pps"] = p["achieved_pps"]
            if not p["lossy"]:
                self.finish(p["achieved_pps"], p["id"], True, "sender-bound")
                return
            self.lossy.append(p["achieved_pps"])
            return self.check()
        lo, hi = self.bracket()
        target = math.sqrt(max(lo, self.min_rate) * hi)
        p = b.probe_retry(self.tool, self.size, target, b.args.duration, "search", self.id)
        self.doc["probes"].append(p["id"])
        self.n += 1
        if p["lossy"]:
            self.lossy.append(p["achieved_pps"])
        else:
            self.lossless.append(p["achieved_pps"])
            self.best[p["achieved_pps"]] = p["id"]
        self.check()

    def check(self):
        lo, hi = self.bracket()
        self.stalled = self.stalled + 1 if (lo, hi) == self.prev else 0
        self.prev = (lo, hi)
        reason = None
        if lo > 0 and hi - lo <= self.precision * hi:
            reason = "precision"
        elif hi <= self.min_rate:
            reason = "min-rate"
        elif self.stalled >= 2:
            reason = "sender-cannot-pace"
        elif self.n >= self.max_probes:
            reason = "max-probes"
        if reason:
            self.finish(lo, self.best.get(lo), False, reason, hi)

    def finish(self, result, probe_id, sender_bound, reason, lowest_lossy=None):
        self.done = True
        self.doc.update(result_pps=result, result_probe=probe_id, sender_bound=sender_bound,
                        converged=reason in ("precision", "min-rate", "sender-bound"), stop_reason=reason,
                        lowest_lossy_pps=lowest_lossy)
        # What limited the recorder: the loss kinds of the lossy probes at the top of the bracket.
        if not sender_bound:
            probes = [p for p in self.bench.probes if p["id"] in self.doc["probes"] and p["lossy"]]
            near = [p for p in probes if p["achieved_pps"] <= 1.5 * (lowest_lossy or 0)] or probes
            self.doc["loss_kinds_at_limit"] = sorted({c for p in near for c in (p.get("loss_classes") or ["other"])})
        log(f"  -> search {self.id} {self.tool} {self.size} B repeat {self.repeat + 1}: "
            f"{fmt_rate(result, self.size, sender_bound)} ({reason})")


# --------------------------------------------------------------------------------------------
# Disk ceiling
# --------------------------------------------------------------------------------------------


def disk_ceiling(bench, when):
    a = bench.args
    out = []
    d = os.path.join(bench.scratch, f"ceiling-{when}")
    os.makedirs(d, exist_ok=True)
    try:
        for i in range(a.dd_repeats):
            bench.check_space()
            bench.wait_quiet()
            f = os.path.join(d, "dd.bin")
            argv = ["dd", "if=/dev/zero", f"of={f}", "bs=8M", f"count={a.dd_count}", "oflag=direct"]
            r = sh(argv)
            m = re.search(r"(\d+) bytes .* copied, ([0-9.]+) s", r.stderr)
            os.remove(f)
            os.sync()
            if not m:
                raise RuntimeError(f"cannot parse dd output: {r.stderr}")
            nbytes, secs = int(m.group(1)), float(m.group(2))
            out.append({"tool": "dd", "when": when, "cmd": shlex.join(argv), "bytes": nbytes, "seconds": secs,
                        "bytes_per_s": nbytes / secs, "dd_line": r.stderr.strip().splitlines()[-1]})
            log(f"  dd oflag=direct ({when} {i + 1}): {nbytes / secs / GB:.2f} GB/s")
        bench.wait_quiet()
        argv = [bench.wirespeed, "disk-test", d, "--size", a.disk_test_size, "--json"]
        r = sh(argv)
        doc = json.loads(r.stdout)
        os.sync()
        out.append({"tool": "disk-test", "when": when, "cmd": shlex.join(argv), "bytes": doc.get("bytes"),
                    "bytes_per_s": doc.get("bytes_per_s"), "report": doc})
        log(f"  wirespeed disk-test ({when}): {doc.get('bytes_per_s', 0) / GB:.2f} GB/s")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    bench.ceilings.extend(out)


# --------------------------------------------------------------------------------------------
# Environment, setup
# --------------------------------------------------------------------------------------------


def first_line(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def environment(args, wirespeed, scratch):
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    df = sh(["df", "-T", scratch], check=False).stdout.strip().splitlines()
    return {
        "hostname": platform.node(), "kernel": platform.release(), "machine": platform.machine(),
        "nproc": os.cpu_count(), "cpu_model": cpu_model, "python": sys.version.split()[0],
        "memory_total_kib": int(open("/proc/meminfo").readline().split()[1]),
        "tcpdump": first_line(["tcpdump", "--version"]), "netsniff-ng": first_line(["netsniff-ng", "-v"]),
        "dd": first_line(["dd", "--version"]),
        "wirespeed": {"binary": wirespeed, "sha256": sha256(wirespeed), "version": first_line([wirespeed, "--version"])},
        "git": {"head": first_line(["git", "-C", REPO, "rev-parse", "HEAD"]),
                "describe": first_line(["git", "-C", REPO, "describe", "--always", "--dirty"])},
        "scratch_dir": scratch, "scratch_fs": df[-1] if df else None,
        "sysctl": {n: read_sysctl(n) for n in ("net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default",
                                                "net.core.netdev_max_backlog", "vm.dirty_ratio",
                                                "vm.dirty_background_ratio")},
        "loadavg_at_start": os.getloadavg(),
    }


def ensure_tools(tools):
    need = {"ethtool": "ethtool", "dd": "coreutils"}
    if "tcpdump" in tools:
        need["tcpdump"] = "tcpdump"
    if "netsniff-ng" in tools:
        need["netsniff-ng"] = "netsniff-ng"
    missing = [pkg for exe, pkg in need.items() if not shutil.which(exe)]
    if not missing:
        return
    envv = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log(f"installing {' '.join(missing)} with apt-get")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends"] + missing
    if subprocess.run(cmd, env=envv).returncode != 0:
        subprocess.run(["apt-get", "update"], env=envv, check=True)
        subprocess.run(cmd, env=envv, check=True)


def build(args):
    """The wirespeed binary to use: built from a clean export of HEAD (default: the work tree may
    hold someone's uncommitted edits), or from the work tree (--in-tree), or given (--wirespeed);
    then copied to --bin-copy, so that a rebuild during the run cannot change it."""
    info = {}
    if args.wirespeed:
        src = os.path.abspath(args.wirespeed)
        info["source"] = "given"
    elif args.in_tree:
        cmd = ["cargo", "build", "--release", "--quiet"]
        log(f"building wirespeed: (cd {REPO} && {shlex.join(cmd)})")
        subprocess.run(cmd, cwd=REPO, check=True)
        src = os.path.join(REPO, "target", "release", "wirespeed")
        info.update(source="work tree", cmd=f"cd {REPO} && {shlex.join(cmd)}")
    else:
        head = sh(["git", "-C", REPO, "rev-parse", "HEAD"]).stdout.strip()
        srcdir = os.path.join(args.build_dir, "src")
        tgt = os.path.join(args.build_dir, "target")
        shutil.rmtree(srcdir, ignore_errors=True)
        os.makedirs(srcdir)
        subprocess.run(f"git -C {shlex.quote(REPO)} archive {head} | tar -x -C {shlex.quote(srcdir)}",
                       shell=True, check=True)
        cmd = ["cargo", "build", "--release", "--quiet", "--offline"]
        log(f"building wirespeed {head[:7]} from a clean export: (cd {srcdir} && CARGO_TARGET_DIR={tgt} {shlex.join(cmd)})")
        r = subprocess.run(cmd, cwd=srcdir, env=dict(os.environ, CARGO_TARGET_DIR=tgt))
        if r.returncode != 0:
            cmd = cmd[:-1]
            subprocess.run(cmd, cwd=srcdir, env=dict(os.environ, CARGO_TARGET_DIR=tgt), check=True)
        src = os.path.join(tgt, "release", "wirespeed")
        info.update(source=f"clean export of {head}",
                    cmd=f"git archive {head} | tar -x -C {srcdir} && cd {srcdir} && "
                        f"CARGO_TARGET_DIR={tgt} {shlex.join(cmd)}")
    if not os.access(src, os.X_OK):
        raise SystemExit(f"no wirespeed binary at {src}")
    if os.path.abspath(src) != os.path.abspath(args.bin_copy):
        shutil.copy2(src, args.bin_copy + ".tmp")
        os.replace(args.bin_copy + ".tmp", args.bin_copy)
    info.update(built=src, copy=args.bin_copy)
    return os.path.abspath(args.bin_copy), info


def raise_rmem_max():
    cur = int(read_sysctl("net.core.rmem_max") or 0)
    if cur < RMEM_MAX:
        CLEANUP.sysctls["net.core.rmem_max"] = str(cur)
        sh(["sysctl", "-q", "-w", f"net.core.rmem_max={RMEM_MAX}"])
        log(f"raised net.core.rmem_max from {cur} to {RMEM_MAX} for this run (restored at exit)")
        return cur
    return None


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def fmt_rate(pps, size, lower_bound=False):
    if pps is None:
        return "n/a"
    s = f"{pps / 1e3:.1f} kpps, {pps * size * 8 / 1e9:.2f} Gb/s"
    return f">= {s} (sender-bound)" if lower_bound else s


def fmt_ratio(a, a_lb, b, b_lb):
    if a is None or b is None or not b:
        return "n/a"
    r = a / b
    if a_lb and b_lb:
        return f"? ({r:.2f}, both sender-bound)"
    if a_lb:
        return f">= {r:.2f}"
    if b_lb:
        return f"<= {r:.2f}"
    return f"{r:.2f}"


def ceiling_summary(ceilings):
    out = {}
    for tool in ("dd", "disk-test"):
        v = [c["bytes_per_s"] for c in ceilings if c["tool"] == tool and c.get("bytes_per_s")]
        if v:
            out[tool] = {"median_bytes_per_s": statistics.median(v), "min": min(v), "max": max(v), "n": len(v),
                         "values": v}
    return out


def write_outputs(bench, meta, final):
    doc = dict(meta)
    doc.update(status="complete" if final else "partial", finished=now_iso(), ceiling=ceiling_summary(bench.ceilings),
               ceilings=bench.ceilings, results=bench.results, cpu=bench.cpu, searches=bench.searches,
               probes=bench.probes, warmups=bench.warmups, failures=bench.failures, notes=bench.notes)
    doc["environment"]["loadavg_at_end"] = os.getloadavg()
    tmpf = os.path.join(bench.out_dir, "results.json.tmp")
    with open(tmpf, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmpf, os.path.join(bench.out_dir, "results.json"))
    with open(os.path.join(bench.out_dir, "summary.md"), "w") as f:
        f.write(summary_md(bench, doc))


def summary_md(bench, doc):
    cfg = doc["config"]
    env = doc["environment"]
    probes = {p["id"]: p for p in bench.probes}
    ceil = doc["ceiling"]
    dd = (ceil.get("dd") or {}).get("median_bytes_per_s")
    o = [f"# Highest zero-loss recording rate ({doc['status']})\n"]
    o.append(f"Run {doc['started']} .. {doc['finished']} on {env['hostname']}: kernel {env['kernel']}, "
             f"{env['nproc']} CPUs ({env['cpu_model']}), wirespeed {env['wirespeed']['version']} "
             f"({doc['build'].get('source')}), {env['tcpdump']}, {env['netsniff-ng']}. "
             f"Load average at start/end: {env['loadavg_at_start'][0]:.2f} / {env['loadavg_at_end'][0]:.2f}. "
             f"Recordings on {env['scratch_fs']}.\n")
    o.append(f"Command: `{doc['command']}`\n")
    o.append(f"Method: veth between two namespaces (MTU 9000, tx-udp-segmentation off on the sender's side, so every "
             f"datagram is its own frame); sender `wirespeed send --gso` on CPU {cfg['send_cpu']}, recorder on CPU "
             f"{cfg['recv_cpu']} (`taskset -c {cfg['recv_cpu']}`, whole process). Log-scale binary search on the "
             f"sender-achieved rate, {cfg['duration']:g} s probes, {cfg['precision'] * 100:g}% precision, at most "
             f"{cfg['max_probes']} probes after the unpaced ceiling probe; median of {doc.get('repeats_done')} "
             f"search(es); the recorders take turns probe by probe. A probe is zero-loss when the recording holds "
             f"every datagram sent (wirespeed: writer.records == sent, ledger lost 0, re-read by `wirespeed verify`; "
             f"peers: `wirespeed verify FILE --format counter,size=N` counts the datagrams in their pcap).\n")
    if dd:
        dt = (ceil.get("disk-test") or {}).get("median_bytes_per_s")
        o.append(f"Disk ceiling: `dd oflag=direct bs=8M count={cfg['dd_count']}` median {dd / GB:.2f} GB/s "
                 f"(min {ceil['dd']['min'] / GB:.2f}, max {ceil['dd']['max'] / GB:.2f}, n={ceil['dd']['n']}, before and "
                 f"after the sweep); `wirespeed disk-test --size {cfg['disk_test_size']}` median "
                 f"{(dt or 0) / GB:.2f} GB/s.\n")
    o.append("| size | recorder | zero-loss rate (median) | payload GB/s | runs (kpps) | vs tcpdump | vs netsniff-ng | "
             "vs dd ceiling | limit | CPU ns/pkt |")
    o.append("|---:|---|---|---:|---|---:|---:|---:|---|---:|")
    repro = []
    for size in cfg["sizes"]:
        by = {r["tool"]: r for r in bench.results if r["size"] == size}
        cpu_by = {c["tool"]: c for c in bench.cpu if c["size"] == size}
        for tool in cfg["tools"]:
            r = by.get(tool)
            if not r:
                continue
            def vs(peer):
                p = by.get(peer)
                if tool == peer:
                    return "-"
                return fmt_ratio(r["median_pps"], r["sender_bound"], p["median_pps"], p["sender_bound"]) if p else "n/a"
            vdd = f"{r['median_pps'] * size / dd:.2f}" if dd else "n/a"
            if r["sender_bound"] and dd:
                vdd = ">= " + vdd
            c = cpu_by.get(tool)
            cpu_s = f"{c['median_ns_per_packet']:.0f} @ {c['rate_pps'] / 1e3:g}k" if c and c.get("median_ns_per_packet") else "n/a"
            o.append(f"| {size} | {tool} | {fmt_rate(r['median_pps'], size, r['sender_bound'])} | "
                     f"{r['median_pps'] * size / GB:.3f} | {', '.join(f'{v / 1e3:.0f}' for v in r['values_pps'])} | "
                     f"{vs('tcpdump')} | {vs('netsniff-ng')} | {vdd} | {r['limit']} | {cpu_s} |")
            p = probes.get(r.get("reproduce_probe"))
            if p:
                repro.append(f"- {size} B {tool} ({p['achieved_pps'] / 1e3:.1f} kpps achieved, sent {p['sent']}, "
                             f"stored {p['stored']}, probe {p['id']}):\n  - recorder: `{p['recorder_cmd']}`\n"
                             f"  - sender: `{p['sender_cmd']}`")
    o.append("\nlimit: `sender-bound` = even the unpaced sender lost nothing; otherwise the kinds of loss seen at the "
             "lowest lossy rates (wirespeed: `ring-full` = the disk fell behind for longer than the RAM ring "
             "absorbs, `socket` = socket-buffer drops, the capture thread fell behind; peers: `tool-reported` = "
             "the tool's own ring-overflow count). CPU ns/pkt: the recorder's CPU time, all threads "
             "(/proc/PID/task/*/schedstat), from the sender's start to its end, / datagrams sent, at the fixed "
             "rate shown, median; start-up and the final drain are left out.\n")
    if bench.cpu:
        o.append("CPU per stored datagram at a fixed rate:\n")
        o.append("| size | recorder | rate | ns/pkt while sending (runs) | whole life, wait4 (runs) | "
                 "wirespeed capture thread ns/pkt | lost |")
        o.append("|---:|---|---:|---|---|---|---|")
        for c in bench.cpu:
            o.append(f"| {c['size']} | {c['tool']} | {c['rate_pps'] / 1e3:g} kpps | "
                     f"{', '.join(f'{x:.0f}' for x in c['values_ns_per_packet'] if x)} | "
                     f"{', '.join(f'{x:.0f}' for x in c['process_lifetime_ns_per_packet'] if x)} | "
                     f"{', '.join(f'{x:.0f}' for x in (c.get('capture_thread_ns_per_packet') or []) if x) or '-'} | "
                     f"{c['lost']} |")
        o.append("")
    if repro:
        o.append("The probe behind each median (start the recorder, wait until it listens, then the sender; "
                 "peers also need a socket on the port in the recorder's namespace, see README):\n")
        o.extend(repro)
    o.append("\nNamespace setup (removed at exit):\n")
    o.extend(f"    {c}" for c in doc["network"].get("setup", []))
    warn = []
    for s in bench.searches:
        if s.get("stop_reason") and not s.get("converged", True):
            warn.append(f"- search {s['id']} ({s['tool']} {s['size']} B, repeat {s['repeat'] + 1}) stopped at "
                        f"{s['stop_reason']}: limit between {s['result_pps'] / 1e3:.1f} and "
                        f"{(s.get('lowest_lossy_pps') or 0) / 1e3:.1f} kpps")
    short = [p for p in bench.probes if p.get("requested_pps") and p["achieved_pps"] < 0.95 * p["requested_pps"]]
    if short:
        warn.append(f"- {len(short)} paced probe(s) reached less than 95 % of the requested rate: the search uses "
                    f"achieved rates")
    waited = [p for p in bench.probes if p["quiet_wait_s"] > 0.5]
    if waited:
        warn.append(f"- {len(waited)} probe(s) waited for the host to become quiet (other work was running); "
                    f"longest {max(p['quiet_wait_s'] for p in waited):.0f} s")
    if bench.failures:
        warn.append(f"- {len(bench.failures)} probe(s) failed and were retried: see `failures` in results.json")
    warn.extend(f"- {n}" for n in bench.notes)
    if warn:
        o.append("\n## Warnings and notes\n")
        o.extend(warn)
    return "\n".join(o) + "\n"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_rate(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKM]?)pps\s*", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * {"": 1, "k": 1e3, "K": 1e3, "M": 1e6}[m.group(2)]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per probe")
    ap.add_argument("--repeats", type=int, default=3, help="searches per (size, recorder); the median is reported")
    ap.add_argument("--budget-min", type=float, default=38.0,
                    help="after each repeat (from the second on), stop repeating when another would end the sweep "
                         "after this many minutes (at least 2 repeats are done)")
    ap.add_argument("--precision", type=float, default=0.04, help="relative bracket width at which a search stops")
    ap.add_argument("--max-probes", type=int, default=7, help="most search probes after the ceiling probe")
    ap.add_argument("--min-rate", default="5kpps", help="rate under which a search gives up (result 0)")
    ap.add_argument("--sizes", default="1080,8800", help="UDP payload sizes (multiples of 8, <= 8900)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="recorders to measure")
    ap.add_argument("--cpu-rate", default="20kpps", help="fixed rate of the CPU runs (lowered per size below 80 "
                    "%% of the slowest recorder's median zero-loss rate)")
    ap.add_argument("--cpu-repeats", type=int, default=2, help="CPU runs per (size, recorder)")
    ap.add_argument("--recv-cpu", type=int, default=1, help="CPU of the recorders")
    ap.add_argument("--send-cpu", type=int, default=0, help="CPU of the sender")
    ap.add_argument("--ws-buffer", default="256M", help="wirespeed record --buffer")
    ap.add_argument("--tcpdump-buffer-kib", type=int, default=65536, help="tcpdump -B (KiB)")
    ap.add_argument("--netsniff-ring", default="64MiB", help="netsniff-ng -S")
    ap.add_argument("--scratch", help="directory for the recordings (default /var/tmp/wsbench-PID; emptied "
                    "after every probe, removed at exit)")
    ap.add_argument("--min-free-gb", type=float, default=25.0, help="stop if the scratch disk has less free")
    ap.add_argument("--dd-count", type=int, default=1024, help="dd count (8 MiB blocks) per ceiling run")
    ap.add_argument("--dd-repeats", type=int, default=3, help="dd runs before and after the sweep")
    ap.add_argument("--disk-test-size", default="8G", help="wirespeed disk-test --size")
    ap.add_argument("--drain-wait", type=float, default=60.0, help="most seconds a recorder may take to finish "
                    "after the sender ends")
    ap.add_argument("--settle", type=float, default=1.5, help="a peer is stopped once its file has not grown for "
                    "this many seconds")
    ap.add_argument("--quiet-threshold", type=float, default=0.25,
                    help="before each probe, wait while any CPU is busier than this (fraction)")
    ap.add_argument("--quiet-wait", type=float, default=30.0, help="longest wait for a quiet host per probe")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="do not re-read wirespeed's lossless recordings with wirespeed verify")
    ap.add_argument("--out", help="output directory (default benchmarks/results/<UTC timestamp>-record-max/)")
    ap.add_argument("--quick", action="store_true", help="smoke test: --duration 1 --repeats 1 --max-probes 2 "
                    "--dd-repeats 1 --dd-count 128 --disk-test-size 1G --cpu-repeats 1")
    ap.add_argument("--wirespeed", help="wirespeed binary to use (no build)")
    ap.add_argument("--in-tree", action="store_true", help="build the work tree instead of a clean export of HEAD")
    ap.add_argument("--build-dir", default="/tmp/wsrb-build", help="where the clean export of HEAD is built")
    ap.add_argument("--bin-copy", default="/tmp/ws-bench-bin", help="the binary is copied here and run from here")
    ap.add_argument("--no-warmup", action="store_true", help="skip the 1 s warm-up probe per recorder")
    ap.add_argument("--keep-raw", action="store_true", help="keep every tool's stdout/stderr in OUT/tmp/")
    a = ap.parse_args(argv)
    if a.quick:
        a.duration, a.repeats, a.max_probes, a.dd_repeats, a.dd_count, a.disk_test_size, a.cpu_repeats = \
            1.0, 1, 2, 1, 128, "1G", 1
    a.sizes = [int(x) for x in a.sizes.split(",") if x]
    a.tools = [x for x in a.tools.split(",") if x]
    for t in a.tools:
        if t not in TOOLS:
            ap.error(f"unknown recorder {t!r} (choose from {', '.join(TOOLS)})")
    for s in a.sizes:
        if s <= 0 or s % 8 or s > 8900:
            ap.error(f"size {s}: a multiple of 8 that fits the 9000-byte MTU")
    try:
        a.cpu_rate_pps = parse_rate(a.cpu_rate)
        a.min_rate_pps = parse_rate(a.min_rate)
    except ValueError as e:
        ap.error(f"give rates in packets per second, e.g. 20kpps: {e}")
    if a.repeats < 1 or a.duration <= 0:
        ap.error("--repeats >= 1 and --duration > 0")
    return a


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.geteuid() != 0:
        raise SystemExit("run as root (network namespaces, packet capture, sysctls)")
    if os.cpu_count() is None or max(args.recv_cpu, args.send_cpu) >= os.cpu_count():
        raise SystemExit(f"--recv-cpu/--send-cpu must be below nproc ({os.cpu_count()})")
    t_start = time.monotonic()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = os.path.abspath(args.out or os.path.join(HERE, "results", f"{stamp}-record-max"))
    os.makedirs(out_dir, exist_ok=True)
    ensure_tools(args.tools)
    wirespeed, build_info = build(args)
    scratch = os.path.abspath(args.scratch or f"/var/tmp/wsbench-{os.getpid()}")
    if os.path.exists(scratch):
        raise SystemExit(f"{scratch} exists already: choose another --scratch")
    os.makedirs(scratch)
    CLEANUP.dirs.append(scratch)
    net = Net()
    bench = Bench(args, out_dir, wirespeed, net, scratch)
    meta = {
        "schema": SCHEMA, "started": now_iso(),
        "command": shlex.join([sys.executable, os.path.relpath(os.path.abspath(__file__), os.getcwd())] + argv),
        "cwd": os.getcwd(),
        "config": {k: getattr(args, k) for k in ("duration", "repeats", "precision", "max_probes", "min_rate_pps",
                                                 "sizes", "tools", "cpu_rate_pps", "cpu_repeats", "recv_cpu",
                                                 "send_cpu", "ws_buffer", "tcpdump_buffer_kib", "netsniff_ring",
                                                 "dd_count", "dd_repeats", "disk_test_size", "settle", "drain_wait",
                                                 "quiet_threshold", "verify", "quick", "budget_min")},
        "pinning": {"sender_cpu": args.send_cpu, "recorder_cpu": args.recv_cpu,
                    "how": "the sender runs under `taskset -c SEND` with --cpu SEND; every recorder runs whole under "
                           "`taskset -c RECV` (wirespeed: capture and writer threads; --cpu RECV pins its capture "
                           "thread; netsniff-ng also gets -b RECV). On veth the kernel's receive path (the packet "
                           "taps, the UDP socket enqueue) runs in softirq on the sender's core."},
        "build": build_info,
        "network": {},
    }
    log(f"results go to {out_dir}; recordings to {scratch}")
    try:
        meta["rmem_max_original"] = read_sysctl("net.core.rmem_max")
        raise_rmem_max()
        meta["environment"] = environment(args, wirespeed, scratch)
        net.create()
        meta["network"] = net.describe()
        write_outputs(bench, meta, final=False)
        run_all(bench, meta, t_start)
        write_outputs(bench, meta, final=True)
        log(f"\nwrote {os.path.join(out_dir, 'results.json')} and summary.md "
            f"({(time.monotonic() - t_start) / 60:.1f} min)\n")
        with open(os.path.join(out_dir, "summary.md")) as f:
            sys.stdout.write(f.read())
    except BaseException:
        if "environment" in meta:
            try:
                write_outputs(bench, meta, final=False)
                log(f"partial results written to {out_dir}")
            except Exception as e:
                log(f"could not write partial results: {e}")
        raise
    finally:
        CLEANUP.run()
        left = [ns for ns in list_namespaces() if ns.endswith(f"-{os.getpid()}") and ns.startswith("wsrb-")]
        if left:
            log(f"WARNING: namespaces still present: {left}")
        if os.path.exists(scratch):
            log(f"WARNING: {scratch} still present")
        if not args.keep_raw:
            shutil.rmtree(bench.tmp, ignore_errors=True)


def run_all(bench, meta, t_start):
    args = bench.args
    log("\n== disk ceiling (before)")
    disk_ceiling(bench, "before")
    if not args.no_warmup:
        for tool in args.tools:
            try:
                bench.probe_retry(tool, args.sizes[0], args.cpu_rate_pps, 1.0, "warmup", record=False)
            except ProbeError as e:
                log(f"  warm-up failed: {e}")
    by_key = {}  # (size, tool) -> [search docs]
    repeats_done = 0
    t_sweep = time.monotonic()
    for rep in range(args.repeats):
        if rep >= 2:
            per_rep = (time.monotonic() - t_sweep) / rep
            projected = (time.monotonic() - t_start) + per_rep * (args.repeats - rep) + 180
            if projected > args.budget_min * 60:
                bench.notes.append(f"repeats reduced from {args.repeats} to {rep}: one repeat took "
                                   f"{per_rep / 60:.1f} min, and the run would have passed --budget-min "
                                   f"{args.budget_min:g}")
                log(f"  {bench.notes[-1]}")
                break
        tools = args.tools[rep % len(args.tools):] + args.tools[:rep % len(args.tools)]  # rotate who goes first
        for size in args.sizes:
            log(f"\n== repeat {rep + 1}/{args.repeats}, {size} B: {', '.join(tools)} take turns probe by probe")
            searches = [Search(bench, tool, size, rep) for tool in tools]
            while not all(s.done for s in searches):
                for s in searches:
                    if s.done:
                        continue
                    try:
                        s.step()
                    except ProbeError as e:
                        log(f"  search failed: {e}")
                        bench.failures.append({"when": now_iso(), "error": str(e), "tool": s.tool, "size": size,
                                               "repeat": rep})
                        s.done = True
                        s.doc["failed"] = str(e)
            for s in searches:
                if "result_pps" in s.doc:
                    by_key.setdefault((size, s.tool), []).append(s.doc)
            summarize(bench, by_key)
            meta["repeats_done"] = rep + 1
            write_outputs(bench, meta, final=False)
        repeats_done = rep + 1
    meta["repeats_done"] = repeats_done
    # CPU per stored datagram at one fixed rate (per size) that every recorder sustains.
    for size in args.sizes:
        meds = [r["median_pps"] for r in bench.results if r["size"] == size]
        rate = args.cpu_rate_pps
        if meds and min(meds) * 0.8 < rate:
            rate = max(1000.0, round(min(meds) * 0.5 / 1000) * 1000)
            bench.notes.append(f"CPU runs at {size} B at {rate / 1e3:g} kpps, not {args.cpu_rate_pps / 1e3:g}: "
                               f"the slowest recorder's median was {min(meds) / 1e3:.1f} kpps")
        runs = {t: [] for t in args.tools}
        log(f"\n== CPU at {rate / 1e3:g} kpps, {size} B")
        for rep in range(args.cpu_repeats):
            for tool in args.tools:
                try:
                    runs[tool].append(bench.probe_retry(tool, size, rate, args.duration, "cpu"))
                except ProbeError as e:
                    log(f"  CPU run failed: {e}")
                    bench.failures.append({"when": now_iso(), "error": str(e)})
        for tool, rr in runs.items():
            per = [r["recorder_cpu_ns_per_packet"] for r in rr if r["recorder_cpu_ns_per_packet"]]
            whole = [r["recorder_process_cpu_ns_per_packet"] for r in rr if r["recorder_process_cpu_ns_per_packet"]]
            bench.cpu.append({
                "size": size, "tool": tool, "rate_pps": rate, "probes": [r["id"] for r in rr],
                "median_ns_per_packet": statistics.median(per) if per else None, "values_ns_per_packet": per,
                "process_lifetime_ns_per_packet": whole,
                "lost": [r["lost"] for r in rr],
                "capture_thread_ns_per_packet": [r.get("capture_cpu_ns_per_packet") for r in rr]
                if tool == "wirespeed" else None,
                "achieved_pps": [r["achieved_pps"] for r in rr],
            })
        write_outputs(bench, meta, final=False)
    log("\n== disk ceiling (after)")
    disk_ceiling(bench, "after")


def summarize(bench, by_key):
    bench.results = []
    for (size, tool), docs in sorted(by_key.items(), key=lambda kv: (kv[0][0], TOOLS.index(kv[0][1]))):
        pick = sorted(docs, key=lambda s: s["result_pps"])[(len(docs) - 1) // 2]  # lower median
        kinds = sorted({k for s in docs for k in s.get("loss_kinds_at_limit", [])})
        if pick["sender_bound"]:
            limit = "sender-bound"
        else:
            limit = ", ".join(kinds) or "?"
        nsb = sum(1 for s in docs if s["sender_bound"])
        if nsb and not pick["sender_bound"]:
            limit += f" ({nsb} of {len(docs)} searches sender-bound)"
        bench.results.append({
            "size": size, "tool": tool, "median_pps": pick["result_pps"],
            "median_gbps": pick["result_pps"] * size * 8 / 1e9, "median_payload_bytes_per_s": pick["result_pps"] * size,
            "sender_bound": pick["sender_bound"], "values_pps": [s["result_pps"] for s in docs],
            "min_pps": min(s["result_pps"] for s in docs), "max_pps": max(s["result_pps"] for s in docs),
            "sender_ceilings_pps": [s.get("sender_ceiling_pps") for s in docs],
            "searches": [s["id"] for s in docs], "picked_search": pick["id"],
            "reproduce_probe": pick.get("result_probe"), "limit": limit,
        })


if __name__ == "__main__":
    main()
