//! Real hosts as the ends of a run, reached over OpenSSH: the third kind of
//! [`super::place::Place`] beside loopback and partitions.
//!
//! wirespeed adds no control service of its own. The transport is the `ssh` on PATH, so the
//! site's keys, host verification, agents, jump hosts, ssh config and audit logs all apply,
//! and nothing of wirespeed's listens on any host between runs. Three rules keep a far host
//! safe and clean:
//!
//! - **Nothing the user typed reaches the far shell.** ssh joins its arguments into one string
//!   that the far login shell parses. The only words on that line are the far program's path
//!   and the fixed word `leash`, each quoted POSIX-style ([`quote`]). The far command's
//!   arguments go as one JSON line on the channel's standard input ([`LeashRequest`]) and are
//!   handed to `execve` as they are, so no value (a path, a format spec, an address) is ever
//!   read by a shell.
//! - **A leash.** `wirespeed leash` ([`leash`]) runs the far command with the channel as its
//!   lifeline. When its standard input reaches end of file (the controller closed it to stop
//!   the run, or died, or the connection dropped), the command gets SIGTERM, so it still
//!   reports, and SIGKILL 10 s later. Nothing outlives the experiment.
//! - **Both ends speak the same documents.** Before anything runs, `wirespeed hello` on each
//!   host gives its version and the document schemas it writes ([`Hello`]). A mismatch is
//!   refused in one line that names both versions.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wirespeed::{sys, Error, Result};

/// The id of the document `wirespeed hello` prints.
pub const HELLO_SCHEMA: &str = "wirespeed.hello/1";

/// Every document id this build writes: the far side's list must be the same, or the
/// controller could misread what comes back. `tests/schemas.rs` checks that this list matches
/// the schema files in `schemas/`.
pub const SCHEMAS: &[&str] = &[
    "wirespeed.bench.capture/1",
    "wirespeed.bench.compare-search/1",
    "wirespeed.bench.compare/1",
    "wirespeed.bench.doctor/1",
    "wirespeed.bench.formats/1",
    "wirespeed.bench.latency/2",
    "wirespeed.bench.max/1",
    "wirespeed.bench.pacing/1",
    "wirespeed.bench.pgm/1",
    "wirespeed.bench.priority/1",
    "wirespeed.bench.rates/1",
    "wirespeed.bench.ring/2",
    "wirespeed.bench.soak/1",
    "wirespeed.bench.sweep/1",
    "wirespeed.bench.taps/1",
    "wirespeed.bench.ttcp/1",
    "wirespeed.bench.writer/1",
    "wirespeed.bench.xpc/1",
    "wirespeed.demo/1",
    "wirespeed.disk-test/1",
    "wirespeed.doctor/1",
    "wirespeed.extract/1",
    "wirespeed.hello/1",
    "wirespeed.isolation/1",
    "wirespeed.latency/1",
    "wirespeed.linerate/1",
    "wirespeed.partition-plan/1",
    "wirespeed.partition-status/1",
    "wirespeed.partition-view/1",
    "wirespeed.partition/1",
    "wirespeed.ping/1",
    "wirespeed.probe/1",
    "wirespeed.record.interval/1",
    "wirespeed.record/1",
    "wirespeed.recording/1",
    "wirespeed.recording/2",
    "wirespeed.recordings/1",
    "wirespeed.recv.interval/1",
    "wirespeed.recv/1",
    "wirespeed.reflect.pgm/1",
    "wirespeed.reflect/1",
    "wirespeed.scan/1",
    "wirespeed.send/1",
    "wirespeed.share/1",
    "wirespeed.station/1",
    "wirespeed.tap.interval/1",
    "wirespeed.tap/1",
    "wirespeed.ttcp.raw/1",
    "wirespeed.ttcp/1",
    "wirespeed.verify/2",
];

/// The most receivers a fleet has: the sending host runs one ssh session per receiver on one
/// connection, and sshd allows 10 sessions on a connection by default (`MaxSessions`).
pub const MAX_FLEET: usize = 8;

/// How long the far command has to end after its SIGTERM before it is killed.
const LEASH_GRACE: Duration = Duration::from_secs(10);

/// The longest request line the leash reads: far more than any command line needs.
const MAX_REQUEST: u64 = 1 << 20;

