//! Real hosts for the tests of runs on hosts: partitions that each run an OpenSSH server with
//! keys, an authorized key and a known_hosts file made for the test. Partitions 1..=N are the
//! hosts (sshd on 198.19.0.I port 2222); the last partition is the controller, where the
//! command under test runs, reaching the hosts over ssh as it would across a lab.
#![allow(dead_code)]

use super::parts::Parts;
use super::{bin, TempDir};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The port every test sshd listens on (each in its own namespace, so always free there).
pub const PORT: u16 = 2222;

pub struct SshLab {
    /// Removed last (fields drop in order): the servers go first, then the partitions.
    sshd: Vec<Child>,
    pub parts: Parts,
    pub dir: TempDir,
    pub hosts: u32,
}

fn keygen(path: &std::path::Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "wirespeed-test", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen (openssh-client) runs");
    assert!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
}

impl SshLab {
    /// `hosts` hosts and a controller: partitions 1..=hosts+1 sharing the CPUs, MTU 9000.
    pub fn new(tag: &str, hosts: u32) -> SshLab {
        assert!(
            std::path::Path::new("/usr/sbin/sshd").exists(),
            "sshd missing: scripts/test.sh installs openssh-server"
        );
        let parts = Parts::new(tag);
        let mut args: Vec<String> = vec!["create".into()];
        for i in 1..=hosts + 1 {
            args.extend(["-p".into(), i.to_string(), "-c".into(), ((i - 1) % 2).to_string()]);
        }
        args.extend(["--share-cpus", "--mtu", "9000", "--no-daemons"].map(String::from));
        parts.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let dir = TempDir::new(&format!("ssh-{tag}"));
        let d = dir.0.clone();
        keygen(&d.join("host_key"));
        keygen(&d.join("client_key"));
        keygen(&d.join("stranger_key"));
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).expect("authorized_keys");
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).expect("host key");
        let mut known = String::new();
        // sshd refuses to start without its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        // Made before the first server starts, so a failure part-way stops the ones started.
        let mut lab = SshLab { sshd: Vec::new(), parts, dir, hosts };
        for i in 1..=hosts {
            known.push_str(&format!("[198.19.0.{i}]:{PORT} {host_pub}"));
            let cfg = d.join(format!("sshd{i}.conf"));
            std::fs::write(
                &cfg,
                format!(
                    "Port {PORT}\nListenAddress 198.19.0.{i}\nHostKey {d}/host_key\nPidFile {d}/sshd{i}.pid\n\
                     AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
                     PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n",
                    d = d.display()
                ),
            )
            .expect("sshd config");
            let mut c = Command::new(bin())
                .args([
                    "partition",
                    "--prefix",
                    &lab.parts.prefix,
                    "exec",
                    &i.to_string(),
                    "--",
                    "/usr/sbin/sshd",
                    "-D",
                    "-e",
                    "-f",
                ])
                .arg(&cfg)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start sshd");
            // Ready when it says it listens; its later lines are drained so it never blocks.
            let err = c.stderr.take().expect("stderr");
            lab.sshd.push(c);
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut r = BufReader::new(err);
                let mut line = String::new();
                while r.read_line(&mut line).unwrap_or(0) > 0 {
                    let _ = tx.send(line.clone());
                    line.clear();
                }
            });
            let t = Instant::now();
            let mut said = String::new();
            loop {
                match rx.recv_timeout(Duration::from_secs(20).saturating_sub(t.elapsed())) {
                    Ok(l) if l.contains("Server listening on") => break,
                    Ok(l) => said.push_str(&l),
                    Err(_) => panic!("sshd in partition {i} did not start: {said}"),
                }
            }
        }
        std::fs::write(d.join("known_hosts"), known).expect("known_hosts");
        std::fs::write(
            d.join("ssh.conf"),
            format!(
                "Host *\n  User root\n  IdentityFile {d}/client_key\n  IdentitiesOnly yes\n  UserKnownHostsFile {d}/known_hosts\n  \
                 GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n",
                d = d.display()
            ),
        )
        .expect("ssh config");
        lab
    }

    /// Host `i` as `--tx`/`--rx` name it.
    pub fn host(&self, i: u32) -> String {
        format!("198.19.0.{i}:{PORT}")
    }

    pub fn file(&self, name: &str) -> String {
        self.dir.0.join(name).display().to_string()
    }

    /// The controller's partition.
    pub fn controller(&self) -> u32 {
        self.hosts + 1
    }

    /// `wirespeed ARGS` in the controller's partition, with the ssh config and the far binary
    /// given (`--ssh-config`, `--remote-wirespeed`) after ARGS.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(["partition", "--prefix", &self.parts.prefix, "exec", &self.controller().to_string(), "--", bin()])
            .args(args)
            .args(["--ssh-config", &self.file("ssh.conf"), "--remote-wirespeed", bin()]);
        c
    }

    /// `wirespeed ARGS` in the controller's partition, exactly as given.
    pub fn run_bare(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .args(["partition", "--prefix", &self.parts.prefix, "exec", &self.controller().to_string(), "--", bin()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run the controller")
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().expect("run the controller")
    }

    /// `PROGRAM ARGS` in partition `id` (an nft rule on a host, say).
    pub fn exec(&self, id: u32, argv: &[&str]) -> Output {
        let id = id.to_string();
        let mut full = vec!["exec", id.as_str(), "--"];
        full.extend_from_slice(argv);
        self.parts.run(&full)
    }
}

impl SshLab {
    /// What runs on the hosts besides their sshd listener: command lines of the processes in
    /// each host's namespace.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let servers: Vec<u32> = self.sshd.iter().map(|c| c.id()).collect();
        for i in 1..=self.hosts {
            let out = Command::new("ip").args(["netns", "pids", &self.parts.ns(i)]).output().expect("ip netns pids");
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                if servers.contains(&pid) {
                    continue;
                }
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                if !cmd.trim().is_empty() {
                    left.push(format!("host {i}: {cmd}"));
                }
            }
        }
        left
    }

    /// Nothing but sshd's listener runs on any host within `limit` (an ended session's sshd and
    /// the far leash go within moments of the connection's end).
    pub fn assert_nothing_left_within(&self, limit: Duration) {
        let t = Instant::now();
        loop {
            let left = self.leftovers();
            if left.is_empty() {
                return;
            }
            assert!(t.elapsed() < limit, "left running on the hosts after {limit:?}:\n{}", left.join("\n"));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// [`SshLab::assert_nothing_left_within`] 15 s: a far command the leash stopped has 10 s
    /// to report before it is killed (it returns as soon as nothing is left).
    pub fn assert_nothing_left(&self) {
        self.assert_nothing_left_within(Duration::from_secs(15));
    }
}

impl Drop for SshLab {
    fn drop(&mut self) {
        // `partition exec` execs `ip netns exec`, which execs sshd: the child is the server.
        for c in &mut self.sshd {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
