#!/usr/bin/env python3
"""Build the book (docs/) as HTML, the pages mdBook would make from docs/book.toml, and check it.

    python3 scripts/book.py [--out DIR]      (default: the build-dir of docs/book.toml, target/book)

Reads docs/book.toml and docs/src/SUMMARY.md, renders every chapter the summary lists with
markdown-it-py (CommonMark with tables and strikethrough; headings get the ids mdBook and GitHub
give them), and writes DIR/index.html (the first chapter) and one DIR/CHAPTER.html per chapter,
each with the summary as its navigation and links between chapters pointing at the .html pages.

Every link and image is checked while building: a link to a chapter must name a heading that
chapter has, a link inside the page one of its own headings, and a link or image out of the book
(../../BENCHMARKS.md, a figure in docs/examples/) a file that exists; those are linked from the
built page by a relative path to the file itself. A chapter the summary lists that is missing, a chapter not in the summary,
or a broken link is a failure. Prints a line per chapter like cargo's test lines and a last line
"test result: ok. N passed; M failed"; exits 1 when anything failed, 2 when markdown-it-py is
missing (pip install markdown-it-py).

`mdbook build docs` builds the same chapters where mdBook is installed (into the same directory);
it rewrites links out of the book differently.
"""

import argparse
import html
import os
import pathlib
import re
import sys
import tomllib

try:
    from markdown_it import MarkdownIt
except ImportError:
    print("book.py: needs markdown-it-py: python3 -m pip install markdown-it-py", file=sys.stderr)
    sys.exit(2)

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
ENTRY = re.compile(r"^\s*-\s*\[(?P<title>[^\]]+)\]\((?P<file>[^)]+\.md)\)\s*$")


def slug(text):
    """A heading's id as mdBook and GitHub make it: lower case, punctuation dropped, spaces to '-'."""
    keep = "".join(c for c in text.strip().lower() if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def summary(src):
    """The chapters of SUMMARY.md, in order: (title, file name)."""
    out = []
    for line in (src / "SUMMARY.md").read_text().splitlines():
        m = ENTRY.match(line)
        if m:
            out.append((m["title"], m["file"]))
    return out


def page(book_title, chapters, current, title, body):
    nav = []
    for t, f in chapters:
        target = html_name(f, chapters)
        cls = ' class="active"' if f == current else ""
        nav.append(f'<li><a href="{target}"{cls}>{html.escape(t)}</a></li>')
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} - {html.escape(book_title)}</title>
<style>
body {{ margin: 0; font: 16px/1.5 system-ui, sans-serif; display: flex; }}
nav {{ width: 17em; flex: none; background: #f4f4f4; padding: 1em; min-height: 100vh; box-sizing: border-box; }}
nav ol {{ padding-left: 1.2em; }} nav a {{ color: #333; text-decoration: none; }}
nav a.active {{ font-weight: bold; }}
main {{ max-width: 50em; padding: 1em 2em; overflow-x: auto; }}
pre {{ background: #f6f8fa; padding: .8em; overflow-x: auto; }}
code {{ font: 14px/1.4 ui-monospace, monospace; }}
table {{ border-collapse: collapse; }} th, td {{ border: 1px solid #ccc; padding: .2em .5em; }}
</style>
</head>
<body>
<nav><strong>{html.escape(book_title)}</strong><ol>
{chr(10).join(nav)}
</ol></nav>
<main>
{body}
</main>
</body>
</html>
"""


def html_name(md_file, chapters):
    """The page a chapter becomes: the first one is index.html, as mdBook makes it."""
    return "index.html" if chapters and md_file == chapters[0][1] else md_file[: -len(".md")] + ".html"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, help="output directory (default: book.toml's build-dir)")
    args = ap.parse_args()

    with open(DOCS / "book.toml", "rb") as f:
        cfg = tomllib.load(f)
    book_title = cfg["book"].get("title", "book")
    src = DOCS / cfg["book"].get("src", "src")
    out = args.out or (DOCS / cfg.get("build", {}).get("build-dir", "book")).resolve()
    chapters = summary(src)

    md = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    failures = {}
    parsed = {}
    anchors = {}
    for title, f in chapters:
        path = src / f
        if not path.is_file():
            failures[f] = [f"SUMMARY.md lists {f}, which does not exist"]
            continue
        env = {}
        tokens = md.parse(path.read_text(), env)
        ids = set()
        for i, t in enumerate(tokens):
            if t.type == "heading_open":
                text = "".join(c.content for c in (tokens[i + 1].children or []) if c.type in ("text", "code_inline"))
                hid = slug(text)
                base, n = hid, 1
                while hid in ids:  # mdBook numbers repeated ids: a, a-1, a-2
                    hid = f"{base}-{n}"
                    n += 1
                ids.add(hid)
                t.attrSet("id", hid)
        parsed[f] = (title, tokens, env)
        anchors[f] = ids
    listed = {f for _, f in chapters}
    for extra in sorted(p.name for p in src.glob("*.md")):
        if extra != "SUMMARY.md" and extra not in listed:
            failures.setdefault(extra, []).append(f"{extra} is not in SUMMARY.md: list it, or it is not in the book")

    out.mkdir(parents=True, exist_ok=True)
    for title, f in chapters:
        if f not in parsed:
            continue
        title, tokens, env = parsed[f]
        bad = failures.setdefault(f, [])

        def walk(ts):
            for t in ts:
                if t.children:
                    walk(t.children)
                # Links and images alike: a picture that is not there is a broken page too.
                attr = {"link_open": "href", "image": "src"}.get(t.type)
                if attr is None:
                    continue
                href = t.attrGet(attr) or ""
                if re.match(r"^[a-z][a-z0-9+.-]*:", href):
                    continue  # http:, https:, mailto:
                target, _, frag = href.partition("#")
                if not target:
                    if frag not in anchors[f]:
                        bad.append(f"link to #{frag}: {f} has no such heading")
                    continue
                if target in anchors:
                    if frag and frag not in anchors[target]:
                        bad.append(f"link to {target}#{frag}: {target} has no such heading")
                    t.attrSet(attr, html_name(target, chapters) + (f"#{frag}" if frag else ""))
                    continue
                resolved = (src / target).resolve()
                if not resolved.exists():
                    bad.append(f"link to {target}: no such file")
                    continue
                # A file outside the book, linked from the built page where it lies.
                t.attrSet(attr, pathlib.Path(os.path.relpath(resolved, out)).as_posix() + (f"#{frag}" if frag else ""))

        walk(tokens)
        body = md.renderer.render(tokens, md.options, env)
        (out / html_name(f, chapters)).write_text(page(book_title, chapters, f, title, body))

    passed = failed = 0
    for name in [f for _, f in chapters] + sorted(set(failures) - listed):
        problems = failures.get(name, [])
        if problems:
            failed += 1
            print(f"test book::{name} ... FAILED")
            for p in problems:
                print(f"    {p}")
        else:
            passed += 1
            print(f"test book::{name} ... ok")
    print(f"book.py: {passed} page(s) in {out}")
    word = "ok" if failed == 0 else "FAILED"
    print(f"test result: {word}. {passed} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
