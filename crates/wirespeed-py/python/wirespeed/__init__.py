"""wirespeed from Python.

- ``wirespeed.open(path)``: a recording made by ``wirespeed record`` (a file or a directory):
  its sidecar ledger as a dict, its records as numpy arrays mapped from the files (no copy),
  pcap time stamps and sources, VDIF/Mark5B header fields as arrays.
- ``wirespeed.verify(path)``: the report ``wirespeed verify --json`` gives, as a dict.
- ``wirespeed.Receiver(listen, ...)``: ``wirespeed recv`` on a native thread; batches of
  datagrams as numpy views of its RAM ring, valid until released; the live ledger.
- ``wirespeed.tap(name)``: a live ring of ``wirespeed record --share NAME``, batch by batch.

Every failure raises ``WirespeedError`` (``UsageError``, a subclass, for bad arguments or input)
with one line saying what is wrong and what to do. The class says the kind, and each is also the
matching built-in: ``InvalidValueError`` and ``BadDataError`` are ``ValueError``\ s,
``NotFoundError`` a ``FileNotFoundError``, ``PermissionDeniedError`` a ``PermissionError``,
``BusyError``, ``UnsupportedError`` and ``IOFailedError`` ``OSError``\ s, ``PeerError`` a
``ConnectionError``, ``RunFailedError`` a ``RuntimeError``. A bad argument's name is ``.param``. The parsing, checking and accounting are the
Rust library's own (``wirespeed._native``); this module shapes its results as numpy arrays.
"""

from __future__ import annotations

import ipaddress
import json
import os
from typing import Iterator, Optional, Sequence, Union

import numpy as np

from . import _native
from ._native import (
    BadDataError,
    BusyError,
    IOFailedError,
    InvalidValueError,
    NotFoundError,
    PeerError,
    PermissionDeniedError,
    RunFailedError,
    UnsupportedError,
    UsageError,
    WirespeedError,
)

__all__ = [
    "BadDataError",
    "Batch",
    "BusyError",
    "IOFailedError",
    "InvalidValueError",
    "NotFoundError",
    "PeerError",
    "PermissionDeniedError",
    "Receiver",
    "Recording",
    "RecordingFile",
    "RunFailedError",
    "Selection",
    "Tap",
    "UnsupportedError",
    "UsageError",
    "WirespeedError",
    "open",
    "open_scan",
    "tap",
    "verify",
]

__version__ = _native.VERSION

PathArg = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

_F = _native.BATCH_FIELDS
_H = _native.BATCH_HEADER_LEN


def _paths(path: PathArg) -> list:
    if isinstance(path, (str, bytes, os.PathLike)):
        return [os.fsdecode(path)]
    return [os.fsdecode(p) for p in path]


def verify(path: PathArg, *, format: Optional[str] = None, window: int = 65536) -> dict:
    """Re-read a recording and compare it with its sidecars: the same document as
    ``wirespeed verify --json PATH`` (schema ``wirespeed.verify/2``).

    ``path`` is a file, a directory (read as one recording, in name order) or a list of them;
    ``format`` checks files that have no sidecar (e.g. ``"counter,size=8800"``).
    """
    return json.loads(_native.verify_paths(_paths(path), format, window))


def open(path: PathArg, *, format: Optional[str] = None) -> "Recording":  # noqa: A001
    """Open a recording made by ``wirespeed record``: a file, or a directory of them.

    ``format`` says what a file without a sidecar holds (e.g. another tool's pcap).
    """
    return Recording(_native.open_paths(_paths(path), format))


def open_scan(scan: str, mounts, *, format: Optional[str] = None) -> "Recording":
    """Open a scan scattered over mount points (recorded by ``wirespeed record --scan``,
    ``wirespeed station``, jive5ab or a Mark6) as one recording in number order: a FlexBuff
    scan's chunks ``<mount>/<SCAN>/<SCAN>.NNNNNNNN`` as files, a Mark6 scan's blocks as pieces of
    its disks' files, each mapped where it lies. ``mounts`` is a list of directories (or one glob
    such as ``"/mnt/disk*"``). A scan without sidecars is read by the format learned from its
    frames, unless ``format`` is given.
    """
    if isinstance(mounts, (str, os.PathLike)):
        mounts = [mounts]
    return Recording(_native.open_scan_native(scan, [os.fspath(m) for m in mounts], format))


