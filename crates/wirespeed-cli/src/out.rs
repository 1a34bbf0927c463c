//! What every command shares for output: writing that survives a closed stdout, JSON documents,
//! report files, and the exit codes beyond 0, 1 and 2.

use std::path::{Path, PathBuf};
use wirespeed::rx::RecvReport;
use wirespeed::{units, Error};

/// Exit code when --expect-zero-loss was given and packets were lost.
pub const EXIT_LOSS: u8 = 3;

/// Exit code of `verify` when a recording is damaged, incomplete or differs from its sidecar.
pub const EXIT_MISMATCH: u8 = 4;

/// Write to stdout (or stderr), ignoring a reader that went away.
pub(crate) fn write_out(to_stderr: bool, text: std::fmt::Arguments) {
    use std::io::Write;
    let _ = if to_stderr { std::io::stderr().lock().write_fmt(text) } else { std::io::stdout().lock().write_fmt(text) };
}

/// An error as the one line a user reads after `wirespeed: `: a bad parameter is named by its
/// flag (`--block 1000 must be ...`), the way it was typed.
pub fn error_line(e: &Error) -> String {
    match e.param_name() {
        Some(p) => format!("--{p} {}", e.message()),
        None => e.to_string(),
    }
}

/// Print a document as pretty JSON on stdout ([`to_json`]: it must carry its id first).
pub fn print_json<T: serde::Serialize>(v: &T) -> Result<(), Error> {
    let s = to_json(v)?;
    println!("{s}");
    Ok(())
}

/// Whether `text` (a JSON document) begins with its id, `{"schema": "wirespeed.NAME/N"`, as
/// every document wirespeed writes must (schemas/README.md); the id found.
pub fn leading_id(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix('{')?.trim_start().strip_prefix("\"schema\"")?;
    let rest = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let id = &rest[..rest.find('"')?];
    let (name, n) = id.strip_prefix("wirespeed.")?.rsplit_once('/')?;
    (!name.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}

/// A command's report with the `priority` object beside its own fields (what `--priority`,
/// `--realtime` and `--lock-memory` applied, or the defaults the run had): the reports' own
/// types stay the library's, and every recv, record and send document says how it was
/// scheduled.
#[derive(serde::Serialize)]
pub struct WithPriority<'a, T: serde::Serialize> {
    #[serde(flatten)]
    pub report: &'a T,
    pub priority: &'a wirespeed::priority::Applied,
}

/// The end of a run the realtime guard stopped (SIGXCPU): one line, exit code 1; else `code`.
pub fn guard_verdict(code: u8) -> u8 {
    match wirespeed::priority::guard_tripped() {
        Some(line) => {
            eprintln!("wirespeed: {line}");
            1
        }
        None => code,
    }
}

/// A bench command's running text (its header, a line per probe or point): on stdout as the
/// report, or on stderr when stdout carries the JSON document instead.
pub fn say(json: bool, text: &str) {
    if json {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

/// [`say`] for one line.
pub fn say_line(json: bool, line: &str) {
    say(json, &format!("{line}\n"));
}

/// A document as pretty JSON text, for stdout and the report files beside the terminal output.
/// A document without its `"schema"` id as the first field is refused (a bug, caught by every
/// test that runs the command), so no command prints JSON that names no contract.
pub fn to_json<T: serde::Serialize>(v: &T) -> Result<String, Error> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Error::failed(format!("cannot encode JSON: {e}")))?;
    if leading_id(&s).is_none() {
        return Err(Error::failed(
            "internal error: this JSON document does not begin with its \"schema\" id; please report it",
        ));
    }
    Ok(s)
}

/// The exit code a capture's report earns: 3 when zero loss was expected and is not shown.
pub fn loss_verdict(r: &RecvReport, expect_zero: bool) -> u8 {
    if !expect_zero {
        return 0;
    }
    // A stream that does not match its format has no loss count worth quoting: the reason
    // (from zero_loss_unproven) comes first.
    if r.total.lost > 0 && r.format_mismatch().is_none() {
        eprintln!(
            "wirespeed: {} packets lost, zero loss was expected (--expect-zero-loss)",
            units::thousands(r.total.lost)
        );
        EXIT_LOSS
    } else if let Some(why) = r.zero_loss_unproven() {
        eprintln!("wirespeed: {why} (--expect-zero-loss)");
        EXIT_LOSS
    } else {
        0
    }
}

