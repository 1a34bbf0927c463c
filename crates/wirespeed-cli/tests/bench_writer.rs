//! `wirespeed bench writer`: every configuration drains the same bytes and leaves no file.

use crate::common;

use common::*;

#[test]
fn every_engine_writes_the_whole_ring_and_removes_its_files() {
    let _turn = traffic();
    let dir = std::env::temp_dir().join(format!("ws-bench-writer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let out = TempDir::new("bench-writer-out");
    let o = run(&["bench", "writer", "--dir", &d, "--size", "16M", "--repeat", "2", "--json", "-o", out.path()]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let doc = json(&stdout_of(&o));
    assert_eq!(doc["schema"], "wirespeed.bench.writer/1", "{doc}");
    assert_eq!((doc["bytes"].as_u64(), doc["repeat"].as_u64()), (Some(16 << 20), Some(2)), "{doc}");
    // -o DIR: the same document as writer.json, and the table as writer.txt.
    assert_eq!(json(&std::fs::read_to_string(out.0.join("writer.json")).unwrap()), doc);
    let txt = std::fs::read_to_string(out.0.join("writer.txt")).unwrap();
    assert!(txt.contains("writer alone, 16.0 MiB per run") && txt.contains("io_uring"), "{txt}");
    let rows = doc["rows"].as_array().expect("rows");
    let names: Vec<String> = rows.iter().map(|r| format!("{}:{}", r["engine"].as_str().unwrap(), r["depth"])).collect();
    assert_eq!(names, ["threads:1", "threads:4", "io_uring:4"]);
    let bytes = rows[0]["bytes"].as_u64().unwrap();
    // The ring holds whole 8192-byte records, all of them written, by every engine alike.
    assert!(bytes > 8 << 20 && bytes <= 16 << 20 && bytes % 8192 == 0, "{bytes}");
    for r in rows {
        assert_eq!(r["bytes"].as_u64(), Some(bytes));
        assert_eq!(r["runs"].as_u64(), Some(2));
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "files left in {d}");
    let _ = std::fs::remove_dir_all(&dir);
    // Bad input: one line, exit 2.
    let o = run(&["bench", "writer", "--dir", "/surely/not/here"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_of(&o).contains("not a directory"), "{}", stderr_of(&o));
}
