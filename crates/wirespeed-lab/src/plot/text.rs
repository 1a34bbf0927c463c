//! Labels: what a piece of text says and how it is set.
//!
//! plotters 0.3.7 rasterises a string with ab_glyph but drops each glyph's left side bearing
//! and truncates every pen position to whole pixels, so PNG letter spacing wobbles by up to
//! two pixels ("packetsper cell"). It gives no way to fix that inside the backend from here,
//! so for the PNG our own labels are set one glyph at a time at positions computed from the
//! font's metrics, read by ab_glyph itself so glyph ids, advances, bearings and kerning are
//! exactly those of the pixels; the SVG keeps whole `<text>` elements, which the viewer lays out itself.
//! Tick numbers are still plotters' own; digits are regular enough not to show it.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{de, FONT, INK};

/// How labels reach the backend: whole strings (SVG) or glyph by glyph (PNG, see above).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum TextMode {
    Whole,
    Glyphs,
}

/// A character, its pen offset from the start of the text and its left side bearing, in
/// pixels.
type Glyph = (char, f64, f64);

/// One piece of text and how to set it.
#[derive(Clone, Copy)]
pub(super) struct Label<'a> {
    text: &'a str,
    size: f64,
    bold: bool,
    colour: RGBColor,
    anchor: (HPos, VPos),
    /// Rotated to read bottom to top, for vertical axis titles.
    up: bool,
}

impl<'a> Label<'a> {
    pub(super) fn new(text: &'a str, size: f64) -> Label<'a> {
        Label { text, size, bold: false, colour: INK, anchor: (HPos::Left, VPos::Top), up: false }
    }

    pub(super) fn bold(self) -> Self {
        Label { bold: true, ..self }
    }

    pub(super) fn colour(self, colour: RGBColor) -> Self {
        Label { colour, ..self }
    }

    pub(super) fn at(self, h: HPos, v: VPos) -> Self {
        Label { anchor: (h, v), ..self }
    }

    pub(super) fn up(self) -> Self {
        Label { up: true, ..self }
    }

    fn style(&self) -> TextStyle<'static> {
        let weight = if self.bold { FontStyle::Bold } else { FontStyle::Normal };
        let font = (FONT, self.size, weight).into_font();
        let font = if self.up { font.transform(FontTransform::Rotate270) } else { font };
        font.color(&self.colour).pos(Pos::new(self.anchor.0, self.anchor.1))
    }

    /// Pen offset before each glyph and the total advance, in pixels, as ab_glyph would lay
    /// it out (advances plus kerning); `None` if the font tables cannot be read.
    fn layout(&self) -> Option<(Vec<Glyph>, f64)> {
        let face = Face::get(self.bold)?;
        let scale = self.size / face.height;
        let mut pen = 0.0;
        let mut prev = None;
        let mut glyphs = Vec::new();
        for c in self.text.chars() {
            let gid = face.font.glyph_id(c);
            if let Some(p) = prev {
                pen += f64::from(face.font.kern_unscaled(p, gid)) * scale;
            }
            glyphs.push((c, pen, f64::from(face.font.h_side_bearing_unscaled(gid)) * scale));
            pen += f64::from(face.font.h_advance_unscaled(gid)) * scale;
            prev = Some(gid);
        }
        Some((glyphs, pen))
    }

    pub(super) fn width<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<i32, String> {
        match self.layout() {
            Some((_, w)) => Ok(w.round() as i32),
            None => Ok(root.estimate_text_size(self.text, &self.style()).map_err(de)?.0 as i32),
        }
    }

    pub(super) fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        mode: TextMode,
        pos: (i32, i32),
    ) -> Result<(), String> {
        if self.text.is_empty() {
            return Ok(());
        }
        let layout = if mode == TextMode::Glyphs { self.layout() } else { None };
        let Some((glyphs, total)) = layout else {
            return root.draw_text(self.text, &self.style(), pos).map_err(de);
        };
        let start = match self.anchor.0 {
            HPos::Left => 0.0,
            HPos::Center => -total / 2.0,
            HPos::Right => -total,
        };
        let style = self.style().pos(Pos::new(HPos::Left, self.anchor.1));
        let mut buf = [0u8; 4];
        for (c, pen, lsb) in glyphs {
            if c.is_whitespace() {
                continue;
            }
            // ab_glyph puts the glyph's bitmap where its ink begins, less the fraction of a
            // pixel it keeps inside the bitmap: shift by the whole pixels of the bearing.
            let along = (start + pen).round() as i32 + lsb.floor() as i32;
            let at = if self.up { (pos.0, pos.1 - along) } else { (pos.0 + along, pos.1) };
            root.draw_text(c.encode_utf8(&mut buf), &style, at).map_err(de)?;
        }
        Ok(())
    }
}

/// Style for plotters' own tick labels.
pub(super) fn tick_style(size: f64) -> TextStyle<'static> {
    (FONT, size).into_font().color(&INK)
}

/// The embedded DejaVu Sans as ab_glyph (the rasteriser plotters draws the PNG with) reads it,
/// so our glyph positions use the same glyph ids, advances, bearings and kerning as its
/// pixels do.
pub(super) struct Face {
    font: FontRef<'static>,
    /// ab_glyph's pixel scale divides by ascent - descent, not by units per em.
    pub(super) height: f64,
    /// Font units per em, to convert to the em size an SVG viewer uses.
    pub(super) upem: f64,
}

impl Face {
    /// The regular or bold face, read once per process; `None` if the font does not parse,
    /// and text then falls back to plotters' own layout.
    pub(super) fn get(bold: bool) -> Option<&'static Face> {
        static REGULAR: OnceLock<Option<Face>> = OnceLock::new();
        static BOLD: OnceLock<Option<Face>> = OnceLock::new();
        if bold {
            BOLD.get_or_init(|| Face::new(dejavu::sans::bold())).as_ref()
        } else {
            REGULAR.get_or_init(|| Face::new(dejavu::sans::regular())).as_ref()
        }
    }

    fn new(bytes: &'static [u8]) -> Option<Face> {
        let font = FontRef::try_from_slice(bytes).ok()?;
        let height = f64::from(font.height_unscaled());
        let upem = f64::from(font.units_per_em()?);
        (height > 0.0 && upem > 0.0).then_some(Face { font, height, upem })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded font parses, and our layout agrees with what plotters (ab_glyph) measures.
    #[test]
    fn font_metrics_match_plotters_layout() {
        super::super::files::ensure_fonts().unwrap();
        for bold in [false, true] {
            let m = &Face::get(bold).expect("DejaVu tables").font;
            assert_ne!(m.glyph_id('a').0, 0);
            assert_ne!(m.glyph_id('µ').0, 0);
            assert_eq!(m.glyph_id('\u{10FFFF}').0, 0);
            let adv_space = m.h_advance_unscaled(m.glyph_id(' '));
            assert!(adv_space > 0.0);
            for text in ["packets per cell", "Round-trip time, 10,000 pps, 64 B", "AVATAR To"] {
                let label = Label::new(text, 15.0);
                let label = if bold { label.bold() } else { label };
                let ours = label.layout().unwrap().1;
                let style = label.style();
                let theirs = f64::from(style.font.box_size(text).unwrap().0);
                assert!((ours - theirs).abs() <= 1.0, "{text:?} bold={bold}: {ours} vs {theirs}");
            }
        }
    }
}
