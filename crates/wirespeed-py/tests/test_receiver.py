"""Live capture from Python: a Receiver fed by `wirespeed send` over loopback, batches as numpy
views of the ring, a slow consumer, and live rings of `record --share`."""

import os
import threading
import time

import numpy as np
import pytest

import wirespeed
from conftest import Spawned, send


def counter_first_words(batch, size):
    """The first 64-bit word of each CASPER counter datagram: its number times the words per
    datagram."""
    return batch.payloads[:, :8].copy().view(">u8")[:, 0] // np.uint64(size // 8)


def test_receiver_sees_every_datagram(tmp_path):
    n, size = 20000, 1024
    with wirespeed.Receiver("127.0.0.1:0", size=size, once=True, rcvbuf="32M") as rx:
        assert rx.port and rx.running
        sender = threading.Thread(target=send, args=(rx.port, "--size", str(size), "--count", str(n), "--rate", "50kpps"))
        sender.start()
        seqs, batches = [], 0
        for batch in rx:
            with batch:
                batches += 1
                assert batch.payloads.shape == (len(batch), size)
                assert (batch.lengths == size).all() and (batch.status == 0).all()
                # The header's number is the format's, and the payload carries it too.
                assert (counter_first_words(batch, size) == batch.seq).all()
                assert all(s.startswith("127.0.0.1:") for s in batch.sources)
                seqs.append(batch.seq.copy())
        sender.join()
        led = rx.ledger()
    seqs = np.concatenate(seqs)
    assert len(seqs) == n, "every datagram handed over"
    assert (np.sort(seqs) == np.arange(n)).all()
    assert led["final"] and not led["running"]
    assert (led["received"], led["lost"], led["datagrams"]) == (n, 0, n)
    assert (led["delivered"], led["datagrams_dropped"], led["batches_dropped"]) == (n, 0, 0)
    assert led["records_taken"] == n and led["batches_taken"] == batches
    assert led["report"]["schema"] == "wirespeed.recv/1"
    assert led["stopped_by"] == "end of stream"


def test_batch_views_are_the_ring_and_stay_valid_until_released():
    with wirespeed.Receiver("127.0.0.1:0", size=256, count=1000, ring="1M") as rx:
        send(rx.port, "--size", "256", "--count", "1000", "--rate", "20kpps")
        assert rx.join(30)
        b = rx.next_batch(timeout=5, max_records=100)
        assert len(b) == 100
        p = b.payloads
        assert not p.flags.writeable and not p.flags.owndata
        first = p.copy()
        held = b.payload(7)
        b.release()
        with pytest.raises(wirespeed.UsageError, match="released"):
            b.payloads
        # An array taken before release still holds its memory: same bytes.
        assert held.tobytes() == first[7].tobytes()
        del held, p
        rest = 0
        while (x := rx.next_batch(timeout=5)) is not None:
            rest += len(x)
            x.release()
        assert rest == 900
        assert rx.finished


def test_a_slow_consumer_loses_counted_batches_and_the_ledger_stays_exact():
    n, size = 20000, 1024
    # A 1 MiB ring holds 978 records of 1072 bytes; the consumer reads nothing until the end.
    rx = wirespeed.Receiver("127.0.0.1:0", size=size, once=True, ring="1M")
    try:
        send(rx.port, "--size", str(size), "--count", str(n), "--rate", "50kpps")
        assert rx.join(60), "the capture never waits for the consumer"
        taken = 0
        while (b := rx.next_batch(timeout=5)) is not None:
            assert (counter_first_words(b, size) == b.seq).all()
            taken += len(b)
            b.release()
        led = rx.ledger()
    finally:
        rx.close()
    assert (led["received"], led["lost"], led["datagrams"]) == (n, 0, n), "the capture's ledger is exact"
    assert led["delivered"] == taken == 1024 * 1024 // (48 + size)
    assert led["datagrams_dropped"] == n - taken
    assert led["batches_dropped"] > 0
    assert led["delivered"] + led["datagrams_dropped"] + led["oversize"] == led["datagrams"]


def test_two_capture_threads_each_with_its_ring():
    n = 4000
    with wirespeed.Receiver("127.0.0.1:0", size=512, once=True, threads=2) as rx:
        sender = threading.Thread(target=send, args=(rx.port, "--size", "512", "--count", str(n), "--streams", "4", "--rate", "20kpps"))
        sender.start()
        per_source = {}
        for b in rx:
            for s, q in zip(b.sources, b.seq.tolist()):
                per_source.setdefault(s, []).append(q)
            b.release()
        sender.join()
        led = rx.ledger()
    assert len(per_source) == 4
    assert all(sorted(v) == list(range(n)) for v in per_source.values())
    assert (led["received"], led["lost"]) == (4 * n, 0)
    assert len(led["report"]["threads"]) == 2


def test_tap_reads_a_live_ring(tmp_path, monkeypatch):
    share = tmp_path / "share"
    share.mkdir()
    monkeypatch.setenv("WIRESPEED_SHARE_DIR", str(share))
    env = dict(os.environ)
    name = f"pytest{os.getpid()}"
    r = Spawned(
        "record",
        ["--size", "512", "--file-format", "pcap", "-o", str(tmp_path), "--share", name, "--once", "--buffer", "64M"],
        env=env,
    )
    t = None
    try:
        deadline = time.time() + 10
        while not (share / f"{name}.json").exists() and time.time() < deadline:
            time.sleep(0.05)
        t = wirespeed.tap(name, start="oldest")
        assert t.recorder_pid == r.proc.pid
        send(r.port, "--size", "512", "--count", "3000", "--rate", "20kpps")
        seqs = []
        for b in t:
            assert (b.lengths == 512).all()
            assert (counter_first_words(b, 512) == b.seq).all()
            seqs.extend(b.seq.tolist())
            b.release()
        assert t.ended_by == "recorder ended"
        rep = t.close()
    finally:
        code, _, err = r.finish()
    assert code == 0, err
    assert sorted(seqs) == list(range(3000))
    assert rep["schema"] == "wirespeed.tap/1"
    assert rep["records"] == 3000 and rep["tap_overrun"]["records"] == 0
    assert (rep["total"]["received"], rep["total"]["lost"]) == (3000, 0)