def _empty_mmap_safe(path: str, nbytes: int, offset: int = 0):
    """``nbytes`` of the file from ``offset`` mapped read-only as bytes (an empty array for
    nothing, which cannot be mapped)."""
    if nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r", offset=offset, shape=(nbytes,))


def _column(dtype_and_bytes) -> np.ndarray:
    dtype, raw = dtype_and_bytes
    return np.frombuffer(raw, dtype=np.dtype(dtype))


class RecordingFile:
    """One file of a recording.

    Attributes: ``path``, ``sidecar`` (its sidecar as a dict, or None), ``sidecar_error``,
    ``file_format`` (``"raw"`` or ``"pcap"``), ``format`` (the format checking its records),
    ``stream_format`` (the format it was recorded as), ``record_len`` (raw files), ``offset``
    and ``bytes`` (where its records lie in the file: all of it, or a Mark6 block), ``part`` (a
    ``.part`` file the recorder never finished), ``header`` (``"vdif"``,
    ``"mark5b"`` or None).
    """

    def __init__(self, native, index: int, meta: dict):
        self._native = native
        self._index = index
        self.path: str = meta["path"]
        self.sidecar: Optional[dict] = meta["sidecar"]
        self.sidecar_path: Optional[str] = meta["sidecar_path"]
        self.sidecar_error: Optional[str] = meta["sidecar_error"]
        self.file_format: str = meta["file_format"]
        self.format: str = meta["format"]
        self.stream_format: str = meta["stream_format"]
        self.record_len: Optional[int] = meta["record_len"]
        self.offset: int = meta["offset"]
        self.bytes: int = meta["bytes"]
        self.part: bool = meta["part"]
        self.header: Optional[str] = meta["header"]
        self._raw_records = meta["records"]
        self._trailing = meta["trailing_bytes"]
        self._map = None
        self._index_cache = None
        self._headers = None

    def __repr__(self) -> str:
        return f"<wirespeed.RecordingFile {self.path!r} {self.file_format} {self.records} records of {self.format}>"

    @property
    def ledger(self) -> Optional[dict]:
        """The sidecar's ledger of the records in this file: ``streams`` (per source and
        stream: counts, first and last sequence, gap ranges, segments) and ``total``; None
        without a sidecar."""
        if self.sidecar is None:
            return None
        return {"streams": self.sidecar["streams"], "total": self.sidecar["total"]}

    def _mapped(self) -> np.ndarray:
        if self._map is None:
            self._map = _empty_mmap_safe(self.path, self.bytes, self.offset)
        return self._map

    def _pcap(self) -> dict:
        if self.file_format != "pcap":
            raise InvalidValueError(f"{self.path} is a raw file: it keeps no time stamps or sources (record with file_format pcap)")
        if self._index_cache is None:
            self._index_cache = self._native.pcap_index(self._index)
        return self._index_cache

    @property
    def records(self) -> int:
        """Records in the file (whole ones)."""
        if self.file_format == "raw":
            return int(self._raw_records or 0)
        return len(self._pcap()["record_offsets"][1]) // 8

    @property
    def trailing_bytes(self) -> int:
        """Bytes after the last whole record."""
        if self.file_format == "raw":
            return int(self._trailing or 0)
        return int(self._pcap()["trailing_bytes"])

    @property
    def lengths(self) -> np.ndarray:
        """Payload bytes of each record (pcap: 0 for a record that is not a whole UDP datagram)."""
        if self.file_format == "raw":
            return np.full(self.records, self.record_len, dtype=np.uint32)
        return _column(self._pcap()["lengths"])

    @property
    def offsets(self) -> np.ndarray:
        """File offset of each record's payload."""
        if self.file_format == "raw":
            return np.arange(self.records, dtype=np.uint64) * np.uint64(self.record_len)
        return _column(self._pcap()["payload_offsets"])

    @property
    def readable(self) -> np.ndarray:
        """Whether each record is a whole UDP datagram (raw files: all are)."""
        if self.file_format == "raw":
            return np.ones(self.records, dtype=bool)
        return _column(self._pcap()["readable"])

    @property
    def time_ns(self) -> np.ndarray:
        """Receive time of each record, ns since the Unix epoch (pcap files only)."""
        return _column(self._pcap()["time_ns"])

    @property
    def sources(self) -> np.ndarray:
        """Source ``address:port`` of each record (pcap files only; ``""`` for a record that
        is not a UDP datagram)."""
        idx = self._pcap()
        names = np.array(list(idx["source_names"]) + [""], dtype=object)
        ids = _column(idx["source_ids"]).astype(np.int64)
        ids[ids == 0xFFFFFFFF] = len(names) - 1
        return names[ids]

    @property
    def payloads(self):
        """The records' payloads, mapped from the file (read-only, no copy).

        A 2-D ``uint8`` array (records x bytes) when every record has the same length at the
        same spacing (raw files; pcap files of one datagram size); otherwise a list with one
        1-D view per record (None for a record that is not a whole UDP datagram).
        """
        m = self._mapped()
        n = self.records
        if self.file_format == "raw":
            return m[: n * self.record_len].reshape(n, self.record_len)
        offs, lens, ok = self.offsets, self.lengths, self.readable
        if n == 0:
            return np.zeros((0, 0), dtype=np.uint8)
        if ok.all() and (lens == lens[0]).all():
            step = np.diff(offs)
            if n == 1 or (step == step[0]).all():
                stride = int(step[0]) if n > 1 else int(lens[0])
                base = m[int(offs[0]):]
                return np.lib.stride_tricks.as_strided(
                    base, shape=(n, int(lens[0])), strides=(stride, 1), writeable=False
                )
        return [m[int(o) : int(o) + int(l)] if r else None for o, l, r in zip(offs, lens, ok)]

    def payload(self, i: int) -> np.ndarray:
        """Record ``i``'s payload, mapped from the file."""
        n = self.records
        if not -n <= i < n:
            raise IndexError(f"record {i} of {n}")
        i %= n
        o, l = int(self.offsets[i]), int(self.lengths[i])
        return self._mapped()[o : o + l]

    def headers(self) -> dict:
        """The VDIF or Mark5B header fields of every record, one numpy array per field (read
        by the library's header views). VDIF: ``header_ok``, ``invalid``, ``legacy``,
        ``seconds``, ``epoch``, ``frame``, ``version``, ``log2_chans``, ``frame_len``,
        ``complex``, ``bits_per_sample``, ``thread``, ``station``, ``edv``.
        Mark5B: ``header_ok``, ``user``, ``tvg``, ``frame``, ``mjd``, ``second_of_day``,
        ``fraction``, ``bcd_ok``, ``crc``, ``crc_ok``."""
        if self._headers is None:
            cols = self._native.header_columns(self._index)
            if cols is None:
                raise InvalidValueError(
                    f"{self.path} holds {self.format}, which has no VDIF or Mark5B header: use payloads instead"
                )
            self._headers = {name: _column((dtype, raw)) for name, dtype, raw in cols}
        return dict(self._headers)


