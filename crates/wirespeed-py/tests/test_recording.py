"""Recordings opened from Python: the sidecar ledger, verify, numpy views of the files, VDIF
and Mark5B headers against the independent `baseband` package."""

import json
import socket
import struct

import numpy as np
import pytest

import wirespeed
from conftest import record, run


def only(directory, ext):
    files = [p for p in directory.iterdir() if p.name.endswith(ext)]
    assert len(files) == 1, files
    return files[0]


def test_open_equals_verify_json(tmp_path):
    # Ten numbers left out on purpose by the sender: a ledger with a gap to compare.
    record(tmp_path, ["--size", "1024"], ["--count", "3000", "--rate", "20kpps", "--skip", "100..109"], lost=10)
    rec = wirespeed.open(tmp_path)
    cli = json.loads(run("verify", "--json", str(tmp_path), check=False).stdout)
    py = wirespeed.verify(tmp_path)
    assert py == cli, "wirespeed.verify() is `wirespeed verify --json`"
    assert len(rec.files) == 1 and cli["files"][0]["path"] == rec.files[0].path
    # The sidecar's ledger, as opened, is the ledger verify finds by re-reading the file.
    assert rec.ledger["streams"] == cli["files"][0]["streams"]
    assert rec.ledger["total"] == cli["files"][0]["total"] == cli["total"]
    assert rec.ledger["total"]["received"] == 2990
    assert rec.ledger["total"]["lost"] == 10
    assert rec.ledger["streams"][0]["gaps"] == [{"first": 100, "last": 109, "count": 10}]
    assert rec.sidecar["schema"] == "wirespeed.recording/2"
    assert rec.sidecar["records"] == rec.records == 2990


def test_raw_payloads_are_the_file_mapped(tmp_path):
    record(tmp_path, ["--size", "1024"], ["--count", "2000", "--rate", "20kpps"])
    rec = wirespeed.open(tmp_path)
    f = rec.files[0]
    data = f.path and open(f.path, "rb").read()
    p = f.payloads
    assert p.shape == (2000, 1024) and p.dtype == np.uint8
    assert p.tobytes() == data
    assert not p.flags.writeable and not p.flags.owndata
    assert isinstance(p.base, np.memmap) or isinstance(p.base.base, np.memmap), "a view of the mapped file"
    # The CASPER counter: word j of datagram n is n * 128 + j, big-endian.
    words = p.view(">u8")
    assert (words[:, 0] == np.arange(2000, dtype=np.uint64) * 128).all()
    assert (f.lengths == 1024).all() and f.trailing_bytes == 0
    with pytest.raises(wirespeed.UsageError, match="raw file"):
        f.time_ns


def parse_pcap(data):
    """An independent reading of a pcap of raw IPv4 records, with struct: (time_ns, source,
    payload offset, payload length) per record."""
    magic, = struct.unpack_from("<I", data, 0)
    assert magic == 0xA1B23C4D
    at, out = 24, []
    while at + 16 <= len(data):
        sec, frac, cap, orig = struct.unpack_from("<IIII", data, at)
        ip = at + 16
        ihl = (data[ip] & 0x0F) * 4
        src = socket.inet_ntoa(data[ip + 12 : ip + 16])
        sport, = struct.unpack_from(">H", data, ip + ihl)
        ulen, = struct.unpack_from(">H", data, ip + ihl + 4)
        out.append((sec * 10**9 + frac, f"{src}:{sport}", ip + ihl + 8, ulen - 8))
        at = ip + cap
    return out


def test_pcap_time_stamps_sources_and_payloads(tmp_path):
    record(tmp_path, ["--size", "512"], ["--count", "1500", "--rate", "20kpps", "--streams", "2"],
           extra=["--file-format", "pcap"])
    rec = wirespeed.open(tmp_path)
    f = rec.files[0]
    data = open(f.path, "rb").read()
    want = parse_pcap(data)
    assert f.records == len(want) == 3000
    assert f.time_ns.tolist() == [w[0] for w in want]
    assert f.sources.tolist() == [w[1] for w in want]
    assert len(set(f.sources)) == 2
    assert f.offsets.tolist() == [w[2] for w in want]
    assert (f.lengths == 512).all()
    p = f.payloads
    assert p.shape == (3000, 512) and not p.flags.writeable
    for i in (0, 1, 1234, 2999):
        o = want[i][2]
        assert p[i].tobytes() == data[o : o + 512]
        assert f.payload(i).tobytes() == data[o : o + 512]
    assert (np.diff(f.time_ns.astype(np.int64)) >= 0).all()


def baseband_vdif_frames(path):
    from baseband import vdif

    frames = []
    with vdif.open(str(path), "rb") as fh:
        while True:
            try:
                fr = fh.read_frame()
            except EOFError:
                return frames
            frames.append(fr)


