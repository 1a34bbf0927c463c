//! The progress bar of a long benchmark run (a sweep of dozens of points, each seconds to
//! minutes long), drawn on stderr by `indicatif`.
//!
//! The bar is for a person watching a terminal, never part of the results: it is drawn only
//! when stderr is a terminal (and `TERM` is not `dumb`), so a run whose stderr is a file, a
//! pipe or a test's capture gets no bar and no escape codes, and stdout and the JSON are never
//! touched. indicatif rather than `\r` and escape codes by hand because it keeps the line
//! within the terminal's width (a wrapped line is cleared whole, not left behind one row per
//! redraw), ticks the clock while a long point runs, and pauses the bar around lines printed
//! through [`Bar::suspend`].

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressState, ProgressStyle};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Points done, the point running, the time since the start, and the time left estimated
/// from the points this process has finished: `[#####.....] 4/12  1080 B, rcvbuf 4.0 MiB,
/// 942M  1:05  ~2:10 left`. Cleared when dropped.
pub struct Bar {
    bar: ProgressBar,
    /// Points finished by this process and when the last one did (ms since the start): the time
    /// left is estimated from them alone (a resumed sweep starts with points done by an earlier
    /// one, which say nothing about this pace).
    done_here: Arc<(AtomicU64, AtomicU64)>,
}

impl Bar {
    /// A bar for a run of which this process will run `todo_here` points.
    pub fn new(todo_here: usize) -> Bar {
        Bar::with_target(todo_here, ProgressDrawTarget::stderr())
    }

    fn with_target(todo_here: usize, target: ProgressDrawTarget) -> Bar {
        let done_here = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let todo_here = todo_here as u64;
        let done = Arc::clone(&done_here);
        let style = ProgressStyle::with_template("[{bar:30}] {n}/{len}  {wide_msg}  {clock}{left}")
            .expect("a valid template")
            .progress_chars("#.")
            .with_key("n", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{}", s.pos() + 1);
            })
            .with_key("clock", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&clock(s.elapsed()));
            })
            .with_key("left", move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let last = Duration::from_millis(done.1.load(Ordering::Relaxed));
                let _ = w.write_str(&left(s.elapsed(), done.0.load(Ordering::Relaxed), last, todo_here));
            });
        let bar = ProgressBar::with_draw_target(Some(todo_here), target)
            .with_style(style)
            .with_finish(ProgressFinish::AndClear);
        if !bar.is_hidden() {
            bar.enable_steady_tick(Duration::from_secs(1));
        }
        Bar { bar, done_here }
    }

    /// Point `n` (1-based) of `of` in the whole run starts; `what` names it.
    pub fn start(&self, n: usize, of: usize, what: &str) {
        self.bar.set_length(of as u64);
        self.bar.set_position(n.saturating_sub(1) as u64);
        self.bar.set_message(what.to_string());
    }

    /// A point finished.
    pub fn done(&self) {
        self.done_here.1.store(self.bar.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.done_here.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Run `f` (which prints a line) with the bar off the screen, then draw it again.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Take the bar off the screen for good (also done on drop).
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// `m:ss` since the start.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

/// `  ~m:ss left`: the mean time of the points finished here (the last at `last`) times those
/// left, counting down while the next one runs; nothing before the first has finished.
fn left(elapsed: Duration, done_here: u64, last: Duration, todo_here: u64) -> String {
    if done_here == 0 {
        return String::new();
    }
    let per = last.as_secs_f64() / done_here as f64;
    let since = elapsed.saturating_sub(last).as_secs_f64();
    let s = (per * todo_here.saturating_sub(done_here) as f64 - since).max(0.0) as u64;
    format!("  ~{}:{:02} left", s / 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_the_bar_shows_them() {
        assert_eq!(clock(Duration::from_secs(65)), "1:05");
        assert_eq!(clock(Duration::from_secs(3725)), "62:05");
        let min = Duration::from_secs(60);
        assert_eq!(left(min, 0, Duration::ZERO, 10), "");
        assert_eq!(left(min, 2, min, 10), "  ~4:00 left");
        // Counting down while the next point runs, never below zero.
        assert_eq!(left(min + Duration::from_secs(30), 2, min, 10), "  ~3:30 left");
        assert_eq!(left(min * 10, 2, min, 10), "  ~0:00 left");
        assert_eq!(left(min, 12, min, 10), "  ~0:00 left");
        // Off a terminal the bar draws nothing and runs what it suspends for.
        let bar = Bar::with_target(3, ProgressDrawTarget::hidden());
        bar.start(1, 3, "1080 B");
        assert_eq!(bar.suspend(|| 7), 7);
        bar.done();
        bar.clear();
    }
}
