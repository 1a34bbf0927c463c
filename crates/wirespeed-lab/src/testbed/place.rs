//! Where a run's two ends happen: on this host's loopback, or in a pair of partitions made for
//! the run and joined by a veth link. `bench`, `bench ttcp`, `bench compare`'s peers, `demo`
//! and `ping` all place their children through one [`Place`], so every self-contained run
//! builds the same pair the same way, pins the same way, and describes itself the same way.
//!
//! A place has two sides: [`Side::Send`] (partition 1: the sender, transmitter or pinger) and
//! [`Side::Recv`] (partition 2: the receiver or reflector). Commands made here die with this
//! process ([`wirespeed::sys::die_with_parent`]), so a killed run leaves no child behind; the pair
//! is recorded as belonging to this process (pid and start time) and removed when the place is
//! dropped, or by the next run that makes a pair (or `partition init`/`status`) if this process
//! was killed before it could.

use super::proc::Placed;
use super::{partition_addr, partition_addr6, topology, CreateOptions, Layout};
use serde::Serialize;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use wirespeed::error::{Error, Result};

/// One end of a place. On partitions it is the partition's id (`Send` is 1, `Recv` is 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The sending end: partition 1, or the first CPU on loopback.
    Send,
    /// The receiving end: partition 2, or the second CPU on loopback.
    Recv,
}

impl Side {
    /// The partition this side runs in when the place is a pair.
    pub fn partition(self) -> u32 {
        match self {
            Side::Send => 1,
            Side::Recv => 2,
        }
    }

    fn index(self) -> usize {
        self.partition() as usize - 1
    }
}

/// Where a run happens: loopback (both ends on 127.0.0.1, each pinned to its own CPU when the
/// host has two) or a partition [`Pair`] that exists while this value lives.
pub struct Place {
    exe: PathBuf,
    at: At,
    /// The ends talk IPv6: ::1 on loopback, the partitions' 2001:2::N addresses on a pair.
    ipv6: bool,
}

enum At {
    Loopback { cpus: [Option<usize>; 2] },
    Partitions(Pair),
    Hosts(super::hosts::Hosts),
}

/// A place as reports show it (the `placement` object of every bench document): what a reader
/// needs to know where the figures were taken, without the live partitions.
#[derive(Clone, Debug, Serialize)]
pub struct Placement {
    /// "loopback", "partitions" or "hosts".
    pub kind: &'static str,
    /// The partitions' namespace prefix, when partitions.
    pub prefix: Option<String>,
    /// CPUs the sender runs on.
    pub send_cpus: Vec<usize>,
    /// CPUs the receiver runs on.
    pub recv_cpus: Vec<usize>,
    /// One phrase for headings.
    pub description: String,
    /// The sender's host, then the receivers' (`local` for this machine), when on hosts.
    pub hosts: Option<Vec<String>>,
}

#[cfg(test)]
impl Placement {
    /// A loopback placement on these CPUs, as the unit tests' documents give it.
    pub(crate) fn test_loopback(send_cpus: &[usize], recv_cpus: &[usize]) -> Placement {
        Placement {
            kind: "loopback",
            prefix: None,
            send_cpus: send_cpus.to_vec(),
            recv_cpus: recv_cpus.to_vec(),
            description: "loopback".into(),
            hosts: None,
        }
    }
}

/// The CPUs this process may run on (`Cpus_allowed_list`), so loopback pins inside them.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(|v| topology::parse_cpu_list(v).ok())
        })
        .map(|set| set.into_iter().collect())
        .unwrap_or_default()
}

fn current_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))
}

impl Place {
    /// Loopback, the sender pinned to the first CPU this process may use and the receiver to
    /// the second, when there are two (otherwise unpinned, sharing).
    pub fn loopback() -> Result<Place> {
        let cpus = allowed_cpus();
        let pins = if cpus.len() >= 2 { [Some(cpus[0]), Some(cpus[1])] } else { [None, None] };
        Place::loopback_on(pins[0], pins[1])
    }

