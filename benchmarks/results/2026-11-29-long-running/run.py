#!/usr/bin/env python3
"""BENCHMARKS 23: recorders that run for months. Run as root from the repository root:

    python3 benchmarks/results/2026-11-29-long-running/run.py WIRESPEED OUTDIR [cpu,big,extract,soak]

- cpu: the recorder's CPU per datagram with the time index on and off (`record --no-index`),
  alternating, five runs each, VDIF raw at 2.048 Gb/s and a counter stream as pcap at 1 Gb/s.
- big: a 200 s VDIF recording at 2.048 Gb/s (51 GB in 1 GiB files): zero loss, and the index's
  size against the data.
- extract: 30 s of it (frames' own time, 7.7 GB) from the middle, through the index and by a
  full scan (`--no-index`), each from a cold page cache (drop_caches), alternating, three each:
  time to the first byte on stdout, total time, bytes, CPU.
- soak: `record --keep-free 40G` writing 100 GB (400 s at 2.048 Gb/s) onto the disk with less
  than that free: zero loss, and the free space sampled every second.

Everything runs in a network namespace made here, over its loopback; the recorder runs on CPU 1,
the sender on CPU 0. The recordings go to /var/tmp/wsb23 and are removed at the end.
"""

import json
import os
import resource
import subprocess
import sys
import time

WS, OUT = sys.argv[1], sys.argv[2]
PARTS = (sys.argv[3] if len(sys.argv) > 3 else "cpu,big,extract,soak").split(",")
NS = "wsbench23"
ROOT = "/var/tmp/wsb23"
VDIF = "vdif,frame=8032,threads=1,station=WS,bits=2,chans=4,complex=0,fps=32000,fill=counter"
os.makedirs(OUT, exist_ok=True)
log = open(os.path.join(OUT, "log.txt"), "a")


