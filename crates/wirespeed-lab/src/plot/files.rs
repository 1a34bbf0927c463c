//! Writing a figure: the size limits, the embedded font, drawing into a hidden sibling file
//! renamed over the target when complete, and the SVG slimmed and matched to the PNG's text.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::text::Face;
use super::{de, FONT, MAX_PIXELS, MAX_SIDE, MIN_SIZE};
use wirespeed::error::Error;

pub(super) fn with_suffix(base: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = base.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

pub(super) fn check_size(what: &str, path: &Path, w: u32, h: u32) -> Result<(), Error> {
    let ok = w >= MIN_SIZE.0
        && h >= MIN_SIZE.1
        && w <= MAX_SIDE
        && h <= MAX_SIDE
        && u64::from(w) * u64::from(h) <= MAX_PIXELS;
    if ok {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "cannot draw {what} {}: size {w}x{h} is outside {}x{} to {MAX_SIDE}x{MAX_SIDE} (at most {MAX_PIXELS} pixels): choose a size in that range",
        path.display(),
        MIN_SIZE.0,
        MIN_SIZE.1
    )))
}

/// Register DejaVu Sans once per process; plotters' ab_glyph text looks fonts up by family
/// name, and without this every label would fail to render.
pub(super) fn ensure_fonts() -> Result<(), String> {
    static FONTS: OnceLock<bool> = OnceLock::new();
    let ok = *FONTS.get_or_init(|| {
        let regular = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok();
        let bold = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok();
        regular && bold
    });
    if ok {
        Ok(())
    } else {
        Err("the embedded DejaVu Sans font could not be loaded".to_string())
    }
}

/// A sibling name for drawing into, renamed over the target when complete so nobody ever
/// opens a half-written figure. It ends in `.png`/`.svg` because the PNG encoder picks its
/// format from the extension, whatever the caller named the target.
fn temp_sibling(path: &Path, ext: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{seq}.tmp.{ext}", std::process::id()))
}

pub(super) fn write_png<F>(what: &str, path: &Path, size: (u32, u32), draw: F) -> Result<(), Error>
where
    F: FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
{
    let fail = |e: String| Error::io(format!("cannot write {what} {}: {e}", path.display()));
    ensure_fonts().map_err(fail)?;
    let tmp = temp_sibling(path, "png");
    let drawn = (|| {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        draw(&root)?;
        root.present().map_err(de)
    })();
    let done = drawn.and_then(|()| fs::rename(&tmp, path).map_err(|e| e.to_string()));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done.map_err(fail)
}

pub(super) fn write_svg<F>(what: &str, path: &Path, size: (u32, u32), draw: F) -> Result<(), Error>
where
    F: FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
{
    let fail = |e: String| Error::io(format!("cannot write {what} {}: {e}", path.display()));
    ensure_fonts().map_err(fail)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root).map_err(fail)?;
        root.present().map_err(|e| fail(de(e)))?;
    }
    let svg = slim_svg(&svg);
    let tmp = temp_sibling(path, "svg");
    let done = fs::write(&tmp, svg).and_then(|()| fs::rename(&tmp, path));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done.map_err(|e| fail(e.to_string()))
}

/// Shrink plotters' SVG without changing the picture: `opacity="1"` and `stroke="none"` are
/// SVG defaults and are most of each cell's bytes; crisp edges stop hairline seams between
/// abutting cells; the font family names the face the layout was measured with, at the size
/// the PNG draws it.
fn slim_svg(svg: &str) -> String {
    let slim = svg
        .replace(" opacity=\"1\"", "")
        .replace(" stroke=\"none\"", "")
        .replace("font-family=\"sans-serif\"", "font-family=\"DejaVu Sans,Verdana,sans-serif\"");
    let slim = rescale_font_sizes(&slim);
    match slim.find(">\n") {
        Some(end) if slim.starts_with("<svg") => {
            let (head, body) = slim.split_at(end + 2);
            format!("{head}<style>rect{{shape-rendering:crispEdges}}</style>\n{body}")
        }
        _ => slim,
    }
}

/// plotters writes `font-size` as its size / 1.24, while ab_glyph draws the PNG with an em of
/// size x units-per-em / (ascent - descent): about 6% larger for DejaVu. Scale the SVG's
/// sizes to match, so text fills the same room in both files.
fn rescale_font_sizes(svg: &str) -> String {
    const KEY: &str = "font-size=\"";
    let Some(m) = Face::get(false) else { return svg.to_string() };
    let k = 1.24 * m.upem / m.height;
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find(KEY) {
        let (before, after) = rest.split_at(at + KEY.len());
        out.push_str(before);
        let end = after.find('"').unwrap_or(after.len());
        match after[..end].parse::<f64>() {
            Ok(size) if size.is_finite() => out.push_str(&format!("{:.1}", size * k)),
            _ => out.push_str(&after[..end]),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_font_sizes_match_the_png_em() {
        let svg = "<svg>\n<text font-size=\"19.35483870967742\">x</text><text font-size=\"oops\">";
        let out = rescale_font_sizes(svg);
        assert!(out.contains("font-size=\"20.6\""), "{out}");
        assert!(out.contains("font-size=\"oops\""), "{out}");
        assert_eq!(rescale_font_sizes("font-size=\"12"), "font-size=\"12.8");
    }
}