def _edge(t, name: str):
    """A window edge for the native side: ``(ns, None)`` or ``(None, text)``."""
    import datetime as _dt

    if t is None:
        return None, None
    if isinstance(t, bool):
        raise InvalidValueError(f"{name}={t!r} is not a time")
    if isinstance(t, (int, np.integer)):
        if t < 0:
            raise InvalidValueError(f"{name}={t} is before 1970: give ns since the Unix epoch")
        return int(t), None
    if isinstance(t, np.datetime64):
        return int(t.astype("datetime64[ns]").astype(np.int64)), None
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        delta = t - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000, None
    if isinstance(t, str):
        return None, t
    raise InvalidValueError(
        f"{name}={t!r} is not a time: give a UTC time as a string ('2026-11-29T14:03:10Z', '-5m', 'ts:123'), "
        "a datetime, a numpy datetime64 or ns since the epoch"
    )


class Selection:
    """The records of a window of a recording (``Recording.between``): the same records, in the
    same order, as ``wirespeed extract`` writes, mapped from the files without a copy.

    ``records`` is how many; ``pieces`` a list of ``(RecordingFile, view)`` with one 2-D
    ``uint8`` view (records x bytes) per run of records that lie evenly spaced in one file (a
    raw file's window is one run per file); ``payloads`` the one view when there is one run,
    else one 1-D view per record; ``file_ids``, ``offsets``, ``lengths`` and ``time_ns``
    (arrival; 0 where unknown) are columns per record; ``ledger`` is the extract's ledger
    (schema wirespeed.extract/1: what was read, each stream's numbers and the holes the
    recording has in the window).
    """

    def __init__(self, rec: "Recording", ledger: dict, ids, offsets, lengths, times):
        self._rec = rec
        self.ledger: dict = ledger
        self.file_ids: np.ndarray = ids
        self.offsets: np.ndarray = offsets
        self.lengths: np.ndarray = lengths
        self.time_ns: np.ndarray = times

    def __repr__(self) -> str:
        return f"<wirespeed.Selection {self.records} records from {len(self.pieces)} piece(s)>"

    def __len__(self) -> int:
        return self.records

    @property
    def records(self) -> int:
        return int(len(self.offsets))

    @property
    def pieces(self) -> list:
        out = []
        n = self.records
        i = 0
        while i < n:
            f = int(self.file_ids[i])
            ln = int(self.lengths[i])
            j = i + 1
            step = None
            while j < n and int(self.file_ids[j]) == f and int(self.lengths[j]) == ln:
                s = int(self.offsets[j]) - int(self.offsets[j - 1])
                if step is None:
                    step = s
                elif s != step:
                    break
                j += 1
            rf = self._rec.files[f]
            m = rf._mapped()
            base = int(self.offsets[i]) - rf.offset
            stride = step if step is not None else ln
            view = np.lib.stride_tricks.as_strided(m[base:], shape=(j - i, ln), strides=(stride, 1), writeable=False)
            out.append((rf, view))
            i = j
        return out

    @property
    def payloads(self):
        pieces = self.pieces
        if len(pieces) == 1:
            return pieces[0][1]
        if not pieces:
            return np.zeros((0, 0), dtype=np.uint8)
        return [row for _, v in pieces for row in v]


