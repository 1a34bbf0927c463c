#!/usr/bin/env python3
"""recv_max.py: the highest zero-loss receive rate of wirespeed recv, beside its peers.

For each path (loopback, veth between two namespaces this script creates), payload size and
receiver (wirespeed recv, the bare recvmmsg floor `bare_recv`, the iperf3 server), it binary
searches the highest sender-achieved rate at which a D-second probe loses nothing, repeats the
search R times and reports the median. It also measures the receiver's CPU time per packet at
one fixed rate every tool sustains. See benchmarks/README.md for how to read the output.

Stdlib only. Run as root (network namespaces, SO_RCVBUFFORCE, buffer caps). Traffic goes only
to 127.0.0.1, or to 198.18.0.2 inside a namespace pair made (and always deleted) here.
"""

import argparse
import atexit
import datetime
import ipaddress
import json
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

SCHEMA = "wirespeed.bench.recv_max/1"
TOOLS = ("wirespeed", "bare", "iperf3")
PATHS = ("loopback", "veth", "partition")
VETH_NET = ipaddress.ip_network("198.18.0.0/15")
VETH_SEND_ADDR = "198.18.0.1"
VETH_RECV_ADDR = "198.18.0.2"
RCVBUF = 32 << 20  # what every receiver asks for (the kernel doubles it for bookkeeping)
BUFFER_SYSCTLS = ("net.core.rmem_max", "net.core.wmem_max")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------
# Cleanup: namespaces, child processes and sysctls are undone on any exit (normal, exception,
# Ctrl-C, SIGTERM/SIGHUP), by try/finally in main() and again by atexit.
# --------------------------------------------------------------------------------------------


class Cleanup:
    def __init__(self):
        self.children = []  # Popen objects we started
        self.namespaces = []  # names we created
        self.partitions = []  # (wirespeed binary, prefix) of `wirespeed partition` sets we created
        self.sysctls = {}  # name -> original value
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
            for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
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

    def remove_partitions(self):
        for exe, prefix in list(self.partitions):
            r = subprocess.run([exe, "partition", "--prefix", prefix, "init"], capture_output=True, text=True)
            if r.returncode == 0:
                self.partitions.remove((exe, prefix))
            else:
                log(f"cleanup: `wirespeed partition init --prefix {prefix}` failed: {r.stderr.strip()}")

    def restore_sysctls(self):
        for name, value in list(self.sysctls.items()):
            r = subprocess.run(["sysctl", "-q", "-w", f"{name}={value}"], capture_output=True, text=True)
            if r.returncode == 0:
                del self.sysctls[name]
            else:
                log(f"cleanup: could not restore {name}={value}: {r.stderr.strip()}")

    def run(self):
        if self.done:
            return
        self.kill_children()
        self.remove_partitions()
        self.delete_namespaces()
        self.restore_sysctls()
        self.done = not (self.namespaces or self.sysctls or self.partitions)


CLEANUP = Cleanup()
atexit.register(CLEANUP.run)


def _raise_exit(sig, _frame):
    raise SystemExit(128 + sig)


def list_namespaces():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def sh(argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {shlex.join(argv)}\n{r.stderr.strip()}")
    return r


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


class NetPath:
    """Where the receiver and the sender run, and the address the sender targets."""

    def __init__(self, name, recv_ns, send_ns, recv_addr, setup_cmds=()):
        self.name = name
        self.recv_ns = recv_ns
        self.send_ns = send_ns
        self.recv_addr = recv_addr
        self.setup_cmds = list(setup_cmds)
        self._port = random.randint(20000, 45000)
        # Never send anywhere but loopback or our own namespaces' 198.18.0.0/15.
        addr = ipaddress.ip_address(recv_addr)
        assert addr.is_loopback or (addr in VETH_NET and recv_ns is not None), recv_addr

    def recv_prefix(self):
        return ["ip", "netns", "exec", self.recv_ns] if self.recv_ns else []

    def send_prefix(self):
        return ["ip", "netns", "exec", self.send_ns] if self.send_ns else []

    def next_port(self):
        """A fresh port for every probe; in the shared root namespace, one nothing holds."""
        for _ in range(2000):
            self._port += 1
            if self._port > 60000:
                self._port = 20000
            if self.recv_ns or port_free(self._port):
                return self._port
        raise RuntimeError("no free port found")

    def snmp_udp(self):
        """The receiving namespace's Udp counters (/proc/net/snmp)."""
        if self.recv_ns:
            text = sh(["ip", "netns", "exec", self.recv_ns, "cat", "/proc/net/snmp"]).stdout
        else:
            with open("/proc/net/snmp") as f:
                text = f.read()
        rows = [line.split() for line in text.splitlines() if line.startswith("Udp:")]
        if len(rows) < 2:
            return {}
        return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:])}

    def describe(self):
        d = {"name": self.name, "receiver_address": self.recv_addr,
             "receiver_namespace": self.recv_ns or "root", "sender_namespace": self.send_ns or "root"}
        if self.setup_cmds:
            d["setup"] = [shlex.join(c) for c in self.setup_cmds]
        return d


def port_free(port):
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def make_loopback():
    return NetPath("loopback", None, None, "127.0.0.1")


