#!/usr/bin/env python3
"""The independent SPEAD implementation (spead2) on the other end of wirespeed.

usage: spead2_peer.py send PORT HEAPS HEAP_BYTES PACKET_BYTES
         sends HEAPS heaps of HEAP_BYTES (one uint8 item, id 0x4300, value = heap index mod 256)
         to 127.0.0.1:PORT as SPEAD-64-48 in packets of at most PACKET_BYTES, then a stop heap.
       spead2_peer.py send-defaults PORT HEAPS
         sends HEAPS heaps the way a spead2 user's code does by default: a 48-bit immediate
         timestamp item and a 64 KiB data item, descriptors sent, packets of at most 8248 bytes.
       spead2_peer.py relay LAYOUT PACKET_BYTES HEAPS DROP_EVERY PORT [PORT...] [tail=N]
         sends HEAPS heaps of LAYOUT (defaults: as send-defaults, SPEAD-64-40; items: SPEAD-64-48,
         an immediate timestamp, a 32 KiB and a 1 KiB item, descriptors again every 25th heap)
         in packets of at most PACKET_BYTES through a relay that forwards each packet to every
         PORT on 127.0.0.1 except every DROP_EVERY-th (0: none; never a stream-control packet,
         never a packet of the last heap, whose loss no receiver could know), then a stop heap.
         Prints JSON: packets sent, and each dropped packet's heap counter, offset, length and
         heap size. tail=N also drops the last N data packets before the stop heap.
       spead2_peer.py recv-cpu PORT
         receives until a stop heap, blocking; prints JSON: heaps, packets, and the process's CPU
         seconds (all threads) from the first heap to the stop (for the benchmarks).
       spead2_peer.py recv PORT SECONDS
         receives until a stop heap or SECONDS without a heap; prints JSON: complete heaps,
         their counters, sizes, incomplete heaps.
"""

import json
import socket
import struct
import sys
import threading
import time

import numpy as np
import spead2
import spead2.recv
import spead2.send


def send(port, heaps, heap_bytes, packet_bytes):
    pool = spead2.ThreadPool()
    cfg = spead2.send.StreamConfig(max_packet_size=packet_bytes, rate=200e6)
    stream = spead2.send.UdpStream(pool, [("127.0.0.1", port)], cfg)
    ig = spead2.send.ItemGroup(flavour=spead2.Flavour(4, 64, 48))
    item = ig.add_item(0x4300, "data", "payload", shape=(heap_bytes,), dtype=np.uint8)
    for i in range(heaps):
        item.value = np.full(heap_bytes, i % 256, np.uint8)
        stream.send_heap(ig.get_heap(descriptors="none", data="all"))
    stream.send_heap(ig.get_end())
    print(json.dumps({"sent_heaps": heaps}))


def send_layout(stream, layout, heaps):
    """Send HEAPS heaps of LAYOUT (see the usage) and a stop heap on a spead2 send stream."""
    if layout == "defaults":
        ig = spead2.send.ItemGroup()
        ts = ig.add_item(0x1600, "timestamp", "sample counter", shape=(), format=[("u", 48)])
        data = ig.add_item(0x4300, "data", "payload", shape=(65536,), dtype=np.uint8)
        for i in range(heaps):
            ts.value = i * 65536
            data.value = np.full(65536, i % 256, np.uint8)
            stream.send_heap(ig.get_heap())
    else:
        ig = spead2.send.ItemGroup(flavour=spead2.Flavour(4, 64, 48))
        ts = ig.add_item(0x1600, "timestamp", "sample counter", shape=(), format=[("u", 48)])
        data = ig.add_item(0x4300, "data", "payload", shape=(32768,), dtype=np.uint8)
        flags = ig.add_item(0x4301, "flags", "per-channel flags", shape=(1024,), dtype=np.uint8)
        for i in range(heaps):
            ts.value = i * 32768
            data.value = np.full(32768, i % 256, np.uint8)
            flags.value = np.zeros(1024, np.uint8)
            stream.send_heap(ig.get_heap(descriptors="all" if i % 25 == 0 else "none"))
    stream.send_heap(ig.get_end())


def send_defaults(port, heaps):
    pool = spead2.ThreadPool()
    cfg = spead2.send.StreamConfig(max_packet_size=8248, rate=200e6)
    stream = spead2.send.UdpStream(pool, [("127.0.0.1", port)], cfg)
    send_layout(stream, "defaults", heaps)
    print(json.dumps({"sent_heaps": heaps}))


def heap_fields(pkt):
    """Heap counter, heap size, offset, payload length and whether it is stream control."""
    abits = pkt[3] * 8
    n = struct.unpack(">H", pkt[6:8])[0]
    f = {}
    for i in range(n):
        raw = struct.unpack(">Q", pkt[8 + 8 * i:16 + 8 * i])[0]
        f[(raw >> abits) & ((1 << (63 - abits)) - 1)] = raw & ((1 << abits) - 1)
    return f.get(1), f.get(2), f.get(3), f.get(4), 6 in f


