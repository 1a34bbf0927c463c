//! Longer runs of the parser fuzzer than the test suite's few seconds.
//!
//! `cargo run --release --example fuzz -- --seconds 60 [--seed N]` fuzzes every format of
//! `wire::fuzz::SPECS` for N seconds each and prints what the parsers answered; it exits
//! non-zero, with the seed and input of each failure, when `check` panicked or contradicted
//! `emit`.

use std::time::Duration;
use wirespeed::wire::fuzz;

fn main() {
    let mut seconds = 5.0f64;
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(1);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().unwrap_or_else(|| usage(&format!("{name} needs a value")));
        match a.as_str() {
            "--seconds" => seconds = value("--seconds").parse().unwrap_or_else(|_| usage("--seconds takes a number")),
            "--seed" => seed = value("--seed").parse().unwrap_or_else(|_| usage("--seed takes a number")),
            _ => usage(&format!("unknown argument '{a}'")),
        }
    }
    println!("seed {seed}, {seconds} s per format");
    println!("{:>10} {:>9} {:>6} {:>9} {:>9} {:>9}  format", "checked", "ok", "unseq", "length", "header", "payload");
    let mut failures = Vec::new();
    for (i, f) in fuzz::formats().iter().enumerate() {
        let r = fuzz::run(f, seed.wrapping_add(i as u64), u64::MAX, Duration::from_secs_f64(seconds));
        println!(
            "{:>10} {:>9} {:>6} {:>9} {:>9} {:>9}  {}",
            r.iterations,
            r.ok,
            r.unsequenced,
            r.invalid[0],
            r.invalid[1],
            r.invalid[2],
            f.spec()
        );
        failures.extend(r.failures);
    }
    if !failures.is_empty() {
        eprintln!("{} failures:", failures.len());
        for f in &failures {
            eprintln!("  {f}");
        }
        std::process::exit(1);
    }
    println!("no failures");
}

fn usage(msg: &str) -> ! {
    eprintln!("fuzz: {msg}\nusage: fuzz [--seconds N] [--seed N]");
    std::process::exit(2);
}