    /// Loopback on the first CPU of the host's first two physical cores, so the two ends never
    /// share a core's execution units (hyperthread siblings); unpinned on a one-core host.
    pub fn loopback_on_cores() -> Result<Place> {
        let cores = topology::Topology::read_host().map(|t| t.cores).unwrap_or_default();
        let first = |i: usize| cores.get(i).and_then(|c| c.iter().next().copied());
        match (first(0), first(1)) {
            (Some(s), Some(r)) => Place::loopback_on(Some(s), Some(r)),
            _ => Place::loopback_on(None, None),
        }
    }

    /// Loopback with the sender pinned to `send_cpu` and the receiver to `recv_cpu`.
    pub fn loopback_on(send_cpu: Option<usize>, recv_cpu: Option<usize>) -> Result<Place> {
        Ok(Place { exe: current_exe()?, at: At::Loopback { cpus: [send_cpu, recv_cpu] }, ipv6: false })
    }

    /// A partition pair made for this run (see [`Pair::create`] for `tag` and `what`); removed
    /// when the place is dropped.
    pub fn partitions(tag: &str, what: &str) -> Result<Place> {
        Place::partitions_with(tag, what, &PairOptions::default())
    }

    /// [`Place::partitions`] with more partitions or their daemons (see [`Pair::create_with`]).
    pub fn partitions_with(tag: &str, what: &str, o: &PairOptions) -> Result<Place> {
        let pair = Pair::create_with(tag, what, o)?;
        Ok(Place { exe: pair.exe.clone(), at: At::Partitions(pair), ipv6: false })
    }

    /// The two ends on hosts reached over ssh (greeted already: see [`super::hosts::Hosts::connect`]).
    pub fn hosts(hosts: super::hosts::Hosts) -> Result<Place> {
        let ipv6 = hosts.data[0].is_ipv6();
        Ok(Place { exe: current_exe()?, at: At::Hosts(hosts), ipv6 })
    }

    /// Whether the two ends run in partitions (else on loopback or hosts).
    pub fn is_partitions(&self) -> bool {
        matches!(self.at, At::Partitions(_))
    }

    /// Whether the two ends run on hosts over ssh.
    pub fn is_hosts(&self) -> bool {
        matches!(self.at, At::Hosts(_))
    }