def relay(layout, packet_bytes, heaps, every, ports, tail=0):
    inbound = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    inbound.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    inbound.bind(("127.0.0.1", 0))
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    report = {"sent": 0, "dropped": []}
    first_cnt = [None]

    def forward():
        i = 0
        queue = []
        while True:
            pkt = inbound.recv(65536)
            cnt, size, off, plen, control = heap_fields(pkt)
            if first_cnt[0] is None:
                first_cnt[0] = cnt
            last_heap = cnt is not None and cnt >= first_cnt[0] + heaps - 1
            report["sent"] += 1
            if every and i % every == every - 1 and not control and not last_heap:
                report["dropped"].append([cnt, off, plen, size])
            elif control:
                # The stop heap: the `tail` data packets held back before it are dropped.
                for held in queue:
                    c, s, o, p, _ = heap_fields(held)
                    report["dropped"].append([c, o, p, s])
                for port in ports:
                    out.sendto(pkt, ("127.0.0.1", port))
                return
            else:
                queue.append(pkt)
                if len(queue) > tail:
                    first = queue.pop(0)
                    for port in ports:
                        out.sendto(first, ("127.0.0.1", port))
            i += 1

    t = threading.Thread(target=forward)
    t.start()
    pool = spead2.ThreadPool()
    cfg = spead2.send.StreamConfig(max_packet_size=packet_bytes, rate=50e6)
    stream = spead2.send.UdpStream(pool, [("127.0.0.1", inbound.getsockname()[1])], cfg)
    send_layout(stream, layout, heaps)
    t.join(60)
    print(json.dumps(report))


def recv_cpu(port):
    import resource

    pool = spead2.ThreadPool()
    stream = spead2.recv.Stream(
        pool, spead2.recv.StreamConfig(max_heaps=16), spead2.recv.RingStreamConfig(heaps=1024, contiguous_only=False)
    )
    stream.add_udp_reader(port, max_size=65536, buffer_size=64 << 20, bind_hostname="127.0.0.1")
    print(json.dumps({"listening": port}), flush=True)
    heaps, t0 = 0, None
    for heap in stream:
        if t0 is None:
            r = resource.getrusage(resource.RUSAGE_SELF)
            t0 = r.ru_utime + r.ru_stime
        heaps += 1
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"heaps": heaps, "packets": stream.stats["packets"], "cpu_s": r.ru_utime + r.ru_stime - (t0 or 0)}))


def recv(port, seconds):
    pool = spead2.ThreadPool()
    # A ring that holds every heap of a test run: the Python loop below may be slow on a busy
    # machine, and a full ring would drop heaps inside spead2 (not on the wire).
    stream = spead2.recv.Stream(
        pool, spead2.recv.StreamConfig(max_heaps=16), spead2.recv.RingStreamConfig(heaps=1024, contiguous_only=False)
    )
    stream.add_udp_reader(port, max_size=65536, buffer_size=64 << 20, bind_hostname="127.0.0.1")
    print(json.dumps({"listening": port}), flush=True)
    counters, sizes, incomplete = [], set(), 0
    # `seconds` of silence after the last heap ends the run; before the first heap, a sender
    # still starting on a busy machine gets at least 30 s.
    start, last = time.time(), None
    while time.time() - (last or start) < (seconds if last else max(seconds, 30)):
        try:
            heap = stream.get_nowait()
        except spead2.Empty:
            time.sleep(0.001)
            continue
        except spead2.Stopped:
            break
        last = time.time()
        if isinstance(heap, spead2.recv.IncompleteHeap):
            incomplete += 1
            continue
        counters.append(heap.cnt)
        sizes.add(sum(len(bytes(it.value)) if hasattr(it, "value") else 0 for it in heap.get_items() if it.id == 0x4300))
    stream.stop()
    print(json.dumps({"heaps": len(counters), "first": min(counters, default=None), "last": max(counters, default=None),
                      "distinct": len(set(counters)), "incomplete": incomplete}))


if __name__ == "__main__":
    if sys.argv[1] == "send-defaults":
        send_defaults(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "recv-cpu":
        recv_cpu(int(sys.argv[2]))
    elif sys.argv[1] == "relay":
        tail = 0
        ports = [int(p) for p in sys.argv[6:] if not p.startswith("tail=")]
        tail = sum(int(p[5:]) for p in sys.argv[6:] if p.startswith("tail="))
        relay(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), ports, tail)
    elif sys.argv[1] == "send":
        send(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        recv(int(sys.argv[2]), float(sys.argv[3]))
