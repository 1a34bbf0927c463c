#!/usr/bin/env python3
"""Pacing accuracy of `wirespeed send`: achieved rate, the lowest and highest rate over any
1 s window, inter-call gaps and stalls, at several rates, across a veth pair between two
namespaces this script creates and deletes (198.18.0.0/15). Needs root.

    python3 benchmarks/pacing.py [--duration 5] [--repeats 3]
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = os.path.join(ROOT, "target", "release", "wirespeed")
CASES = [("8800", "1G"), ("8800", "5G"), ("8800", "20G --gso"), ("1080", "100kpps"),
         ("1080", "500kpps --gso"), ("1080", "942M")]


def sh(*a):
    subprocess.run(a, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    a, b = f"wsp-{os.getpid()}-a", f"wsp-{os.getpid()}-b"
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "-n", a, "link", "add", "wspa", "type", "veth", "peer", "name", "wspb", "netns", b)
        for ns, dev, ip in ((a, "wspa", "198.18.1.1/24"), (b, "wspb", "198.18.1.2/24")):
            sh("ip", "-n", ns, "addr", "add", ip, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "mtu", "9000", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        print(f"| size | rate | achieved / requested | any 1 s window | send-call gap p50 / p99 | stalls given up | receiver lost |")
        print(f"|---:|---|---|---|---|---:|---:|")
        port = 7300
        for size, rate in CASES:
            runs = []
            for _ in range(args.repeats):
                port += 1
                r = subprocess.Popen(["ip", "netns", "exec", b, "taskset", "-c", "1", W, "recv", f"198.18.1.2:{port}",
                                      "--once", "--json", "--duration", str(args.duration + 20)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                time.sleep(0.3)
                s = subprocess.run(["ip", "netns", "exec", a, "taskset", "-c", "0", W, "send", f"198.18.1.2:{port}",
                                    "--size", size, "--rate", *rate.split(), "--duration", str(args.duration), "--json"],
                                   capture_output=True, text=True, check=True)
                out, _ = r.communicate(timeout=args.duration + 30)
                runs.append((json.loads(s.stdout), json.loads(out)))
            med = lambda f: statistics.median(f(sr) for sr in runs)
            lo = min(s["per_second_range"][0] for s, _ in runs)
            hi = max(s["per_second_range"][1] for s, _ in runs)
            print(f"| {size} | {rate} | {med(lambda x: x[0]['rate_ratio']) * 100:.3f}% | {lo * 100:.2f}%..{hi * 100:.2f}% "
                  f"| {med(lambda x: x[0]['gaps']['p50_ns']) / 1e3:.1f} / {med(lambda x: x[0]['gaps']['p99_ns']) / 1e3:.1f} us "
                  f"| {sum(s['slips'] for s, _ in runs)} | {sum(r['total']['lost'] for _, r in runs)} |", flush=True)
        print(f"\n{args.repeats} runs of {args.duration:g} s per row (median; window range over all runs); "
              f"sender on CPU 0, receiver on CPU 1; `python3 benchmarks/pacing.py --duration {args.duration:g} --repeats {args.repeats}`")
    finally:
        subprocess.run(["ip", "netns", "del", a], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", b], stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())