class Recording:
    """A recording: its files in recording order (``files``), what was skipped, and shortcuts
    to the only file of a one-file recording (``payloads``, ``time_ns``, ``headers()``...)."""

    def __init__(self, native):
        self._native = native
        meta = json.loads(native.meta())
        self.files = [RecordingFile(native, i, m) for i, m in enumerate(meta["files"])]
        self.skipped: list = meta["skipped"]
        self._sidecar_total: dict = meta["sidecar_total"]

    def __repr__(self) -> str:
        return f"<wirespeed.Recording of {len(self.files)} file(s)>"

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[RecordingFile]:
        return iter(self.files)

    def __getitem__(self, i: int) -> RecordingFile:
        return self.files[i]

    def between(self, t0=None, t1=None, *, clock: str = "auto", stream: Optional[int] = None, seq=None) -> Selection:
        """The records from ``t0`` up to (not including) ``t1``, found through the files' time
        indexes as ``wirespeed extract`` finds them, as numpy views of the files.

        ``t0``/``t1``: a UTC time string (``"2026-11-29T14:03:10Z"``), ``"now"``, a time before
        now (``"-5m"``), ``"+30s"`` for ``t1`` (after ``t0``), ``"ts:N"`` (a SPEAD timestamp), a
        ``datetime`` (naive means UTC), a ``numpy.datetime64``, or ns since the epoch; None
        leaves that end open. ``clock``: ``"data"`` (the frames' own VDIF/Mark5B time, SPEAD
        timestamps), ``"arrival"``, or ``"auto"`` (data for VDIF and Mark5B). ``stream`` keeps one
        stream (VDIF thread); ``seq=(a, b)`` numbers a through b.
        """
        f0, s0 = _edge(t0, "t0")
        f1, s1 = _edge(t1, "t1")
        if seq is not None:
            seq = (int(seq[0]), int(seq[1]))
        raw = self._native.between(f0, s0, f1, s1, clock, stream, seq)
        ledger = json.loads(raw[0])
        return Selection(self, ledger, _column(raw[1]), _column(raw[2]), _column(raw[3]), _column(raw[4]))

    @property
    def sidecars(self) -> list:
        """Each file's sidecar (a dict, or None)."""
        return [f.sidecar for f in self.files]

    @property
    def ledger(self) -> dict:
        """The sidecar ledger. One file: its ``streams`` and ``total``. Several: ``total`` (the
        sidecars' counts added up) and ``files`` (each file's ledger); loss between files is
        seen only by ``verify``, which reads the files as one stream."""
        if len(self.files) == 1:
            led = self.files[0].ledger
            if led is None:
                raise InvalidValueError(f"{self.files[0].path} has no sidecar, so no ledger: use wirespeed.verify(path)")
            return led
        return {"total": self._sidecar_total, "files": [f.ledger for f in self.files]}

    def _one(self) -> RecordingFile:
        if len(self.files) != 1:
            raise InvalidValueError(f"this recording has {len(self.files)} files: use rec.files[i] (or iterate over rec)")
        return self.files[0]

    sidecar = property(lambda self: self._one().sidecar, doc="The sidecar of a one-file recording.")
    records = property(lambda self: sum(f.records for f in self.files), doc="Records in all files.")
    payloads = property(lambda self: self._one().payloads, doc="RecordingFile.payloads of a one-file recording.")
    lengths = property(lambda self: self._one().lengths, doc="RecordingFile.lengths of a one-file recording.")
    time_ns = property(lambda self: self._one().time_ns, doc="RecordingFile.time_ns of a one-file recording.")
    sources = property(lambda self: self._one().sources, doc="RecordingFile.sources of a one-file recording.")

    def headers(self) -> dict:
        """RecordingFile.headers() of a one-file recording."""
        return self._one().headers()