def say(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    print(line, file=log, flush=True)


def sh(*a, check=True):
    print("$", " ".join(a), file=log, flush=True)
    return subprocess.run(a, check=check, capture_output=True, text=True)


def ns(*a):
    return ["ip", "netns", "exec", NS, *a]


def cold():
    sh("sync")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def clean(d):
    if os.path.isdir(d):
        for n in os.listdir(d):
            os.remove(os.path.join(d, n))
        os.rmdir(d)


def free_bytes(path):
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize


def record(dirname, fmt_args, send_args, extra=(), sample=None):
    """One recording: the recorder on CPU 1, one sender on CPU 0. Returns (report, rusage of
    the recorder, wall seconds, samples of free space)."""
    os.makedirs(dirname, exist_ok=True)
    cmd = ns("/usr/bin/time", "-f", "WSTIME %e %U %S", "taskset", "-c", "1", WS, "record", "127.0.0.1:7148", *fmt_args, "-o", dirname, "--json", "--once",
             "--buffer", "2G", "--duration", "900", *extra)
    print("$", " ".join(cmd), file=log, flush=True)
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:
        line = rec.stderr.readline()
        print(line, end="", file=log, flush=True)
        if "listening on" in line or not line:
            break
    t0 = time.monotonic()
    snd = subprocess.Popen(ns(WS, "send", "127.0.0.1:7148", *fmt_args, "--cpu", "0", *send_args),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []
    while snd.poll() is None or rec.poll() is None:
        if sample:
            samples.append((round(time.monotonic() - t0, 1), free_bytes(sample)))
        time.sleep(1 if sample else 0.1)
        if snd.poll() is not None and rec.poll() is None and time.monotonic() - t0 > 1200:
            rec.terminate()
    out = rec.stdout.read()
    err = rec.stderr.read()
    print(err[-4000:], file=log, flush=True)
    rec.wait()
    wall = time.monotonic() - t0
    rep = json.loads(out)
    # The recorder's own CPU, as /usr/bin/time reports it (user + system seconds).
    t = [l.split() for l in err.splitlines() if l.startswith("WSTIME ")][-1]
    cpu = float(t[2]) + float(t[3])
    return rep, cpu, wall, samples, err


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def part_cpu():
    rows = []
    reports = []
    cases = [
        ("vdif raw 2.048 Gb/s", ["--format", VDIF], ["--duration", "12", "--rate", "2048M"]),
        ("counter 1080 B pcap 1 Gb/s", ["--size", "1080"], ["--duration", "12", "--rate", "1G"]),
    ]
    for name, fmt, snd in cases:
        extra_ff = ["--file-format", "pcap"] if "pcap" in name else []
        for i in range(5):
            for index in ([True, False] if i % 2 == 0 else [False, True]):
                d = f"{ROOT}/cpu"
                rep, cpu, wall, _, _ = record(d, fmt, snd, extra=["--file-size", "1G", *extra_ff,
                                                                   *([] if index else ["--no-index"])])
                recv = rep["capture"]["total"]["received"]
                w = rep["writer"]
                row = {
                    "case": name, "index": index, "rep": i, "received": recv,
                    "lost": rep["capture"]["total"]["lost"], "ring_full": rep["ring"]["ring_full"],
                    "recorder_cpu_s": round(cpu, 3), "cpu_us_per_datagram": round(cpu / recv * 1e6, 4),
                    "writer_cpu_s": w["cpu_s"], "writer_us_per_datagram": round(w["cpu_s"] / recv * 1e6, 4),
                    "capture_cpu_s": rep["capture"]["capture_cpu_ns"] / 1e9,
                    # Capture thread + writer over the stream: the recorder's work per datagram
                    # without the ring's setup (page faults, mlock), which varies run to run.
                    "stream_us_per_datagram": round((rep["capture"]["capture_cpu_ns"] / 1e3 + w["cpu_s"] * 1e6) / recv, 4),
                    "bytes": w["bytes"],
                    "sidecar_bytes": sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".json")),
                }
                say(json.dumps(row))
                rows.append(row)
                reports.append({"case": name, "index": index, "rep": i, "report": rep})
                clean(d)
    json.dump(rows, open(os.path.join(OUT, "cpu.json"), "w"), indent=1)
    json.dump(reports, open(os.path.join(OUT, "cpu-reports.json"), "w"))
    for name, *_ in cases:
        on = [r for r in rows if r["case"] == name and r["index"]]
        off = [r for r in rows if r["case"] == name and not r["index"]]
        for k in ("cpu_us_per_datagram", "stream_us_per_datagram", "writer_us_per_datagram"):
            a, b = median([r[k] for r in on]), median([r[k] for r in off])
            say(f"{name}: {k} median on {a:.4f} off {b:.4f} ratio {a / b:.3f}")


def part_big():
    d = f"{ROOT}/big"
    rep, _, wall, _, err = record(d, ["--format", VDIF], ["--duration", "200", "--rate", "2048M"], extra=["--file-size", "1G"])
    json.dump(rep, open(os.path.join(OUT, "big-record.json"), "w"), indent=1)
    data = sides = index = 0
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n)
        if n.endswith(".json"):
            sides += os.path.getsize(p)
            s = json.load(open(p))
            index += len(json.dumps(s.get("index"), indent=2)) if s.get("index") else 0
        else:
            data += os.path.getsize(p)
    row = {"received": rep["capture"]["total"]["received"], "lost": rep["capture"]["total"]["lost"],
           "ring_full": rep["ring"]["ring_full"], "files": len(rep["writer"]["files"]), "data_bytes": data,
           "sidecar_bytes": sides, "index_json_bytes": index, "index_share": index / data, "wall_s": wall}
    say("big:", json.dumps(row))
    json.dump(row, open(os.path.join(OUT, "big.json"), "w"), indent=1)


