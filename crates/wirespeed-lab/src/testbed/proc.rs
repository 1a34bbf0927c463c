//! The child processes of a run (a receiver and a sender, a reflector and a pinger, a ttcp pair,
//! an iperf3 client and server), handled one way: started so they die with this process, their
//! "listening on ADDR" line awaited before the other end starts, their output drained on
//! threads so a chatty child never blocks on a full pipe, and waited for with a limit, a stop
//! request passed on, and SIGTERM before SIGKILL so a child told to stop still reports.
//!
//! Every self-contained run used to do this by hand, each a little differently; the rules are
//! here once, tested against real children. Place the command first with
//! [`super::place::Place`].

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStderr, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wirespeed::{sys, Error, Result};

/// How often a wait looks at the stop flag and its limits (the exit itself is seen at once).
const STEP: Duration = Duration::from_millis(5);

/// A command as [`super::place::Place`] placed it: a plain command (here or in a partition),
/// or one that runs on a far host through its leash, whose standard input carries the leash
/// request and is then held open as the far command's lifeline (closing it is how the far
/// command is asked to stop: see [`super::hosts`]). Run it through [`Proc`] or
/// [`Placed::output`], which know this; the bare command does not.
pub struct Placed {
    cmd: Command,
    leash: Option<String>,
}

impl Placed {
    /// `cmd` that runs a far command: `request` (one line) is written to its standard input,
    /// which then stays open until the child is asked to stop.
    pub fn leashed(cmd: Command, request: String) -> Placed {
        Placed { cmd, leash: Some(request) }
    }

    /// Whether the command runs on a far host through a leash.
    pub fn is_leashed(&self) -> bool {
        self.leash.is_some()
    }

    /// A far command as a report shows it: `on HOST: PROGRAM ARGS...` (`None` when not far).
    pub fn far_text(&self) -> Option<String> {
        let line = self.leash.as_deref()?;
        let req: super::hosts::LeashRequest = serde_json::from_str(line.trim()).ok()?;
        // ssh's arguments end with the destination and the far command line.
        let args: Vec<_> = self.cmd.get_args().collect();
        let host = args.len().checked_sub(2).map(|i| args[i].to_string_lossy().into_owned()).unwrap_or_default();
        let program = req.program.unwrap_or_else(|| "wirespeed".into());
        Some(format!("on {host}: {program} {}", req.args.join(" ")))
    }

    /// The command as it will be started (to show it, or read its arguments).
    pub fn as_command(&self) -> &Command {
        &self.cmd
    }

    /// The command, to add to it (environment, a scheduling hook): what is added applies to
    /// the process started here, which for a far command is its ssh.
    pub fn command_mut(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// Run it to its end with no input and collect what it printed, like
    /// [`Command::output`]; a far command's channel is held open until it has ended, so its
    /// leash never stops it early. Dies with this process.
    pub fn output(self) -> std::io::Result<std::process::Output> {
        let Placed { mut cmd, leash } = self;
        sys::die_with_parent(&mut cmd);
        cmd.stdin(if leash.is_some() { Stdio::piped() } else { Stdio::null() });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let mut stdin = child.stdin.take();
        if let (Some(line), Some(i)) = (&leash, stdin.as_mut()) {
            i.write_all(line.as_bytes())?;
        }
        let read = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut v);
                }
                v
            })
        };
        let out = read(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
        let err = read(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
        let status = child.wait()?;
        drop(stdin);
        Ok(std::process::Output {
            status,
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        })
    }
}

impl From<Command> for Placed {
    fn from(cmd: Command) -> Placed {
        Placed { cmd, leash: None }
    }
}

