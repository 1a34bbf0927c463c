//! A station recorder end to end: scans scattered over several disks in the FlexBuff and Mark6
//! layouts, read back by a reader written here from the layouts' description; a disk that fills
//! and one made read-only in the middle of a scan, with nothing lost; and `wirespeed station`
//! driven over VSI-S by several clients as a Field System drives jive5ab.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The VDIF preset's stream, spelled out so that nothing has to be learned.
const VDIF: &str = "vdif,frame=8032,threads=1,station=WS,bits=2,chans=4,complex=0,fps=32000,fill=counter";
const FRAME: usize = 8032;

/// A scan's FlexBuff chunks found as the layout describes them: `<mount>/<SCAN>/<SCAN>.NNNNNNNN`
/// (eight digits) on every mount point, ordered by number, concatenated.
fn flexbuff_by_hand(mounts: &[&str], scan: &str) -> (Vec<u64>, Vec<u8>) {
    let mut chunks: Vec<(u64, PathBuf)> = Vec::new();
    for m in mounts {
        let dir = Path::new(m).join(scan);
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(num) = name.strip_prefix(&format!("{scan}.")) else { continue };
            if num.len() == 8 && num.bytes().all(|b| b.is_ascii_digit()) {
                chunks.push((num.parse().unwrap(), e.path()));
            }
        }
    }
    chunks.sort();
    let numbers = chunks.iter().map(|c| c.0).collect();
    let data = chunks.iter().flat_map(|(_, p)| std::fs::read(p).unwrap()).collect();
    (numbers, data)
}

/// A scan's Mark6 files read as the layout describes them: a 20-byte header (sync 0xfeed6666,
/// version 2, block size, packet format, packet size), then blocks of an 8-byte header (block
/// number, size including the header) and data; all blocks of all files in number order.
fn mark6_by_hand(mounts: &[&str], scan: &str) -> (Vec<u64>, Vec<u8>) {
    let mut blocks: Vec<(u64, Vec<u8>)> = Vec::new();
    for m in mounts {
        let Ok(f) = std::fs::read(Path::new(m).join(scan)) else { continue };
        let w = |at: usize| u32::from_le_bytes(f[at..at + 4].try_into().unwrap());
        assert_eq!(w(0), 0xfeed_6666, "sync word");
        assert_eq!(w(4), 2, "version 2");
        assert_eq!(w(12), 0, "packet format VDIF");
        assert_eq!(w(16) as usize, FRAME, "packet size");
        let mut at = 20;
        while at < f.len() {
            let (n, size) = (w(at) as u64, w(at + 4) as usize);
            assert!(size > 8 && size <= w(8) as usize, "a block no larger than the header's block size");
            blocks.push((n, f[at + 8..at + size].to_vec()));
            at += size;
        }
    }
    blocks.sort_by_key(|b| b.0);
    (blocks.iter().map(|b| b.0).collect(), blocks.into_iter().flat_map(|b| b.1).collect())
}

/// Every frame of `data` is a VDIF frame of the preset's stream, in order from the first: no
/// frame missing, doubled or out of place between the chunks.
fn frames_in_order(data: &[u8], want: usize) {
    assert_eq!(data.len() % FRAME, 0, "whole frames");
    assert_eq!(data.len() / FRAME, want, "frames");
    let seq = |f: &[u8]| {
        let secs = u32::from_le_bytes(f[0..4].try_into().unwrap()) & 0x3fff_ffff;
        let frame = u32::from_le_bytes(f[4..8].try_into().unwrap()) & 0x00ff_ffff;
        secs as u64 * 32000 + frame as u64
    };
    let first = seq(&data[..FRAME]);
    for (i, f) in data.chunks(FRAME).enumerate() {
        assert_eq!(seq(f), first + i as u64, "frame {i} out of sequence");
    }
}

fn gathered(scan: &str, mounts: &[&str], out: &Path) -> Vec<u8> {
    let mut a = vec!["gather", scan, "--from"];
    a.extend_from_slice(mounts);
    let o = out.display().to_string();
    a.extend(["-w", o.as_str()]);
    let r = run(&a);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::read(out).unwrap()
}

fn verify_scan(scan: &str, mounts: &[&str]) -> (Option<i32>, Value) {
    let mut a = vec!["verify", "--scan", scan, "--json", "--expect-zero-loss"];
    a.extend_from_slice(mounts);
    let r = run(&a);
    (r.status.code(), json(&String::from_utf8_lossy(&r.stdout)))
}