/// Quote `word` for a POSIX shell: inside single quotes every character stands for itself, and
/// a single quote is written `'\''` (close, an escaped quote, reopen). Every word is quoted,
/// even one that looks safe, so no rule about which characters are special can be wrong.
pub fn quote(word: &str) -> String {
    let mut s = String::with_capacity(word.len() + 2);
    s.push('\'');
    for c in word.chars() {
        if c == '\'' {
            s.push_str("'\\''");
        } else {
            s.push(c);
        }
    }
    s.push('\'');
    s
}

/// One end of a run on hosts, as `--tx`/`--rx` name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// The machine this command runs on (`local`).
    Local,
    /// A host reached with ssh: `dest` is what ssh is given (`[user@]host`, possibly an alias
    /// of the user's ssh config), `port` its `-p`.
    Ssh {
        /// `[user@]host` (IPv6 literals without their brackets).
        dest: String,
        /// The port, when given (`host:2222`, `[2001:2::1]:2222`).
        port: Option<u16>,
    },
}

impl Host {
    /// Read `[user@]host[:port]`, `[user@][v6addr]:port`, a bare IPv6 address, or `local`.
    pub fn parse(s: &str) -> std::result::Result<Host, String> {
        if s == "local" {
            return Ok(Host::Local);
        }
        let bad = |why: &str| format!("'{s}' is not a host: {why} (give [user@]host[:port], or local)");
        if s.is_empty() {
            return Err(bad("it is empty"));
        }
        if s.starts_with('-') {
            return Err(bad("it starts with '-', which ssh would read as an option"));
        }
        // Names, addresses and ssh aliases only: nothing a local ProxyCommand's %h or a shell
        // could read as more than a name.
        if let Some(c) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-:@[]%".contains(*c))) {
            return Err(bad(&format!("it holds {c:?}")));
        }
        let (user, rest) = match s.rsplit_once('@') {
            Some((u, r)) if !u.is_empty() => (Some(u), r),
            Some(_) => return Err(bad("the user before '@' is empty")),
            None => (None, s),
        };
        let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
            let (h, after) = inner.split_once(']').ok_or_else(|| bad("'[' without ']'"))?;
            match after {
                "" => (h, None),
                p => (h, Some(p.strip_prefix(':').ok_or_else(|| bad("text after ']' is not ':PORT'"))?)),
            }
        } else if rest.matches(':').count() == 1 {
            let (h, p) = rest.split_once(':').unwrap_or((rest, ""));
            (h, Some(p))
        } else {
            (rest, None)
        };
        if host.is_empty() {
            return Err(bad("the host name is empty"));
        }
        if host.starts_with('-') || user.is_some_and(|u| u.starts_with('-')) {
            return Err(bad("a part starts with '-', which ssh would read as an option"));
        }
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| bad("the port is not 1..65535"))?),
        };
        let dest = match user {
            Some(u) => format!("{u}@{host}"),
            None => host.to_string(),
        };
        Ok(Host::Ssh { dest, port })
    }

    /// The host as messages and reports name it (`lab2`, `me@lab2:2222`, `local`).
    pub fn name(&self) -> String {
        match self {
            Host::Local => "local".into(),
            Host::Ssh { dest, port: None } => dest.clone(),
            Host::Ssh { dest, port: Some(p) } => match dest.rsplit_once('@') {
                Some((u, h)) if h.contains(':') => format!("{u}@[{h}]:{p}"),
                None if dest.contains(':') => format!("[{dest}]:{p}"),
                _ => format!("{dest}:{p}"),
            },
        }
    }
}

/// How ssh is run: the user's own options and config file, and the far program's path.
#[derive(Clone, Debug, Default)]
pub struct Ssh {
    /// `--ssh-option KEY=VALUE`, each passed as `-o KEY=VALUE` before wirespeed's own (ssh takes
    /// the first value it is given for an option, so the user's win).
    pub options: Vec<String>,
    /// `--ssh-config FILE`, passed as `-F FILE`.
    pub config: Option<PathBuf>,
    /// The far wirespeed: `wirespeed` (found on the far PATH) or `--remote-wirespeed PATH`.
    pub remote_exe: String,
}

