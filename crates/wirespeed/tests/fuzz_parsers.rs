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
            Ok(PacketInfo::new(0, u64::from_be_bytes(buf[..8].try_into().unwrap())))
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

/// Every format, every truncation (and a few extensions) of valid datagrams: a datagram cut
/// short is never read as a valid one. Formats of a fixed or self-described length refuse it
/// outright; formats that take their reading from the datagram's own length (the counter
/// without `size=`) may accept it in isolation, so there the stream's [`LengthLock`], fixed by
/// the first two datagrams, must refuse it. A field is never read from a datagram too short to
/// hold it (no panic, which `check` would show).
#[test]
fn truncated_datagrams_are_never_numbers() {
    use wirespeed::wire::{Admit, LengthLock, UNSEQUENCED};
    for f in fuzz::formats() {
        let len = f.fixed_len().unwrap_or(8 * 100).max(f.packet_len());
        let mut buf = vec![0u8; len + 16];
        let mut checked = 0;
        let mut rng = fuzz::Rng::new(len as u64);
        let base = f.seq_at(1_700_000_000_000_000_000).unwrap_or(0);
        for k in 0..40u64 {
            let seq = base.wrapping_add(if k < 4 { k } else { rng.next_u64() % 1_000_000 });
            let stream = (rng.next_u64() % u64::from(f.stream_count())) as u32;
            buf.iter_mut().for_each(|b| *b = 0);
            f.emit(stream, seq, &mut buf[..len]);
            let Ok(info) = f.check(&buf[..len]) else { continue };
            checked += 1;
            let mut lock = LengthLock::default();
            if f.length_locked() {
                assert_eq!(lock.admit(len, info.seq), Admit::Held);
                assert!(matches!(lock.admit(len, info.seq), Admit::WithHeld(_)));
            }
            let longer = [len + 1, len + 8, len + 16];
            for cut in (0..len).chain(longer) {
                let d = &buf[..cut];
                match f.check(d) {
                    Err(_) => {}
                    Ok(i) if f.length_locked() && i.stream != UNSEQUENCED => assert_eq!(
                        lock.admit(cut, i.seq),
                        Admit::Wrong,
                        "{}: {cut} of {len} bytes of seq {seq} passed the length lock as {i:?}",
                        f.spec()
                    ),
                    Ok(i) => panic!("{}: {cut} of {len} bytes of seq {seq} accepted as {i:?}", f.spec()),
                }
            }
        }
        assert!(checked >= 4, "{}: only {checked} valid datagrams to cut", f.spec());
    }
}

/// The layout learner (`wirespeed probe`) is fed by the network too: mutated datagrams of every
/// format, from a few sources, never make it panic, and any spec it gives parses.
#[test]
fn the_layout_learner_survives_mutated_input() {
    use std::net::SocketAddr;
    use wirespeed::wire::learn::Learner;
    let mut rng = fuzz::Rng::new(0x1ea4);
    for f in fuzz::formats() {
        let mut learner = Learner::new();
        let mut good = vec![0u8; f.packet_len()];
        let mut other = vec![0u8; f.packet_len()];
        for i in 0..20_000u64 {
            f.emit((i % 4) as u32, i, &mut good);
            f.emit(0, i / 2, &mut other);
            let mut d = good.clone();
            if i % 3 != 0 {
                fuzz::mutate(&mut rng, &mut d, &other);
            }
            let src = SocketAddr::from(([127, 0, 0, 1], 5000 + (rng.below(4) as u16)));
            learner.feed(src, &d);
        }
        for l in learner.learned() {
            if let Some(spec) = &l.spec {
                assert!(wirespeed::wire::spec::parse(spec).is_ok(), "{}: {spec}", f.spec());
            }
            assert!(l.spec.is_some() || !l.missing.is_empty(), "{}: no spec and no reason: {l:?}", f.spec());
        }
    }
}
