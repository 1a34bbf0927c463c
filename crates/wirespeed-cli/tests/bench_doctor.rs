//! `bench doctor`: whether the doctor's fixes work. Without root, one line and exit 1. As root, part rmem
//! with short runs: what the program guarantees whatever the machine's load (rmem_max back to
//! its original value, every value `doctor --apply` changed back after the undo script, the
//! doctor naming socket.rmem_max as a problem at the kernel default); loss counts depend on the
//! scheduler and are not asserted.

mod common;

use common::*;

fn rmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max").expect("rmem_max").trim().parse().expect("a number")
}

#[test]
fn bench_doctor_without_root_is_one_line_and_exit_1() {
    let args = ["bench", "doctor", "--part", "rmem", "--duration", "100ms"];
    let out = unprivileged(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bench doctor needs root"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn bench_doctor_help_says_what_it_changes() {
    let h = String::from_utf8_lossy(&run(&["bench", "doctor", "--help"]).stdout).to_string();
    for s in ["212992", "--apply", "undo", "CAP_NET_ADMIN", "Try:", "Exit codes"] {
        assert!(h.contains(s), "bench doctor --help lacks '{s}'");
    }
}

#[test]
#[ignore = "needs root"]
fn bench_doctor_rmem_puts_the_host_back_and_names_the_sysctl() {
    assert!(is_root(), "run as root: cargo test --release -p wirespeed-cli --test bench_doctor -- --include-ignored");
    let _turn = traffic();
    let original = rmem_max();
    let dir = TempDir::new("benchdoctor");
    let out = run(&["bench", "doctor", "--part", "rmem", "--duration", "500ms", "--json", "-o", dir.path()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(rmem_max(), original, "net.core.rmem_max is not back to its original value");
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["schema"], "wirespeed.bench.doctor/1");
    assert_eq!(doc["placement"]["kind"], "partitions", "{}", doc["placement"]);
    let r = &doc["rmem"];
    assert_eq!(u(r, "original_rmem_max"), original);
    assert_eq!(u(r, "set_to"), 212992);
    assert_eq!(u(r, "rmem_max_at_end"), original);
    assert_eq!(u(r, "rmem_max_after_undo"), 212992, "the undo script did not put rmem_max back");
    // The receiver's buffer was capped by the sysctl before, not after.
    assert!(u(&r["before"], "rcvbuf_granted") <= 2 * 212992, "{}", r["before"]);
    assert!(u(&r["after"], "sent") > 0 && u(&r["before"], "sent") > 0);
    let d = &r["doctor"];
    assert_eq!(d["expected"], "socket.rmem_max");
    assert_eq!(d["expected_finding"]["status"], "problem", "{d}");
    assert_eq!(d["named_right_fix"], true);
    let changes: Vec<&str> =
        d["expected_finding"]["changes"].as_array().expect("changes").iter().filter_map(|c| c.as_str()).collect();
    assert!(changes.iter().any(|c| c.starts_with("net.core.rmem_max=")), "{changes:?}");
    let restores = r["restores"].as_array().expect("restores");
    assert!(restores.iter().any(|x| x["what"] == "net.core.rmem_max"), "{restores:?}");
    for x in restores {
        assert_eq!(x["restored"], true, "{x}");
        assert_eq!(x["after_undo"], x["before"], "{x}");
    }
    assert_eq!(r["undo_restored"], true);
    assert!(r["undo_script"].as_str().is_some_and(|s| s.contains("rmem_max")), "{}", r["undo_script"]);
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .expect("out dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["doctor.json", "doctor.txt"]);
}