/// One ssh connection to a host that every command of the run shares (OpenSSH's connection
/// multiplexing): a far command then starts in milliseconds instead of a key exchange's third
/// of a second. The master is this process's child in a process group of its own; it dies
/// with this process (so the connection drops and every far leash sees the end of its input)
/// and is stopped, its socket's directory removed, when dropped.
#[derive(Debug)]
pub struct Master {
    child: std::process::Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Master {
    /// Wait until the connection is up (its socket appears); a failure is ssh's own, said as
    /// [`ssh_failure`] says it, naming `host`.
    pub fn ready(&mut self, host: &Host, exe: &str) -> Result<()> {
        let name = host.name();
        let t = Instant::now();
        loop {
            if self.socket.exists() {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                let said = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
                return Err(ssh_failure(&name, st.code(), &said, exe));
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(ssh_failure(&name, None, "", exe));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The start of a master's directory name in the temp dir: `wirespeed-ssh-PID-TAG`.
const MASTER_DIR: &str = "wirespeed-ssh-";

/// Remove the masters' directories under `base` that runs now gone left (a controller killed
/// outright cannot remove its own): only a directory named for a process that no longer runs,
/// holding nothing but what a master puts there (its socket `s` and its `stderr`).
fn reap_stale_in(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) =
            name.strip_prefix(MASTER_DIR).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = e.path();
        let ours = std::fs::read_dir(&path)
            .map(|d| d.flatten().all(|f| matches!(f.file_name().to_str(), Some("s" | "stderr"))))
            .unwrap_or(false);
        if ours && e.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// A random 32-bit tag for a directory name (not for anything secret).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() as u32
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Ssh {
    /// Check the options before anything runs: each `--ssh-option` is one `KEY=VALUE`.
    pub fn check(&self) -> Result<()> {
        for o in &self.options {
            let ok =
                o.split_once('=').is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric()));
            if !ok {
                return Err(Error::invalid(format!(
                    "--ssh-option '{o}' is not KEY=VALUE (e.g. --ssh-option ConnectTimeout=5, --ssh-option IdentityFile=~/.ssh/lab)"
                )));
            }
        }
        if let Some(f) = &self.config {
            if !f.is_file() {
                return Err(Error::invalid(format!("--ssh-config {}: no such file", f.display())));
            }
        }
        if self.remote_exe.is_empty() {
            return Err(Error::invalid("--remote-wirespeed is empty: give the far wirespeed's path"));
        }
        Ok(())
    }

    /// `ssh ... DEST 'EXE' 'WORD'`: the far wirespeed run with one fixed word (`leash`,
    /// `hello`), through `master`'s connection when there is one, in its own process group so
    /// a Ctrl-C at the terminal reaches only this process, which stops the far side through
    /// the leash (and keeps its report).
    fn command(&self, host: &Host, master: Option<&Master>, word: &str) -> Command {
        let mut c = self.base(host, master, &[]);
        c.arg(format!("{} {}", quote(&self.remote_exe), quote(word)));
        c
    }

    /// `ssh OPTIONS EXTRA -- DEST`, the part every ssh of a run shares.
    fn base(&self, host: &Host, master: Option<&Master>, extra: &[&std::ffi::OsStr]) -> Command {
        let Host::Ssh { dest, port } = host else { unreachable!("ssh is only run for a far host") };
        let mut c = Command::new("ssh");
        for o in &self.options {
            c.arg("-o").arg(o);
        }
        if let Some(f) = &self.config {
            c.arg("-F").arg(f);
        }
        // No prompt can be answered in the middle of a run; no terminal, no X11, no agent
        // forwarding; a dead connection is noticed within 30 s.
        c.args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=10"]);
        c.args(["-T", "-x", "-a"]);
        if let Some(m) = master {
            c.arg("-S").arg(&m.socket).args(["-o", "ControlMaster=no"]);
        }
        if let Some(p) = port {
            c.args(["-p", &p.to_string()]);
        }
        c.args(extra).arg("--").arg(dest);
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c
    }

    /// Start the shared connection to `host` ([`Master`]); [`Master::ready`] waits for it.
    /// Started on the thread that lives as long as the run: the master dies with the thread that
    /// started it (`die_with_parent`), and it must outlive the greeting.
    pub fn start_master(&self, host: &Host) -> Result<Master> {
        let name = host.name();
        // A short path (a Unix socket's name has room for about 100 bytes), made new: never a
        // directory someone else made.
        reap_stale_in(&std::env::temp_dir());
        let mut made = None;
        for _ in 0..16 {
            let tag: u32 = rand_u32();
            let dir = std::env::temp_dir().join(format!("{MASTER_DIR}{}-{tag:08x}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    made = Some(dir);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(Error::io(format!("cannot create {} for the ssh connection: {e}", dir.display())))
                }
            }
        }
        let dir = made.ok_or_else(|| Error::io("cannot create a directory for the ssh connection in the temp dir"))?;
        let socket = dir.join("s");
        let log = std::fs::File::create(dir.join("stderr"))
            .map_err(|e| Error::io(format!("cannot create {}: {e}", dir.join("stderr").display())))?;
        let own = ["-M", "-N", "-o", "ControlPersist=no", "-S"].map(std::ffi::OsStr::new);
        let mut c = self.base(host, None, &[&own[..], &[socket.as_os_str()]].concat());
        // Its stderr goes to a file: a pipe nobody reads would stall it once full.
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        sys::die_with_parent(&mut c);
        match c.spawn() {
            Ok(child) => Ok(Master { child, dir, socket }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(Error::failed(format!("{name}: cannot run ssh: {e} (install OpenSSH's client)")))
            }
        }
    }
}

/// What the far leash is asked to run: one JSON line on its standard input.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
pub struct LeashRequest {
    /// The program, found on the far PATH; `None` for the far wirespeed itself.
    pub program: Option<String>,
    /// Its arguments, passed to `execve` as they are.
    pub args: Vec<String>,
}

/// `wirespeed hello`'s document: what a controller checks before it runs anything there.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Hello {
    /// Always [`HELLO_SCHEMA`].
    pub schema: String,
    /// The far wirespeed's version.
    pub version: String,
    /// The document ids it writes ([`SCHEMAS`]).
    pub schemas: Vec<String>,
    /// The host's name (`uname -n`).
    pub hostname: String,
    /// `$SSH_CONNECTION` as sshd set it ("client port server port"): the addresses the
    /// controller and the host see each other at. `None` when not run over ssh.
    pub ssh_connection: Option<String>,
    /// Online CPUs.
    pub cpus: usize,
    /// The CPUs it may run on (`Cpus_allowed_list`), for a run that pins its far ends.
    #[serde(default)]
    pub cpu_list: Vec<usize>,
    /// Whether it runs with CAP_NET_ADMIN (partitions, namespaces' counters, some sockets).
    pub net_admin: bool,
}

impl Hello {
    /// This host's hello, for `version` (the command's own).
    pub fn here(version: &str) -> Hello {
        let net_admin = super::require_net_admin("hello").is_ok();
        Hello {
            schema: HELLO_SCHEMA.into(),
            version: version.into(),
            schemas: SCHEMAS.iter().map(|s| s.to_string()).collect(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            ssh_connection: std::env::var("SSH_CONNECTION").ok(),
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cpu_list: super::place::allowed_cpus(),
            net_admin,
        }
    }

    /// The address the host was reached at (the server part of `$SSH_CONNECTION`).
    pub fn server_addr(&self) -> Option<IpAddr> {
        self.ssh_connection.as_deref()?.split_whitespace().nth(2)?.parse().ok()
    }

    /// The address the controller came from as the host saw it.
    pub fn client_addr(&self) -> Option<IpAddr> {
        self.ssh_connection.as_deref()?.split_whitespace().next()?.parse().ok()
    }
}

/// Run `cmd`, giving it `input` on standard input, for at most `limit`: (exit code, stdout,
/// stderr). `None` for the code when it was killed at the limit.
fn run_for(mut cmd: Command, input: &str, limit: Duration) -> std::io::Result<(Option<i32>, String, String)> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    sys::die_with_parent(&mut cmd);
    let mut child = cmd.spawn()?;
    if let Some(mut i) = child.stdin.take() {
        let _ = std::io::Write::write_all(&mut i, input.as_bytes());
    }
    let out = child.stdout.take();
    let err = child.stderr.take();
    let read = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let (o, e) = (read(out.map(|r| Box::new(r) as Box<dyn Read + Send>)), read(err.map(|r| Box::new(r) as _)));
    let t = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait()? {
            break st.code();
        }
        if t.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok((code, o.join().unwrap_or_default(), e.join().unwrap_or_default()))
}

/// Why ssh (exit 255) or the far shell failed to run the far wirespeed, as one line naming the
/// host and the fix; `said` is everything they printed on stderr.
pub fn ssh_failure(host: &str, code: Option<i32>, said: &str, exe: &str) -> Error {
    let last = proc_last_line(said);
    let has = |n: &str| said.contains(n);
    match code {
        None => Error::failed(format!(
            "{host}: ssh did not answer within its time: check that the host is up and reachable (ssh {host} true)"
        )),
        Some(255) if has("Host key verification failed") || has("host key is known") => Error::failed(format!(
            "{host}: its host key is not in known_hosts (or has changed): check the key and add it (ssh {host} true, once, by hand; or ssh-keyscan), then run again"
        )),
        Some(255) if has("Permission denied") => Error::permission(format!(
            "{host}: refused the login ({last}): add your public key to its authorized_keys, or name the key with --ssh-option IdentityFile=PATH"
        )),
        Some(255) if has("Could not resolve hostname") => {
            Error::failed(format!("{host}: the name does not resolve ({last}): check the host name or give its address"))
        }
        Some(255) if has("Connection refused") || has("No route to host") || has("timed out") || has("unreachable") => {
            Error::failed(format!(
                "{host}: cannot connect ({last}): check the address and port, and that sshd runs there"
            ))
        }
        Some(255) => Error::failed(format!("{host}: ssh failed: {}", if last.is_empty() { "no reason given" } else { &last })),
        Some(126) | Some(127) => Error::failed(format!(
            "{host}: cannot run '{exe}' there ({last}): install wirespeed on {host}, or give its path with --remote-wirespeed PATH"
        )),
        Some(c) => Error::failed(format!(
            "{host}: '{exe} hello' failed (exit {c}{}): the far wirespeed is older than this one or broken: install this version (the same as here) there",
            if last.is_empty() { String::new() } else { format!(": {last}") }
        )),
    }
}

fn proc_last_line(said: &str) -> String {
    super::proc::last_line(said).unwrap_or("").to_string()
}

/// One end of a run on hosts: where it is, what its hello said, and its shared connection.
#[derive(Debug)]
pub struct End {
    /// The host.
    pub host: Host,
    /// Its hello (this machine's own for `local`).
    pub hello: Hello,
    /// The connection every far command of the run goes through (`None` for `local`).
    master: Option<Master>,
}

impl End {
    /// The host's name for messages and reports.
    pub fn name(&self) -> String {
        self.host.name()
    }
}

/// Greet `host` with `wirespeed hello` over ssh (or here, for `local`), through its shared
/// connection (opened here, on this thread: it lives as long as this thread), and check it
/// speaks the same documents as `version` (this build's).
pub fn greet(ssh: &Ssh, host: &Host, version: &str) -> Result<End> {
    let master = match host {
        Host::Local => None,
        Host::Ssh { .. } => Some(ssh.start_master(host)?),
    };
    greet_through(ssh, host, master, version)
}

/// [`greet`] through a master already started (`None` for `local`).
fn greet_through(ssh: &Ssh, host: &Host, mut master: Option<Master>, version: &str) -> Result<End> {
    let hello = match host {
        Host::Local => Hello::here(version),
        Host::Ssh { .. } => {
            let name = host.name();
            if let Some(m) = master.as_mut() {
                m.ready(host, &ssh.remote_exe)?;
            }
            let (code, out, err) = run_for(ssh.command(host, master.as_ref(), "hello"), "", Duration::from_secs(30))
                .map_err(|e| Error::failed(format!("{name}: cannot run ssh: {e} (install OpenSSH's client)")))?;
            if code != Some(0) {
                return Err(ssh_failure(&name, code, &err, &ssh.remote_exe));
            }
            // The last line that is a hello: a far shell's rc files may print before it.
            let hello = out.lines().rev().find_map(|l| serde_json::from_str::<Hello>(l.trim()).ok()).ok_or_else(|| {
                Error::failed(format!(
                    "{name}: '{} hello' printed no hello document: the far wirespeed is older than this one: install version {version} there",
                    ssh.remote_exe
                ))
            })?;
            hello
        }
    };
    if hello.schema != HELLO_SCHEMA || hello.version != version || hello.schemas != SCHEMAS {
        let theirs: Vec<&str> = hello.schemas.iter().map(String::as_str).filter(|s| !SCHEMAS.contains(s)).collect();
        let ours: Vec<&str> = SCHEMAS.iter().copied().filter(|s| !hello.schemas.iter().any(|h| h == s)).collect();
        let diff = if theirs.is_empty() && ours.is_empty() {
            String::new()
        } else {
            format!(" (documents only there: {}; only here: {})", list_or_none(&theirs), list_or_none(&ours))
        };
        return Err(Error::failed(format!(
            "{}: runs wirespeed {} and this is wirespeed {version}{diff}: install the same version on both",
            host.name(),
            hello.version
        )));
    }
    Ok(End { host: host.clone(), hello, master })
}

fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The ends of a run on hosts: the sender's and the receiver's, greeted, with the address the
/// data goes to.
#[derive(Debug)]
pub struct Hosts {
    /// How ssh is run.
    pub ssh: Ssh,
    /// The sending end, then the receiving ends (one, or a fleet).
    pub ends: Vec<End>,
    /// Each receiver's data address, in the order of the receiving ends: `--data-address`,
    /// else the address ssh reached it at (or, for `local`, the address the sender's host saw
    /// this machine at).
    pub data: Vec<IpAddr>,
    /// The CPU the sender and the first receiver are pinned to, when a run pins them (`bench
    /// priority` puts the receiver and its competing load on one CPU of the far host).
    pub pins: [Option<usize>; 2],
}

impl Hosts {
    /// Greet `tx` and every one of `rx` (all at once) and settle the data addresses (`data`:
    /// none, or one per receiver in order).
    pub fn connect(ssh: Ssh, tx: &Host, rx: &[Host], data: &[IpAddr], version: &str) -> Result<Hosts> {
        ssh.check()?;
        if rx.is_empty() {
            return Err(Error::invalid("--tx needs --rx: name the receiver's host too"));
        }
        if !data.is_empty() && data.len() != rx.len() {
            return Err(Error::invalid(format!(
                "--data-address given {} time(s) for {} --rx: give none, or one per --rx in the same order",
                data.len(),
                rx.len()
            )));
        }
        if rx.len() > MAX_FLEET {
            return Err(Error::invalid(format!(
                "--rx given {} times: a fleet has at most {MAX_FLEET} receivers (the sender's host runs one ssh session per receiver, and sshd allows 10 on a connection)",
                rx.len()
            )));
        }
        let all: Vec<&Host> = std::iter::once(tx).chain(rx).collect();
        // The masters start here, on the thread the run lives on (each dies with the thread
        // that started it); the waits and greetings run side by side.
        let mut masters = Vec::new();
        for h in &all {
            masters.push(match h {
                Host::Local => None,
                Host::Ssh { .. } => Some(ssh.start_master(h)?),
            });
        }
        let greeted: Vec<Result<End>> = std::thread::scope(|sc| {
            let hs: Vec<_> = all
                .iter()
                .zip(masters)
                .map(|(h, m)| {
                    let ssh = &ssh;
                    sc.spawn(move || greet_through(ssh, h, m, version))
                })
                .collect();
            hs.into_iter()
                .zip(&all)
                .map(|(t, h)| {
                    t.join().unwrap_or_else(|_| Err(Error::failed(format!("{}: greeting it failed", h.name()))))
                })
                .collect()
        });
        let ends = greeted.into_iter().collect::<Result<Vec<End>>>()?;
        let mut addrs: Vec<IpAddr> = Vec::new();
        for (i, r) in ends[1..].iter().enumerate() {
            let a = match (data.get(i), &r.host, &ends[0].host) {
                (Some(a), _, _) => *a,
                (None, Host::Ssh { .. }, _) => r.hello.server_addr().ok_or_else(|| no_data_address(r))?,
                (None, Host::Local, Host::Ssh { .. }) => {
                    ends[0].hello.client_addr().ok_or_else(|| no_data_address(r))?
                }
                (None, Host::Local, Host::Local) => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            };
            // ssh through a tunnel or a ProxyCommand arrives from loopback: that is not where
            // the data can go.
            let far = !(matches!(r.host, Host::Local) && matches!(ends[0].host, Host::Local));
            if data.get(i).is_none() && far && (a.is_loopback() || a.is_unspecified()) {
                return Err(Error::invalid(format!(
                    "{}: ssh reached it at {a} (a tunnel or a ProxyCommand), which the data cannot go to: give its data address with --data-address ADDR",
                    r.name()
                )));
            }
            if let Some(j) = addrs.iter().position(|b| *b == a) {
                return Err(Error::invalid(format!(
                    "--rx {} and --rx {} receive at the same address {a}: give each receiving host once (or each its own --data-address)",
                    ends[j + 1].name(),
                    r.name()
                )));
            }
            addrs.push(a);
        }
        Ok(Hosts { ssh, ends, data: addrs, pins: [None, None] })
    }

    /// How many receivers (1, or a fleet's size).
    pub fn receivers(&self) -> usize {
        self.ends.len() - 1
    }

    /// The command that runs `program` (`None`: wirespeed itself) with `args` on end `i` (0 the
    /// sender, 1.. the receivers), and the leash request to write on its standard input (`None`
    /// for `local`, run here directly).
    pub fn command(&self, i: usize, program: Option<&str>, args: Vec<String>) -> (Command, Option<String>) {
        self.ends[i].command(&self.ssh, program, args)
    }
}

impl End {
    /// The command that runs `program` (`None`: wirespeed itself) with `args` on this end, and
    /// the leash request to write on its standard input (`None` for `local`, run here).
    pub fn command(&self, ssh: &Ssh, program: Option<&str>, args: Vec<String>) -> (Command, Option<String>) {
        let end = self;
        match &end.host {
            Host::Local => {
                let mut c = match program {
                    Some(p) => Command::new(p),
                    None => Command::new(std::env::current_exe().unwrap_or_else(|_| "wirespeed".into())),
                };
                c.args(args);
                (c, None)
            }
            h => {
                let req = LeashRequest { program: program.map(str::to_string), args };
                let line = serde_json::to_string(&req).unwrap_or_default() + "\n";
                (ssh.command(h, end.master.as_ref(), "leash"), Some(line))
            }
        }
    }
}

fn no_data_address(end: &End) -> Error {
    Error::invalid(format!(
        "cannot tell which address the data should go to on {}: give it with --data-address ADDR",
        end.name()
    ))
}

/// `wirespeed leash`: read one [`LeashRequest`] line from `input`, run it with no input and this
/// process's outputs, and stop it (SIGTERM, then SIGKILL after 10 s) when `input` reaches end
/// of file. Returns the command's exit code (128 + the signal when a signal ended it).
pub fn leash<R: Read + Send + 'static>(input: R) -> Result<u8> {
    let mut r = BufReader::new(input);
    let mut line = String::new();
    (&mut r)
        .take(MAX_REQUEST)
        .read_line(&mut line)
        .map_err(|e| Error::io(format!("leash: cannot read the request: {e}")))?;
    let req: LeashRequest = serde_json::from_str(line.trim()).map_err(|e| {
        Error::invalid(format!("leash: the request is not one JSON line {{\"program\", \"args\"}} ({e}): `leash` is run by a controller over ssh, not by hand"))
    })?;
    let (mut cmd, name) = match &req.program {
        None => (
            Command::new(
                std::env::current_exe().map_err(|e| Error::failed(format!("leash: cannot find this program: {e}")))?,
            ),
            "wirespeed".to_string(),
        ),
        Some(p) => (Command::new(p), p.clone()),
    };
    cmd.args(&req.args).stdin(Stdio::null());
    sys::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| {
        let host = Hello::here("").hostname;
        Error::failed(format!("cannot start {name} on {host}: {e} (install it there)"))
    })?;
    let pid = child.id();
    let (tx, eof) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = [0u8; 512];
        while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let mut termed: Option<Instant> = None;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| Error::failed(format!("leash: cannot wait for {name}: {e}")))? {
            break st;
        }
        match termed {
            None if eof.try_recv().is_ok() => {
                let _ = sys::send_signal(pid, sys::SIGTERM);
                termed = Some(Instant::now());
            }
            Some(at) if at.elapsed() >= LEASH_GRACE => {
                let _ = child.kill();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => (128 + s) as u8,
        _ => 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_every_character_literal() {
        assert_eq!(quote("wirespeed"), "'wirespeed'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("it's"), "'it'\\''s'");
        // A POSIX shell reads each quoted word back as exactly the word.
        for w in ["$(touch /tmp/x)", "a;b", "`id`", "'\"'", "a b\nc", "\\", "*", "~", "$HOME", "!x"] {
            let out = Command::new("sh").arg("-c").arg(format!("printf %s {}", quote(w))).output().expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), w);
        }
    }

    #[test]
    fn hosts_are_read_with_users_ports_and_ipv6() {
        let ssh = |d: &str, p: Option<u16>| Host::Ssh { dest: d.into(), port: p };
        assert_eq!(Host::parse("local"), Ok(Host::Local));
        assert_eq!(Host::parse("lab2"), Ok(ssh("lab2", None)));
        assert_eq!(Host::parse("me@lab2:2222"), Ok(ssh("me@lab2", Some(2222))));
        assert_eq!(Host::parse("2001:2::2"), Ok(ssh("2001:2::2", None)));
        assert_eq!(Host::parse("root@[2001:2::2]:22"), Ok(ssh("root@2001:2::2", Some(22))));
        assert_eq!(Host::parse("root@[2001:2::2]:22").map(|h| h.name()), Ok("root@[2001:2::2]:22".into()));
        assert_eq!(Host::parse("me@lab2:2222").map(|h| h.name()), Ok("me@lab2:2222".into()));
        let odd = ["me@-oProxyCommand=x", "a;b", "$(x)", "a`b`", "lab\n"];
        for bad in ["", "-oProxyCommand=x", "a b", "lab:0", "lab:99999", "lab:x", "@lab", "[::1", "[::1]x", ":22"]
            .into_iter()
            .chain(odd)
        {
            let e = Host::parse(bad).unwrap_err();
            assert!(e.contains("is not a host"), "{bad}: {e}");
        }
    }

    #[test]
    fn ssh_failures_name_the_host_and_the_fix() {
        let f = |code, said: &str| ssh_failure("lab2", code, said, "wirespeed").to_string();
        assert!(f(Some(255), "No ED25519 host key is known for lab2\nHost key verification failed.\n")
            .contains("known_hosts"));
        assert!(f(Some(255), "root@lab2: Permission denied (publickey).").contains("authorized_keys"));
        assert!(f(Some(255), "ssh: connect to host lab2 port 22: Connection refused").contains("sshd runs there"));
        assert!(f(Some(255), "ssh: Could not resolve hostname lab2: Name").contains("does not resolve"));
        assert!(f(Some(127), "sh: 1: wirespeed: not found").contains("--remote-wirespeed"));
        assert!(f(Some(2), "error: unrecognized subcommand 'hello'").contains("older than this one"));
        assert!(f(None, "").contains("did not answer"));
        for c in [Some(255), Some(127), Some(2), None] {
            assert!(f(c, "x").starts_with("lab2: "), "{}", f(c, "x"));
        }
    }

    #[test]
    fn the_leash_stops_its_command_at_end_of_input() {
        // A command that reports on SIGTERM: the leash passes the end of its input on as one.
        // It says it is ready (its trap set) by making a file; only then is its input closed.
        let ready = std::env::temp_dir().join(format!("wirespeed-leash-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&ready);
        let req = LeashRequest {
            program: Some("sh".into()),
            args: vec![
                "-c".into(),
                format!("trap 'exit 7' TERM; : > '{}'; while :; do sleep 0.01; done", ready.display()),
            ],
        };
        let line = serde_json::to_string(&req).expect("json") + "\n";
        let (rd, mut wr) = std::os::unix::net::UnixStream::pair().expect("pair");
        std::io::Write::write_all(&mut wr, line.as_bytes()).expect("write");
        let h = std::thread::spawn(move || leash(rd));
        let t = Instant::now();
        while !ready.exists() {
            assert!(t.elapsed() < Duration::from_secs(60), "the command never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&ready);
        drop(wr);
        assert_eq!(h.join().expect("join").expect("leash"), 7);
    }

    #[test]
    fn only_a_dead_runs_master_directories_are_reaped() {
        let base = std::env::temp_dir().join(format!("wirespeed-reap-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        // A pid above the kernel's largest cannot be running.
        let dead = 4_194_305;
        let mk = |name: &str, files: &[&str]| {
            let d = base.join(name);
            std::fs::create_dir_all(&d).expect("dir");
            for f in files {
                std::fs::write(d.join(f), "").expect("file");
            }
            d
        };
        let stale = mk(&format!("{MASTER_DIR}{dead}-0000abcd"), &["stderr"]);
        let old_style = mk(&format!("{MASTER_DIR}{dead}-1"), &[]);
        let foreign = mk(&format!("{MASTER_DIR}{dead}-0000abce"), &["stderr", "notes.txt"]);
        let live = mk(&format!("{MASTER_DIR}{}-0000abcf", std::process::id()), &["stderr"]);
        let other = mk("wirespeed-sshx", &[]);
        reap_stale_in(&base);
        assert!(!stale.exists() && !old_style.exists(), "a dead run's directories go");
        assert!(foreign.exists() && live.exists() && other.exists(), "nothing else is touched");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_leash_request_that_is_not_json_is_refused() {
        let e = leash(&b"rm -rf /\n"[..]).unwrap_err().to_string();
        assert!(e.contains("not one JSON line"), "{e}");
    }
}