    /// "loopback", "partitions" or "hosts", as reports name the place.
    pub fn kind(&self) -> &'static str {
        match self.at {
            At::Loopback { .. } => "loopback",
            At::Partitions(_) => "partitions",
            At::Hosts(_) => "hosts",
        }
    }

    /// The partition pair, when the place is one.
    pub fn pair(&self) -> Option<&Pair> {
        match &self.at {
            At::Partitions(p) => Some(p),
            _ => None,
        }
    }

    /// The ends on hosts, when the place is hosts.
    pub fn host_ends(&self) -> Option<&super::hosts::Hosts> {
        match &self.at {
            At::Hosts(h) => Some(h),
            _ => None,
        }
    }

    /// How many receivers a point has: 1, or on hosts the fleet's size (`--rx` repeated).
    pub fn receivers(&self) -> usize {
        self.host_ends().map_or(1, |h| h.receivers())
    }

    /// Receiver `i`'s address (0 is [`Place::ip`] of [`Side::Recv`]).
    pub fn receiver_ip(&self, i: usize) -> IpAddr {
        match &self.at {
            At::Hosts(h) if i > 0 => h.data[i],
            _ => self.ip(Side::Recv),
        }
    }

    /// `wirespeed ARGS` on receiver `i` (0 is [`Place::command`] of [`Side::Recv`]).
    pub fn receiver_command<S: AsRef<OsStr>>(&self, i: usize, args: &[S]) -> Placed {
        match &self.at {
            At::Hosts(h) if i > 0 => far_end(h, i + 1, None, args),
            _ => self.command(Side::Recv, args),
        }
    }

    /// Receiver `i`'s host as reports name it (`None` off hosts).
    pub fn receiver_host(&self, i: usize) -> Option<String> {
        self.host_ends().map(|h| h.ends[i + 1].name())
    }

    /// Who runs on `side`, for messages: "the receiver" plus " on HOST" when on a far host.
    pub fn who(&self, side: Side, role: &str) -> String {
        match &self.at {
            At::Hosts(h) => format!("{role} on {}", h.ends[side.index()].name()),
            _ => role.to_string(),
        }
    }

    /// The partitions' namespace prefix, when the place is a pair.
    pub fn prefix(&self) -> Option<&str> {
        self.pair().map(|p| p.prefix.as_str())
    }

    /// The CPU a child of this binary on `side` is told to pin itself to (`--cpu`): only on
    /// loopback, where nothing else keeps the two ends apart; a partition's cgroup does that.
    pub fn pin(&self, side: Side) -> Option<usize> {
        match &self.at {
            At::Loopback { cpus } => cpus[side.index()],
            At::Hosts(h) => h.pins[side.index()],
            At::Partitions(_) => None,
        }
    }

    /// The CPUs `side` runs on: its pinned CPU on loopback (none when unpinned), its
    /// partition's set otherwise.
    pub fn cpus(&self, side: Side) -> Vec<usize> {
        match &self.at {
            At::Loopback { cpus } => cpus[side.index()].into_iter().collect(),
            At::Partitions(p) => p.cpus[side.index()].iter().copied().collect(),
            At::Hosts(h) => h.pins[side.index()].into_iter().collect(),
        }
    }

    /// The address `side` is reached at: 127.0.0.1, or its partition's stable address; with
    /// [`Place::use_ipv6`], ::1 or the partition's 2001:2::N.
    pub fn ip(&self, side: Side) -> IpAddr {
        match (&self.at, self.ipv6) {
            (At::Loopback { .. }, false) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            (At::Loopback { .. }, true) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            (At::Partitions(_), false) => IpAddr::V4(partition_addr(side.partition())),
            (At::Partitions(_), true) => IpAddr::V6(partition_addr6(side.partition())),
            // Only the receiver's address is ever dialled; the sender's is where it came from.
            (At::Hosts(h), _) => match side {
                Side::Recv => h.data[0],
                Side::Send => h.ends[0].hello.client_addr().unwrap_or(h.data[0]),
            },
        }
    }

    /// Run the traffic over IPv6 (::1, or the pair's 2001:2::1 and 2001:2::2): refused when
    /// this host has no IPv6.
    pub fn use_ipv6(&mut self) -> Result<()> {
        if let At::Hosts(h) = &self.at {
            if let Some(a) = h.data.iter().find(|a| !a.is_ipv6()) {
                return Err(Error::invalid(format!(
                    "--ipv6 on hosts: the receiver's data address {a} is IPv4: give an IPv6 one with --data-address"
                )));
            }
        }
        if !std::path::Path::new("/proc/sys/net/ipv6").exists() {
            return Err(Error::invalid(
                "--ipv6: this host has no IPv6 (/proc/sys/net/ipv6 is missing): leave --ipv6 out",
            ));
        }
        self.ipv6 = true;
        Ok(())
    }

    /// Whether the traffic runs over IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// `wirespeed ARGS...` (this same binary) to run on `side`: inside its partition (its
    /// namespace, cgroups and CPUs), or plainly on loopback (pinning is the child's own
    /// `--cpu`, see [`Place::pin`]). It dies with this process: spawn it from a thread that
    /// lives as long as it does.
    pub fn command<S: AsRef<OsStr>>(&self, side: Side, args: &[S]) -> Placed {
        match &self.at {
            At::Partitions(p) => p.command(side.partition(), args).into(),
            At::Hosts(h) => far(h, side, None, args),
            At::Loopback { .. } => {
                let mut c = Command::new(&self.exe);
                c.args(args);
                wirespeed::sys::die_with_parent(&mut c);
                c.into()
            }
        }
    }

    /// `PROGRAM ARGS...` (another tool: `iperf3`, `cat`, ...) placed like this binary's own
    /// children: in `side`'s partition through `partition exec`, or on loopback pinned with
    /// `taskset` to the CPU that side's own child would get, so a peer is measured on the same
    /// cores as wirespeed. It dies with this process, like [`Place::command`]'s.
    pub fn tool_command<S: AsRef<OsStr>>(&self, side: Side, program: &str, args: &[S]) -> Placed {
        let mut cmd = match &self.at {
            At::Partitions(p) => return p.tool_command(side.partition(), program, args).into(),
            // This binary by its path means the far host's own wirespeed; a pinned end runs
            // its tools under taskset there, as loopback does here.
            At::Hosts(h) => {
                let me = Path::new(program) == self.exe;
                return match (h.pins[side.index()], me) {
                    (Some(c), false) => {
                        let mut v: Vec<String> = vec!["-c".into(), c.to_string(), program.into()];
                        v.extend(args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()));
                        far(h, side, Some("taskset"), &v)
                    }
                    _ => far(h, side, Some(program).filter(|_| !me), args),
                };
            }
            At::Loopback { cpus } => match cpus[side.index()] {
                Some(c) => {
                    let mut cmd = Command::new("taskset");
                    cmd.args(["-c", &c.to_string(), program]).args(args);
                    cmd
                }
                None => {
                    let mut cmd = Command::new(program);
                    cmd.args(args);
                    cmd
                }
            },
        };
        wirespeed::sys::die_with_parent(&mut cmd);
        cmd.into()
    }

    /// A CPU hog on `side`: a shell busy loop (no system call in the loop) at nice `nice`,
    /// placed as that side's own children are (inside its partition, so in its namespace and on
    /// its CPUs; on loopback pinned with `taskset` to its CPU). For a run that measures how a
    /// receiver fares against competing work on its core (`bench priority`). Stopped (SIGKILL)
    /// when the returned process is dropped, and dies with this process.
    pub fn cpu_hog(&self, side: Side, nice: i32) -> Result<super::proc::Proc> {
        const LOOP: &str = "while :; do :; done";
        let cmd = if self.is_hosts() {
            // The niceness must be the far process's: `nice` there, not this end's ssh.
            self.tool_command(side, "nice", &["-n", &nice.to_string(), "sh", "-c", LOOP])
        } else {
            let mut cmd = self.tool_command(side, "sh", &["-c", LOOP]);
            wirespeed::sys::sched::nice_in_child(cmd.command_mut(), nice);
            cmd
        };
        super::proc::Proc::spawn(cmd, &self.who(side, "the CPU hog"))
    }

    /// On hosts, pin `side` (its wirespeed and its tools) to the last CPU its host allows, so a
    /// run that loads that end's core (`bench priority`'s hog) loads the core it runs on.
    /// Returns the CPU; `None` elsewhere (loopback pins already, a partition is its own core).
    pub fn pin_far(&mut self, side: Side) -> Option<usize> {
        let At::Hosts(h) = &mut self.at else { return None };
        let cpu = h.ends[side.index()].hello.cpu_list.last().copied()?;
        h.pins[side.index()] = Some(cpu);
        Some(cpu)
    }

    /// The one phrase that says where a run happens, naming the two ends `send` and `recv`
    /// ("sender"/"receiver", "transmitter"/"receiver", ...).
    pub fn describe(&self, send: &str, recv: &str) -> String {
        let d = self.describe_ends(send, recv);
        if self.ipv6 {
            format!("{d}, over IPv6")
        } else {
            d
        }
    }

    fn describe_ends(&self, send: &str, recv: &str) -> String {
        match &self.at {
            At::Loopback { cpus: [Some(s), Some(r)] } => format!("loopback, {send} on CPU {s}, {recv} on CPU {r}"),
            At::Loopback { .. } => format!("loopback, {send} and {recv} unpinned (one CPU)"),
            At::Partitions(p) => format!(
                "partitions '{}' over a veth link (MTU 9000), {send} in partition 1 (CPUs {}), {recv} in partition 2 (CPUs {})",
                p.prefix,
                topology::format_cpu_list(&p.cpus[0]),
                topology::format_cpu_list(&p.cpus[1])
            ),
            At::Hosts(h) => {
                let rx: Vec<String> = h.ends[1..]
                    .iter()
                    .zip(&h.data)
                    .map(|(e, a)| format!("{} ({} CPUs) at {a}", e.name(), e.hello.cpus))
                    .collect();
                let many = if rx.len() > 1 { format!("a fleet of {} {recv}s, each its own streams, on ", rx.len()) } else { format!("{recv} on ") };
                format!("hosts over ssh, {send} on {} ({} CPUs), {many}{}", h.ends[0].name(), h.ends[0].hello.cpus, rx.join(", "))
            }
        }
    }

    /// The place as a report records it, the ends named sender and receiver.
    pub fn placement(&self) -> Placement {
        Placement {
            kind: self.kind(),
            prefix: self.prefix().map(str::to_string),
            send_cpus: self.cpus(Side::Send),
            recv_cpus: self.cpus(Side::Recv),
            description: self.describe("sender", "receiver"),
            hosts: self.host_ends().map(|h| h.ends.iter().map(|e| e.name()).collect()),
        }
    }
}

