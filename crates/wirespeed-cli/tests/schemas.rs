//! The machine-readable contracts: every `wirespeed.NAME/N` document the tool writes has a JSON
//! Schema (draft 2020-12) in `schemas/`, and the real output of every command (stdout with
//! `--json`, and the files: sidecars, share descriptors, bench NAME.json, the partition state
//! file) validates against it. The validator is Python's `jsonschema` (the suite installs it),
//! run through `schemas/check.py`, which names the document, the JSON path and what is wrong.

mod common;

use common::docs::{check_py, repo, schemas_dir, Docs};
use common::parts::Parts;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `wirespeed ARGS`, which must succeed; its stdout.
fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr_of(&o));
    stdout_of(&o)
}

// ------------------------------------------------------------------------- the contract itself

/// The ids the source writes: `"wirespeed.NAME/N"` string literals in every file under crates/
/// (what `grep -rhoE '"wirespeed\.[a-z_.-]+/[0-9]+"' crates` finds).
fn ids_in_source() -> BTreeSet<String> {
    fn walk(p: &Path, out: &mut BTreeSet<String>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                walk(&e.path(), out);
            }
            return;
        }
        let Ok(bytes) = std::fs::read(p) else { return };
        let text = String::from_utf8_lossy(&bytes);
        let open = concat!("\"", "wirespeed.");
        for (at, _) in text.match_indices(open) {
            let rest = &text[at + open.len()..];
            let name_len = rest.find(|c: char| !(c.is_ascii_lowercase() || "_.-".contains(c))).unwrap_or(rest.len());
            let after = &rest[name_len..];
            let Some(digits) = after.strip_prefix('/') else { continue };
            let n = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
            if name_len > 0 && n > 0 && digits[n..].starts_with('"') {
                out.insert(format!("wirespeed.{}/{}", &rest[..name_len], &digits[..n]));
            }
        }
    }
    let mut ids = BTreeSet::new();
    walk(&repo().join("crates"), &mut ids);
    ids
}

#[test]
fn every_id_the_source_writes_has_a_schema_and_every_schema_is_for_one() {
    let ids = ids_in_source();
    assert!(ids.len() >= 30 && ids.contains("wirespeed.recv/1"), "the scan found the ids: {ids:?}");
    let mut files = BTreeSet::new();
    for e in std::fs::read_dir(schemas_dir()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".schema.json") {
            if stem != "wirespeed.defs" {
                files.insert(stem.to_string());
            }
        }
    }
    let want: BTreeSet<String> = ids.iter().map(|id| id.replace('/', "-")).collect();
    let missing: Vec<_> = want.difference(&files).collect();
    let stray: Vec<_> = files.difference(&want).collect();
    assert!(missing.is_empty(), "ids the source writes without a schema in schemas/: {missing:?}");
    assert!(stray.is_empty(), "schemas for no id the source writes: {stray:?}");
    // Each schema names its id as the const of its schema property, and the index lists it.
    let index = std::fs::read_to_string(schemas_dir().join("README.md")).expect("schemas/README.md");
    for id in &ids {
        let file = format!("{}.schema.json", id.replace('/', "-"));
        let s = json(&std::fs::read_to_string(schemas_dir().join(&file)).unwrap());
        assert_eq!(s["$id"], format!("https://wirespeed.invalid/schemas/{file}"), "{file}");
        assert!(s["description"].as_str().is_some_and(|d| d.len() > 40), "{file}: a description");
        let consts: Vec<&Value> = [&s["properties"]["schema"]["const"]]
            .into_iter()
            .chain(
                s["$defs"]
                    .as_object()
                    .into_iter()
                    .flat_map(|d| d.values().map(|v| &v["properties"]["schema"]["const"])),
            )
            .filter(|v| !v.is_null())
            .collect();
        assert!(consts.iter().all(|c| *c == id) && !consts.is_empty(), "{file}: schema.const is {id}");
        assert!(index.contains(&format!("`{id}`")) && index.contains(&file), "schemas/README.md lists {id} and {file}");
        // The top level is a contract (no field the schema does not name), except where a later
        // version may add fields (metrics on recv, record and reflect).
        let closed = |o: &Value| o["additionalProperties"] == false || o["unevaluatedProperties"] == false;
        let top_closed = match s["oneOf"].as_array() {
            Some(branches) => branches.iter().all(|b| {
                let name = b["$ref"].as_str().and_then(|r| r.strip_prefix("#/$defs/")).expect("a local $ref");
                closed(&s["$defs"][name])
            }),
            None => closed(&s),
        };
        let open = ["wirespeed.recv/1", "wirespeed.record/1", "wirespeed.reflect/1"].contains(&id.as_str());
        assert_eq!(top_closed, !open, "{file}: top level {}", if open { "open" } else { "closed" });
    }
}