def make_veth():
    pid = os.getpid()
    ns_a, ns_b = f"wsb-{pid}-a", f"wsb-{pid}-b"
    if_a, if_b = f"wsb{pid}a", f"wsb{pid}b"  # at most 11 characters (IFNAMSIZ is 16)
    existing = list_namespaces()
    for ns in (ns_a, ns_b):
        if ns in existing:
            raise RuntimeError(f"namespace {ns} already exists (a stale run with this pid?): "
                               f"check it and `ip netns del {ns}`")
    cmds = [
        ["ip", "netns", "add", ns_a],
        ["ip", "netns", "add", ns_b],
        ["ip", "-n", ns_a, "link", "add", if_a, "type", "veth", "peer", "name", if_b, "netns", ns_b],
        ["ip", "-n", ns_a, "link", "set", if_a, "mtu", "9000"],
        ["ip", "-n", ns_b, "link", "set", if_b, "mtu", "9000"],
        ["ip", "-n", ns_a, "addr", "add", f"{VETH_SEND_ADDR}/24", "dev", if_a],
        ["ip", "-n", ns_b, "addr", "add", f"{VETH_RECV_ADDR}/24", "dev", if_b],
        ["ip", "-n", ns_a, "link", "set", "lo", "up"],
        ["ip", "-n", ns_b, "link", "set", "lo", "up"],
        ["ip", "-n", ns_a, "link", "set", if_a, "up"],
        ["ip", "-n", ns_b, "link", "set", if_b, "up"],
    ]
    for c in cmds:
        sh(c)
        if c[:3] == ["ip", "netns", "add"]:
            CLEANUP.namespaces.append(c[3])
    # The sender's namespace has no default route: only 198.18.0.0/24 is reachable from it.
    route = sh(["ip", "-n", ns_a, "route", "get", VETH_RECV_ADDR]).stdout
    if if_a not in route:
        raise RuntimeError(f"unexpected route to {VETH_RECV_ADDR} in {ns_a}: {route}")
    # Let the link come up (veth carrier is immediate, but DAD-free IPv4 still needs the link).
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        st = sh(["ip", "-n", ns_b, "-o", "link", "show", if_b]).stdout
        if "LOWER_UP" in st and ",UP" in st:
            break
        time.sleep(0.05)
    return NetPath("veth", ns_b, ns_a, VETH_RECV_ADDR, cmds)


def make_partition(wirespeed, send_cpu, recv_cpu):
    """Two partitions made by `wirespeed partition create` (namespaces, CPU sets, a direct veth
    link, MTU 9000): the sender in partition 1, the receiver in partition 2."""
    prefix = f"wsbp{os.getpid() % 1000000}x"
    cmd = [wirespeed, "partition", "--prefix", prefix, "create", "-p", "1", "-c", str(send_cpu),
           "-p", "2", "-c", str(recv_cpu), "--mtu", "9000", "--no-daemons"]
    CLEANUP.partitions.append((wirespeed, prefix))
    sh(cmd)
    addr = sh([wirespeed, "partition", "--prefix", prefix, "status", "--json"]).stdout
    recv_addr = [p for p in json.loads(addr)["partitions"] if p["id"] == 2][0]["address"]
    return NetPath("partition", f"{prefix}2", f"{prefix}1", recv_addr, [cmd])


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


def stop_and_reap(proc, sig, grace):
    """Ask proc to stop with sig, then kill it; returns its rusage (or None)."""
    for s, t in ((sig, grace), (signal.SIGKILL, 5.0)):
        try:
            os.kill(proc.pid, s)
        except ProcessLookupError:
            pass
        ru = wait4_timeout(proc, t)
        if ru is not None:
            return ru
    return None


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


