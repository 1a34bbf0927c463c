"""Bad input raises one Python exception with one clear line, never a crash."""

import errno
import socket

import pytest

import wirespeed


def one_line(excinfo, *needles):
    msg = str(excinfo.value)
    assert "\n" not in msg and msg.strip() == msg and msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_missing_path(tmp_path):
    for call in (wirespeed.open, wirespeed.verify):
        with pytest.raises(wirespeed.UsageError) as e:
            call(tmp_path / "nowhere")
        one_line(e, "cannot read", "nowhere")


def test_not_a_recording(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.open(f)
    one_line(e, "cannot tell what", "format=")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.open(tmp_path)
    one_line(e, "holds no recordings")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.verify(empty)
    one_line(e, "holds no recordings")


def test_a_damaged_pcap_is_reported_not_a_crash(tmp_path):
    f = tmp_path / "x.pcap"
    f.write_bytes(b"\x4d\x3c\xb2\xa1" + b"\0" * 10)
    rec = wirespeed.open(f, format="counter,size=64")
    assert rec.files[0].records == 0
    assert rec.files[0].trailing_bytes == 14
    report = wirespeed.verify(f, format="counter,size=64")
    assert report["problems"] >= 1


def test_bad_arguments():
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.open(".", format="nonsense")
    one_line(e, "nonsense")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.verify(".", window=1000)
    one_line(e, "power of two")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.Receiver("not an address")
    one_line(e, "cannot read listen address")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.Receiver("127.0.0.1:0", format="vdif", size=100)
    one_line(e, "size=100 does not match")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.Receiver("127.0.0.1:0", ring="lots")
    one_line(e, "ring=")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.Receiver("127.0.0.1:0", count=0)
    one_line(e, "count=0")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.Receiver("127.0.0.1:0", backend="carrier-pigeon")
    one_line(e)
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.Receiver("127.0.0.1:0", once=True, once_quiet="5ms")
    one_line(e, "once_quiet=")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.Receiver("127.0.0.1:0", once_quiet="1s")
    one_line(e, "give once=True too")
    with pytest.raises(TypeError):
        wirespeed.Receiver("127.0.0.1:0", no_such_option=1)


def test_port_in_use():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(wirespeed.WirespeedError) as e:
            wirespeed.Receiver(f"127.0.0.1:{s.getsockname()[1]}")
        one_line(e, "already in use")
    finally:
        s.close()


def test_no_such_live_ring(tmp_path, monkeypatch):
    monkeypatch.setenv("WIRESPEED_SHARE_DIR", str(tmp_path))
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.tap("nobody")
    one_line(e, "no recorder shares")
    with pytest.raises(wirespeed.UsageError) as e:
        wirespeed.tap("../etc")
    one_line(e, "share name")


def test_each_kind_is_also_the_matching_builtin(tmp_path, monkeypatch):
    # A missing path: FileNotFoundError with its errno, and still a UsageError.
    with pytest.raises(FileNotFoundError) as e:
        wirespeed.verify(tmp_path / "nowhere")
    assert isinstance(e.value, wirespeed.NotFoundError) and isinstance(e.value, wirespeed.UsageError)
    assert e.value.errno == errno.ENOENT
    # A bad value: ValueError, naming the parameter as Python spells it.
    with pytest.raises(ValueError) as e:
        wirespeed.Receiver("not an address")
    assert isinstance(e.value, wirespeed.InvalidValueError) and isinstance(e.value, wirespeed.UsageError)
    with pytest.raises(ValueError) as e:
        wirespeed.Receiver("127.0.0.1:0", max_streams=10**9)
    assert e.value.param == "max_streams"
    one_line(e, "max_streams=1000000000 is more than")
    assert "--" not in str(e.value)
    # A file that is not what it claims: ValueError too.
    monkeypatch.setenv("WIRESPEED_SHARE_DIR", str(tmp_path))
    (tmp_path / "junk.json").write_text("not json")
    with pytest.raises(ValueError) as e:
        wirespeed.tap("junk")
    assert isinstance(e.value, wirespeed.BadDataError), type(e.value)
    # A port in use: an OSError that is not a UsageError.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(OSError) as e:
            wirespeed.Receiver(f"127.0.0.1:{s.getsockname()[1]}")
        assert isinstance(e.value, wirespeed.BusyError) and not isinstance(e.value, wirespeed.UsageError)
        assert e.value.errno == errno.EADDRINUSE
    finally:
        s.close()