/// A directory a child on one side writes its files into, for files that belong in `local` here
/// (heat maps, histogram logs). Here and in partitions (one filesystem) it is `local` itself;
/// on a far host it is a directory `mktemp -d` made there, whose files [`FarDir::fetch`]
/// brings back into `local` (through `tar` on the ssh channel) before removing it. Dropped
/// unfetched, the far directory is removed all the same: wirespeed leaves nothing there.
pub struct FarDir<'a> {
    place: &'a Place,
    side: Side,
    local: PathBuf,
    far: Option<String>,
}

impl Place {
    /// Where `side`'s child should write files that belong in `local` (see [`FarDir`]).
    pub fn far_dir(&self, side: Side, local: &Path) -> Result<FarDir<'_>> {
        let far = match &self.at {
            At::Hosts(h) if h.ends[side.index()].host != super::hosts::Host::Local => {
                let who = h.ends[side.index()].name();
                let out = self
                    .tool_command(side, "mktemp", &["-d", "-t", "wirespeed-files.XXXXXXXX"])
                    .output()
                    .map_err(|e| Error::failed(format!("{who}: cannot run ssh: {e}")))?;
                // Exactly the one path mktemp made: the far shell's rc files may print too, and
                // this is what is later removed there.
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let dir = text.lines().map(str::trim).rfind(|l| l.starts_with('/')).unwrap_or("").to_string();
                let name_ok =
                    Path::new(&dir).file_name().is_some_and(|n| n.to_string_lossy().starts_with("wirespeed-files."))
                        && !dir.contains("/../");
                if !out.status.success() || !name_ok {
                    return Err(Error::failed(format!(
                        "{who}: cannot make a directory for the run's files there (mktemp -d): {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                Some(dir)
            }
            _ => None,
        };
        Ok(FarDir { place: self, side, local: local.to_path_buf(), far })
    }
}

impl FarDir<'_> {
    /// The directory to give the child (`-o DIR`).
    pub fn path(&self) -> PathBuf {
        match &self.far {
            Some(f) => PathBuf::from(f),
            None => self.local.clone(),
        }
    }

    /// Bring the far files into the local directory (made if needed) and remove the far one.
    pub fn fetch(mut self) -> Result<()> {
        let Some(far) = self.far.clone() else { return Ok(()) };
        let who = self.place.who(self.side, "the host");
        let out = self
            .place
            .tool_command(self.side, "tar", &["-C", &far, "-cf", "-", "."])
            .output()
            .map_err(|e| Error::failed(format!("{who}: cannot run ssh: {e}")))?;
        self.remove();
        if !out.status.success() {
            return Err(Error::failed(format!(
                "cannot bring the run's files back from {who} (tar): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        std::fs::create_dir_all(&self.local)
            .map_err(|e| Error::io(format!("cannot create {}: {e}", self.local.display())))?;
        let mut tar = Command::new("tar");
        // The files only: the local directory keeps its own mode and owner (the far one is
        // mktemp's 0700), and what is unpacked is this user's, with this umask.
        tar.arg("-C")
            .arg(&self.local)
            .args(["--no-overwrite-dir", "--no-same-owner", "--no-same-permissions", "-xf", "-"])
            .stdin(std::process::Stdio::piped());
        let mut child = tar.spawn().map_err(|e| Error::failed(format!("cannot run tar here: {e}")))?;
        if let Some(mut i) = child.stdin.take() {
            let _ = std::io::Write::write_all(&mut i, &out.stdout);
        }
        match child.wait() {
            Ok(st) if st.success() => Ok(()),
            _ => Err(Error::failed(format!("cannot unpack the run's files from {who} into {}", self.local.display()))),
        }
    }

    fn remove(&mut self) {
        if let Some(far) = self.far.take() {
            let _ = self.place.tool_command(self.side, "rm", &["-rf", "--", &far]).output();
        }
    }
}

impl Drop for FarDir<'_> {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `program` (`None`: wirespeed) with `args` on `side` of hosts: over ssh through the far
/// leash, or here for `local`.
fn far<S: AsRef<OsStr>>(h: &super::hosts::Hosts, side: Side, program: Option<&str>, args: &[S]) -> Placed {
    far_end(h, side.index(), program, args)
}

/// [`far`] on end `i` of the hosts (0 the sender, 1.. the receivers).
fn far_end<S: AsRef<OsStr>>(h: &super::hosts::Hosts, i: usize, program: Option<&str>, args: &[S]) -> Placed {
    let args = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    match h.command(i, program, args) {
        (mut c, None) => {
            wirespeed::sys::die_with_parent(&mut c);
            c.into()
        }
        (c, Some(line)) => Placed::leashed(c, line),
    }
}

/// What [`Pair::create_with`] makes beyond the plain pair.
#[derive(Debug, Clone, Copy)]
pub struct PairOptions {
    /// Partitions 1..=N (at least 2).
    pub partitions: u32,
    /// Start each partition's daemon: heartbeats, XPC, raw devices.
    pub daemons: bool,
    /// Heartbeat settings of the daemons.
    pub hb: super::HbConfig,
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions { partitions: 2, daemons: false, hb: Default::default() }
    }
}

/// A partition pair that exists while this value lives: partitions 1 and 2, one core each,
/// joined by a veth link. The partitions kind of [`Place`]; use it through a place unless a
/// run needs the pair itself.
pub struct Pair {
    /// The namespace prefix (partition N is namespace `PREFIX<N>`).
    pub prefix: String,
    /// CPUs of partition 1 and of partition 2.
    pub cpus: [BTreeSet<usize>; 2],
    exe: PathBuf,
    owner: super::Owner,
}

impl Pair {
    /// Make partitions 1 and 2 with one core each (both share the CPUs on a one-core host),
    /// MTU 9000, no memory limit. `tag` starts the prefix; the process id makes it unique among
    /// running processes (tags are at most 7 letters: with a 7-digit pid and the final `x`, the
    /// prefix stays within 16 characters).
    /// `what` names the run (demo, bench, ping) in the message that removes the pair should
    /// the run be killed. Pairs left by runs that are gone are removed first, each said in one
    /// line on stderr.
    pub fn create(tag: &str, what: &str) -> Result<Pair> {
        Pair::create_with(tag, what, &PairOptions::default())
    }

    /// [`Pair::create`] with more partitions (3: a third that a run can kill), daemons (and so
    /// XPC and the raw devices) and heartbeat settings. Partitions beyond the host's cores share
    /// them.
    pub fn create_with(tag: &str, what: &str, o: &PairOptions) -> Result<Pair> {
        for line in super::reap_stale() {
            eprintln!("wirespeed: {line}");
        }
        let prefix = format!("{tag}{}x", std::process::id());
        let topo = topology::Topology::read_host()?;
        let cpus: [BTreeSet<usize>; 2] = if topo.cores.len() >= 2 {
            [topo.cores[0].clone(), topo.cores[1].clone()]
        } else {
            [topo.online.clone(), topo.online.clone()]
        };
        let n = o.partitions.max(2);
        let layout = Layout {
            prefix: prefix.clone(),
            partitions: (0..n).map(|i| topology::PartSpec { id: i + 1, cpus: cpus[i as usize % 2].clone() }).collect(),
            mtu: 9000,
            mem: None,
            share_cpus: topo.cores.len() < 2 || n > 2,
        };
        let exe = current_exe()?;
        // From here on the guard removes whatever `create` managed to build.
        let owner = super::Owner::me(what);
        let pair = Pair { prefix, cpus, exe, owner: owner.clone() };
        super::create(
            &topo,
            layout,
            &CreateOptions {
                force: false,
                hb: o.hb,
                daemon_exe: o.daemons.then(|| pair.exe.clone()),
                owner: Some(owner),
            },
        )?;
        Ok(pair)
    }

    /// The stable address of partition `id` (1 or 2).
    pub fn addr(&self, id: u32) -> Ipv4Addr {
        partition_addr(id)
    }

    /// `wirespeed ARGS...` to run inside partition `id` (its namespace, cgroups and CPUs). It
    /// dies with this process (see [`wirespeed::sys::die_with_parent`]): spawn it from a thread that
    /// lives as long as it does.
    pub fn command<S: AsRef<OsStr>>(&self, id: u32, args: &[S]) -> Command {
        self.tool_command(id, &self.exe, args)
    }

    /// `PROGRAM ARGS...` (another tool, e.g. `iperf3`) to run inside partition `id`, dying with
    /// this process like [`Pair::command`].
    pub fn tool_command<P: AsRef<OsStr>, S: AsRef<OsStr>>(&self, id: u32, program: P, args: &[S]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(["partition", "--prefix", &self.prefix, "exec", &id.to_string(), "--"]).arg(program).args(args);
        wirespeed::sys::die_with_parent(&mut c);
        c
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Only a set this run owns: if `create` refused because the prefix was taken, the set
        // there is someone else's.
        if let Ok(Some(st)) = super::load(&self.prefix) {
            if st.owner.as_ref() == Some(&self.owner) {
                let _ = super::init(&self.prefix);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_pins_and_describes_its_two_ends() {
        let p = Place::loopback_on(Some(0), Some(1)).expect("place");
        assert!(!p.is_partitions());
        assert_eq!((p.kind(), p.prefix()), ("loopback", None));
        assert_eq!((p.pin(Side::Send), p.pin(Side::Recv)), (Some(0), Some(1)));
        assert_eq!((p.cpus(Side::Send), p.cpus(Side::Recv)), (vec![0], vec![1]));
        assert_eq!(p.ip(Side::Recv), IpAddr::V4(Ipv4Addr::LOCALHOST));
        let pl = p.placement();
        assert_eq!(pl.description, "loopback, sender on CPU 0, receiver on CPU 1");
        assert_eq!((pl.send_cpus, pl.recv_cpus), (vec![0], vec![1]));
        let one = Place::loopback_on(None, None).expect("place");
        assert_eq!(one.describe("sender", "receiver"), "loopback, sender and receiver unpinned (one CPU)");
        assert!(one.cpus(Side::Send).is_empty());
    }

    #[test]
    fn a_loopback_tool_is_pinned_with_taskset() {
        let p = Place::loopback_on(Some(3), Some(5)).expect("place");
        let c = p.tool_command(Side::Recv, "iperf3", &["-s"]);
        assert_eq!(c.as_command().get_program(), "taskset");
        let args: Vec<_> = c.as_command().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(args, ["-c", "5", "iperf3", "-s"]);
        let c = Place::loopback_on(None, None).expect("place").tool_command(Side::Send, "cat", &["x"]);
        assert_eq!(c.as_command().get_program(), "cat");
    }
}