def listening(pid, port, proto):
    """True once process pid holds a socket bound to port (TCP: in LISTEN state)."""
    mine = socket_inodes(pid)
    if not mine:
        return False
    for table in (proto, proto + "6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) < 10:
                        continue
                    if int(cols[1].rsplit(":", 1)[1], 16) != port or cols[9] not in mine:
                        continue
                    if proto == "tcp" and cols[3] != "0A":
                        continue
                    return True
        except OSError:
            continue
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


class ProbeError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------
# Tools: how to start each receiver and sender, and how to read what they report
# --------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, out_dir, wirespeed, bare):
        self.args = args
        self.out_dir = out_dir
        self.tmp = os.path.join(out_dir, "tmp")
        os.makedirs(self.tmp, exist_ok=True)
        self.wirespeed = wirespeed
        self.bare = bare
        self.sender_extra = sender_extra(args, wirespeed)
        self.probes = []
        self.warmups = []
        self.searches = []
        self.results = []
        self.cpu = []
        self.failures = []

    # -- command lines ------------------------------------------------------------------------

    def recv_cmd(self, path, tool, size, port):
        a = self.args
        pin = ["taskset", "-c", str(a.recv_cpu)]
        if tool == "wirespeed":
            # --duration is only a safety stop: --once ends it at the sender's end messages.
            safety = a.duration + 30
            cmd = [self.wirespeed, "recv", f"{path.recv_addr}:{port}", "--once", "--json", "--size", str(size),
                   "--rcvbuf", "32M", "--cpu", str(a.recv_cpu), "--duration", f"{safety:g}"]
        elif tool == "bare":
            cmd = [self.bare, "--port", str(port), "--size", str(size), "--bind", path.recv_addr,
                   "--cpu", str(a.recv_cpu), "--idle-ms", str(a.bare_idle_ms)]
        else:
            cmd = ["iperf3", "-s", "-1", "-p", str(port), "-B", path.recv_addr, "-J"]
        return path.recv_prefix() + pin + cmd

    def send_cmd(self, path, tool, size, port, rate_pps, duration):
        """rate_pps None: the sender's own ceiling."""
        a = self.args
        pin = ["taskset", "-c", str(a.send_cpu)]
        if tool in ("wirespeed", "bare"):
            rate = a.ceiling_rate if rate_pps is None else f"{rate_pps:.1f}pps"
            cmd = [self.wirespeed, "send", f"{path.recv_addr}:{port}", "--size", str(size), "--rate", rate,
                   "--duration", f"{duration:g}", "--gso", "--cpu", str(a.send_cpu), "--json"] + self.sender_extra
        else:
            bits = "0" if rate_pps is None else str(int(round(rate_pps * size * 8)))
            secs = max(1, int(round(duration)))
            cmd = ["iperf3", "-c", path.recv_addr, "-u", "-b", bits, "-l", str(size), "-t", str(secs),
                   "-p", str(port), "-J", "--get-server-output"]
            if self.args.iperf3_window:
                cmd += ["-w", self.args.iperf3_window]
        return path.send_prefix() + pin + cmd

    # -- one probe ----------------------------------------------------------------------------

    def probe(self, path, tool, size, rate_pps, duration, kind, search_id=None, record=True):
        port = path.next_port()
        recv_argv = self.recv_cmd(path, tool, size, port)
        send_argv = self.send_cmd(path, tool, size, port, rate_pps, duration)
        for argv in (recv_argv, send_argv):
            for word in argv:  # belt and braces: the only destinations are ours
                if ":" in word and word.split(":")[0].count(".") == 3:
                    assert word.split(":")[0] in ("127.0.0.1", VETH_RECV_ADDR, path.recv_addr), word
        pid_tag = f"{len(self.probes) + len(self.warmups)}-{tool}-{port}"
        files = {k: os.path.join(self.tmp, f"{pid_tag}.{k}") for k in ("rout", "rerr", "sout", "serr")}
        snmp0 = path.snmp_udp()
        load0 = os.getloadavg()[0]
        started = now_iso()
        t0 = time.monotonic()
        with open(files["rout"], "wb") as ro, open(files["rerr"], "wb") as re_:
            rproc = CLEANUP.track(subprocess.Popen(recv_argv, stdout=ro, stderr=re_, stdin=subprocess.DEVNULL,
                                                   start_new_session=True))
        proto = "tcp" if tool == "iperf3" else "udp"
        deadline = time.monotonic() + 15
        while not listening(rproc.pid, port, proto):
            if rproc.poll() is not None or time.monotonic() > deadline:
                stop_and_reap(rproc, signal.SIGTERM, 2)
                raise ProbeError(f"{tool} receiver did not start listening on port {port}: "
                                 f"{shlex.join(recv_argv)}\n{tail(files['rerr'])}")
            time.sleep(0.01)
        with open(files["sout"], "wb") as so, open(files["serr"], "wb") as se:
            sproc = CLEANUP.track(subprocess.Popen(send_argv, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                                   start_new_session=True))
        sru = wait4_timeout(sproc, duration + 30)
        if sru is None:
            sru = stop_and_reap(sproc, signal.SIGTERM, 3)
        # The receiver ends by itself: wirespeed at the end messages, bare after its idle time,
        # iperf3 when the client closes the test. Past the grace, it is stopped (which it reports).
        grace = {"wirespeed": 3.0, "bare": self.args.bare_idle_ms / 1000 + 3.0, "iperf3": 5.0}[tool]
        rru = wait4_timeout(rproc, grace)
        receiver_stopped = False
        if rru is None:
            receiver_stopped = True
            rru = stop_and_reap(rproc, signal.SIGTERM, 5)
        wall = time.monotonic() - t0
        snmp1 = path.snmp_udp()

        rec = {
            "id": len(self.probes) if record else None, "kind": kind, "search": search_id,
            "path": path.name, "tool": tool, "size": size, "port": port, "started": started,
            "duration_s": duration, "wall_s": round(wall, 3), "loadavg_1m_before": load0,
            "requested_pps": rate_pps, "requested": "sender ceiling" if rate_pps is None else f"{rate_pps:.1f} pps",
            "receiver_cmd": shlex.join(recv_argv), "sender_cmd": shlex.join(send_argv),
            "receiver_exit": rproc.returncode, "sender_exit": sproc.returncode,
            "receiver_stopped_by_harness": receiver_stopped,
            "receiver_rusage": ru_dict(rru), "sender_rusage": ru_dict(sru),
            "udp_rcvbuf_errors_delta": (snmp1.get("RcvbufErrors", 0) - snmp0.get("RcvbufErrors", 0)
                                        if snmp0 and snmp1 else None),
            "note": "loopback: the root namespace's counter is shared with anything else on the host"
            if path.recv_ns is None else None,
        }
        try:
            self._parse(tool, size, files, rec, private_counters=path.recv_ns is not None)
        except ProbeError as e:
            raise ProbeError(f"{e}\nreceiver: {rec['receiver_cmd']}\n{tail(files['rerr'])}\n"
                             f"sender: {rec['sender_cmd']}\n{tail(files['serr'])}") from None
        finally:
            if not self.args.keep_raw:
                for f in files.values():
                    try:
                        os.remove(f)
                    except OSError:
                        pass
        rec["achieved_gbps"] = rec["achieved_pps"] * size * 8 / 1e9
        rec["lossy"] = rec["lost"] > 0 or bool(rec.get("incomplete"))
        if rec["received"] and rec["receiver_rusage"]:
            rec["receiver_cpu_ns_per_packet"] = rec["receiver_rusage"]["cpu_s"] * 1e9 / rec["received"]
        else:
            rec["receiver_cpu_ns_per_packet"] = None
        if record:
            self.probes.append(rec)
        else:
            self.warmups.append(rec)
        req = "ceiling" if rate_pps is None else f"{rate_pps / 1e3:9.1f}k"
        log(f"  {kind:8s} {path.name:8s} {size:5d} B {tool:9s} req {req:>10s} pps  achieved "
            f"{rec['achieved_pps'] / 1e3:8.1f} kpps {rec['achieved_gbps']:6.2f} Gbps  lost {rec['lost']:>8d}"
            f"{'  LOSSY' if rec['lossy'] else ''}{'  (incomplete: ' + rec['incomplete'] + ')' if rec.get('incomplete') else ''}")
        return rec

    def _load(self, path, what):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise ProbeError(f"cannot read the {what} JSON: {e}") from None

    def _parse(self, tool, size, files, rec, private_counters):
        if tool in ("wirespeed", "bare"):
            s = self._load(files["sout"], "wirespeed send")
            rec["sender"] = {k: s.get(k) for k in ("sent", "achieved_pps", "achieved_bps", "rate_ratio", "slips",
                                                    "gso_used", "gso_segments", "burst", "elapsed_s", "refused",
                                                    "cpu_ns_per_packet", "requested")}
            sent = int(s["sent"])
            rec["sent"] = sent
            rec["achieved_pps"] = float(s["achieved_pps"])
        if tool == "wirespeed":
            r = self._load(files["rout"], "wirespeed recv")
            total = r.get("total", {})
            kern = r.get("kernel", {})
            received = int(total.get("received", 0))
            ledger_lost = int(total.get("lost", 0))
            rec["receiver"] = {
                "total": total, "streams_without_end": r.get("streams_without_end"),
                "datagrams": r.get("datagrams"), "pps": r.get("pps"), "bps": r.get("bps"),
                "socket_drops_proc": kern.get("socket_drops_proc"),
                "rcvbuf_errors": (kern.get("namespace_delta") or {}).get("rcvbuf_errors"),
                "rcvbuf_granted": kern.get("rcvbuf_granted"), "capture_cpu_ns": r.get("capture_cpu_ns"),
                "cpu_ns_per_packet": r.get("cpu_ns_per_packet"), "stopped_by": r.get("stopped_by"),
                "backend": r.get("backend"),
            }
            rec["received"] = received
            # Zero loss = the ledger says 0 lost, every stream's end message arrived, and the
            # receiver holds as many datagrams as the sender says it sent.
            rec["lost"] = max(ledger_lost, rec["sent"] - received, 0)
            if r.get("streams_without_end"):
                rec["incomplete"] = f"{r['streams_without_end']} stream(s) without end message"
            if ledger_lost != rec["sent"] - received:
                rec["ledger_mismatch"] = {"ledger_lost": ledger_lost, "sent_minus_received": rec["sent"] - received}
        elif tool == "bare":
            r = self._load(files["rout"], "bare_recv")
            rec["receiver"] = r
            rec["received"] = int(r["received"])
            rec["lost"] = max(rec["sent"] - rec["received"], 0)
            if rec["received"] > rec["sent"]:
                rec["incomplete"] = f"received {rec['received']} > sent {rec['sent']}"
        elif tool == "iperf3":
            c = self._load(files["sout"], "iperf3 client")
            if c.get("error"):
                raise ProbeError(f"iperf3 client error: {c['error']}")
            srv = c.get("server_output_json")
            if not srv:
                srv = self._load(files["rout"], "iperf3 server")
            if srv.get("error"):
                raise ProbeError(f"iperf3 server error: {srv['error']}")
            ss = c["end"]["sum_sent"]
            rs = srv["end"]["sum"]  # the server's (receiver's) own view
            ustream = (srv["end"].get("streams") or [{}])[0].get("udp", {})
            sent = int(ss["packets"])
            seen = int(rs["packets"])  # highest sequence number the server saw
            lost = int(rs["lost_packets"])  # gaps below it
            rec["sent"] = sent
            rec["achieved_pps"] = sent / float(ss["seconds"]) if ss.get("seconds") else 0.0
            rec["received"] = seen - lost
            rec["lost"] = max(lost, 0)
            # iperf3 cannot see drops after the last datagram it counted; in a namespace of our
            # own the kernel's UDP RcvbufErrors counter can, so it counts too (loopback shares
            # the root namespace's counter with the rest of the host: shown, not counted).
            kdrops = rec.get("udp_rcvbuf_errors_delta")
            if private_counters and kdrops and kdrops > rec["lost"]:
                rec["lost"] = kdrops
                rec["lost_from_kernel_counter"] = True
            rec["receiver"] = {
                "server_packets": seen, "server_lost_packets": lost, "out_of_order": ustream.get("out_of_order"),
                "jitter_ms": rs.get("jitter_ms"), "rcvbuf_actual": srv.get("start", {}).get("rcvbuf_actual"),
                "client_sum_received": c["end"].get("sum_received"),
                # Datagrams sent after the last one the server counted: iperf3 stops reading at the
                # end of the test (control message), so these are not counted as loss, only shown.
                "tail_unseen": sent - seen,
            }
            rec["sender"] = {"sent": sent, "seconds": ss.get("seconds"), "bits_per_second": ss.get("bits_per_second"),
                             "target_bitrate": c.get("start", {}).get("target_bitrate"),
                             "sndbuf_actual": c.get("start", {}).get("sndbuf_actual")}
        if not rec.get("sent"):
            raise ProbeError(f"the {tool} sender sent nothing")

    def probe_retry(self, *a, **kw):
        try:
            return self.probe(*a, **kw)
        except ProbeError as e:
            log(f"  probe failed, retrying once: {str(e).splitlines()[0]}")
            self.failures.append({"when": now_iso(), "error": str(e)})
            return self.probe(*a, **kw)

    # -- search ---------------------------------------------------------------------------------

    def search(self, path, tool, size, repeat):
        a = self.args
        sid = len(self.searches)
        s = {"id": sid, "path": path.name, "tool": tool, "size": size, "repeat": repeat, "probes": []}
        self.searches.append(s)
        ceiling = self.probe_retry(path, tool, size, None, a.duration, "ceiling", sid)
        s["probes"].append(ceiling["id"])
        s["sender_ceiling_pps"] = ceiling["achieved_pps"]
        if not ceiling["lossy"]:
            s.update(result_pps=ceiling["achieved_pps"], result_probe=ceiling["id"], sender_bound=True,
                     converged=True, stop_reason="sender-bound")
            return s
        lossless, lossy = [], [ceiling["achieved_pps"]]
        best = {}  # achieved pps -> probe id, for lossless probes
        n = stalled = 0
        prev = None
        while True:
            hi = min(lossy)
            below = [x for x in lossless if x < hi]
            lo = max(below) if below else 0.0
            stalled = stalled + 1 if (lo, hi) == prev else 0
            prev = (lo, hi)
            if lo > 0 and hi - lo <= a.precision * hi:
                reason = "precision"
                break
            if hi < a.min_rate:
                reason = "min-rate"  # lossy even at the lowest rate worth probing
                break
            if stalled >= 2:
                # Twice in a row the bracket did not move: the paced sender cannot offer the
                # rates inside it (it falls short of the request, below lo), so asking again is futile.
                reason = "sender-cannot-pace"
                break
            if n >= a.max_probes:
                reason = "max-probes"
                break
            target = (lo + hi) / 2
            p = self.probe_retry(path, tool, size, target, a.duration, "search", sid)
            s["probes"].append(p["id"])
            n += 1
            if p["lossy"]:
                lossy.append(p["achieved_pps"])
            else:
                lossless.append(p["achieved_pps"])
                best[p["achieved_pps"]] = p["id"]
        # The result: the highest achieved rate that lost nothing, below the lowest lossy one.
        s.update(result_pps=lo, result_probe=best.get(lo), sender_bound=False,
                 converged=reason in ("precision", "min-rate"), stop_reason=reason, lowest_lossy_pps=hi)
        return s

    def cpu_run(self, path, tool, size, repeat):
        a = self.args
        p = self.probe_retry(path, tool, size, a.cpu_rate_pps, a.cpu_duration, "cpu")
        p["cpu_repeat"] = repeat
        return p


# --------------------------------------------------------------------------------------------
# Environment, setup
# --------------------------------------------------------------------------------------------


def read_sysctl(name):
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            return f.read().strip()
    except OSError:
        return None


def first_line(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def environment(args, wirespeed):
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    git = {}
    for key, argv in (("commit", ["git", "-C", REPO, "rev-parse", "HEAD"]),
                      ("describe", ["git", "-C", REPO, "describe", "--always", "--dirty"])):
        git[key] = first_line(argv)
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "crates", "Cargo.toml", "Cargo.lock"],
                           capture_output=True, text=True).stdout.strip()
    git["crates_dirty"] = bool(dirty)
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "machine": platform.machine(),
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "python": sys.version.split()[0],
        "gcc": first_line(["gcc", "--version"]),
        "iperf3": first_line(["iperf3", "--version"]),
        "wirespeed": wirespeed,
        "wirespeed_git": git,
        "sysctl": {n: read_sysctl(n) for n in BUFFER_SYSCTLS + ("net.core.rmem_default", "net.core.netdev_max_backlog",
                                                               "net.ipv4.udp_mem")},
        "loadavg_at_start": os.getloadavg(),
        "euid": os.geteuid(),
    }