/// Four disks, one of which fills (something else takes its space) and one of which turns
/// read-only while the scan is written: both are dropped with one line each, their chunks go to
/// the others from RAM, and every datagram sent is in the scan, in order, as the layout's own
/// reader finds it.
#[test]
#[ignore = "needs root"]
fn a_scan_over_four_disks_loses_nothing_when_one_fills_and_one_turns_read_only() {
    let _t = traffic();
    let disks = [SmallFs::new("160m"), SmallFs::new("160m"), SmallFs::new("160m"), SmallFs::new("64m")];
    let mounts: Vec<&str> = disks.iter().map(|d| d.path()).collect();
    let sent = 15000usize;
    let mut args = vec!["--format", VDIF, "--scan", "s1", "--chunk-size", "4M", "--buffer", "256M", "--json"];
    args.extend(["--count", "15000", "--duration", "60"]);
    for m in &mounts {
        args.extend(["-o", m]);
    }
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    let mut sender = spawn_send(r.port, &["--preset", "vdif", "--count", "15000", "--rate", "800M"]);
    // Disk 1 turns read-only as soon as it holds a chunk of the scan: later chunks meant for it
    // fail, and go elsewhere.
    let t = Instant::now();
    while flexbuff_by_hand(&mounts[1..2], "s1").0.is_empty() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    sh(&["mount", "-o", "remount,ro", mounts[1]]);
    // Something else fills disk 3, leaving less than a chunk (again, should a chunk land on it
    // between the look at its free space and the fill).
    let filled = (0..20).any(|_| {
        let df = Command::new("stat").args(["-f", "-c", "%a %S", mounts[3]]).output().unwrap();
        let df = String::from_utf8_lossy(&df.stdout);
        let (blocks, size) = df.trim().split_once(' ').unwrap();
        let free = blocks.parse::<u64>().unwrap() * size.parse::<u64>().unwrap();
        let f = format!("{}/other-data-{free}", mounts[3]);
        Command::new("fallocate")
            .args(["-l", &(free.saturating_sub(1 << 20)).to_string(), &f])
            .status()
            .unwrap()
            .success()
    });
    assert!(filled, "disk 3 could not be filled");
    let _ = sender.wait();
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    sh(&["mount", "-o", "remount,rw", mounts[1]]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("dropping disk {} (read-only)", mounts[1])), "{stderr}");
    // A chunk being written when its disk turned read-only stays there, partial, and is named:
    // the operator removes it (as here, once the disk is writable again) before jive5ab reads.
    for line in stderr.lines().filter(|l| l.contains("a partial copy of chunk")) {
        let path = line.split(": remove ").nth(1).and_then(|r| r.split(" before").next()).unwrap();
        std::fs::remove_file(path).unwrap();
    }
    assert!(stderr.contains(&format!("disk {} is full", mounts[3])), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(u(&rep["capture"]["total"], "received"), sent as u64, "{stdout}");
    assert_eq!(u(&rep["capture"]["total"], "lost"), 0);
    assert_eq!(u(&rep["writer"], "records"), sent as u64);
    assert!(rep["writer"]["error"].is_null(), "{stdout}");
    // The layout's own reader: chunk numbers 0.. without a gap, frames in order.
    let (numbers, data) = flexbuff_by_hand(&mounts, "s1");
    assert_eq!(numbers, (0..numbers.len() as u64).collect::<Vec<_>>(), "one sequence over all disks");
    frames_in_order(&data, sent);
    // gather writes the same bytes; verify reads every chunk against its sidecar.
    let out = TempDir::new("station-gather");
    assert_eq!(gathered("s1", &mounts, &out.0.join("s1.vdif")), data);
    let (vcode, v) = verify_scan("s1", &mounts);
    assert_eq!(vcode, Some(0), "{v}");
    assert_eq!(u(&v["total"], "received"), sent as u64);
    assert_eq!(u(&v, "matching"), numbers.len() as u64, "every chunk matches its sidecar");
    // A chunk taken away is named missing, and verify fails.
    let victim = numbers.len() as u64 / 2;
    let p =
        mounts.iter().map(|m| Path::new(m).join("s1").join(format!("s1.{victim:08}"))).find(|p| p.exists()).unwrap();
    std::fs::remove_file(&p).unwrap();
    let (vcode, v) = verify_scan("s1", &mounts);
    assert_eq!(vcode, Some(4), "{v}");
    assert!(v["notes"].to_string().contains(&format!("chunk {victim} is missing from the scan")), "{v}");
    // Mark6 on the three disks with room: blocks in order by the layout's reader, and gather.
    let m6: Vec<&str> = mounts[..3].to_vec();
    let mut args = vec!["--format", VDIF, "--scan", "m1", "--layout", "mark6", "--chunk-size", "1M", "--buffer", "64M"];
    args.extend(["--count", "5000", "--duration", "60"]);
    for m in &m6 {
        args.extend(["-o", m]);
    }
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    send_to_port(r.port, &["--preset", "vdif", "--count", "5000", "--rate", "600M"]);
    let (code, _, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let (blocks, data) = mark6_by_hand(&m6, "m1");
    assert_eq!(blocks, (0..blocks.len() as u64).collect::<Vec<_>>());
    assert!(blocks.len() >= 3, "5000 frames are several 1 MiB blocks");
    frames_in_order(&data, 5000);
    assert_eq!(gathered("m1", &m6, &out.0.join("m1.vdif")), data);
    let (vcode, v) = verify_scan("m1", &m6);
    assert_eq!(vcode, Some(0), "{v}");
    assert_eq!(u(&v["total"], "received"), 5000);
    // The documents: a chunk's and a Mark6 file's sidecars, and gather's listing.
    let mut docs = common::docs::Docs::new("station-scan");
    docs.add_file("wirespeed.recording/2", &Path::new(mounts[0]).join("s1").join(".s1.00000000.json"));
    let side = m6.iter().map(|m| Path::new(m).join(".m1.mark6.json")).find(|p| p.exists()).unwrap();
    docs.add_file("wirespeed.recording/2", &side);
    let mut a = vec!["gather", "m1", "--json", "--from"];
    a.extend_from_slice(&m6);
    let list = run(&a);
    docs.add_text("gather --json", "wirespeed.scan/1", &String::from_utf8_lossy(&list.stdout));
    docs.validate();
}

/// A running station and its control port.
struct Station {
    child: std::process::Child,
    control: u16,
    err: std::thread::JoinHandle<String>,
}

fn start_station(disks: &[&str]) -> Station {
    let mut cmd = Command::new(bin());
    cmd.args(["station", "--control", "127.0.0.1:0", "--buffer", "128M", "--allow-root-fs", "--json"]);
    for d in disks {
        cmd.args(["--disks", d]);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start station");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("VSI-S on ") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the station ended before serving");
    }
    let control =
        line.split("VSI-S on 127.0.0.1:").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
    let err = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    Station { child, control, err }
}