def test_baseband_reads_the_vdif_the_api_returns(tmp_path):
    fmt = "vdif,frame=8032,threads=2,fps=1000"
    record(tmp_path, ["--format", fmt], ["--streams", "2", "--count", "300", "--rate", "2000pps"])
    rec = wirespeed.open(tmp_path)
    f = rec.files[0]
    assert f.header == "vdif" and f.path.endswith(".vdif")
    h = f.headers()
    frames = baseband_vdif_frames(f.path)
    assert len(frames) == f.records == 600
    assert h["header_ok"].all()
    assert h["seconds"].tolist() == [fr.header["seconds"] for fr in frames]
    assert h["frame"].tolist() == [fr.header["frame_nr"] for fr in frames]
    assert h["thread"].tolist() == [fr.header["thread_id"] for fr in frames]
    assert h["station"].tolist() == [fr.header["station_id"] for fr in frames]
    assert h["frame_len"].tolist() == [fr.header.frame_nbytes for fr in frames]
    assert h["bits_per_sample"].tolist() == [fr.header.bps for fr in frames]
    assert h["epoch"].tolist() == [fr.header["ref_epoch"] for fr in frames]
    assert sorted(set(h["thread"].tolist())) == [0, 1]
    # The payload words baseband decodes from are the bytes the API maps.
    p = f.payloads
    for i in range(0, 600, 37):
        assert (p[i, 32:].view("<u4") == frames[i].payload.words).all()


def test_baseband_reads_the_mark5b_the_api_returns(tmp_path):
    from astropy.time import Time
    from baseband import mark5b

    record(tmp_path, ["--format", "mark5b,fps=1000"], ["--count", "200", "--rate", "1000pps"])
    rec = wirespeed.open(tmp_path)
    h = rec.headers()
    frames = []
    with mark5b.open(rec.files[0].path, "rb", nchan=8, bps=2, ref_time=Time.now()) as fh:
        while True:
            try:
                frames.append(fh.read_frame())
            except EOFError:
                break
    assert len(frames) == rec.records == 200
    assert h["header_ok"].all() and h["crc_ok"].all() and h["bcd_ok"].all()
    assert h["frame"].tolist() == [fr.header["frame_nr"] for fr in frames]
    assert h["user"].tolist() == [fr.header["user"] for fr in frames]
    assert h["tvg"].tolist() == [bool(fr.header["internal_tvg"]) for fr in frames]
    assert h["mjd"].tolist() == [fr.header.jday for fr in frames]
    assert h["second_of_day"].tolist() == [fr.header.seconds for fr in frames]
    p = rec.payloads
    assert p.shape == (200, 10016)
    for i in (0, 99, 199):
        assert (p[i, 16:].view("<u4") == frames[i].payload.words).all()


def test_counter_recordings_have_no_instrument_headers(tmp_path):
    record(tmp_path, ["--size", "64"], ["--count", "10", "--rate", "1000pps"])
    with pytest.raises(wirespeed.UsageError, match="no VDIF or Mark5B header"):
        wirespeed.open(tmp_path).headers()


SCAN_SPEC = "vdif,frame=8032,threads=1,station=WS,bits=2,chans=4,complex=0,fps=32000,fill=counter"


def record_scan(tmp_path, name, *layout):
    """400 VDIF frames recorded as scan `name` over two disks in 256 KiB chunks (31 frames
    each); the disks."""
    from conftest import Spawned, send

    disks = [tmp_path / "d0", tmp_path / "d1"]
    for d in disks:
        d.mkdir()
    r = Spawned(
        "record",
        ["--format", SCAN_SPEC, "-o", str(disks[0]), "-o", str(disks[1]), "--scan", name, *layout,
         "--chunk-size", "256K", "--once", "--json", "--buffer", "16M", "--block", "256K", "--duration", "60"],
    )
    send(r.port, "--preset", "vdif", "--count", "400", "--rate", "100M")
    code, out, err = r.finish()
    assert code == 0, err
    return disks


def frames_in_order(data, n):
    words = np.frombuffer(data, dtype="<u4").reshape(n, 2008).astype(np.int64)
    seq = (words[:, 0] & 0x3FFFFFFF) * 32000 + (words[:, 1] & 0xFFFFFF)
    return (seq - seq[0] == np.arange(n)).all()


def test_a_flexbuff_scan_opens_as_one_recording_in_chunk_order(tmp_path):
    """A scan over two disks, its chunks alternating between them: `open_scan` reads them in
    chunk order, and its payloads are exactly what `wirespeed gather` writes."""
    disks = record_scan(tmp_path, "py1")
    rec = wirespeed.open_scan("py1", [str(d) for d in disks])
    assert len(rec.files) == 13, [f.path for f in rec.files]  # 400 frames, 31 a chunk
    assert [f.path.rsplit(".", 1)[1] for f in rec.files] == [f"{i:08}" for i in range(13)]
    assert rec.ledger["total"]["received"] == 400 and rec.ledger["total"]["lost"] == 0
    gathered = tmp_path / "all.vdif"
    run("gather", "py1", "--from", str(disks[0]), str(disks[1]), "-w", str(gathered))
    data = b"".join(f.payloads.tobytes() for f in rec.files)
    assert data == gathered.read_bytes()
    assert frames_in_order(data, 400), "frames in order across the chunks"


