//! Bounded mutation fuzzing of every format's parser (stable Rust, no cargo-fuzz): `check` must
//! never panic on any input, and what it accepts must be consistent with what `emit` produces.
//! A few seconds in release mode; `cargo run --release --example fuzz -- --seconds N` runs the
//! same fuzzer for longer.

use std::time::Duration;
use wirespeed::wire::fuzz;

#[test]
fn parsers_survive_mutated_input() {
    let mut total = 0;
    let mut failures = Vec::new();
    for (i, f) in fuzz::formats().iter().enumerate() {
        // A fixed number of iterations, not a time budget: how many a busy host fits into two
        // seconds is the scheduler's business. The time limit only guards against a hang.
        let r = fuzz::run(f, 0x5eed_0000 + i as u64, 30_000, Duration::from_secs(600));
        total += r.iterations;
        assert!(r.failures.is_empty(), "{} failures:\n{}", r.failures.len(), r.failures.join("\n"));
        assert_eq!(r.iterations, 30_000, "{}: every iteration ran", f.spec());
        // The fuzzer must reach both sides of the parser: accepted and refused datagrams.
        assert!(r.ok + r.unsequenced > 0, "{}: nothing accepted", f.spec());
        assert!(r.invalid.iter().sum::<u64>() > 0, "{}: nothing refused", f.spec());
        failures.extend(r.failures);
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(total, 30_000 * fuzz::formats().len() as u64);
}

#[test]
fn the_fuzzer_finds_a_planted_bug() {
    // A parser that panics on one header byte: the fuzzer must report it, not crash.
    use wirespeed::wire::{Format, Invalid, PacketInfo};
    #[derive(Debug)]
    struct Fragile;
    impl Format for Fragile {
        fn name(&self) -> String {
            "fragile".into()
        }
        fn packet_len(&self) -> usize {
            16
        }
        fn emit(&self, _: u32, seq: u64, buf: &mut [u8]) {
            buf[..8].copy_from_slice(&seq.to_be_bytes());
            buf[8..].fill(0);
        }
        fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
            if buf.len() != 16 {
                return Err(Invalid::Length);
            }
            assert!(buf[9] != 0xFF, "planted bug");
            Ok(PacketInfo { stream: 0, seq: u64::from_be_bytes(buf[..8].try_into().unwrap()) })
        }
        fn spec(&self) -> String {
            "fragile".into()
        }
    }
    let f: std::sync::Arc<dyn Format> = std::sync::Arc::new(Fragile);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = fuzz::run(&f, 1, 20_000, Duration::from_secs(2));
    std::panic::set_hook(prev);
    assert!(r.failures.iter().any(|m| m.contains("panicked")), "{r:?}");
}