def ensure_iperf3():
    if shutil.which("iperf3"):
        return
    if os.geteuid() != 0:
        raise SystemExit("iperf3 is missing and this is not root: install it (apt-get install iperf3) "
                         "or leave it out with --tools wirespeed,bare")
    envv = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log("installing iperf3 with apt-get")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "iperf3"]
    if subprocess.run(cmd, env=envv).returncode != 0:
        subprocess.run(["apt-get", "update"], env=envv, check=True)
        subprocess.run(cmd, env=envv, check=True)


def build(args, out_dir):
    cmds = {}
    if args.wirespeed:
        wirespeed = os.path.abspath(args.wirespeed)
    else:
        wirespeed = os.path.join(REPO, "target", "release", "wirespeed")
        if not args.no_build:
            cmd = ["cargo", "build", "--release", "--quiet"]
            log(f"building wirespeed: (cd {REPO} && {shlex.join(cmd)})")
            subprocess.run(cmd, cwd=REPO, check=True)
            cmds["wirespeed"] = f"cd {REPO} && {shlex.join(cmd)}"
    if not os.access(wirespeed, os.X_OK):
        raise SystemExit(f"no wirespeed binary at {wirespeed}: build it (cargo build --release) or pass --wirespeed")
    bare = os.path.join(out_dir, "bare_recv")
    cmd = ["gcc", "-O2", "-Wall", "-o", bare, os.path.join(HERE, "bare_recv.c")]
    subprocess.run(cmd, check=True)
    cmds["bare_recv"] = shlex.join(cmd)
    return wirespeed, bare, cmds