/// Create the output directory before any traffic, so a bad path fails at once.
pub fn out_dir(p: &Option<PathBuf>) -> Result<Option<PathBuf>, Error> {
    match p {
        None => Ok(None),
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::io(format!("cannot create the output directory {}: {e}", d.display())))?;
            Ok(Some(d.clone()))
        }
    }
}

/// How every bench command ends: its files in the output directory (`-o`) when given, NAME.txt
/// first, then the bench's other files, then NAME.json; on stdout the JSON document alone
/// (`--json`), or else what the bench shows at its end and which files went where.
pub struct BenchEnd<'a, T: serde::Serialize> {
    /// The bench's name: the stem of its files.
    pub name: &'a str,
    /// The document, for NAME.json and `--json`.
    pub doc: &'a T,
    /// NAME.txt: the running text and what closes it.
    pub text: String,
    /// Further files written beside NAME.txt, `(file name, contents)`.
    pub extra: Vec<(String, String)>,
    /// Files the bench wrote itself (charts), named in the closing line after NAME.json.
    pub also: Vec<String>,
    /// What stdout shows at the end without `--json` (the table, the verdict).
    pub shown: String,
}

impl<T: serde::Serialize> BenchEnd<'_, T> {
    /// Write the files and print the ending.
    pub fn finish(self, json: bool, dir: Option<&Path>) -> Result<(), Error> {
        let txt = format!("{}.txt", self.name);
        let doc_name = format!("{}.json", self.name);
        if let Some(d) = dir {
            let mut files: Vec<(&str, &str)> = vec![(&txt, &self.text)];
            files.extend(self.extra.iter().map(|(n, b)| (n.as_str(), b.as_str())));
            let body = to_json(self.doc)?;
            files.push((&doc_name, &body));
            write_files(d, &files)?;
        }
        if json {
            print_json(self.doc)?;
        } else {
            print!("{}", self.shown);
            if let Some(d) = dir {
                let mut names = vec![txt.clone()];
                names.extend(self.extra.iter().map(|(n, _)| n.clone()));
                names.push(doc_name.clone());
                names.extend(self.also.iter().cloned());
                println!("{} in {}", list_and(&names), d.display());
            }
        }
        Ok(())
    }
}

/// `a`, `a and b`, `a, b and c`.
fn list_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The usual ending ([`BenchEnd`]): the running `text` with the closing `table` after a blank
/// line as NAME.txt, the document as NAME.json; on stdout a blank line and the table.
pub fn finish_bench<T: serde::Serialize>(
    json: bool,
    dir: Option<&Path>,
    name: &str,
    text: String,
    doc: &T,
    table: &str,
) -> Result<(), Error> {
    BenchEnd {
        name,
        doc,
        text: format!("{text}\n{table}"),
        extra: Vec::new(),
        also: Vec::new(),
        shown: format!("\n{table}"),
    }
    .finish(json, dir)
}

/// The error a bench stopped by a signal ends with: what was measured before it (`done`, or
/// nothing said when empty), and that the results shown are partial.
pub fn stopped(done: &str) -> Error {
    let after = if done.is_empty() { String::new() } else { format!(" after {done}") };
    Error::failed(format!("stopped by a signal{after}; the results above are partial"))
}

/// Write a report's files into its directory, naming the file that could not be written.
pub fn write_files(dir: &Path, files: &[(&str, &str)]) -> Result<(), Error> {
    for (name, body) in files {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(|e| Error::io(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}

/// The hidden name a file written out (`gather -w`, `extract -w`) has until it is whole, in
/// its own directory: `.NAME.part`. Renamed to NAME only then, so a write cut short never
/// leaves a file that looks finished.
pub fn hidden_part(target: &std::path::Path) -> std::path::PathBuf {
    target.with_file_name(format!(
        ".{}.part",
        target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    ))
}
