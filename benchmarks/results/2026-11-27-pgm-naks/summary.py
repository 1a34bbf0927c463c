#!/usr/bin/env python3
"""BENCHMARKS.md 14f's tables from forged.sh's and stall.sh's reports.
Usage: summary.py FORGED_DIR STALL_DIR"""
import glob, json, os, re, sys

WIRE = 1000 + 24 + 28  # a 1000-byte datagram as ODATA/RDATA on the wire (PGM + UDP + IP headers)


def load(p):
    with open(p) as f:
        return json.load(f)


def forged(d):
    print("| source | run | ODATA sent | forged NAKs (bytes) | RDATA sent | RDATA bytes / NAK bytes | repair share of data bytes | over budget | flagged |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    tags = sorted({re.sub(r"^send-|\.json$", "", os.path.basename(p)) for p in glob.glob(f"{d}/send-*.json")},
                  key=lambda t: (["before", "after", "after-share10", "after-off", "openpgm"].index(t.rsplit("-", 1)[0]), t))
    for tag in tags:
        who, run = tag.rsplit("-", 1)
        s, f = load(f"{d}/send-{tag}.json"), load(f"{d}/forger-{tag}.json")
        if who == "openpgm":
            odata, rdata = s["sent"], s["rdata_sent"]
            rbytes, obytes = rdata * WIRE, odata * WIRE
            over, flag = "-", "-"
        else:
            st = s["pgm"]["stats"]
            odata, rdata = st["odata"], st["rdata"]
            rbytes, obytes = st["rdata_bytes"] + 28 * rdata, st["odata_bytes"] + 28 * odata
            over = f'{st.get("nak_over_budget", "-"):,}' if "nak_over_budget" in st else "-"
            flag = {True: "no", False: "yes"}.get(s["pgm"].get("naks_plausible"), "-")
        print(f"| {who} | {run} | {odata:,} | {f['naks']:,} ({f['nak_wire_bytes']:,}) | {rdata:,} | {rbytes / f['nak_wire_bytes']:.1f}x | {100 * rbytes / (rbytes + obytes):.1f} % | {over} | {flag} |")


def stall(d):
    print("| sender | run | delivered | lost | socket drops | repaired | NAKs (sqns) | RDATA sent | over budget | wait mean | wait max |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    tags = sorted({re.sub(r"^recv-|\.json$", "", os.path.basename(p)) for p in glob.glob(f"{d}/recv-*.json")},
                  key=lambda t: (["before", "default", "burst2048", "off"].index(t.rsplit("-", 1)[0]), t))
    for tag in tags:
        mode, run = tag.rsplit("-", 1)
        r, s = load(f"{d}/recv-{tag}.json"), load(f"{d}/send-{tag}.json")
        p, st = r["pgm"], s["pgm"]["stats"]
        drops = r["kernel"]["socket_drops_rxq_ovfl"]
        mean = p["repair_sum_ns"] / p["repaired"] / 1e6 if p["repaired"] else 0
        print(f"| {mode} | {run} | {r['datagrams']:,} | {r['total']['lost']:,} | {drops if isinstance(drops, str) else f'{drops:,}'} | {p['repaired']:,} | {p['naks_sent']:,} | {st['rdata']:,} | {st.get('nak_over_budget', '-')} | {mean:.0f} ms | {p['repair_max_ns'] / 1e6:.0f} ms |")


if __name__ == "__main__":
    forged(sys.argv[1])
    print()
    if len(sys.argv) > 2:
        stall(sys.argv[2])