def sender_extra(args, wirespeed):
    """Extra `wirespeed send` flags: --catch-up-factor when asked for and this build has it. (At
    b03d6ae the paced sender reached only 60-90 % of the requested rate and `inf` restored exact
    pacing; 024e894 fixed the pacer.)"""
    if not args.catch_up_factor:
        return []
    r = subprocess.run([wirespeed, "send", "--help"], capture_output=True, text=True)
    if "--catch-up-factor" not in r.stdout:
        return []
    return ["--catch-up-factor", args.catch_up_factor]


def raise_buffer_caps(args):
    """iperf3 sets its buffers with plain SO_RCVBUF/SO_SNDBUF (capped by the sysctls) and fails if
    it does not get them; to give all three receivers the same 32 MiB buffer, the caps are raised
    for the run and restored afterwards."""
    if args.keep_buffer_caps or os.geteuid() != 0:
        return False
    changed = False
    for name in BUFFER_SYSCTLS:
        cur = int(read_sysctl(name) or 0)
        if cur < RCVBUF:
            CLEANUP.sysctls[name] = str(cur)
            sh(["sysctl", "-q", "-w", f"{name}={RCVBUF}"])
            log(f"raised {name} from {cur} to {RCVBUF} for this run (restored at exit)")
            changed = True
    return changed


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def fmt_rate(pps, size, lower_bound):
    if pps is None:
        return "n/a"
    gbps = pps * size * 8 / 1e9
    s = f"{gbps:.2f} Gbps / {pps / 1e3:.1f} kpps"
    return f">= {s} (sender-bound)" if lower_bound else s


def fmt_ratio(a, a_lb, b, b_lb):
    """a/b where either may be a lower bound (sender-bound)."""
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


def write_outputs(bench, meta, out_dir, final):
    doc = dict(meta)
    doc.update(status="complete" if final else "partial", finished=now_iso(),
               results=bench.results, cpu=bench.cpu, searches=bench.searches, probes=bench.probes,
               warmups=bench.warmups, failures=bench.failures)
    doc["environment"]["loadavg_at_end"] = os.getloadavg()
    tmpf = os.path.join(out_dir, "results.json.tmp")
    with open(tmpf, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmpf, os.path.join(out_dir, "results.json"))
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary_md(bench, doc))


