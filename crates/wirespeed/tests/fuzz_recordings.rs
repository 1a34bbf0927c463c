//! Bounded mutation fuzzing of the recording readers (pcap headers, record walking, sidecar-free
//! raw files): any bytes, cut anywhere, must be read without a panic and never claim more whole
//! records than the bytes hold.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use wirespeed::spool::{
    parse_pcap_global, parse_pcap_packet, pcap_global_header, pcap_record_header, FileFormat, FileLedger, PcapInfo,
    ReadLayout, RecordWalker,
};
use wirespeed::wire::{spec, Format};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn sample(fmt: &Arc<dyn Format>, ff: FileFormat, n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    if ff == FileFormat::Pcap {
        out.extend_from_slice(&pcap_global_header());
    }
    let len = fmt.packet_len();
    let mut buf = vec![0u8; len];
    let a = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 4000);
    for seq in 0..n {
        fmt.emit(0, seq, &mut buf);
        if ff == FileFormat::Pcap {
            out.extend_from_slice(&pcap_record_header(seq, a, a, len));
            out.extend_from_slice(&buf);
        } else {
            out.extend_from_slice(&buf[fmt.raw_strip()..]);
        }
    }
    out
}

#[test]
fn walkers_survive_any_bytes() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for spec_s in
        ["counter,size=64", "vdif,frame=96,fps=100", "mark5b,fps=100,fill=any", "spead,heap=256,payload=128,fill=any"]
    {
        let fmt = spec::parse(spec_s).unwrap();
        for ff in [FileFormat::Raw, FileFormat::Pcap] {
            let layout = ReadLayout::for_stream(&fmt, ff).unwrap();
            let clean = sample(&fmt, ff, 40);
            for _ in 0..3000 {
                let mut b = clean.clone();
                for _ in 0..=rng.below(8) {
                    if b.is_empty() {
                        break;
                    }
                    match rng.below(5) {
                        0 => {
                            let i = rng.below(b.len() as u64) as usize;
                            b[i] ^= 1 << rng.below(8);
                        }
                        1 => {
                            let i = rng.below(b.len() as u64) as usize;
                            b[i] = [0u8, 0xff, 0x7f, 0x80][rng.below(4) as usize];
                        }
                        2 => b.truncate(rng.below(b.len() as u64 + 1) as usize),
                        3 => {
                            let i = rng.below(b.len() as u64 + 1) as usize;
                            let junk: Vec<u8> = (0..rng.below(300)).map(|_| rng.next() as u8).collect();
                            b.splice(i..i, junk);
                        }
                        _ => {
                            // A pcap caplen field set to something absurd.
                            if b.len() > 40 {
                                let i = 24 + 8;
                                b[i..i + 4].copy_from_slice(&(rng.next() as u32).to_le_bytes());
                            }
                        }
                    }
                }
                let mut w = RecordWalker::new(layout.clone());
                let mut l = FileLedger::new(layout.reader.clone(), 64);
                let mut rest = &b[..];
                while !rest.is_empty() {
                    let n = (1 + rng.below(700) as usize).min(rest.len());
                    w.feed(&rest[..n], &mut l);
                    rest = &rest[n..];
                }
                assert!(w.complete_bytes <= b.len() as u64, "{spec_s} {ff:?}");
                let (_, total) = l.finish();
                assert!(total.received + total.invalid <= l.records + 1, "{spec_s}");
            }
        }
    }
}

#[test]
fn pcap_packet_parser_survives_any_bytes() {
    let mut rng = Rng(42);
    for linktype in [1u32, 101, 113, 228, 999] {
        let info = PcapInfo { nanos: true, big_endian: false, linktype };
        for _ in 0..20_000 {
            let n = rng.below(80) as usize;
            let mut b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            if n > 0 && rng.below(2) == 0 {
                b[0] = 0x45;
            }
            let orig = if rng.below(2) == 0 { n as u32 } else { rng.next() as u32 };
            let (_, payload) = parse_pcap_packet(&info, &b, orig);
            if let Some(p) = payload {
                assert!(p.len() <= b.len());
            }
            let _ = parse_pcap_global(&b);
        }
    }
}