/// Every place outside the tests where the source turns a value into JSON text
/// (`serde_json::to_string`, `to_string_pretty`, `to_vec`, `to_vec_pretty`, `to_writer`,
/// `to_value`), per file, and what it writes. The CLI's `out::to_json` (under `print_json` and
/// `finish_bench`) refuses at run time a document whose first field is not its id, so every
/// command these tests run proves its documents carry one; a new site elsewhere fails this test
/// until it is listed here with its id (and a schema), or in schemas/README.md as internal.
/// Not caught: JSON text made by formatting (`format!`) or by `Value::to_string` of a `json!`.
const JSON_WRITERS: &[(&str, usize, &str)] = &[
    ("wirespeed-cli/src/cmd/bench/bare_recv.rs", 1, "internal: the hidden bench bare-recv's line"),
    ("wirespeed-cli/src/cmd/extract.rs", 1, "wirespeed.extract/1 (the ledger FILE.json beside an extract)"),
    ("wirespeed-cli/src/cmd/recv.rs", 1, "wirespeed.recv.interval/1 (rx::Progress carries it)"),
    ("wirespeed-cli/src/cmd/tap.rs", 1, "wirespeed.tap.interval/1 (TapProgress carries it)"),
    ("wirespeed-cli/src/main.rs", 1, "wirespeed.hello/1 (the hidden hello, read over ssh)"),
    ("wirespeed-cli/src/out.rs", 1, "to_json: checks the leading id of everything printed or filed"),
    ("wirespeed-lab/src/bench/doctor.rs", 1, "not a document: to_value of an enum, for its name"),
    ("wirespeed-lab/src/bench/sweep.rs", 1, "wirespeed.bench.sweep/1 (results.json)"),
    ("wirespeed-lab/src/demo.rs", 2, "wirespeed.demo/1"),
    ("wirespeed-lab/src/latency/sweep.rs", 1, "wirespeed.latency/1 (ping -o DIR)"),
    ("wirespeed-lab/src/testbed/daemon.rs", 1, "wirespeed.partition-view/1"),
    ("wirespeed-lab/src/testbed/devices.rs", 1, "internal: /run/wirespeed/hw.made"),
    ("wirespeed-lab/src/testbed/hosts.rs", 1, "internal: the leash request"),
    ("wirespeed-lab/src/testbed/state.rs", 1, "wirespeed.partition/1 (the state file)"),
    ("wirespeed-py/src/receiver.rs", 1, "wirespeed.recv/1 (a Receiver's report)"),
    (
        "wirespeed-py/src/recording.rs",
        2,
        "wirespeed.verify/2 (verify's report), wirespeed.extract/1 (between's ledger)",
    ),
    ("wirespeed-py/src/tap.rs", 1, "wirespeed.tap/1 (a Tap's report)"),
    ("wirespeed/src/record.rs", 1, "wirespeed.record.interval/1"),
    ("wirespeed/src/spool/scatter.rs", 1, "wirespeed.recording/2 (a scan's chunk and Mark6 sidecars)"),
    ("wirespeed/src/spool/share.rs", 1, "wirespeed.share/1"),
    ("wirespeed/src/spool/writer.rs", 3, "wirespeed.recording/2 (sidecars, provisional ones too)"),
];

/// `(file under crates/, count)` of the JSON-writing calls in non-test source: files named
/// tests.rs and everything after a file's first `#[cfg(test)]` are tests.
fn json_writers_in_source() -> Vec<(String, usize)> {
    fn walk(root: &Path, p: &Path, out: &mut Vec<(String, usize)>) {
        if p.is_dir() {
            let mut es: Vec<_> = std::fs::read_dir(p).unwrap().flatten().map(|e| e.path()).collect();
            es.sort();
            for e in es {
                walk(root, &e, out);
            }
            return;
        }
        if p.extension() != Some("rs".as_ref()) || p.file_name().is_some_and(|n| n == "tests.rs") {
            return;
        }
        let text = std::fs::read_to_string(p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let writers = [
            "to_string(",
            "to_string_pretty(",
            "to_vec(",
            "to_vec_pretty(",
            "to_writer(",
            "to_writer_pretty(",
            "to_value(",
        ];
        let calls = writers.iter().map(|f| code.matches(&format!("serde_json::{f}")).count()).sum::<usize>();
        assert!(
            !code.contains("use serde_json::to_") && !code.contains("use serde_json::{"),
            "{}: call serde_json's writers by their full path, so this test sees them",
            p.display()
        );
        if calls > 0 {
            out.push((p.strip_prefix(root).unwrap().display().to_string(), calls));
        }
    }
    // Every crate's source, so a new crate cannot write documents unseen.
    let root = repo().join("crates");
    let mut out = Vec::new();
    let mut crates: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.path().join("src")).collect();
    crates.sort();
    for src in crates.iter().filter(|p| p.is_dir()) {
        walk(&root, src, &mut out);
    }
    out
}