def summary_md(bench, doc):
    cfg = doc["config"]
    env = doc["environment"]
    probes = {p["id"]: p for p in bench.probes}
    out = []
    out.append(f"# Highest zero-loss receive rate ({doc['status']})\n")
    out.append(f"Run {doc['started']} .. {doc['finished']} on {env['hostname']}: kernel {env['kernel']}, "
               f"{env['nproc']} CPUs ({env['cpu_model']}), wirespeed {env['wirespeed_git'].get('describe')}"
               f"{' (crates/ modified)' if env['wirespeed_git'].get('crates_dirty') else ''}, "
               f"{env['iperf3']}. Load average at start/end: "
               f"{env['loadavg_at_start'][0]:.2f} / {env['loadavg_at_end'][0]:.2f}.\n")
    out.append(f"Command: `{doc['command']}`\n")
    out.append(f"Method: binary search on the sender-achieved rate, {cfg['duration']} s probes, "
               f"{cfg['precision'] * 100:g}% precision, median of {cfg['repeats']} search(es); a probe is lossy if "
               f"one datagram is lost. Receiver pinned to CPU {cfg['recv_cpu']}, sender to CPU {cfg['send_cpu']} "
               f"(taskset, plus the tools' --cpu). Every receiver asks for a 32 MiB buffer "
               f"(granted 64 MiB; {doc['buffer_caps']}). CPU ns/packet: receiver process user+sys "
               f"(wait4 rusage) / packets received, at {cfg['cpu_rate_pps'] / 1e3:g} kpps for "
               f"{cfg['cpu_duration']} s, median of {cfg['repeats']}.\n")
    out.append("Senders: wirespeed and bare are fed by `wirespeed send --gso`; iperf3 by its own client. "
               "\"sender-bound\": even the sender's ceiling lost nothing, so the receiver's limit is higher.\n")
    for path in cfg["paths"]:
        rows = [r for r in bench.results if r["path"] == path]
        if not rows:
            continue
        out.append(f"\n## {path}\n")
        out.append("| size | tool | zero-loss rate (payload) | vs iperf3 | vs bare | CPU ns/packet | CPU vs iperf3 |")
        out.append("|---:|---|---|---|---|---:|---|")
        repro = []
        for size in cfg["sizes"]:
            by_tool = {r["tool"]: r for r in rows if r["size"] == size}
            cpu_by_tool = {c["tool"]: c for c in bench.cpu if c["path"] == path and c["size"] == size}
            ip = by_tool.get("iperf3")
            ba = by_tool.get("bare")
            ipc = cpu_by_tool.get("iperf3", {}).get("median_ns_per_packet")
            for tool in cfg["tools"]:
                r = by_tool.get(tool)
                if not r:
                    continue
                cpu = cpu_by_tool.get(tool, {}).get("median_ns_per_packet")
                spread = ""
                picked = bench.searches[r["picked_search"]] if r.get("picked_search") is not None else {}
                if not picked.get("converged", True):
                    spread += (f" [open bracket: lossy at {picked['lowest_lossy_pps'] / 1e3:.1f} kpps, "
                               f"{picked['stop_reason']}]")
                if len(r["values_pps"]) > 1:
                    spread = f" (runs {min(r['values_pps']) / 1e3:.0f}-{max(r['values_pps']) / 1e3:.0f} kpps)"
                vs_ip = "-" if tool == "iperf3" else (fmt_ratio(r["median_pps"], r["sender_bound"], ip["median_pps"],
                                                                ip["sender_bound"]) if ip else "n/a")
                vs_ba = "-" if tool == "bare" else (fmt_ratio(r["median_pps"], r["sender_bound"], ba["median_pps"],
                                                              ba["sender_bound"]) if ba else "n/a")
                cpu_s = f"{cpu:.0f}" if cpu is not None else "n/a"
                cpu_vs = "-" if tool == "iperf3" else (f"{cpu / ipc:.2f}" if cpu is not None and ipc else "n/a")
                out.append(f"| {size} | {tool} | {fmt_rate(r['median_pps'], size, r['sender_bound'])}{spread} | "
                           f"{vs_ip} | {vs_ba} | {cpu_s} | {cpu_vs} |")
                p = probes.get(r.get("reproduce_probe"))
                if p:
                    repro.append(f"- {size} B {tool} ({p['achieved_pps'] / 1e3:.1f} kpps, lost {p['lost']}, "
                                 f"probe {p['id']}):\n  - receiver: `{p['receiver_cmd']}`\n  - sender: `{p['sender_cmd']}`")
        if repro:
            out.append("\nThe probe behind each median (start the receiver, then the sender):\n")
            out.extend(repro)
        if path in ("veth", "partition"):
            out.append(f"\n{path} setup (removed at exit):\n")
            out.extend(f"    {c}" for c in doc["paths"].get(path, {}).get("setup", []))
        out.append("")
    warn = []
    for r in bench.results:
        open_ = [bench.searches[i] for i in r["searches"] if not bench.searches[i].get("converged", True)]
        if open_:
            reasons = ", ".join(sorted({x["stop_reason"] for x in open_}))
            warn.append(f"- {r['path']} {r['size']} B {r['tool']}: {len(open_)} search(es) stopped before "
                        f"reaching the precision ({reasons}); sender-cannot-pace: the paced sender fell short "
                        f"of the rates inside the bracket (the unpaced ceiling probe went higher)")
    for c in bench.cpu:
        if any(l for l in c["lost"]):
            warn.append(f"- {c['path']} {c['size']} B {c['tool']}: loss during the CPU run at "
                        f"{c['rate_pps'] / 1e3:g} kpps ({c['lost']}): its CPU figure is at a rate it could not hold")
    short = [p for p in bench.probes if p.get("requested_pps") and p["achieved_pps"] < 0.95 * p["requested_pps"]]
    if short:
        worst = min(short, key=lambda p: p["achieved_pps"] / p["requested_pps"])
        warn.append(f"- {len(short)} paced probe(s) reached less than 95 % of the requested rate (worst: probe "
                    f"{worst['id']}, {worst['tool']} {worst['path']} {worst['size']} B, "
                    f"{worst['achieved_pps'] / worst['requested_pps'] * 100:.0f} %): the search uses achieved rates, "
                    f"but the sender could not pace there")
    busy = max(env["loadavg_at_start"][0], env["loadavg_at_end"][0])
    if busy > 0.5:
        warn.append(f"- the host was busy (1-min load average up to {busy:.2f} on {env['nproc']} CPUs): other work "
                    f"competed with the pinned sender/receiver; rerun on a quiet host before comparing figures")
    if env["wirespeed_git"].get("crates_dirty"):
        warn.append("- wirespeed was built from a work tree with uncommitted changes under crates/")
    if bench.failures:
        warn.append(f"- {len(bench.failures)} probe(s) failed and were retried: see `failures` in results.json")
    if warn:
        out.append("## Warnings\n")
        out.extend(warn)
        out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per probe")
    ap.add_argument("--repeats", type=int, default=3, help="searches per (path, size, tool); the median is reported")
    ap.add_argument("--precision", type=float, default=0.02, help="relative width at which a search stops")
    ap.add_argument("--sizes", default="1080,8800", help="UDP payload sizes (multiples of 8)")
    ap.add_argument("--paths", default="loopback,veth", help="any of loopback, veth, partition (two `wirespeed partition` hosts)")
    ap.add_argument("--tools", default="wirespeed,bare,iperf3", help="receivers to measure")
    ap.add_argument("--out", help="output directory (default benchmarks/results/<UTC timestamp>/)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: --duration 1 --repeats 1 --precision 0.10 --max-probes 6")
    ap.add_argument("--cpu-rate", default="50kpps", help="fixed rate of the CPU-per-packet runs (pps, e.g. 50kpps)")
    ap.add_argument("--cpu-duration", type=float, help="seconds per CPU run (default: --duration)")
    ap.add_argument("--recv-cpu", type=int, default=1, help="CPU the receivers are pinned to")
    ap.add_argument("--send-cpu", type=int, default=0, help="CPU the senders are pinned to")
    ap.add_argument("--ceiling-rate", default="max",
                    help="wirespeed send --rate of the ceiling probe (max = unpaced; use 100G with builds before "
                         "b03d6ae, whose --rate max aborts)")
    ap.add_argument("--catch-up-factor", default="",
                    help="pass wirespeed send --catch-up-factor F, if the build has the flag (default: don't; "
                         "'inf' restored exact pacing at b03d6ae, see README)")
    ap.add_argument("--max-probes", type=int, default=12, help="most search probes after the ceiling probe")
    ap.add_argument("--min-rate", type=float, default=1000.0, help="pps under which a search gives up (result 0)")
    ap.add_argument("--bare-idle-ms", type=int, default=1000, help="bare_recv --idle-ms")
    ap.add_argument("--iperf3-window", default="32M", help="iperf3 -w (empty: none)")
    ap.add_argument("--keep-buffer-caps", action="store_true",
                    help="do not raise net.core.rmem_max/wmem_max to 32 MiB for the run (then iperf3 -w is dropped)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the 1 s warm-up run per (path, tool)")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build --release first")
    ap.add_argument("--wirespeed", help="wirespeed binary to use (implies --no-build)")
    ap.add_argument("--keep-raw", action="store_true", help="keep every tool's raw stdout/stderr in OUT/tmp/")
    a = ap.parse_args(argv)
    if a.quick:
        a.duration, a.repeats, a.precision, a.max_probes = 1.0, 1, 0.10, 6
    a.sizes = [int(x) for x in a.sizes.split(",") if x]
    a.paths = [x for x in a.paths.split(",") if x]
    a.tools = [x for x in a.tools.split(",") if x]
    for p in a.paths:
        if p not in PATHS:
            ap.error(f"unknown path {p!r} (choose from {', '.join(PATHS)})")
    for t in a.tools:
        if t not in TOOLS:
            ap.error(f"unknown tool {t!r} (choose from {', '.join(TOOLS)})")
    for s in a.sizes:
        if s <= 0 or s % 8 or s > 8900:
            ap.error(f"size {s}: wirespeed needs a multiple of 8, and it must fit the 9000-byte MTU")
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKM]?)pps\s*", a.cpu_rate)
    if not m:
        ap.error("--cpu-rate: give packets per second, e.g. 50kpps")
    a.cpu_rate_pps = float(m.group(1)) * {"": 1, "k": 1e3, "K": 1e3, "M": 1e6}[m.group(2)]
    if a.cpu_duration is None:
        a.cpu_duration = a.duration
    if a.wirespeed:
        a.no_build = True
    if a.repeats < 1 or a.duration <= 0:
        ap.error("--repeats >= 1 and --duration > 0")
    return a


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    # Even when started with SIGINT ignored (a background job), Ctrl-C/SIGINT cleans up and stops.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.geteuid() != 0 and ("veth" in args.paths or "partition" in args.paths):
        raise SystemExit("the veth and partition paths need root (network namespaces): run as root or use --paths loopback")
    if os.cpu_count() is None or max(args.recv_cpu, args.send_cpu) >= os.cpu_count():
        raise SystemExit(f"--recv-cpu/--send-cpu must be below nproc ({os.cpu_count()})")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = os.path.abspath(args.out or os.path.join(HERE, "results", stamp))
    os.makedirs(out_dir, exist_ok=True)
    if "iperf3" in args.tools:
        ensure_iperf3()
    wirespeed, bare, build_cmds = build(args, out_dir)

    bench = Bench(args, out_dir, wirespeed, bare)
    meta = {
        "schema": SCHEMA, "started": now_iso(),
        "command": shlex.join([sys.executable, os.path.relpath(os.path.abspath(__file__), os.getcwd())] + argv),
        "cwd": os.getcwd(),
        "config": {k: getattr(args, k) for k in ("duration", "repeats", "precision", "sizes", "paths", "tools",
                                                 "quick", "cpu_rate_pps", "cpu_duration", "recv_cpu", "send_cpu",
                                                 "ceiling_rate", "max_probes", "min_rate", "bare_idle_ms",
                                                 "iperf3_window", "catch_up_factor")},
        "pinning": {"receiver_cpu": args.recv_cpu, "sender_cpu": args.send_cpu,
                    "how": "every receiver and sender runs under `taskset -c CPU`; wirespeed recv/send also get "
                           "--cpu and bare_recv --cpu"},
        "build": build_cmds,
        "wirespeed_send_extra_args": bench.sender_extra,
        "paths": {},
    }
    log(f"results go to {out_dir}")
    try:
        meta["buffer_caps_original"] = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}
        caps = raise_buffer_caps(args)
        if not caps and "iperf3" in args.tools and args.iperf3_window:
            cap = min(int(read_sysctl(n) or 0) for n in BUFFER_SYSCTLS)
            if cap < RCVBUF:
                log(f"buffer caps kept at {cap}: iperf3 runs without -w (its buffer is the default)")
                args.iperf3_window = ""
                meta["config"]["iperf3_window"] = ""
        meta["buffer_caps"] = ("net.core.rmem_max/wmem_max raised to 32 MiB for the run and restored"
                               if caps else "net.core.rmem_max/wmem_max left as they were: "
                               + ", ".join(f"{n}={read_sysctl(n)}" for n in BUFFER_SYSCTLS))
        meta["environment"] = environment(args, wirespeed)
        meta["environment"]["sysctl_during_run"] = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}
        write_outputs(bench, meta, out_dir, final=False)  # so that even a SIGKILLed run leaves its setup
        run_all(bench, meta, out_dir)
        write_outputs(bench, meta, out_dir, final=True)
        log(f"\nwrote {os.path.join(out_dir, 'results.json')} and summary.md\n")
        with open(os.path.join(out_dir, "summary.md")) as f:
            sys.stdout.write(f.read())
    except BaseException:
        if "environment" in meta:
            try:
                write_outputs(bench, meta, out_dir, final=False)
                log(f"partial results written to {out_dir}")
            except Exception as e:  # never mask the original error
                log(f"could not write partial results: {e}")
        raise
    finally:
        CLEANUP.run()
        left = [ns for ns in list_namespaces() if ns.startswith(f"wsb-{os.getpid()}-")]
        if left:
            log(f"WARNING: namespaces still present: {left}")
        if not args.keep_raw:
            shutil.rmtree(bench.tmp, ignore_errors=True)


