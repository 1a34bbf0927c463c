#!/usr/bin/env python3
"""latency.py: round-trip time percentiles of wirespeed ping/reflect beside sockperf ping-pong.

Issue #6's benchmark: 64-byte messages at 10,000 per second, on loopback and across a partition
link (two partitions made with `wirespeed partition`, one core each, a veth link between), with
both tools measured in the same run, alternating which goes first, R repeats of D seconds each.

  - ws-open: `wirespeed reflect` on the far side, `wirespeed ping --pps 10000 --size 64` (open
    loop, the default: probes leave on schedule whatever the replies do; RTT from one clock).
  - ws-closed: the same with `--closed-loop` (each probe waits for the previous reply; slots
    missed meanwhile are skipped and counted), the method of sockperf ping-pong.
  - sp-pp: `sockperf server` and `sockperf ping-pong --mps 10000 -m 64 --full-rtt` (closed loop;
    400 ms warm-up excluded by sockperf itself).
  - sp-ul: `sockperf under-load --reply-every 1` (open loop: sockperf's own open-loop mode).

Like is compared with like: ws-closed with sp-pp, ws-open with sp-ul. A closed loop does not
send while a reply is late, so a stall shows up in one sample instead of in every probe that
would have been sent during it (coordinated omission); its tail percentiles are lower for that
reason alone, which is why open loop is wirespeed's default.

On loopback each client runs on CPU 0 and each server on CPU 1 (taskset); in partitions the
partitions' cpusets place them (partition 1 = core 0, partition 2 = core 1). Client CPU per
message is the client process's user+system time (wait4 rusage) over the messages it sent.

Stdlib only; run as root for the partition path. Traffic goes to 127.0.0.1 or to the
partitions' own 198.19.0.x addresses, inside namespaces made (and always removed) here.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WS = os.path.join(REPO, "target", "release", "wirespeed")
PREFIX = "wsbl%dx" % (os.getpid() % 100000)
PORT_WS = 7149
PORT_SP = 11111
TOOLS = ("ws-closed", "sp-pp", "ws-open", "sp-ul")
ALL_TOOLS = TOOLS + ("ws-open-spin",)
KEYS = ("min", "p50", "p90", "p99", "p999", "p9999", "max")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def with_rusage(cmd):
    """Run cmd to completion and return (returncode, stdout, stderr, user+sys seconds)."""
    r, w = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.dup2(w2, 2)
        os.close(r)
        os.close(r2)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(w)
    os.close(w2)
    import threading

    bufs = {}

    def drain(fd, key):
        chunks = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(fd)
        bufs[key] = b"".join(chunks).decode(errors="replace")

    t1 = threading.Thread(target=drain, args=(r, "out"))
    t2 = threading.Thread(target=drain, args=(r2, "err"))
    t1.start()
    t2.start()
    _, status, ru = os.wait4(pid, 0)
    t1.join()
    t2.join()
    return os.waitstatus_to_exitcode(status), bufs["out"], bufs["err"], ru.ru_utime + ru.ru_stime


def start_server(cmd, ready=None):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if ready:
        line = p.stderr.readline()
        if ready not in line:
            p.kill()
            raise SystemExit("server did not start: %r %s" % (line, p.stderr.read()))
    else:
        time.sleep(1.0)
    if p.poll() is not None:
        raise SystemExit("server exited: %s" % p.stderr.read())
    return p


def stop_server(p):
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def sockperf_percentiles(text):
    us = {}
    pats = {
        "max": r"<MAX> observation =\s*([\d.]+)",
        "p9999": r"percentile 99\.990 =\s*([\d.]+)",
        "p999": r"percentile 99\.900 =\s*([\d.]+)",
        "p99": r"percentile 99\.000 =\s*([\d.]+)",
        "p90": r"percentile 90\.000 =\s*([\d.]+)",
        "p50": r"percentile 50\.000 =\s*([\d.]+)",
        "min": r"<MIN> observation =\s*([\d.]+)",
    }
    for k, pat in pats.items():
        m = re.search(pat, text)
        if not m:
            raise SystemExit("cannot read sockperf's %s from:\n%s" % (k, text))
        us[k] = float(m.group(1))
    m = re.search(r"\[Total Run\].*SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    sent, recvd = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    m = re.search(r"\[Valid Duration\].*SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    valid = int(m.group(2)) if m else 0
    drop = re.search(r"# dropped messages = (\d+)", text)
    return us, sent, recvd, valid, int(drop.group(1)) if drop else 0


def one_wirespeed(path, args, closed=False, spin=False):
    far = "127.0.0.1" if path == "loopback" else "198.19.0.2"
    srv_cmd = [WS, "reflect", "%s:%d" % (far, PORT_WS), "--json"] + (["--spin"] if spin else [])
    cli_cmd = [WS, "ping", "%s:%d" % (far, PORT_WS), "--pps", str(args.pps), "--size", str(args.size),
               "--duration", "%ds" % args.duration, "--json", "--no-files"] + (["--closed-loop"] if closed else []) + (["--spin"] if spin else [])
    srv = start_server(wrap(path, 2, srv_cmd), ready="listening on")
    try:
        code, out, err, cpu = with_rusage(wrap(path, 1, cli_cmd))
    finally:
        stop_server(srv)
    if code != 0:
        raise SystemExit("wirespeed ping failed: %s" % err)
    run = json.loads(out)["runs"][0]
    us = {k: run["rtt"][k] / 1e3 for k in KEYS}
    return {"tool": "ws-closed" if closed else ("ws-open-spin" if spin else "ws-open"), "path": path, "rtt_us": us, "sent": run["sent"],
            "skipped": run["schedule"]["skipped"],
            "replies": run["replies"]["received"], "lost": run["replies"]["lost"],
            "client_cpu_ns_per_msg": cpu * 1e9 / max(run["sent"], 1),
            "send_late_p99_us": run["schedule"]["late_p99_ns"] / 1e3, "cmd": " ".join(cli_cmd)}


def one_sockperf(path, args, mode="ping-pong"):
    far = "127.0.0.1" if path == "loopback" else "198.19.0.2"
    srv_cmd = ["sockperf", "server", "-i", far, "-p", str(PORT_SP)]
    cli_cmd = ["sockperf", mode, "-i", far, "-p", str(PORT_SP), "--mps", str(args.pps), "-m",
               str(args.size), "-t", str(args.duration), "--full-rtt"] + (["--reply-every", "1"] if mode == "under-load" else [])
    srv = start_server(wrap(path, 2, srv_cmd))
    try:
        code, out, err, cpu = with_rusage(wrap(path, 1, cli_cmd))
    finally:
        stop_server(srv)
    if code != 0:
        raise SystemExit("sockperf failed: %s %s" % (out, err))
    us, sent, recvd, valid, dropped = sockperf_percentiles(out + err)
    return {"tool": "sp-pp" if mode == "ping-pong" else "sp-ul", "path": path, "rtt_us": us, "sent": sent, "replies": recvd, "lost": dropped,
            "observations": valid, "client_cpu_ns_per_msg": cpu * 1e9 / max(sent, 1), "cmd": " ".join(cli_cmd)}


def wrap(path, side, cmd):
    """Place a command: loopback by taskset (client CPU 0, server CPU 1), else in a partition."""
    if path == "loopback":
        return ["taskset", "-c", "0" if side == 1 else "1"] + cmd
    return [WS, "partition", "--prefix", PREFIX, "exec", str(side), "--"] + cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pps", type=int, default=10000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--duration", type=int, default=10, help="seconds per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--paths", default="loopback,partition")
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help="which of %s to run (ws-open-spin: ping and reflector both --spin)" % ",".join(ALL_TOOLS))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    if not shutil.which("sockperf"):
        raise SystemExit("sockperf is not installed: apt-get install sockperf")
    if not os.path.exists(WS):
        raise SystemExit("build first: cargo build --release")
    paths = args.paths.split(",")
    tools = args.tools.split(",")
    for t in tools:
        if t not in ALL_TOOLS:
            raise SystemExit("unknown tool %r: choose from %s" % (t, ",".join(ALL_TOOLS)))
    results = []
    made = False
    try:
        for path in paths:
            if path == "partition":
                subprocess.run([WS, "partition", "--prefix", PREFIX, "create", "-p", "1", "-c", "0", "-p", "2", "-c",
                                "1", "--no-daemons"], check=True, capture_output=True)
                made = True
            for rep in range(args.repeat):
                run_of = {
                    "ws-open": lambda: one_wirespeed(path, args),
                    "ws-closed": lambda: one_wirespeed(path, args, closed=True),
                    "ws-open-spin": lambda: one_wirespeed(path, args, spin=True),
                    "sp-pp": lambda: one_sockperf(path, args),
                    "sp-ul": lambda: one_sockperf(path, args, "under-load"),
                }
                order = [run_of[t] for t in tools]
                if rep % 2 == 1:
                    order.reverse()
                for f in order:
                    r = f()
                    r["repeat"] = rep
                    results.append(r)
                    log("%-9s %-9s rep %d: p50 %7.1f  p99 %7.1f  p99.9 %8.1f  max %8.1f us  lost %d  cpu %.0f ns/msg"
                        % (path, r["tool"], rep, r["rtt_us"]["p50"], r["rtt_us"]["p99"], r["rtt_us"]["p999"],
                           r["rtt_us"]["max"], r["lost"], r["client_cpu_ns_per_msg"]))
                    time.sleep(1)
            if path == "partition":
                subprocess.run([WS, "partition", "--prefix", PREFIX, "init"], capture_output=True)
                made = False
    finally:
        if made:
            subprocess.run([WS, "partition", "--prefix", PREFIX, "init"], capture_output=True)
    summary = {}
    for path in paths:
        for tool in tools:
            rs = [r for r in results if r["path"] == path and r["tool"] == tool]
            summary.setdefault(path, {})[tool] = {
                k: statistics.median(r["rtt_us"][k] for r in rs) for k in KEYS
            } | {"cpu_ns_per_msg": statistics.median(r["client_cpu_ns_per_msg"] for r in rs),
                 "lost": sum(r["lost"] for r in rs)}
    print("| path | tool | min | p50 | p90 | p99 | p99.9 | p99.99 | max | client CPU/msg | lost |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        for tool in tools:
            s = summary[path][tool]
            print("| %s | %s | %s | %.0f ns | %d |" % (path, tool, " | ".join("%.1f" % s[k] for k in KEYS),
                                                      s["cpu_ns_per_msg"], s["lost"]))
        for a, b in (("ws-closed", "sp-pp"), ("ws-open", "sp-ul"), ("ws-open-spin", "sp-ul")):
            if a not in tools or b not in tools:
                continue
            w, p = summary[path][a], summary[path][b]
            print("| %s | ratio %s / %s | | %.2f | %.2f | %.2f | %.2f | %.2f | | | |" % (
                path, a, b, w["p50"] / p["p50"], w["p90"] / p["p90"], w["p99"] / p["p99"], w["p999"] / p["p999"],
                w["p9999"] / p["p9999"]))
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    fn = os.path.join(args.out, "latency-%s.json" % stamp)
    with open(fn, "w") as f:
        json.dump({"schema": "wirespeed.bench.latency/1", "args": vars(args), "runs": results, "summary": summary},
                  f, indent=1)
    log("results: %s" % fn)


if __name__ == "__main__":
    main()
