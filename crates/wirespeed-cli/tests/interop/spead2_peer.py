#!/usr/bin/env python3
"""The independent SPEAD implementation (spead2) on the other end of wirespeed.

usage: spead2_peer.py send PORT HEAPS HEAP_BYTES PACKET_BYTES
         sends HEAPS heaps of HEAP_BYTES (one uint8 item, id 0x4300, value = heap index mod 256)
         to 127.0.0.1:PORT as SPEAD-64-48 in packets of at most PACKET_BYTES, then a stop heap.
       spead2_peer.py send-defaults PORT HEAPS
         sends HEAPS heaps the way a spead2 user's code does by default: a 48-bit immediate
         timestamp item and a 64 KiB data item, descriptors sent, packets of at most 8248 bytes.
       spead2_peer.py recv PORT SECONDS
         receives until a stop heap or SECONDS without a heap; prints JSON: complete heaps,
         their counters, sizes, incomplete heaps.
"""

import json
import sys
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


def send_defaults(port, heaps):
    pool = spead2.ThreadPool()
    cfg = spead2.send.StreamConfig(max_packet_size=8248, rate=200e6)
    stream = spead2.send.UdpStream(pool, [("127.0.0.1", port)], cfg)
    ig = spead2.send.ItemGroup()
    ts = ig.add_item(0x1600, "timestamp", "sample counter", shape=(), format=[("u", 48)])
    data = ig.add_item(0x4300, "data", "payload", shape=(65536,), dtype=np.uint8)
    for i in range(heaps):
        ts.value = i * 65536
        data.value = np.full(65536, i % 256, np.uint8)
        stream.send_heap(ig.get_heap())
    stream.send_heap(ig.get_end())
    print(json.dumps({"sent_heaps": heaps}))


def recv(port, seconds):
    pool = spead2.ThreadPool()
    # A ring that holds every heap of a test run: the Python loop below may be slow on a busy
    # machine, and a full ring would drop heaps inside spead2 (not on the wire).
    stream = spead2.recv.Stream(
        pool, spead2.recv.StreamConfig(max_heaps=16), spead2.recv.RingStreamConfig(heaps=1024)
    )
    stream.add_udp_reader(port, max_size=65536, buffer_size=64 << 20, bind_hostname="127.0.0.1")
    print(json.dumps({"listening": port}), flush=True)
    counters, sizes, incomplete = [], set(), 0
    last = time.time()
    while time.time() - last < seconds:
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
    elif sys.argv[1] == "send":
        send(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        recv(int(sys.argv[2]), float(sys.argv[3]))
