"""Send VDIF or Mark5B frames written by the independent `baseband` package over UDP, one
frame per datagram: what an instrument's stream looks like to wirespeed, made without it.

usage: baseband_send.py vdif HOST:PORT --threads 2 --chans 1 --bits 2 --station Xx --fps 1000
                        --payload 1000 --seconds 2.2 [--edv 0|3] [--complex]
       baseband_send.py mark5b HOST:PORT --chans 1 --bits 2 --fps 400 --seconds 2.2 [--skip N]
--src-port P sends from that port (two runs from one port are one source changing layout).
--skip N leaves out every Nth datagram but none of the last 16 (loss injected where every
stream's ledger sees it: each VDIF thread's last frame arrives).
Prints one JSON line: datagrams sent and skipped."""
import argparse, io, json, socket, sys, time
import numpy as np
import astropy.units as u
from astropy.time import Time
from baseband import vdif, mark5b

p = argparse.ArgumentParser()
p.add_argument("kind", choices=["vdif", "mark5b"])
p.add_argument("target")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--chans", type=int, default=1)
p.add_argument("--bits", type=int, default=2)
p.add_argument("--station", default="Xx")
p.add_argument("--fps", type=int, default=1000)
p.add_argument("--payload", type=int, default=1000)
p.add_argument("--seconds", type=float, default=2.2)
p.add_argument("--edv", type=int, default=0)
p.add_argument("--complex", action="store_true")
p.add_argument("--skip", type=int, default=0)
p.add_argument("--src-port", type=int, default=0)
a = p.parse_args()

start = Time("2026-11-28T00:00:00", format="isot", scale="utc")
buf = io.BytesIO()
if a.kind == "vdif":
    per_sample = a.chans * a.bits * (2 if a.complex else 1)
    spf = a.payload * 8 // per_sample
    rate = spf * a.fps * u.Hz
    kw = dict(sample_rate=rate, samples_per_frame=spf, nchan=a.chans, bps=a.bits, complex_data=a.complex,
              station=a.station, nthread=a.threads, edv=a.edv, time=start)
    if a.edv == 3:
        kw.pop("samples_per_frame")
        kw["frame_length"] = (a.payload + 32) // 8
    fh = vdif.open(buf, "ws", **kw)
    spf = fh.samples_per_frame
    shape = (spf,) + ((a.threads,) if a.threads > 1 else ()) + ((a.chans,) if a.chans > 1 else ())
    frame_len = fh.header0.frame_nbytes
    nframes = int(a.seconds * a.fps)
else:
    rate = a.fps * 10000 * 8 // (a.chans * a.bits) * u.Hz
    fh = mark5b.open(buf, "ws", sample_rate=rate, nchan=a.chans, bps=a.bits, time=start)
    spf = fh.samples_per_frame
    shape = (spf, a.chans) if a.chans > 1 else (spf,)
    frame_len = 10016
    nframes = int(a.seconds * a.fps)
dtype = np.complex64 if a.complex else np.float32
rng = np.random.default_rng(1)
for _ in range(nframes):
    d = rng.standard_normal(shape).astype(np.float32)
    fh.write(d.astype(dtype) if not a.complex else (d + 1j * d).astype(dtype))
fh.flush() if hasattr(fh, "flush") else None
data = buf.getvalue()
host, port = a.target.rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if a.src_port:
    s.bind((host, a.src_port))
sent = skipped = 0
for i in range(len(data) // frame_len):
    if a.skip and i % a.skip == a.skip - 1 and i < len(data) // frame_len - 16:
        skipped += 1
        continue
    s.sendto(data[i * frame_len:(i + 1) * frame_len], (host, int(port)))
    sent += 1
    if sent % 200 == 0:
        time.sleep(0.002)
print(json.dumps({"sent": sent, "skipped": skipped, "frame_bytes": frame_len, "frames": len(data) // frame_len}))