def test_a_mark6_scan_opens_block_by_block_where_the_blocks_lie(tmp_path):
    """A Mark6 scan over two disks: `open_scan` maps each block inside its disk's file, in block
    order, and the payloads are what `wirespeed gather` writes."""
    disks = record_scan(tmp_path, "m6", "--layout", "mark6")
    rec = wirespeed.open_scan("m6", [str(d) for d in disks])
    assert len(rec.files) == 13 and sum(f.records for f in rec.files) == 400
    assert all(f.offset >= 28 for f in rec.files), "past the file and block headers"
    gathered = tmp_path / "all.vdif"
    run("gather", "m6", "--from", str(disks[0]), str(disks[1]), "-w", str(gathered))
    data = b"".join(f.payloads.tobytes() for f in rec.files)
    assert data == gathered.read_bytes()
    assert frames_in_order(data, 400), "frames in order across the blocks"


VDIF3 = "vdif,frame=1032,threads=3,fps=2000,epoch=52,start=0"


def vdif_ids(frames):
    """(thread, frame number since 2026-01-01) of each 1032-byte VDIF frame, from its header."""
    w = frames[:, :16].copy().view("<u4")
    secs = (w[:, 0] & 0x3FFFFFFF).astype(np.uint64)
    return (w[:, 3] >> 16) & 0x3FF, secs * 2000 + (w[:, 1] & 0xFFFFFF)


def test_between_gives_the_records_extract_writes_as_views(tmp_path):
    d = tmp_path / "rec"
    d.mkdir()
    # 3 threads x 6000 frames (3 s from 2026-01-01T00:00:00Z) in 1 MiB files.
    record(d, ["--format", VDIF3], ["--streams", "3", "--count", "6000", "--start-seq", "0"], extra=("--file-size", "1M"))
    rec = wirespeed.open(d)
    assert len(rec.files) > 10
    sel = rec.between("2026-01-01T00:00:01.25Z", "+0.75s", stream=1)
    assert sel.records == len(sel) == 1500
    threads, numbers = vdif_ids(np.concatenate([v for _, v in sel.pieces]))
    assert (threads == 1).all() and (numbers == np.arange(2500, 4000)).all()
    # Views of the mapped files, not copies; one evenly spaced run per file.
    for f, v in sel.pieces:
        assert not v.flags.owndata and not v.flags.writeable and v.shape[1] == 1032
    # The same bytes as `wirespeed extract`, and the same ledger.
    out = tmp_path / "win.vdif"
    run("extract", str(d), "--from", "2026-01-01T00:00:01.25Z", "--to", "+0.75s", "--stream", "1", "-w", str(out))
    assert b"".join(v.tobytes() for _, v in sel.pieces) == out.read_bytes()
    led = json.loads((tmp_path / "win.vdif.json").read_text())
    assert sel.ledger["streams"] == led["streams"] and sel.ledger["records"] == 1500
    # Every thread: the window's frames of all three, in file order.
    all3 = rec.between("2026-01-01T00:00:01.25Z", "2026-01-01T00:00:02Z")
    assert all3.records == 4500 and all3.ledger["total"]["lost"] == 0
    # datetime, numpy datetime64 and ns since the epoch name the same instants.
    import datetime

    t0 = datetime.datetime(2026, 1, 1, 0, 0, 1, 250000)
    t1 = np.datetime64("2026-01-01T00:00:02")
    ns0 = int(np.datetime64("2026-01-01T00:00:01.25").astype("datetime64[ns]").astype(np.int64))
    for a, b in [(t0, t1), (ns0, t1), (t0.replace(tzinfo=datetime.timezone.utc), "2026-01-01T00:00:02Z")]:
        assert rec.between(a, b, stream=1).records == 1500
    # By numbers alone.
    assert rec.between(seq=(100, 199), stream=2).records == 100
    # A window with nothing in it: no records, and the ledger says what the window should hold.
    empty = rec.between("2026-01-01T00:00:05Z", "+1s")
    assert empty.records == 0 and empty.pieces == []
    assert [g["count"] for g in empty.ledger["missing_at_edges"]] == [2000, 2000, 2000]


def test_between_refuses_bad_times_with_one_line(tmp_path):
    record(tmp_path, ["--size", "1024"], ["--count", "100"])
    rec = wirespeed.open(tmp_path)
    with pytest.raises(wirespeed.InvalidValueError, match="is not a time"):
        rec.between("yesterday")
    with pytest.raises(wirespeed.InvalidValueError, match="clock"):
        rec.between("-1h", clock="sideways")
    with pytest.raises(wirespeed.InvalidValueError, match="empty"):
        rec.between("now", "-1h", clock="arrival")
    with pytest.raises(wirespeed.InvalidValueError, match="not a time"):
        rec.between(3.5)
    # A counter stream has no time of its own; its arrival times do.
    assert rec.between("-1h", "+2h").records == 100
