#!/usr/bin/env python3
"""The table of BENCHMARKS.md 14e from run.sh's JSON (run in the directory it wrote)."""
import json
print("| receiver buffer | repairs | run | delivered | lost | socket drops | repaired | NAKs (sqns) | RDATA sent | repair bytes % | wait mean | wait max |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for buf in ("default", "2M"):
    for mode in ("unpaced", "cap"):
        for r in (1, 2):
            t = f"{buf}-{mode}-{r}"
            rv = json.load(open(f"recv-{t}.json")); sv = json.load(open(f"send-{t}.json"))
            p = rv["pgm"]; s = sv["pgm"]["stats"]
            k = rv.get("kernel") or {}
            drops = f"{k['socket_drops_rxq_ovfl']:,}" if "socket_drops_rxq_ovfl" in k else "-"
            print(f"| {'as asked' if buf=='default' else '--rcvbuf 2M'} | {'unpaced' if mode=='unpaced' else '20kpps cap'} | {r} | {rv['datagrams']:,} | {rv['total']['lost']} | {drops} | {p['repaired']:,} | {p['naks_sent']:,} | {s['rdata']:,} | {sv['pgm']['repair_share_percent']:.1f} | {p['repair_mean_ns']/1e6:.0f} ms | {p['repair_max_ns']/1e6:.0f} ms |")
