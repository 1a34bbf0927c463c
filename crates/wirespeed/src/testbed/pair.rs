//! Two partitions joined by a veth link, made for one run and removed after it: the setting in
//! which `demo`, `ping` and the benchmarks run end to end on one host when they have the
//! privilege. One place, so every self-contained run builds the same pair the same way.
//!
//! The pair is recorded as belonging to this process (pid and start time). If the process is
//! killed before it can remove the pair, its children die with it ([`Pair::command`]) and the
//! next run that makes a pair (or `partition init`/`status`) removes the leftovers.

use super::{partition_addr, topology, CreateOptions, Layout};
use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

/// A partition pair that exists while this value lives.
pub struct Pair {
    /// The namespace prefix (partition N is namespace PREFIX<N>).
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
        let layout = Layout {
            prefix: prefix.clone(),
            partitions: cpus
                .iter()
                .enumerate()
                .map(|(i, c)| topology::PartSpec { id: i as u32 + 1, cpus: c.clone() })
                .collect(),
            mtu: 9000,
            mem: None,
            share_cpus: topo.cores.len() < 2,
        };
        let exe =
            std::env::current_exe().map_err(|e| Error::Runtime(format!("cannot find this program's path: {e}")))?;
        // From here on the guard removes whatever `create` managed to build.
        let owner = super::Owner::me(what);
        let pair = Pair { prefix, cpus, exe, owner: owner.clone() };
        super::create(
            &topo,
            layout,
            &CreateOptions { force: false, hb: Default::default(), daemon_exe: None, owner: Some(owner) },
        )?;
        Ok(pair)
    }

    /// The stable address of partition `id` (1 or 2).
    pub fn addr(&self, id: u32) -> Ipv4Addr {
        partition_addr(id)
    }

    /// `wirespeed ARGS...` to run inside partition `id` (its namespace, cgroups and CPUs). It
    /// dies with this process (see [`crate::sys::die_with_parent`]): spawn it from a thread that
    /// lives as long as it does.
    pub fn command<S: AsRef<std::ffi::OsStr>>(&self, id: u32, args: &[S]) -> Command {
        self.tool_command(id, &self.exe, args)
    }

    /// `PROGRAM ARGS...` (another tool, e.g. `iperf3`) to run inside partition `id`, dying with
    /// this process like [`Pair::command`].
    pub fn tool_command<P: AsRef<std::ffi::OsStr>, S: AsRef<std::ffi::OsStr>>(
        &self,
        id: u32,
        program: P,
        args: &[S],
    ) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(["partition", "--prefix", &self.prefix, "exec", &id.to_string(), "--"]).arg(program).args(args);
        crate::sys::die_with_parent(&mut c);
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