def run_all(bench, meta, out_dir):
    args = bench.args
    for pname in args.paths:
        if pname == "loopback":
            path = make_loopback()
        elif pname == "veth":
            path = make_veth()
        else:
            path = make_partition(bench.wirespeed, args.send_cpu, args.recv_cpu)
        meta["paths"][pname] = path.describe()
        log(f"\n== path {pname}: receiver at {path.recv_addr} ({path.recv_ns or 'root namespace'}), "
            f"sender in {path.send_ns or 'root namespace'}")
        try:
            for tool in args.tools:
                if not args.no_warmup:
                    try:
                        bench.probe_retry(path, tool, args.sizes[0], args.cpu_rate_pps, 1.0, "warmup", record=False)
                    except ProbeError as e:
                        log(f"  warm-up failed: {e}")
            for size in args.sizes:
                for tool in args.tools:
                    values, sids = [], []
                    for rep in range(args.repeats):
                        try:
                            s = bench.search(path, tool, size, rep)
                        except ProbeError as e:
                            log(f"  search failed: {e}")
                            bench.failures.append({"when": now_iso(), "error": str(e), "path": pname,
                                                   "tool": tool, "size": size, "repeat": rep})
                            continue
                        values.append(s)
                        sids.append(s["id"])
                        log(f"  -> search {rep + 1}/{args.repeats}: "
                            f"{fmt_rate(s['result_pps'], size, s['sender_bound'])}")
                    if values:
                        pick = sorted(values, key=lambda s: s["result_pps"])[(len(values) - 1) // 2]  # lower median
                        bench.results.append({
                            "path": pname, "size": size, "tool": tool, "median_pps": pick["result_pps"],
                            "median_gbps": pick["result_pps"] * size * 8 / 1e9, "sender_bound": pick["sender_bound"],
                            "values_pps": [s["result_pps"] for s in values],
                            "sender_bound_runs": sum(1 for s in values if s["sender_bound"]),
                            "searches": sids, "picked_search": pick["id"],
                            "reproduce_probe": pick.get("result_probe"),
                        })
                    runs = []
                    for rep in range(args.repeats):
                        try:
                            runs.append(bench.cpu_run(path, tool, size, rep))
                        except ProbeError as e:
                            log(f"  CPU run failed: {e}")
                            bench.failures.append({"when": now_iso(), "error": str(e)})
                    per = [r["receiver_cpu_ns_per_packet"] for r in runs if r["receiver_cpu_ns_per_packet"]]
                    if per:
                        bench.cpu.append({
                            "path": pname, "size": size, "tool": tool, "rate_pps": args.cpu_rate_pps,
                            "median_ns_per_packet": statistics.median(per), "values_ns_per_packet": per,
                            "lost": [r["lost"] for r in runs], "probes": [r["id"] for r in runs],
                            "wirespeed_capture_thread_ns_per_packet": [
                                (r.get("receiver") or {}).get("cpu_ns_per_packet") for r in runs] if tool == "wirespeed"
                            else None,
                        })
                        log(f"  -> CPU {tool} {size} B at {args.cpu_rate_pps / 1e3:g} kpps: "
                            f"{statistics.median(per):.0f} ns/packet (process user+sys)")
                    write_outputs(bench, meta, out_dir, final=False)
        finally:
            CLEANUP.kill_children()
            if path.recv_ns:
                CLEANUP.delete_namespaces()


if __name__ == "__main__":
    main()