/// A running child. Dropped while it still runs, it is killed (SIGKILL) and reaped, so no error
/// path leaves one behind; it also dies with this process (see [`sys::die_with_parent`]).
pub struct Proc {
    who: String,
    pid: u32,
    /// The reaper thread's report: the exit status and the moment it came.
    exited: mpsc::Receiver<(std::io::Result<ExitStatus>, Instant)>,
    reaper: Option<JoinHandle<()>>,
    reaped: bool,
    stdout: Option<JoinHandle<String>>,
    stderr: Stderr,
    /// A leashed child's standard input, held open until it is asked to stop.
    leash: Mutex<Option<ChildStdin>>,
    leashed: bool,
}

enum Stderr {
    /// Kept for [`Proc::listening`] to read.
    Held(BufReader<ChildStderr>),
    Draining(JoinHandle<String>),
    None,
}

/// How to wait for a child: what to pass on and when to give up on it.
#[derive(Clone, Copy, Default)]
pub struct Wait<'a> {
    stop: Option<&'a AtomicBool>,
    also: &'a [&'a Proc],
    limit: Option<Duration>,
    kill_at_limit: bool,
    kill_after: Option<Duration>,
}

impl<'a> Wait<'a> {
    /// Wait for as long as the child runs, passing nothing on.
    pub fn new() -> Wait<'a> {
        Wait::default()
    }

    /// When `flag` is raised (a signal sent to this process alone, not to the terminal's
    /// process group), send the child SIGTERM once, so it ends its run and still reports.
    pub fn stop(mut self, flag: &'a AtomicBool) -> Wait<'a> {
        self.stop = Some(flag);
        self
    }

    /// With [`Wait::stop`]: tell these other children to stop at the same moment (a receiver
    /// waiting for a sender that was told to stop).
    pub fn also_stop(mut self, others: &'a [&'a Proc]) -> Wait<'a> {
        self.also = others;
        self
    }

    /// After `limit` from the start of the wait, send SIGTERM (or SIGKILL with
    /// [`Wait::kill_at_limit`]); the outcome says the limit was reached.
    pub fn limit(mut self, limit: Duration) -> Wait<'a> {
        self.limit = Some(limit);
        self
    }

    /// At the limit, SIGKILL at once: for a child whose report is no use any more.
    pub fn kill_at_limit(mut self) -> Wait<'a> {
        self.kill_at_limit = true;
        self
    }

    /// SIGKILL a child still running this long after its SIGTERM (without it, a child told to
    /// stop is given as long as it takes).
    pub fn kill_after(mut self, grace: Duration) -> Wait<'a> {
        self.kill_after = Some(grace);
        self
    }
}

/// How a child ended, with everything it printed.
#[derive(Debug)]
pub struct Exit {
    /// Its exit status.
    pub status: ExitStatus,
    /// The moment it exited (seen by a thread blocked in `wait`, so not rounded to a poll step).
    pub at: Instant,
    /// Its standard output (empty when inherited).
    pub stdout: String,
    /// Its standard error (after the "listening" line, when [`Proc::listening`] read it).
    pub stderr: String,
    /// A stop request was passed on to it.
    pub stopped: bool,
    /// The wait's limit was reached.
    pub timed_out: bool,
    /// It had to be killed (SIGKILL).
    pub killed: bool,
}

enum Out {
    Piped,
    ListenOnStderr,
    Inherit,
    Watch(Stream, mpsc::Sender<String>),
}