/// What a far host's `wirespeed hello` says it writes is what this tree has schemas for: a
/// controller compares the lists, so a stale list would refuse (or pass) the wrong hosts.
#[test]
fn hello_lists_exactly_the_documents_with_schemas() {
    let out = run(&["hello"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    let doc = json(&text);
    assert_eq!(doc["schema"], "wirespeed.hello/1");
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
    let listed: BTreeSet<String> =
        doc["schemas"].as_array().expect("schemas").iter().map(|v| v.as_str().unwrap().to_string()).collect();
    let mut files = BTreeSet::new();
    for e in std::fs::read_dir(schemas_dir()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".schema.json").filter(|s| *s != "wirespeed.defs") {
            let (base, n) = stem.rsplit_once('-').expect("NAME-N");
            files.insert(format!("{base}/{n}"));
        }
    }
    assert_eq!(listed, files);
    let mut docs = Docs::new("hello");
    docs.add_text("wirespeed hello", "wirespeed.hello/1", &text);
    docs.validate();
}

#[test]
fn every_place_that_writes_json_is_known_and_names_its_id() {
    let found = json_writers_in_source();
    let mut want: Vec<(String, usize)> = JSON_WRITERS.iter().map(|(f, n, _)| (f.to_string(), *n)).collect();
    want.sort();
    let mut got = found.clone();
    got.sort();
    assert_eq!(
        got, want,
        "serde_json writers in the source (file, calls) differ from JSON_WRITERS: give a new document a \
         \"schema\" id first, a schema in schemas/ and a line here; or list it in schemas/README.md \
         under \"Internal, not a contract\""
    );
    // Each listed id has its schema, and each internal one is in the README's internal list.
    let index = std::fs::read_to_string(schemas_dir().join("README.md")).unwrap();
    let internal = index.split("## Internal, not a contract").nth(1).expect("the README's internal section");
    for (file, _, what) in JSON_WRITERS {
        if let Some(id) = what.split_whitespace().find(|w| w.starts_with("wirespeed.") && w.contains('/')) {
            assert!(schemas_dir().join(format!("{}.schema.json", id.replace('/', "-"))).is_file(), "{file}: {id}");
        } else if what.starts_with("internal") {
            let name = ["bench bare-recv", "hw.made", "leash request"]
                .into_iter()
                .find(|n| what.contains(n))
                .unwrap_or_else(|| panic!("{file}: '{what}' names no internal document the README knows"));
            assert!(internal.contains(name), "{file}: schemas/README.md says why {name} is internal");
        }
    }
}

#[test]
fn every_schema_is_valid_json_schema_and_every_ref_resolves() {
    let (code, out) = check_py(&["--schemas"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(" 0 problems"), "{out}");
}

// ------------------------------------------------------------------ send, recv, demo, broken

/// A recv and a send report of two streams with loss left out on purpose (gap ranges).
fn recv_and_send() -> (String, String) {
    let _g = traffic();
    let r = spawn_recv(&["--once", "--json", "--metrics", "0"]);
    let target = format!("127.0.0.1:{}", r.port);
    let send = ok(&[
        "send",
        &target,
        "--streams",
        "2",
        "--count",
        "3000",
        "--rate",
        "60kpps",
        "--skip-every",
        "500",
        "--json",
    ]);
    let (code, out, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    assert!(json(&out)["metrics"]["scrapes"].as_u64().is_some(), "recv --metrics: {out}");
    (out, send)
}

#[test]
fn send_recv_and_demo_documents_match_their_schemas() {
    let (recv, send) = recv_and_send();
    let mut d = Docs::new("sendrecv");
    d.add_text("recv --json", "wirespeed.recv/1", &recv);
    d.add_text("send --json", "wirespeed.send/1", &send);
    let demo = {
        let _g = traffic();
        ok(&["demo", "--loopback", "--json", "--duration", "1", "--rate", "20kpps", "--skip-every", "1000"])
    };
    d.add_text("demo --loopback --json", "wirespeed.demo/1", &demo);
    let probe = {
        let _g = traffic();
        let p = spawn_cmd_with(&[], "probe", "127.0.0.1:0", &["--for", "120s", "--count", "1500", "--json"]);
        let to = format!("127.0.0.1:{}", p.port);
        let out = run(&["send", &to, "--format", "vdif,frame=1032,fps=1000", "--count", "1500", "--rate", "3kpps"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (code, stdout, stderr) = finish(p, std::time::Duration::from_secs(30));
        assert_eq!(code, Some(0), "a spec for the one source: {stdout}{stderr}");
        stdout
    };
    d.add_text("probe --json", "wirespeed.probe/1", &probe);
    let learned = {
        let _g = traffic();
        let r = spawn_recv(&["--format", "vdif", "--once", "--json", "--duration", "60"]);
        let to = format!("127.0.0.1:{}", r.port);
        let out = run(&["send", &to, "--format", "vdif", "--count", "300"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (code, stdout, stderr) = finish(r, std::time::Duration::from_secs(60));
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stdout.contains("\"learned\""), "{stdout}");
        stdout
    };
    d.add_text("recv --format vdif --json (layout learned)", "wirespeed.recv/1", &learned);
    let changed = {
        let _g = traffic();
        let r = spawn_recv(&["--format", "vdif", "--count", "2800", "--json", "--duration", "60"]);
        let to = format!("127.0.0.1:{}", r.port);
        for (f, n) in [("vdif", "300"), ("vdif,frame=1032,chans=1,fps=1000", "2500")] {
            let out = run(&["send", &to, "--format", f, "--count", n, "--rate", "20kpps"]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let (code, stdout, stderr) = finish(r, std::time::Duration::from_secs(60));
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stdout.contains("\"layout_changes\"") && stdout.contains("\"layout\": 1"), "{stdout}");
        stdout
    };
    d.add_text("recv --format vdif --json (a change of layout followed)", "wirespeed.recv/1", &changed);
    let spead = {
        let _g = traffic();
        let f = "spead,heap=16384,payload=4096,fill=counter";
        let r = spawn_recv(&["--format", f, "--once", "--json", "--duration", "60"]);
        let to = format!("127.0.0.1:{}", r.port);
        let out = run(&["send", &to, "--format", f, "--count", "400", "--skip-every", "7", "--rate", "20kpps"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (code, stdout, stderr) = finish(r, std::time::Duration::from_secs(60));
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stdout.contains("\"missing_bytes\""), "{stdout}");
        stdout
    };
    d.add_text("recv --format spead --json (heaps)", "wirespeed.recv/1", &spead);
    d.validate();
}

/// The `--interval-json` lines of recv and of a recorder that keeps nothing (`--sink null`,
/// without the recorder's own figures): each line a document of its own. The runs last a fixed
/// time, so the number of lines does not depend on the traffic.
#[test]
fn interval_json_lines_match_their_schemas() {
    let _g = traffic();
    let mut d = Docs::new("intervals");
    let r = spawn_recv(&["--duration", "1500ms", "--interval", "200ms", "--interval-json", "--json"]);
    send_to_port(r.port, &["--count", "3000", "--rate", "30kpps", "--skip-every", "500"]);
    let (code, out, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    d.add_text("recv --json", "wirespeed.recv/1", &out);
    d.add_lines("recv --interval-json", "wirespeed.recv.interval/1", &err, 3);
    // The last sample (over a second after the traffic) counts what the final report counts.
    let last = json(err.lines().rfind(|l| l.starts_with('{')).unwrap());
    let report = json(&out);
    assert!(report["datagrams"].as_u64().is_some_and(|n| n > 0), "{report}");
    assert_eq!(last["datagrams"], report["datagrams"], "{last}");
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--sink", "null", "--duration", "1s", "--interval", "200ms", "--interval-json"],
    );
    send_to_port(r.port, &["--count", "1000", "--rate", "20kpps"]);
    let (code, _, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    d.add_lines("record --sink null --interval-json", "wirespeed.record.interval/1", &err, 2);
    let line = json(err.lines().find(|l| l.starts_with('{')).unwrap());
    assert!(line.get("written_bytes").is_none(), "a recorder that keeps nothing writes nothing: {line}");
    d.validate();
}

/// A change that breaks a document.
type Spoil = Box<dyn Fn(&mut Value)>;

/// The validation cannot pass vacuously: real documents broken on purpose are rejected, each
/// with the path and what is wrong.
#[test]
fn broken_documents_are_rejected_with_the_path_and_the_reason() {
    let (recv, send) = recv_and_send();
    let linerate = ok(&["linerate", "--link", "1G", "--size", "1500", "--json"]);
    let d = TempDir::new("schemas-broken");
    let cases: Vec<(&str, &str, Spoil, &str)> = vec![
        (
            "linerate",
            &linerate,
            Box::new(|v| v["surprise"] = 1.into()),
            "at /: Additional properties are not allowed ('surprise' was unexpected)",
        ),
        (
            "linerate",
            &linerate,
            Box::new(|v| v["rows"][0]["frames_per_s"] = "81274".into()),
            "at /rows/0/frames_per_s: '81274' is not of type 'number'",
        ),
        (
            "recv",
            &recv,
            Box::new(|v| v["streams"][0]["lost"] = "3".into()),
            "at /streams/0/lost: '3' is not of type 'integer'",
        ),
        (
            "recv",
            &recv,
            Box::new(|v| v["total"]["lost"] = Value::from(-1)),
            "at /total/lost: -1 is less than the minimum of 0",
        ),
        (
            "recv",
            &recv,
            Box::new(|v| drop(v.as_object_mut().unwrap().remove("total"))),
            "'total' is a required property",
        ),
        (
            "recv",
            &recv,
            Box::new(|v| drop(v.as_object_mut().unwrap().remove("priority"))),
            "'priority' is a required property",
        ),
        (
            "recv",
            &recv,
            Box::new(|v| v["total"]["lost_too"] = 0.into()),
            "at /total: Additional properties are not allowed",
        ),
        (
            "recv",
            &recv,
            Box::new(|v| v["streams"][0]["gaps"][0]["first"] = Value::Null),
            "at /streams/0/gaps/0/first: None is not of type 'integer'",
        ),
        (
            "send",
            &send,
            Box::new(|v| v["surprise"] = true.into()),
            "Unevaluated properties are not allowed ('surprise' was unexpected)",
        ),
        ("send", &send, Box::new(|v| v["schema"] = "wirespeed.recv/1".into()), "at /: 'total' is a required property"),
    ];
    for (i, (what, text, spoil, needle)) in cases.iter().enumerate() {
        let mut v = json(text);
        let p = d.0.join(format!("{what}-{i}.json"));
        std::fs::write(&p, v.to_string()).unwrap();
        let (code, out) = check_py(&[p.to_str().unwrap()]);
        assert_eq!(code, Some(0), "the unbroken {what} document is valid:\n{out}");
        spoil(&mut v);
        std::fs::write(&p, v.to_string()).unwrap();
        let (code, out) = check_py(&[p.to_str().unwrap()]);
        assert_eq!(code, Some(1), "case {i} ({what}) must be rejected:\n{out}");
        assert!(out.contains(needle), "case {i} ({what}): expected {needle:?} in:\n{out}");
        assert!(out.contains(p.to_str().unwrap()), "the document is named:\n{out}");
    }
    // What a later version may add stays valid: a field at the top of recv/1 and in a stream's
    // ledger object. The metrics object itself is a contract: a wrong one is refused.
    let mut v = json(&recv);
    v["metrics"] = serde_json::json!({"port": 9100});
    let p = d.0.join("recv-bad-metrics.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let (code, out) = check_py(&[p.to_str().unwrap()]);
    assert_eq!(code, Some(1), "a metrics object without listen/url/scrapes is refused:\n{out}");
    assert!(out.contains("/metrics"), "{out}");
    v["metrics"] =
        serde_json::json!({"listen": "127.0.0.1:9464", "url": "http://127.0.0.1:9464/metrics", "scrapes": 3});
    v["later"] = serde_json::json!({"port": 9100});
    v["streams"][0]["later"] = 1.into();
    let p = d.0.join("recv-extended.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let (code, out) = check_py(&[p.to_str().unwrap()]);
    assert_eq!(code, Some(0), "fields a later version adds are allowed there:\n{out}");
    // A document of no known kind, or without a kind, is a usage error, never "valid".
    let p = d.0.join("unknown.json");
    std::fs::write(&p, format!(r#"{{"schema": "wirespeed.{}/1"}}"#, "nosuch")).unwrap();
    let (code, out) = check_py(&[p.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("has no schema file"), "{out}");
    std::fs::write(&p, "{}").unwrap();
    assert_eq!(check_py(&[p.to_str().unwrap()]).0, Some(2));
}

// ------------------------------------------- record, sidecars, share, tap, verify, disk-test

/// Lines from a child's stderr up to and including the first that contains `needle` (a
/// `--metrics` run says where it serves before it says anything else).
fn read_until(r: &mut impl BufRead, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let start = seen.len();
        let n = r.read_line(&mut seen).unwrap();
        assert!(n > 0, "stderr ended before a line with {needle:?}:\n{seen}");
        if seen[start..].contains(needle) {
            return seen;
        }
    }
}

/// Wait for `path` to exist (a descriptor published, say); panics after 30 s.
fn wait_for_file(path: &Path) -> String {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.trim_end().ends_with('}') {
                return s;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn record_sidecars_share_tap_verify_and_disk_test_documents_match_their_schemas() {
    let _g = traffic();
    let mut d = Docs::new("record");
    let work = TempDir::new("schemas-rec");
    let (rec, share) = (work.0.join("rec"), work.0.join("share"));
    std::fs::create_dir_all(&rec).unwrap();
    std::fs::create_dir_all(&share).unwrap();
    let name = format!("schemas{}", std::process::id());
    let mut cmd = Command::new(bin());
    cmd.env("WIRESPEED_SHARE_DIR", &share);
    cmd.args(["record", "127.0.0.1:0", "--size", "1024", "--file-format", "pcap", "-o", rec.to_str().unwrap()]);
    cmd.args(["--json", "--block", "1M", "--buffer", "16M", "--once", "--duration", "120", "--share", &name]);
    // With --metrics the report gains its `metrics` object (the schema names it).
    cmd.args(["--file-size", "2M", "--interval", "100ms", "--interval-json", "--metrics", "0"]);
    // Retention that deletes nothing here (the files are new), for its report's shape.
    cmd.args(["--keep-for", "1h"]);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start record");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let first = read_until(&mut err, "listening on ");
    let port: u16 = first
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("record did not say its port: {first}"));
    let rec_err = std::thread::spawn(move || {
        let mut rest = first;
        let _ = err.read_to_string(&mut rest);
        rest
    });
    let descriptor = share.join(format!("{name}.json"));
    d.add_text("share descriptor", "wirespeed.share/1", &wait_for_file(&descriptor));
    let mut tap = Command::new(bin())
        .env("WIRESPEED_SHARE_DIR", &share)
        .args(["tap", &name, "--json", "--interval", "50ms", "--interval-json", "--metrics", "0"])
        .args(["-w", work.0.join("tap.pcap").to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tap");
    // Traffic only once the tap says it attached (the recorder may end soon after).
    let mut tap_err = BufReader::new(tap.stderr.take().unwrap());
    let attached = read_until(&mut tap_err, "wirespeed tap: attached to");
    assert!(attached.contains("wirespeed tap: attached to"), "tap did not attach: {attached}");
    let tap_err = std::thread::spawn(move || {
        let mut rest = attached;
        let _ = tap_err.read_to_string(&mut rest);
        rest
    });
    // Paced to last 0.5 s, so the tap (attached before) and the recorder see several intervals.
    send_to_port(port, &["--size", "1024", "--count", "5000", "--rate", "10kpps", "--skip-every", "1000"]);
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "record did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let rec_stderr = rec_err.join().unwrap_or_default();
    assert_eq!(status.code(), Some(0), "record: {rec_stderr}");
    assert!(json(&out)["metrics"]["url"].as_str().is_some_and(|u| u.ends_with("/metrics")), "{out}");
    d.add_text("record --json", "wirespeed.record/1", &out);
    d.add_lines("record --interval-json", "wirespeed.record.interval/1", &rec_stderr, 2);
    let tap = tap.wait_with_output().expect("tap ends with the recorder");
    let tap_stderr = tap_err.join().unwrap_or_default();
    assert_eq!(tap.status.code(), Some(0), "{tap_stderr}");
    d.add_text("tap --json", "wirespeed.tap/1", &stdout_of(&tap));
    d.add_lines("tap --interval-json", "wirespeed.tap.interval/1", &tap_stderr, 2);
    let sidecars = visible_files(&rec, ".json");
    assert!(!sidecars.is_empty(), "a sidecar per file in {}", rec.display());
    for s in &sidecars {
        d.add_file("wirespeed.recording/2", s);
    }
    d.add_text("verify --json", "wirespeed.verify/2", &ok(&["verify", rec.to_str().unwrap(), "--json"]));
    d.add_text(
        "recordings --json --verify",
        "wirespeed.recordings/1",
        &ok(&["recordings", rec.to_str().unwrap(), "--json", "--verify"]),
    );
    // An extract's ledger, beside its output and on stdout.
    let xout = work.0.join("extract.pcap");
    let xs = ok(&["extract", rec.to_str().unwrap(), "--seq", "0..2999", "-w", xout.to_str().unwrap(), "--json"]);
    d.add_text("extract --json", "wirespeed.extract/1", &xs);
    d.add_file("wirespeed.extract/1", &work.0.join("extract.pcap.json"));
    let xs = ok(&["extract", rec.to_str().unwrap(), "--clock", "arrival", "--from", "-1h", "--to", "+2h", "--json"]);
    d.add_text("extract --json of a time window", "wirespeed.extract/1", &xs);
    // A recording of before wirespeed.recording/2: the same sidecars without the two fields
    // version 2 added. verify still reads it, and it matches the /1 schema.
    for s in &sidecars {
        let mut v = json(&std::fs::read_to_string(s).unwrap());
        let o = v.as_object_mut().unwrap();
        o.remove("not_written_wrong_length").expect("a /2 field");
        o.remove("unwritten").expect("a /2 field");
        o.remove("run").expect("a field added in /2 (the run's identity)");
        o.remove("index").expect("a field added in /2 (the time index)");
        o.insert("schema".into(), "wirespeed.recording/1".into());
        std::fs::write(s, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        d.add_file("wirespeed.recording/1", s);
    }
    let v1 = json(&ok(&["verify", rec.to_str().unwrap(), "--json"]));
    assert_eq!(v1["files"].as_array().map(Vec::len), Some(sidecars.len()), "verify reads /1 sidecars: {v1}");
    d.add("verify --json of /1 sidecars", "wirespeed.verify/2", &v1);
    d.add_text(
        "recordings --json of /1 sidecars",
        "wirespeed.recordings/1",
        &ok(&["recordings", rec.to_str().unwrap(), "--json"]),
    );
    // verify of a damaged recording: a byte changed inside a record, exit code 4 and the
    // problems named in the document.
    let data: Vec<PathBuf> = visible_files(&rec, ".pcap");
    let mut bytes = std::fs::read(&data[0]).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&data[0], &bytes).unwrap();
    let bad = run(&["verify", rec.to_str().unwrap(), "--json"]);
    assert_eq!(bad.status.code(), Some(4), "{}", stderr_of(&bad));
    d.add_text("verify --json of a damaged recording", "wirespeed.verify/2", &stdout_of(&bad));
    let bad = run(&["recordings", rec.to_str().unwrap(), "--json", "--verify"]);
    assert_eq!(bad.status.code(), Some(4), "{}", stderr_of(&bad));
    d.add_text("recordings --json --verify of a damaged recording", "wirespeed.recordings/1", &stdout_of(&bad));
    // A recorder killed with SIGKILL leaves its provisional sidecar (.NAME.json.part), and
    // verify reads the .part file through it (exit code 4: incomplete).
    let killed = work.0.join("killed");
    std::fs::create_dir_all(&killed).unwrap();
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--size", "1024", "-o", killed.to_str().unwrap(), "--buffer", "16M", "--block", "1M", "--flush", "200ms"],
    );
    let mut sender = spawn_send(r.port, &["--size", "1024", "--rate", "20kpps", "--count", "20000"]);
    wait_part_file(&killed, 1024 * 10);
    let mut rec_child = r.child;
    rec_child.kill().unwrap();
    let _ = rec_child.wait();
    let _ = sender.kill();
    let _ = sender.wait();
    let provisional: Vec<PathBuf> = std::fs::read_dir(&killed)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".json.part"))
        .collect();
    assert_eq!(provisional.len(), 1, "one provisional sidecar in {}", killed.display());
    d.add_file("wirespeed.recording/2", &provisional[0]);
    let part = run(&["verify", killed.to_str().unwrap(), "--json"]);
    assert_eq!(part.status.code(), Some(4), "{}", stderr_of(&part));
    d.add_text("verify --json of a killed recording", "wirespeed.verify/2", &stdout_of(&part));
    d.add_text(
        "recordings --json of a killed recording",
        "wirespeed.recordings/1",
        &ok(&["recordings", killed.to_str().unwrap(), "--json"]),
    );
    let disk = TempDir::new("schemas-disk");
    d.add_text(
        "disk-test --json",
        "wirespeed.disk-test/1",
        &ok(&["disk-test", disk.path(), "--size", "16M", "--block", "1M", "--json"]),
    );
    d.validate();
}

// --------------------------------------------------------- ping, reflect, linerate, doctor, ttcp

#[test]
fn latency_documents_match_their_schemas() {
    let _g = traffic();
    let mut d = Docs::new("latency");
    // The reflector runs until told to stop (SIGTERM, after the ping), so a probe the kernel
    // drops on a busy host cannot keep it waiting for a count.
    let r = spawn_cmd_with(&[], "reflect", "127.0.0.1:0", &["--json", "--duration", "120", "--metrics", "0"]);
    let target = format!("127.0.0.1:{}", r.port);
    let out = TempDir::new("schemas-ping");
    let ping = ok(&["ping", &target, "--pps", "2000,4000", "--count", "1000", "--json", "-o", out.path()]);
    let st = Command::new("kill").args(["-TERM", &r.child.id().to_string()]).status().expect("kill");
    assert!(st.success());
    let (code, refl, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    d.add_text("ping --json", "wirespeed.latency/1", &ping);
    d.add_file("wirespeed.latency/1", &out.0.join("latency.json"));
    d.add_text("reflect --json", "wirespeed.reflect/1", &refl);
    // Each run is a wirespeed.ping/1 report of its own.
    for (i, run) in json(&ping)["runs"].as_array().expect("runs").iter().enumerate() {
        d.add(&format!("ping run {i}"), "wirespeed.ping/1", run);
    }
    d.add_text(
        "linerate",
        "wirespeed.linerate/1",
        &ok(&["linerate", "--link", "10G", "--size", "64,1500,8800", "--json"]),
    );
    d.validate();
}

#[test]
fn doctor_documents_match_their_schema() {
    let mut d = Docs::new("doctor");
    d.add_text(
        "doctor --json",
        "wirespeed.doctor/1",
        &ok(&["doctor", "--for", "4G", "--size", "1080", "--all", "--json"]),
    );
    // A snapshot of a two-node host, with --persist: the persisted object filled in.
    let fixture = repo().join("crates/wirespeed-lab/tests/fixtures/doctor/numa2-smt");
    let persist = TempDir::new("schemas-persist");
    let args = ["doctor", "--root", fixture.to_str().unwrap(), "--for", "4G", "--size", "1080", "--cpu", "2"];
    let mut all = args.to_vec();
    all.extend(["--all", "--json", "--persist", persist.path()]);
    let doc = json(&ok(&all));
    assert!(doc["persisted"].is_array(), "{doc}");
    d.add("doctor --persist --json", "wirespeed.doctor/1", &doc);
    d.validate();
}

#[test]
fn ttcp_documents_match_their_schemas() {
    let _g = traffic();
    let mut d = Docs::new("ttcp");
    for proto in [&[][..], &["-u"][..]] {
        let mut rargs = vec!["--bind", "127.0.0.1", "-p", "0", "-l", "1200", "--json"];
        rargs.extend_from_slice(proto);
        let r = spawn_cmd_with(&[], "ttcp", "-r", &rargs);
        let p = r.port.to_string();
        let mut targs = vec!["ttcp", "-t", "-p", &p, "-l", "1200", "-n", "500", "--json"];
        if !proto.is_empty() {
            targs.extend(["-u", "--rate", "20kpps"]);
        }
        targs.push("127.0.0.1");
        d.add_text(&format!("ttcp -t {proto:?}"), "wirespeed.ttcp/1", &ok(&targs));
        let (code, out, err) = finish(r, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{err}");
        d.add_text(&format!("ttcp -r {proto:?}"), "wirespeed.ttcp/1", &out);
    }
    // Raw: a regular file stands in for a device.
    let dir = TempDir::new("schemas-ttcp-raw");
    let f = dir.0.join("dev");
    std::fs::write(&f, b"").unwrap();
    let fs = f.to_str().unwrap();
    d.add_text(
        "ttcp -t --device",
        "wirespeed.ttcp.raw/1",
        &ok(&["ttcp", "-t", "--device", fs, "-l", "100", "-n", "50", "--json"]),
    );
    d.add_text(
        "ttcp -r --device",
        "wirespeed.ttcp.raw/1",
        &ok(&["ttcp", "-r", "--device", fs, "-l", "100", "-n", "50", "--json"]),
    );
    // bench ttcp: Tables 4 and 5 and Table 3 over pipes and Unix sockets.
    let out = TempDir::new("schemas-bench-ttcp");
    let doc = ok(&[
        "bench",
        "ttcp",
        "--loopback",
        "--buffers",
        "256K",
        "-n",
        "100",
        "--table3",
        "--over",
        "pipe,unix,tcp",
        "--writes",
        "4",
        "--json",
        "-o",
        out.path(),
    ]);
    d.add_text("bench ttcp --json", "wirespeed.bench.ttcp/1", &doc);
    d.add_file("wirespeed.bench.ttcp/1", &out.0.join("ttcp.json"));
    d.validate();
}

// ----------------------------------------------------------------------------- bench commands

/// `wirespeed bench ARGS --json -o DIR`: the document on stdout and the file NAME.json in DIR
/// must both be `id` and valid.
fn bench_doc(d: &mut Docs, id: &str, file: &str, args: &[&str]) {
    let out = TempDir::new("schemas-bench");
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend(["--json", "-o", out.path()]);
    let doc = ok(&all);
    d.add_text(&format!("bench {}", args[0]), id, &doc);
    d.add_file(id, &out.0.join(file));
}

#[test]
fn bench_max_rates_sweep_soak_documents_match_their_schemas() {
    let _g = traffic();
    let mut d = Docs::new("bench-a");
    let max = [
        "max",
        "--loopback",
        "--duration",
        "300ms",
        "--repeat",
        "1",
        "--precision",
        "30%",
        "--lo",
        "50M",
        "--hi",
        "200M",
        "--size",
        "1080",
    ];
    bench_doc(&mut d, "wirespeed.bench.max/1", "max.json", &max);
    let rates = ["rates", "--loopback", "--rates", "100M,200M", "--duration", "300ms", "--size", "1080"];
    bench_doc(&mut d, "wirespeed.bench.rates/1", "rates.json", &rates);
    let sweep = ["sweep", "--loopback", "--rates", "100M", "--sizes", "1080,8800", "--duration", "300ms"];
    bench_doc(&mut d, "wirespeed.bench.sweep/1", "results.json", &sweep);
    let soak = ["soak", "--loopback", "--duration", "2s", "--every", "1s", "--rate", "20M"];
    bench_doc(&mut d, "wirespeed.bench.soak/1", "soak.json", &soak);
    d.validate();
}

#[test]
fn bench_compare_documents_match_their_schemas() {
    let _g = traffic();
    let mut d = Docs::new("bench-compare");
    let grid = ["compare", "--loopback", "--rates", "200M", "--sizes", "1080", "--duration", "1"];
    bench_doc(&mut d, "wirespeed.bench.compare/1", "compare.json", &grid);
    let search = ["compare", "--loopback", "--search", "--tools", "bare", "--sizes", "8800", "--duration", "300ms"];
    bench_doc(&mut d, "wirespeed.bench.compare-search/1", "compare-search.json", &search);
    d.validate();
}

#[test]
fn bench_pacing_formats_latency_capture_ring_taps_documents_match_their_schemas() {
    let _g = traffic();
    let mut d = Docs::new("bench-b");
    let pacing = ["pacing", "--loopback", "--cases", "1080@2000pps", "--duration", "1", "--repeat", "1", "--no-iperf3"];
    bench_doc(&mut d, "wirespeed.bench.pacing/1", "pacing.json", &pacing);
    let formats = ["formats", "--reps", "1", "--bytes", "1M"];
    bench_doc(&mut d, "wirespeed.bench.formats/1", "formats.json", &formats);
    let latency = ["latency", "--loopback", "--tools", "ws-open", "--pps", "1000", "--duration", "1", "--repeat", "1"];
    bench_doc(&mut d, "wirespeed.bench.latency/2", "latency.json", &latency);
    let capture = ["capture", "--loopback", "--count", "2000", "--repeat", "1"];
    bench_doc(&mut d, "wirespeed.bench.capture/1", "capture.json", &capture);
    let ring = ["ring", "--sizes", "16M", "--states", "warm", "--repeat", "1", "--rate", "2000pps", "--stream", "1s"];
    bench_doc(&mut d, "wirespeed.bench.ring/2", "ring.json", &ring);
    let taps = ["taps", "--count", "2000", "--pps", "20000", "--repeat", "1", "--taps", "0,1"];
    bench_doc(&mut d, "wirespeed.bench.taps/1", "taps.json", &taps);
    d.validate();
}

#[test]
fn partition_plan_document_matches_its_schema() {
    let mut d = Docs::new("plan");
    let doc = json(&ok(&["partition", "plan", "--json"]));
    let cores = doc["cores"].as_u64().expect("cores");
    assert!(cores >= 1 && doc["rows"][0]["partitions"] == 1, "{doc}");
    d.add("partition plan --json", "wirespeed.partition-plan/1", &doc);
    d.validate();
}

#[test]
fn bench_writer_and_xpc_documents_match_their_schemas() {
    let mut d = Docs::new("bench-c");
    let disk = TempDir::new("schemas-writer");
    let writer =
        ["writer", "--dir", disk.path(), "--size", "16M", "--repeat", "1", "--engines", "threads:1,io_uring:2"];
    bench_doc(&mut d, "wirespeed.bench.writer/1", "writer.json", &writer);
    let xpc = ["xpc", "--messages", "2000", "--pings", "200", "--bulk", "2", "--repeat", "2"];
    bench_doc(&mut d, "wirespeed.bench.xpc/1", "xpc.json", &xpc);
    d.validate();
}

// ------------------------------------------------------------------------------- root only

#[test]
#[ignore = "needs root"]
fn partition_state_file_status_and_daemon_views_match_their_schemas() {
    assert!(is_root(), "run as root (or leave out --include-ignored)");
    let mut d = Docs::new("partition");
    let parts = Parts::new("schema");
    parts.ok(&["create", "-p", "1", "-c", "0", "-p", "2", "-c", "1", "--hb-check", "100ms"]);
    let run_dir = std::env::var_os("WIRESPEED_RUN_DIR").map_or_else(|| PathBuf::from("/run/wirespeed"), PathBuf::from);
    let state = run_dir.join(format!("{}.json", parts.prefix));
    d.add_file("wirespeed.partition/1", &state);
    // Each daemon's view, once it sees its peer active.
    let view = |id: u32| run_dir.join(&parts.prefix).join(format!("view-{id}.json"));
    for (id, peer) in [(1, "2"), (2, "1")] {
        parts.wait_for(&format!("partition {id}'s daemon sees {peer}"), Duration::from_secs(60), || {
            std::fs::read_to_string(view(id))
                .is_ok_and(|s| serde_json::from_str::<Value>(&s).is_ok_and(|v| v["peers"][peer] == "active"))
        });
        d.add_file("wirespeed.partition-view/1", &view(id));
    }
    d.add_text("partition status --json", "wirespeed.partition-status/1", &parts.ok(&["status", "--json"]));
    parts.ok(&["deactivate", "2"]);
    d.add_file("wirespeed.partition/1", &state);
    d.add_text(
        "partition status --json (2 deactivated)",
        "wirespeed.partition-status/1",
        &parts.ok(&["status", "--json"]),
    );
    d.validate();
    // The state file and the status are two documents, two ids: neither is valid as the other.
    let st = json(&parts.ok(&["status", "--json"]));
    assert!(st.get("layout").is_none() && st["partitions"].is_array(), "{st}");
    let mut as_state = st.clone();
    as_state["schema"] = "wirespeed.partition/1".into();
    let p = d.dir.0.join("status-as-state.json");
    std::fs::write(&p, as_state.to_string()).unwrap();
    let (code, out) = check_py(&[p.to_str().unwrap()]);
    assert_eq!(code, Some(1), "a status is not a state file:\n{out}");
}

#[test]
#[ignore = "needs root"]
fn root_only_documents_match_their_schemas() {
    assert!(is_root(), "run as root (or leave out --include-ignored)");
    let _g = traffic();
    let mut d = Docs::new("root");
    // The demo across two partitions: the children's own documents, priority objects included.
    let demo = ok(&["demo", "--json", "--duration", "1", "--rate", "20kpps"]);
    assert_eq!(json(&demo)["path"], "partitions", "{demo}");
    d.add_text("demo --json (partitions)", "wirespeed.demo/1", &demo);
    d.add_text(
        "bench isolation",
        "wirespeed.isolation/1",
        &ok(&["bench", "isolation", "--repeat", "1", "--window", "300ms", "--json"]),
    );
    bench_doc(
        &mut d,
        "wirespeed.bench.priority/1",
        "priority.json",
        &[
            "priority",
            "--loopback",
            "--duration",
            "100ms",
            "--repeat",
            "1",
            "--precision",
            "30%",
            "--lo",
            "50M",
            // High enough that a search can find a limit here (loopback reaches tens of Gb/s).
            "--hi",
            "40G",
        ],
    );
    bench_doc(&mut d, "wirespeed.bench.doctor/1", "doctor.json", &["doctor", "--part", "rmem", "--duration", "500ms"]);
    // doctor --apply inside a namespace of this test's own, on a veth there (the changes the
    // namespace cannot make are reported as failed), then its undo script.
    let ns = Netns::new("schemas");
    let tag = format!("{}", std::process::id() % 100_000);
    let (a, b) = (format!("wss{tag}a"), format!("wss{tag}b"));
    ns.exec(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b]);
    ns.exec(&["ip", "link", "set", &a, "up"]);
    let undo_dir = TempDir::new("schemas-undo");
    let undo = undo_dir.0.join("undo.sh");
    let args = ["doctor", "--iface", &a, "--for", "40G", "--size", "8800", "--json", "--apply", "--undo"];
    let mut all = args.to_vec();
    all.push(undo.to_str().unwrap());
    let applied = run_prefixed(&ns.prefix(), &all);
    let mut undo_cmd = ns.prefix();
    undo_cmd.extend(["sh", undo.to_str().unwrap()]);
    sh(&undo_cmd);
    let doc = json(&stdout_of(&applied));
    assert!(doc["applied"].is_object(), "{doc}");
    d.add("doctor --apply --json", "wirespeed.doctor/1", &doc);
    d.validate();
}

#[test]
fn pgm_documents_match_their_schemas() {
    // A PGM session on loopback (the receiver on 127.0.0.2: the sender's NAK socket binds
    // 127.0.0.1 at the same port), and ping/reflect over PGM.
    let _g = traffic();
    let mut d = Docs::new("pgm");
    let r = spawn_cmd_with(&[], "recv", "127.0.0.2:0", &["--transport", "pgm", "--once", "--json", "--duration", "60"]);
    let target = format!("127.0.0.2:{}", r.port);
    let sent = ok(&["send", &target, "--transport", "pgm", "--count", "500", "--rate", "10kpps", "--json"]);
    let (code, recv, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    d.add_text("send --transport pgm", "wirespeed.send/1", &sent);
    d.add_text("recv --transport pgm", "wirespeed.recv/1", &recv);
    let r = spawn_cmd_with(&[], "reflect", "127.0.0.2:0", &["--transport", "pgm", "--json", "--duration", "60"]);
    let target = format!("127.0.0.2:{}", r.port);
    let ping = ok(&["ping", &target, "--transport", "pgm", "--pps", "2000", "--count", "500", "--json", "--no-files"]);
    let st = Command::new("kill").args(["-TERM", &r.child.id().to_string()]).status().expect("kill");
    assert!(st.success());
    let (code, refl, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    d.add_text("ping --transport pgm", "wirespeed.latency/1", &ping);
    d.add("ping pgm run", "wirespeed.ping/1", &json(&ping)["runs"][0]);
    d.add_text("reflect --transport pgm", "wirespeed.reflect.pgm/1", &refl);
    d.validate();
}