def run_extract(args, ttfb):
    """`wirespeed extract ARGS -w -`. With `ttfb`: stdout is a pipe, the time to its first
    byte is taken and the extract stopped; else stdout is /dev/null and the whole extract is
    timed (a pipe to a Python reader would measure the pipe). Returns (seconds, cpu s, stderr)."""
    cmd = [WS, "extract", *args, "-w", "-"]
    print("$", " ".join(cmd), "(ttfb)" if ttfb else "(total)", file=log, flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    if ttfb:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        b = os.read(p.stdout.fileno(), 1)
        dt = time.monotonic() - t0
        assert b, "no byte came"
        p.kill()
        p.wait()
        err = ""
    else:
        with open("/dev/null", "wb") as null:
            p = subprocess.run(cmd, stdout=null, stderr=subprocess.PIPE)
        dt = time.monotonic() - t0
        err = p.stderr.decode()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu, err


def part_extract():
    d = f"{ROOT}/big"
    files = sorted(n for n in os.listdir(d) if n.endswith(".vdif"))
    first = json.load(open(os.path.join(d, files[0] + ".json")))
    t0 = first["index"]["data_time"][0] // 1_000_000_000 + 100
    frm = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
    rows = []
    for i in range(3):
        for how in (["index", "scan"] if i % 2 == 0 else ["scan", "index"]):
            args = [d, "--from", frm, "--to", "+30s"] + (["--no-index"] if how == "scan" else [])
            cold()
            ttfb, _, _ = run_extract(args, True)
            cold()
            total, cpu, err = run_extract(args, False)
            row = {"how": how, "rep": i, "ttfb_s": round(ttfb, 4), "total_s": round(total, 3), "cpu_s": round(cpu, 3),
                   "summary": err.strip().splitlines()[-1]}
            say(json.dumps(row))
            rows.append(row)
    json.dump({"from": frm, "to": "+30s", "rows": rows}, open(os.path.join(OUT, "extract.json"), "w"), indent=1)
    for k in ("ttfb_s", "total_s", "cpu_s"):
        a = median([r[k] for r in rows if r["how"] == "index"])
        b = median([r[k] for r in rows if r["how"] == "scan"])
        say(f"extract {k}: index {a} scan {b} ratio {a / b:.4f}")


def part_soak():
    clean(f"{ROOT}/big")
    d = f"{ROOT}/soak"
    os.makedirs(d, exist_ok=True)
    start_free = free_bytes(d)
    say("soak: free before", start_free)
    rep, _, wall, samples, err = record(d, ["--format", VDIF], ["--duration", "400", "--rate", "2048M"],
                                        extra=["--file-size", "1G", "--keep-free", "40G"], sample=d)
    json.dump(rep, open(os.path.join(OUT, "soak-record.json"), "w"), indent=1)
    json.dump(samples, open(os.path.join(OUT, "soak-free.json"), "w"))
    ret = rep.get("retention", {})
    row = {"free_before": start_free, "received": rep["capture"]["total"]["received"],
           "lost": rep["capture"]["total"]["lost"], "ring_full": rep["ring"]["ring_full"],
           "written_bytes": rep["writer"]["bytes"], "files_deleted": ret.get("files_deleted"),
           "bytes_deleted": ret.get("bytes_deleted"), "min_free_sampled": min(s[1] for s in samples),
           "min_free_seen_by_retention": ret.get("min_free_bytes"), "keep_free_bytes": ret.get("keep_free_bytes"),
           "deletion_lines": err.count("retention: deleted "), "wall_s": wall, "ring_high_water": rep["ring"]["high_water"]}
    say("soak:", json.dumps(row))
    json.dump(row, open(os.path.join(OUT, "soak.json"), "w"), indent=1)
    clean(d)


def main():
    sh("ip", "netns", "add", NS)
    try:
        sh(*ns("ip", "link", "set", "lo", "up"))
        os.makedirs(ROOT, exist_ok=True)
        for p in PARTS:
            say(f"== {p} ({time.strftime('%H:%M:%S')})")
            globals()[f"part_{p}"]()
    finally:
        subprocess.run(["ip", "netns", "del", NS])
        if "extract" in PARTS or "soak" in PARTS or "cpu" in PARTS:
            for sub in ("cpu", "soak"):
                clean(f"{ROOT}/{sub}")


if __name__ == "__main__":
    main()