def _source_text(family: int, port: int, addr: np.ndarray) -> str:
    if family == 4:
        return f"{ipaddress.IPv4Address(bytes(addr[:4]))}:{port}"
    if family == 6:
        return f"[{ipaddress.IPv6Address(bytes(addr[:16]))}]:{port}"
    return ""


class Batch:
    """Datagrams of one batch, as numpy views of the memory they were received into.

    Arrays (one row per datagram): ``payloads`` (2-D ``uint8``, the longest datagram's width;
    bytes past ``lengths[i]`` are undefined), ``lengths``, ``time_ns`` (receive time, ns since
    the Unix epoch), ``seq`` and ``stream`` (the format's sequence number and stream id),
    ``status`` (0 valid; 1 wrong length, 2 bad header, 3 bad payload), ``ports``; ``sources``
    as ``address:port`` strings. Read-only views: copy what must outlive the batch.

    ``release()`` (or leaving a ``with batch:`` block) gives the memory back to the capture;
    arrays still held elsewhere keep it (and their contents) until they are gone.
    """

    def __init__(self, buf, records: int, stride: int):
        self._buf = buf
        self.records = records
        self.stride = stride
        base = np.frombuffer(memoryview(buf), dtype=np.uint8)
        self._rows = base.reshape(records, stride)

    def __repr__(self) -> str:
        state = "released" if self._rows is None else f"{self.records} datagrams"
        return f"<wirespeed.Batch {state}>"

    def __len__(self) -> int:
        return self.records

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        """Give the batch's memory back (once no array of it is held any more)."""
        self._rows = None
        self._buf = None

    @property
    def released(self) -> bool:
        return self._rows is None

    def _r(self) -> np.ndarray:
        if self._rows is None:
            raise InvalidValueError("this batch was released: take the arrays (or copies) before release()")
        return self._rows

    def _field(self, name: str, dtype: str) -> np.ndarray:
        at = _F[name]
        size = np.dtype(dtype).itemsize
        return self._r()[:, at : at + size].view(dtype)[:, 0]

    @property
    def lengths(self) -> np.ndarray:
        return self._field("len", "<u4")

    @property
    def time_ns(self) -> np.ndarray:
        return self._field("time_ns", "<u8")

    @property
    def seq(self) -> np.ndarray:
        return self._field("seq", "<u8")

    @property
    def stream(self) -> np.ndarray:
        return self._field("stream", "<u4")

    @property
    def status(self) -> np.ndarray:
        return self._field("status", "u1")

    @property
    def ports(self) -> np.ndarray:
        return self._field("port", "<u2")

    @property
    def sources(self) -> list:
        rows = self._r()
        fam, ports = self._field("family", "u1"), self.ports
        a = _F["addr"]
        return [_source_text(int(fam[i]), int(ports[i]), rows[i, a : a + 16]) for i in range(self.records)]

    @property
    def payloads(self) -> np.ndarray:
        rows = self._r()
        width = int(self.lengths.max()) if self.records else 0
        return rows[:, _H : _H + width]

    def payload(self, i: int) -> np.ndarray:
        """Datagram ``i``, exactly its length."""
        return self._r()[i, _H : _H + int(self.lengths[i])]


