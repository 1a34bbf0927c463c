//! The book (`docs/`): what the test command makes of it. It is plain Markdown in mdBook's
//! layout (`docs/book.toml`, `docs/src/SUMMARY.md`), so these tests are its build: the summary
//! lists every chapter and nothing else, every relative link of the README and of the book
//! reaches a file (and a heading, when it names one), and every example that sends stays on
//! the host, as the README's do.

use crate::trust_inputs::{check_examples, markdown_code};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

fn book() -> PathBuf {
    repo().join("docs/src")
}

/// The chapters the summary lists, in its order.
fn summary() -> Vec<String> {
    let text = std::fs::read_to_string(book().join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- [")?.split_once("](")?.1.strip_suffix(')').map(str::to_string))
        .collect()
}

/// A heading's anchor as GitHub and mdBook make it: lower case, punctuation dropped, spaces as
/// hyphens.
fn slug(heading: &str) -> String {
    let keep: String = heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .collect();
    keep.replace(' ', "-")
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every `](target)` of a Markdown text outside code blocks and inline code.
fn links(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(j) = rest.find(')') {
                out.push(rest[..j].to_string());
                rest = &rest[j..];
            }
        }
    }
    out
}

/// The README and every chapter, as (path, text).
fn pages() -> Vec<(PathBuf, String)> {
    let mut out = vec![(repo().join("README.md"), std::fs::read_to_string(repo().join("README.md")).unwrap())];
    for ch in summary() {
        let p = book().join(&ch);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("SUMMARY.md lists {ch}: {e}"));
        out.push((p, text));
    }
    out
}

#[test]
fn the_summary_lists_every_chapter_once() {
    let listed = summary();
    let set: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(set.len(), listed.len(), "a chapter listed twice: {listed:?}");
    let mut files: Vec<String> = std::fs::read_dir(book())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "SUMMARY.md")
        .collect();
    files.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(files, sorted, "docs/src/*.md and SUMMARY.md differ: list every chapter, and only chapters");
    assert!(listed.len() >= 10, "{listed:?}");
}

#[test]
fn every_relative_link_reaches_its_file_and_heading() {
    let mut checked = 0;
    for (page, text) in pages() {
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() { page.clone() } else { dir.join(file) };
            assert!(target.exists(), "{}: the link {link} reaches nothing ({})", page.display(), target.display());
            if let Some(a) = anchor {
                let t = std::fs::read_to_string(&target).unwrap();
                assert!(anchors(&t).contains(a), "{}: no heading #{a} in {}", page.display(), target.display());
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "expected the README's and the book's links to be found (found {checked})");
}

#[test]
fn book_examples_that_send_stay_on_the_host() {
    let mut n = 0;
    for (page, text) in pages().into_iter().skip(1) {
        n += check_examples(&page.display().to_string(), markdown_code(&text).into_iter());
    }
    assert!(n >= 5, "expected the book's send examples to be found (found {n})");
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(slug(" Partitions: several test hosts on one box"), "partitions-several-test-hosts-on-one-box");
    assert_eq!(slug("Reliable multicast: `--transport pgm`"), "reliable-multicast---transport-pgm");
    assert_eq!(links("see [a](b.md#c) and `[x](y)` [d](#e)"), ["b.md#c", "#e"]);
}
