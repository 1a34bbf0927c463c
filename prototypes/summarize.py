#!/usr/bin/env python3
"""Medians per (rate, receiver) from run.sh output files, as a Markdown table.

    ./summarize.py RAW.txt [RAW2.txt ...]

Columns: datagrams/s received, receiver-thread CPU ns per datagram, sender-thread CPU ns per
datagram (on veth the receive softirq runs in the sender's context, so part of the receive cost is
charged there), their sum, loss, and the ratio of each CPU figure to the recvmmsg baseline.
"""
import re
import statistics
import sys

ORDER = ["recvmmsg", "uring", "xdp-generic", "xdp-native"]
RATES = ["60kpps", "100kpps", "120kpps", "400kpps", "max"]


def parse(paths):
    runs = []
    for p in paths:
        for line in open(p):
            kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
            if "proto" in kv:
                runs.append(kv)
    return runs


def med(xs):
    # upper median: a value one run really measured
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    runs = parse(sys.argv[1:])
    print("| rate asked | receiver | runs | recv dgram/s | rx CPU ns/dgram | tx CPU ns/dgram | rx+tx ns/dgram "
          "| lost = sent - received (sum of runs) | rx CPU vs recvmmsg | rx+tx vs recvmmsg | load1 (min-max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rate in RATES:
        base = None
        for proto in ORDER:
            rs = [r for r in runs if r["rate"] == rate and r["proto"] == proto]
            if not rs:
                continue
            pps = med([float(r["pps"]) for r in rs])
            rx = med([float(r["cpu_ns_per_dgram"]) for r in rs])
            tx = med([float(r["tx_cpu_ns_per_dgram"]) for r in rs])
            tot = med([float(r["cpu_ns_per_dgram"]) + float(r["tx_cpu_ns_per_dgram"]) for r in rs])
            # sent minus received: gaps, head and tail alike (the counter check counts gaps only)
            lost = sum(int(r["tx_sent"]) - int(r["pkts"]) for r in rs)
            sent = sum(int(r["tx_sent"]) for r in rs)
            loads = [float(r["load1"]) for r in rs]
            if proto == "recvmmsg":
                base = (rx, tot)
            ratio_rx = f"{rx / base[0]:.2f}" if base else "-"
            ratio_tot = f"{tot / base[1]:.2f}" if base else "-"
            print(f"| {rate} | {proto} | {len(rs)} | {pps:,.0f} | {rx:.0f} | {tx:.0f} | {tot:.0f} | "
                  f"{lost} of {sent} | {ratio_rx} | {ratio_tot} | {min(loads):.1f}-{max(loads):.1f} |")


main()
