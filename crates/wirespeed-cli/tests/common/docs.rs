//! The JSON documents a test collects and validates against their schemas in `schemas/`
//! (through `schemas/check.py`, Python's `jsonschema`): shared by the schema tests and by tests
//! of commands whose documents they check where they run them.

use super::{json, TempDir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

pub fn schemas_dir() -> PathBuf {
    repo().join("schemas")
}

/// `python3 schemas/check.py ARGS...`: its exit code and its output.
pub fn check_py(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("python3")
        .arg(schemas_dir().join("check.py"))
        .args(args)
        .output()
        .expect("python3 runs (the suite installs it with the jsonschema package)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// The documents a test collected, each with the id it must carry and where it came from.
pub struct Docs {
    pub dir: TempDir,
    files: Vec<String>,
}

impl Docs {
    pub fn new(tag: &str) -> Docs {
        Docs { dir: TempDir::new(&format!("schemas-{tag}")), files: Vec::new() }
    }

    /// Keep `doc` (from `label`: the command or file it came from), which must be `id`.
    pub fn add(&mut self, label: &str, id: &str, doc: &Value) {
        assert_eq!(doc["schema"], id, "{label}: the document's kind:\n{doc}");
        // Its id first, as written (serde_json keeps the order: preserve_order).
        let first = doc.as_object().and_then(|o| o.keys().next()).map(String::as_str);
        assert_eq!(first, Some("schema"), "{label}: the id is the first field:\n{doc}");
        let name: String =
            label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
        let p = self.dir.0.join(format!("{:02}-{name}.json", self.files.len()));
        std::fs::write(&p, serde_json::to_string_pretty(doc).unwrap()).unwrap();
        self.files.push(p.to_str().unwrap().to_string());
    }

    /// A command's stdout, one JSON document.
    pub fn add_text(&mut self, label: &str, id: &str, text: &str) {
        self.add(label, id, &json(text));
    }

    /// The `--interval-json` lines in a command's stderr (every line that begins with `{`):
    /// each one a document of its own, at least `min` of them; how many there were.
    pub fn add_lines(&mut self, label: &str, id: &str, stderr: &str, min: usize) -> usize {
        let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with('{')).collect();
        assert!(lines.len() >= min, "{label}: at least {min} JSON lines in:\n{stderr}");
        for (i, l) in lines.iter().enumerate() {
            assert!(!l.contains('\n') && l.ends_with('}'), "{label}: one document per line: {l}");
            self.add(&format!("{label} line {i}"), id, &json(l));
        }
        lines.len()
    }

    /// A file the command wrote.
    pub fn add_file(&mut self, id: &str, path: &Path) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        self.add(&path.display().to_string(), id, &json(&text));
    }

    /// Every document valid against its schema, or the test fails with check.py's lines.
    pub fn validate(&self) {
        assert!(!self.files.is_empty());
        let args: Vec<&str> = self.files.iter().map(String::as_str).collect();
        let (code, out) = check_py(&args);
        assert_eq!(code, Some(0), "documents that do not match their schema:\n{out}");
        assert_eq!(out.lines().filter(|l| l.ends_with(" valid")).count(), self.files.len(), "{out}");
    }
}