/// One of a child's two output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Proc {
    /// Start `cmd` with no input and its output collected (read from now on, so it never
    /// blocks on a full pipe). `who` names it in messages ("the sender").
    pub fn spawn(cmd: impl Into<Placed>, who: &str) -> Result<Proc> {
        Proc::start(cmd, who, Out::Piped)
    }

    /// Like [`Proc::spawn`], but its standard error is kept for [`Proc::listening`]: for a
    /// server that says where it listens before anything may be sent to it.
    pub fn spawn_listener(cmd: impl Into<Placed>, who: &str) -> Result<Proc> {
        Proc::start(cmd, who, Out::ListenOnStderr)
    }

    /// Like [`Proc::spawn`], and every line of `stream` is also sent on the returned channel as
    /// it comes: for a server that says it is ready in its own words, on either stream (sockperf
    /// on stdout). Both streams are still collected whole for [`Proc::wait`].
    pub fn spawn_watch(cmd: impl Into<Placed>, who: &str, stream: Stream) -> Result<(Proc, mpsc::Receiver<String>)> {
        let (tx, rx) = mpsc::channel();
        Ok((Proc::start(cmd, who, Out::Watch(stream, tx))?, rx))
    }

    /// Start `cmd` printing where this process prints (a child whose report is the run's).
    pub fn spawn_inherit(cmd: impl Into<Placed>, who: &str) -> Result<Proc> {
        Proc::start(cmd, who, Out::Inherit)
    }

    fn start(cmd: impl Into<Placed>, who: &str, out: Out) -> Result<Proc> {
        let Placed { mut cmd, leash } = cmd.into();
        sys::die_with_parent(&mut cmd);
        if !matches!(out, Out::Inherit) {
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        if leash.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| Error::failed(format!("cannot start {who}: {e}")))?;
        let mut stdin = child.stdin.take();
        if let (Some(line), Some(i)) = (&leash, stdin.as_mut()) {
            // One short line: it fits the pipe, so this never blocks on the far side.
            let _ = i.write_all(line.as_bytes()).and_then(|_| i.flush());
        }
        let (out_tee, err_tee) = match &out {
            Out::Watch(Stream::Stdout, tx) => (Some(tx.clone()), None),
            Out::Watch(Stream::Stderr, tx) => (None, Some(tx.clone())),
            _ => (None, None),
        };
        let stdout = child.stdout.take().map(|o| drain(o, out_tee));
        let stderr = match (child.stderr.take(), out) {
            (Some(e), Out::ListenOnStderr) => Stderr::Held(BufReader::new(e)),
            (Some(e), _) => Stderr::Draining(drain(e, err_tee)),
            (None, _) => Stderr::None,
        };
        let pid = child.id();
        let (tx, exited) = mpsc::channel();
        // A thread blocked in wait sees the exit the moment it happens (a sender's wall time is
        // a figure of the run) and reaps it, whatever the waiting side is doing.
        let reaper = std::thread::spawn(move || {
            let st = child.wait();
            let _ = tx.send((st, Instant::now()));
        });
        Ok(Proc {
            who: who.into(),
            pid,
            exited,
            reaper: Some(reaper),
            reaped: false,
            stdout,
            stderr,
            leashed: leash.is_some(),
            leash: Mutex::new(stdin.filter(|_| leash.is_some())),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Read the child's standard error until it says "listening on ADDR" and return ADDR (the
    /// word after it, as printed); the rest of its standard error is then drained, each line
    /// also handed to `tee` as it comes (a closed channel is ignored). `Err` with everything it
    /// said when it ended without saying it listens (it failed to start, or was stopped).
    pub fn listening(&mut self, tee: Option<mpsc::Sender<String>>) -> std::result::Result<String, String> {
        let Stderr::Held(mut r) = std::mem::replace(&mut self.stderr, Stderr::None) else {
            return Err(String::new());
        };
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return Err(said);
            }
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or_default().to_string();
                self.stderr = Stderr::Draining(drain(r, tee));
                return Ok(addr);
            }
            said.push_str(&line);
        }
    }

    /// Ask the child to stop (SIGTERM), unless it has already exited. A leashed child (a far
    /// command over ssh) is asked by closing its standard input: its leash passes that on as
    /// SIGTERM, and the far command's report still comes back over the channel.
    pub fn terminate(&self) {
        if self.leashed {
            if let Ok(mut g) = self.leash.lock() {
                g.take();
            }
        } else {
            self.signal(sys::SIGTERM);
        }
    }

    fn signal(&self, sig: i32) {
        if !self.reaped {
            let _ = sys::send_signal(self.pid, sig);
        }
    }

    /// Wait for the child to exit under `how`, and collect what it printed.
    pub fn wait(mut self, how: Wait) -> Result<Exit> {
        self.stderr = match std::mem::replace(&mut self.stderr, Stderr::None) {
            Stderr::Held(r) => Stderr::Draining(drain(r, None)),
            other => other,
        };
        let t = Instant::now();
        let (mut stopped, mut timed_out, mut killed) = (false, false, false);
        let mut termed: Option<Instant> = None;
        let (st, at) = loop {
            match self.exited.recv_timeout(STEP) {
                Ok(v) => break v,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.reaped = true;
                    return Err(Error::failed(format!("lost track of {}", self.who)));
                }
            }
            if !stopped && how.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                stopped = true;
                if termed.is_none() {
                    self.terminate();
                    termed = Some(Instant::now());
                }
                for o in how.also {
                    o.terminate();
                }
            }
            if !timed_out && how.limit.is_some_and(|l| t.elapsed() >= l) {
                timed_out = true;
                if how.kill_at_limit {
                    self.signal(KILL);
                    killed = true;
                } else if termed.is_none() {
                    self.terminate();
                    termed = Some(Instant::now());
                }
            }
            if let (false, Some(at), Some(grace)) = (killed, termed, how.kill_after) {
                if at.elapsed() >= grace {
                    self.signal(KILL);
                    killed = true;
                }
            }
        };
        self.reaped = true;
        let status = st.map_err(|e| Error::failed(format!("cannot wait for {}: {e}", self.who)))?;
        let stdout = self.stdout.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        let stderr = match std::mem::replace(&mut self.stderr, Stderr::None) {
            Stderr::Draining(h) => h.join().unwrap_or_default(),
            _ => String::new(),
        };
        Ok(Exit { status, at, stdout, stderr, stopped, timed_out, killed })
    }

    /// Give the child `grace` to exit by itself, then ask it to stop (SIGTERM: it still
    /// reports), then kill it if it still runs 10 s later, which is an error.
    pub fn finish(self, grace: Duration) -> Result<Exit> {
        let who = self.who.clone();
        let exit = self.wait(Wait::new().limit(grace).kill_after(Duration::from_secs(10)))?;
        if exit.killed {
            return Err(Error::failed(format!("{who} did not stop when asked: killed")));
        }
        Ok(exit)
    }
}

