//! Per-packet cost of building and checking counter payloads, single core.
//!
//! `cargo run --release --example format_cost` prints ns per packet for each size; used by
//! BENCHMARKS.md to show that payload handling is a small part of the per-packet receive cost.

use std::hint::black_box;
use std::time::Instant;
use wirespeed::wire::{ByteOrder, Counter, Format};

fn main() {
    let reps = 5;
    println!("{:>6} {:>6} {:>12} {:>12}", "bytes", "order", "emit ns/pkt", "check ns/pkt");
    for size in [64usize, 1080, 8192, 8800] {
        for order in [ByteOrder::Be, ByteOrder::Le] {
            let c = Counter::new(size, order).expect("multiple of 8");
            let mut buf = vec![0u8; size];
            let n: u64 = (200_000_000 / size as u64).max(10_000);
            let mut emit = Vec::new();
            let mut check = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                for s in 0..n {
                    c.emit(0, s, black_box(&mut buf));
                }
                emit.push(t.elapsed().as_nanos() as f64 / n as f64);
                c.emit(0, 7, &mut buf);
                let t = Instant::now();
                for _ in 0..n {
                    black_box(c.check(black_box(&buf)).expect("valid"));
                }
                check.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
            emit.sort_by(f64::total_cmp);
            check.sort_by(f64::total_cmp);
            println!("{:>6} {:>6} {:>12.1} {:>12.1}", size, order, emit[reps / 2], check[reps / 2]);
        }
    }
}
