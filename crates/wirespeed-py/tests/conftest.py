"""Helpers for the Python package's tests: the built `wirespeed` binary, recorders started on a
port the kernel chooses, senders to loopback. Traffic goes to 127.0.0.1 only."""

import json
import os
import pathlib
import subprocess
import threading

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def binary() -> str:
    b = os.environ.get("WIRESPEED_BIN") or str(REPO / "target" / "release" / "wirespeed")
    if not os.access(b, os.X_OK):
        raise RuntimeError(f"{b} is not built: run `cargo build --release -p wirespeed-cli` (or set WIRESPEED_BIN)")
    return b


def run(*args, check=True, timeout=120) -> subprocess.CompletedProcess:
    p = subprocess.run([binary(), *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"wirespeed {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


class Spawned:
    """A `wirespeed record|recv 127.0.0.1:0 ...` child and the port it reported."""

    def __init__(self, sub: str, args, env=None):
        self.proc = subprocess.Popen(
            [binary(), sub, "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        first = self.proc.stderr.readline()
        try:
            addr = first.split("listening on ")[1].split()[0]
            self.port = int(addr.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            self.proc.kill()
            raise AssertionError(f"wirespeed {sub} did not report its port: {first!r} {self.proc.stderr.read()}")
        self._err = [first]
        self._t = threading.Thread(target=lambda: self._err.append(self.proc.stderr.read()), daemon=True)
        self._t.start()

    def finish(self, timeout=120):
        try:
            out = self.proc.stdout.read()
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._t.join(5)
        return self.proc.returncode, out, "".join(self._err)


def send(port: int, *args):
    return run("send", f"127.0.0.1:{port}", *args)


def record(directory, format_args, send_args, extra=(), lost=0):
    """Record what one `wirespeed send` sends (`--once`) into `directory`; the record report,
    whose ledger must show exactly `lost` lost (what the sender skipped on purpose)."""
    r = Spawned(
        "record",
        [*format_args, "-o", str(directory), "--once", "--json", "--buffer", "64M", "--block", "1M",
         "--duration", "60", "--rcvbuf", "64M", *extra],
    )
    send(r.port, *format_args, *send_args)
    code, out, err = r.finish()
    assert code == 0, err
    rep = json.loads(out)
    assert rep["capture"]["total"]["lost"] == lost, out
    return rep


@pytest.fixture
def tmpdir_path(tmp_path):
    return tmp_path