/// One control connection: each call sends a unit and reads its reply line.
struct Client(BufReader<TcpStream>);

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client(BufReader::new(s))
    }
    fn ask(&mut self, unit: &str) -> String {
        self.0.get_mut().write_all(format!("{unit}\n").as_bytes()).unwrap();
        let mut r = String::new();
        self.0.read_line(&mut r).unwrap();
        r
    }
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A Field System session over VSI-S: replies as jive5ab gives them, two clients at once, a
/// client that leaves in the middle of a command, bad commands, and a stray datagram in the
/// middle of a scan: the scan goes on and holds every frame sent, and verify agrees.
#[test]
fn a_field_system_session_records_a_scan_and_bad_input_never_ends_it() {
    let _t = traffic();
    let d: Vec<TempDir> = (0..3).map(|i| TempDir::new(&format!("station-disk{i}"))).collect();
    let disks: Vec<&str> = d.iter().map(|t| t.path()).collect();
    let st = start_station(&disks);
    let port = free_udp_port();
    let mut fs = Client::connect(st.control);
    assert_eq!(fs.ask("mode=vdif_8000-2048-4-2;"), "!mode= 0 ;\n");
    assert_eq!(fs.ask(&format!("net_protocol=pudp:4M:8M:8;net_port={port};")), "!net_protocol = 0 ;!net_port= 0 ;\n");
    assert_eq!(fs.ask("set_disks?;"), format!("!set_disks?  0 : 3 : {} ;\n", disks.join(" : ")));
    assert_eq!(fs.ask("record=on:../x;").split(" : ").next(), Some("!record = 8"));
    assert_eq!(fs.ask("mode;"), "!syntax = 7 : Not a command or query;\n");
    assert_eq!(fs.ask("bogus?;"), "!bogus? 7 : ENOSYS - not implemented ;\n");
    assert_eq!(fs.ask("record=on:exp1_ws_no0001;"), "!record=  0  ;\n");
    // A second client sees the scan; a third leaves halfway through a command, which is
    // never carried out.
    let mut other = Client::connect(st.control);
    assert_eq!(other.ask("record?;"), "!record?  0 : on : 1 : exp1_ws_no0001 : 0 ;\n");
    // A query without a terminator is answered once the client pauses, as jive5ab answers it.
    other.0.get_mut().write_all(b"status?").unwrap();
    let mut r = String::new();
    other.0.read_line(&mut r).unwrap();
    assert_eq!(r, "!status?  0 : 0x00000059 ;\n");
    {
        let mut half = TcpStream::connect(("127.0.0.1", st.control)).unwrap();
        half.write_all(b"record=off").unwrap();
    }
    assert_eq!(fs.ask("mode=vdif_8000-2048-4-2;"), "!mode=  6 : not whilst vbsrecord is in progress ;\n");
    let mut sender = spawn_send(port, &["--preset", "vdif", "--count", "8000", "--rate", "600M"]);
    std::thread::sleep(Duration::from_millis(300));
    let stray = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    stray.send_to(b"STRAY12345", ("127.0.0.1", port)).unwrap();
    assert!(sender.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(other.ask("record?;").starts_with("!record?  0 : on : 1 : exp1_ws_no0001 : "), "the stray ended nothing");
    assert_eq!(fs.ask("status?;"), "!status?  0 : 0x00000059 ;\n");
    assert_eq!(fs.ask("record=off;"), "!record=  1 ;\n");
    assert_eq!(other.ask("record?;"), "!record?  0 : off ;\n");
    assert_eq!(fs.ask("record=off;"), "!record=  6 : Not doing record ;\n");
    // The scan's own figures: every frame, none lost; scan_check from its frames.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        fs.ask("evlbi?;"),
        "!evlbi? 0 : total : 8001 : loss : 0 ( 0.00%) : out-of-order : 0 ( 0.00%) : extent : 0seqnr/pkt ;\n"
    );
    assert_eq!(fs.ask("scan_set=exp1_ws_no0001;"), "!scan_set= 0 ;\n");
    let check = fs.ask("scan_check?;");
    let f: Vec<&str> = check.trim_end_matches(" ;\n").split(" : ").collect();
    assert_eq!(
        (f[0], f[2], f[3], f[4], f[7], f[8], f[9]),
        ("!scan_check? 0", "exp1_ws_no0001", "VDIF", "8", "256Mbps", "0", "8032"),
        "{check}"
    );
    // The same name again gets a letter, as jive5ab's does.
    assert_eq!(fs.ask("record=on:exp1_ws_no0001;"), "!record=  0  : exp1_ws_no0001a ;\n");
    assert_eq!(fs.ask("record=off;"), "!record=  1 ;\n");
    let Station { child, err, .. } = st;
    sh(&["kill", "-TERM", &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    let stderr = err.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut docs = common::docs::Docs::new("station");
    docs.add_text("station --json", "wirespeed.station/1", &text);
    docs.validate();
    let rep = json(&text);
    let s1 = &rep["scans"][0];
    assert_eq!((u(s1, "received"), u(s1, "lost"), u(s1, "invalid"), u(s1, "records")), (8000, 0, 1, 8000), "{rep}");
    assert_eq!(rep["scans"][1]["name"], "exp1_ws_no0001a");
    let (vcode, v) = verify_scan("exp1_ws_no0001", &disks);
    assert_eq!(vcode, Some(0), "{v}");
    assert_eq!(u(&v["total"], "received"), 8000);
    frames_in_order(&flexbuff_by_hand(&disks, "exp1_ws_no0001").1, 8000);
}

/// A VDIF stream of four threads recorded by four capture threads: one scan per thread,
/// `SCAN_ds<i>` (jive5ab's datastream naming), each holding exactly its own thread's frames,
/// all of them.
#[test]
fn a_four_thread_vdif_stream_is_recorded_as_one_scan_per_thread() {
    let _t = traffic();
    let d: Vec<TempDir> = (0..2).map(|i| TempDir::new(&format!("station-ds{i}"))).collect();
    let disks: Vec<&str> = d.iter().map(|t| t.path()).collect();
    let spec = "vdif,frame=8032,threads=4,station=WS,bits=2,chans=4,complex=0,fps=8000,fill=counter";
    let mut args = vec!["--format", spec, "--threads", "4", "--scan", "ds", "--chunk-size", "1M", "--buffer", "64M"];
    args.extend(["--count", "8000", "--json", "--duration", "60"]);
    for m in &disks {
        args.extend(["-o", m]);
    }
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    send_to_port(r.port, &["--format", spec, "--streams", "4", "--count", "2000", "--rate", "400M"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(u(&json(&stdout)["capture"]["total"], "lost"), 0, "{stdout}");
    let mut total = 0;
    for i in 0..4u64 {
        let scan = format!("ds_ds{i}");
        let (code, v) = verify_scan(&scan, &disks);
        assert_eq!(code, Some(0), "{v}");
        let streams = v["streams"].as_array().unwrap();
        assert_eq!(streams.len(), 1, "one VDIF thread in {scan}: {v}");
        assert_eq!(u(&streams[0], "stream"), i, "VDIF thread {i} in {scan}");
        total += u(&v["total"], "received");
    }
    assert_eq!(total, 8000, "every frame in the scan of its thread");
    // The scan itself is named by its streams.
    let r = run(&["verify", "--scan", "ds", disks[0]]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("recorded per data stream: give one of ds_ds0"), "{r:?}");
}