/// SIGKILL, for a child that ignored SIGTERM.
const KILL: i32 = libc::SIGKILL;

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped && self.exited.try_recv().is_err() {
            self.signal(KILL);
        }
        self.reaped = true;
        // The reaper ends as soon as the child is gone: no zombie stays behind.
        if let Some(h) = self.reaper.take() {
            let _ = h.join();
        }
    }
}

/// Read `r` to its end on a thread and return it as text; each line is also handed to `tee` as
/// soon as it is read.
fn drain<R: Read + Send + 'static>(r: R, tee: Option<mpsc::Sender<String>>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut all = Vec::new();
        let mut buf = Vec::new();
        while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            if let Some(tx) = &tee {
                let _ = tx.send(String::from_utf8_lossy(&buf).trim_end().to_string());
            }
            all.extend_from_slice(&buf);
            buf.clear();
        }
        String::from_utf8_lossy(&all).into_owned()
    })
}

/// The last line of `text` that says something, trimmed: a failed child's reason.
pub fn last_line(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

/// The first line of `text` that says something, trimmed.
pub fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_listener_says_where_then_is_termed_after_its_grace() {
        let mut p = Proc::spawn_listener(
            sh("echo starting >&2; echo 'x: listening on 127.0.0.1:9 (test)' >&2; echo more >&2; exec sleep 60"),
            "the sleeper",
        )
        .expect("spawn");
        assert_eq!(p.listening(None).as_deref(), Ok("127.0.0.1:9"));
        let t = Instant::now();
        let e = p.finish(Duration::from_millis(50)).expect("finish");
        assert_eq!(e.status.signal(), Some(libc::SIGTERM));
        assert!(!e.killed && e.timed_out && !e.stopped);
        assert_eq!(e.stderr, "more\n");
        assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    }

    #[test]
    fn a_child_that_ignores_term_is_killed() {
        let p = Proc::spawn(sh("trap '' TERM; exec sleep 60"), "the stubborn one").expect("spawn");
        let t = Instant::now();
        let e =
            p.wait(Wait::new().limit(Duration::from_millis(50)).kill_after(Duration::from_millis(100))).expect("wait");
        assert_eq!(e.status.signal(), Some(libc::SIGKILL));
        assert!(e.timed_out && e.killed);
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        // finish says so as an error.
        let p = Proc::spawn(sh("trap '' TERM; exec sleep 60"), "the stubborn one").expect("spawn");
        let err = p.finish(Duration::ZERO).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("the stubborn one did not stop when asked: killed"), "{err}");
    }

    #[test]
    fn draining_does_not_block_on_a_chatty_child() {
        // Far more than a pipe holds, on both outputs: the child only exits if both are read.
        let n = 4_000_000;
        let p = Proc::spawn(sh(&format!("head -c {n} /dev/zero; head -c {n} /dev/zero >&2")), "the chatty one")
            .expect("spawn");
        let e = p.wait(Wait::new().limit(Duration::from_secs(60)).kill_after(Duration::from_secs(1))).expect("wait");
        assert!(e.status.success() && !e.timed_out);
        assert_eq!((e.stdout.len(), e.stderr.len()), (n, n));
    }

    #[test]
    fn a_stop_is_passed_on_to_the_child_and_the_others() {
        let stop = AtomicBool::new(true);
        let other = Proc::spawn(sh("exec sleep 60"), "the other").expect("spawn");
        let p =
            Proc::spawn(sh("trap 'echo bye; exit 3' TERM; while :; do sleep 0.01; done"), "the child").expect("spawn");
        let others = [&other];
        let e = p.wait(Wait::new().stop(&stop).also_stop(&others).kill_after(Duration::from_secs(20))).expect("wait");
        assert!(e.stopped && !e.killed);
        assert_eq!((e.status.code(), e.stdout.as_str()), (Some(3), "bye\n"));
        let o = other.wait(Wait::new().limit(Duration::from_secs(20)).kill_at_limit()).expect("wait");
        assert_eq!(o.status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_child_that_never_listens_says_why_and_lines_are_teed() {
        let mut p = Proc::spawn_listener(sh("echo 'wirespeed: port busy' >&2; exit 1"), "the receiver").expect("spawn");
        let said = p.listening(None).unwrap_err();
        assert_eq!(last_line(&said), Some("wirespeed: port busy"));
        assert_eq!(p.wait(Wait::new()).expect("wait").status.code(), Some(1));

        let (tx, rx) = mpsc::channel();
        let mut p =
            Proc::spawn_listener(sh("echo 'listening on [::1]:5' >&2; echo one >&2; echo two >&2"), "the talker")
                .expect("spawn");
        assert_eq!(p.listening(Some(tx)).as_deref(), Ok("[::1]:5"));
        let e = p.wait(Wait::new()).expect("wait");
        assert_eq!(e.stderr, "one\ntwo\n");
        assert_eq!(rx.iter().collect::<Vec<_>>(), ["one", "two"]);
    }

    #[test]
    fn a_dropped_child_is_killed_and_reaped() {
        let p = Proc::spawn(sh("exec sleep 60"), "the sleeper").expect("spawn");
        let pid = p.pid();
        drop(p);
        assert_eq!(sys::proc::start_time(pid), None, "still there after drop");
    }

    #[test]
    fn lines_that_say_something() {
        assert_eq!(last_line("a\n  b  \n\n"), Some("b"));
        assert_eq!(first_line("\n a \nb"), Some("a"));
        assert_eq!(last_line(" \n"), None);
    }
}
