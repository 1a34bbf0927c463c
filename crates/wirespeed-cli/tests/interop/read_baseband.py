#!/usr/bin/env python3
"""Read a wirespeed raw recording with the independent `baseband` package and print what it
saw as one JSON line: frame count, first/last header times, threads, and frame-number continuity.

usage: read_baseband.py vdif FILE FRAMES_PER_SECOND
       read_baseband.py mark5b FILE FRAMES_PER_SECOND NCHAN BPS
Exit 0 when baseband read every frame without complaint, 1 otherwise (the reason is printed).
"""

import json
import sys

import astropy.units as u
from astropy.time import Time
from baseband import mark5b, vdif


def read_vdif(path, fps):
    frames = 0
    threads = {}
    first = last = None
    problems = []
    with vdif.open(path, "rb") as fh:
        while True:
            try:
                fr = fh.read_frame()
            except EOFError:
                break
            h = fr.header
            frames += 1
            t = h.get_time(frame_rate=fps * u.Hz)
            first = t if first is None else min(first, t)
            last = t if last is None else max(last, t)
            tid = h["thread_id"]
            pos = h["seconds"] * fps + h["frame_nr"]
            if tid in threads and pos != threads[tid] + 1:
                problems.append(f"thread {tid}: frame {pos} follows {threads[tid]}")
            threads[tid] = pos
            if h["frame_nr"] >= fps:
                problems.append(f"frame number {h['frame_nr']} >= {fps} frames/s")
            if fr.valid is False:
                problems.append("a frame is marked invalid")
    # The stream reader checks header consistency across the whole file as well. It expects
    # the threads of one frame number together (a frame set); independent senders interleave
    # threads as they arrive, so it is used on single-thread files only.
    nthreads = max(len(threads), 1)
    start = stop = None
    samples = None
    if nthreads == 1:
        with vdif.open(path, "rs", sample_rate=_vdif_rate(path, fps)) as sh:
            start, stop = sh.start_time.isot, sh.stop_time.isot
            samples = int(sh.read().shape[0])
    return {
        "kind": "vdif",
        "frames": frames,
        "threads": sorted(threads),
        "first": first.isot if first is not None else None,
        "last": last.isot if last is not None else None,
        "stream_start": start,
        "stream_stop": stop,
        "samples": samples,
        "frames_per_thread": frames // nthreads,
        "problems": problems,
    }


def _vdif_rate(path, fps):
    with vdif.open(path, "rb") as fh:
        h = fh.read_header()
    return fps * h.samples_per_frame * u.Hz


def read_mark5b(path, fps, nchan, bps):
    frames = 0
    first = last = None
    prev = None
    problems = []
    with mark5b.open(path, "rb", nchan=nchan, bps=bps, ref_time=Time.now()) as fh:
        while True:
            try:
                fr = fh.read_frame()
            except EOFError:
                break
            h = fr.header
            frames += 1
            t = h.get_time(frame_rate=fps * u.Hz)
            first = t if first is None else min(first, t)
            last = t if last is None else max(last, t)
            pos = (h["bcd_jday"], h["bcd_seconds"], h["frame_nr"])
            if prev is not None:
                want_nr = (prev[2] + 1) % fps
                if h["frame_nr"] != want_nr:
                    problems.append(f"frame {h['frame_nr']} follows {prev[2]}")
            prev = pos
            if h["user"] is None:
                problems.append("no user field")
    spf = 10000 * 8 // (nchan * bps)
    with mark5b.open(path, "rs", nchan=nchan, bps=bps, sample_rate=fps * spf * u.Hz, ref_time=Time.now()) as sh:
        start, stop = sh.start_time, sh.stop_time
        data = sh.read()
    return {
        "kind": "mark5b",
        "frames": frames,
        "first": first.isot if first is not None else None,
        "last": last.isot if last is not None else None,
        "stream_start": start.isot,
        "stream_stop": stop.isot,
        "samples": int(data.shape[0]),
        "problems": problems,
    }


def main():
    kind, path, fps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        if kind == "vdif":
            out = read_vdif(path, fps)
        else:
            out = read_mark5b(path, fps, int(sys.argv[4]), int(sys.argv[5]))
    except Exception as e:  # baseband complained: that is the finding
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps(out))
    return 1 if out["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
