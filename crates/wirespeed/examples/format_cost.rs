//! Per-packet cost of building and checking payloads, single core.
//!
//! `cargo run --release --example format_cost` prints ns per packet of `emit` and `check`: first
//! the counter at each size and byte order, then every instrument format (VDIF, VTP, Mark5B in
//! its modes, SPEAD, sequence field) with its fills. Used by BENCHMARKS.md to show that payload
//! handling is a small part of the per-packet receive cost.

use std::hint::black_box;
use std::time::Instant;
use wirespeed::wire::{spec, ByteOrder, Counter, Format};

/// Median ns per packet of emit and check over `reps` runs of `n` packets.
fn cost(f: &dyn Format, reps: usize, n: u64) -> (f64, f64) {
    let mut buf = vec![0u8; f.packet_len()];
    let mut emit = Vec::new();
    let mut check = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        for s in 0..n {
            f.emit(0, s, black_box(&mut buf));
        }
        emit.push(t.elapsed().as_nanos() as f64 / n as f64);
        f.emit(0, 7, &mut buf);
        let t = Instant::now();
        for _ in 0..n {
            black_box(f.check(black_box(&buf)).expect("valid"));
        }
        check.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    emit.sort_by(f64::total_cmp);
    check.sort_by(f64::total_cmp);
    (emit[reps / 2], check[reps / 2])
}

fn main() {
    println!("{:>6} {:>6} {:>12} {:>12}", "bytes", "order", "emit ns/pkt", "check ns/pkt");
    for size in [64usize, 1080, 8192, 8800] {
        for order in [ByteOrder::Be, ByteOrder::Le] {
            let c = Counter::new(size, order).expect("multiple of 8");
            let n: u64 = (200_000_000 / size as u64).max(10_000);
            let (e, k) = cost(&c, 5, n);
            println!("{:>6} {:>6} {:>12.1} {:>12.1}", size, order, e, k);
        }
    }
    println!();
    println!("{:>6} {:>12} {:>12}  format", "bytes", "emit ns/pkt", "check ns/pkt");
    let specs = [
        "seqfield,offset=0,width=8,order=be,size=8192,fill=any",
        "seqfield,offset=0,width=8,order=be,size=8192,fill=zeros",
        "seqfield,offset=0,width=8,order=be,size=8192,fill=counter",
        "vdif,frame=8032,fps=32000,fill=any",
        "vdif,frame=8032,fps=32000,fill=counter",
        "vdif,frame=8032,fps=32000,fill=tvg",
        "vdif,frame=8032,fps=32000,fill=random:1",
        "vtp,frame=8032,fps=32000,fill=counter",
        "mark5b,fps=25600,fill=tvg",
        "mark5b,fps=25600,fill=counter",
        "mark5b,fps=25600,fill=any",
        "mark5b,fps=25600,halves=1,psn=1,fill=tvg",
        "mark5b,fps=25600,halves=1,psn=0,fill=tvg",
        "spead,heap=65536,payload=8192,fill=counter",
        "spead,heap=65536,payload=8192,fill=any",
        "spead,heap=4096,payload=1024,fill=counter",
    ];
    for s in specs {
        let f = spec::parse(s).expect("valid spec");
        let n: u64 = (100_000_000 / f.packet_len() as u64).max(10_000);
        let (e, k) = cost(f.as_ref(), 3, n);
        println!("{:>6} {:>12.1} {:>12.1}  {}", f.packet_len(), e, k, s);
    }
}