def _ledger(live: dict, report: Optional[dict]) -> dict:
    out = {"running": live["running"], **live["handover"]}
    if report is not None:
        t = report["total"]
        out.update(
            final=True,
            datagrams=report["datagrams"],
            bytes=report["bytes"],
            received=t["received"],
            lost=t["lost"],
            late=t["late"],
            duplicate=t["duplicate"],
            invalid=t["invalid"],
            stale=t["stale"],
            resync=t["resync"],
            streams=report["streams"],
            stopped_by=report["stopped_by"],
            report=report,
        )
    else:
        p = live["progress"] or {}
        out.update(final=False, elapsed_s=p.get("elapsed_s", 0.0), pps=p.get("pps", 0.0), bps=p.get("bps", 0.0))
        for k in ("datagrams", "lost", "late", "duplicate", "invalid", "socket_drops", "ring_full"):
            out[k] = p.get(k, 0)
    return out


class Receiver:
    """``wirespeed recv`` on a native capture thread, its datagrams handed over in batches.

    ``listen`` is a port, ``ADDR:PORT`` or ``GROUP:PORT`` (port 0: the kernel chooses; see
    ``port``). Keywords mirror ``wirespeed recv``'s options: ``format`` (a spec or preset),
    ``size``, ``rcvbuf``, ``batch`` (datagrams per receive call), ``window``, ``max_streams``,
    ``threads``, ``cpus``, ``cpu``, ``duration``, ``count``, ``once``, ``once_quiet``, ``backend``,
    ``coalesce``, ``busy_poll``, ``gro``; plus ``ring`` (RAM ring per capture thread, default
    ``"64M"``) and ``max_datagram`` (the slot for formats without a fixed length, default 9000).
    Sizes and durations take numbers or the command line's strings (``"64M"``, ``"250ms"``).

    The capture never waits for Python: datagrams that find the ring full (batches held or not
    yet taken) are counted (``datagrams_dropped``, ``batches_dropped`` in ``ledger()``) and
    still counted by the ledger, which stays exact. Use it as a context manager, or call
    ``close()``.
    """

    def __init__(self, listen: Union[int, str], **options):
        self._rx = _native.Receiver(listen, **options)

    def __repr__(self) -> str:
        state = "running" if self.running else "ended"
        return f"<wirespeed.Receiver {self.address} {self._rx.format} {state}>"

    def __enter__(self) -> "Receiver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    port = property(lambda self: self._rx.port, doc="The bound port.")
    address = property(lambda self: self._rx.address, doc="The bound address.")
    running = property(lambda self: self._rx.running, doc="Whether the capture is running.")
    finished = property(
        lambda self: self._rx.finished, doc="The capture ended and every batch it kept was taken."
    )

    def next_batch(self, timeout: Optional[float] = None, max_records: int = 4096) -> Optional[Batch]:
        """The next batch (at most ``max_records`` datagrams), waiting at most ``timeout``
        seconds (None: until one comes or the capture ends). None when the time ran out or the
        capture ended with nothing left (``finished``). The GIL is released while waiting."""
        v = self._rx.next_view(timeout, max_records)
        if v is None:
            return None
        return Batch(v, v.records, v.stride)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            b = self.next_batch()
            if b is None:
                return
            yield b

    def ledger(self) -> dict:
        """The live ledger: while running, the capture's counts (updated every 100 ms) and the
        hand-over's; once it ended, the exact totals, per-stream ledgers and the whole report
        (``report``: ``wirespeed recv --json``'s document)."""
        rep = self._rx.report()
        return _ledger(json.loads(self._rx.live()), json.loads(rep) if rep is not None else None)

    def report(self) -> Optional[dict]:
        """``wirespeed recv --json``'s document once the capture ended; None while it runs."""
        rep = self._rx.report()
        return json.loads(rep) if rep is not None else None

    def stop(self) -> None:
        """Ask the capture to stop (within 100 ms)."""
        self._rx.stop()

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for the capture to end (for ``count``, ``duration`` or ``once``); whether it did."""
        return self._rx.join(timeout)

    def close(self) -> dict:
        """Stop the capture, wait for it, and return the final ledger."""
        self._rx.stop()
        self._rx.join(None)
        return self.ledger()


class Tap:
    """A live ring of ``wirespeed record --share NAME``, read batch by batch (copies: the
    recorder may overwrite its ring at any time, and never waits for a tap). Iterate over it,
    or call ``next_batch()``; ``close()`` returns the report (``wirespeed tap --json``'s)."""

    def __init__(self, name: str, *, start: str = "newest", format: Optional[str] = None):
        self._t = _native.Tap(name, start=start, format=format)
        self._report = None

    def __repr__(self) -> str:
        return f"<wirespeed.Tap {self._t.name} (recorder pid {self._t.recorder_pid})>"

    def __enter__(self) -> "Tap":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    name = property(lambda self: self._t.name)
    recorder_pid = property(lambda self: self._t.recorder_pid)
    ended_by = property(lambda self: self._t.ended_by, doc="Why the tap is over, or None.")

    def next_batch(self, timeout: Optional[float] = None, max_records: int = 4096) -> Optional[Batch]:
        """The next batch, waiting at most ``timeout`` seconds (None: until one comes or the
        recorder ends). None when the time ran out or the tap is over (``ended_by``)."""
        got = self._t.next_batch(timeout, max_records)
        if got is None:
            return None
        buf, records, stride = got
        return Batch(buf, records, stride)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            b = self.next_batch()
            if b is None:
                return
            yield b

    def ledger(self) -> dict:
        """Live counts while reading (records, bytes, ``tap_overrun``, ``behind_bytes``); after
        ``close()``, the report with the per-stream ledger of every record read."""
        if self._report is not None:
            return self._report
        return json.loads(self._t.live())

    def close(self) -> dict:
        """Stop reading; the report (``wirespeed tap --json``'s document)."""
        if self._report is None:
            self._report = json.loads(self._t.close())
        return self._report


def tap(name: str, *, start: str = "newest", format: Optional[str] = None) -> Tap:
    """Attach to the live ring ``record --share NAME`` publishes. ``start="oldest"`` reads what
    the ring still holds first; ``"newest"`` (default) only what is published from now on."""
    return Tap(name, start=start, format=format)
