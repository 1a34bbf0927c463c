//! The host's CPU topology and the rules a partition layout must obey.
//!
//! Like the Origin 2000's Table 1, not every split of a machine is a valid one. The rules are
//! pure functions over a [`Topology`] value so that unit tests can feed synthetic machines (SMT
//! pairs, several NUMA nodes) and the real host is only read once, by [`Topology::read_host`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use wirespeed::{Error, Result};

/// Most partitions one host may be divided into (the Origin 2000's partition id space).
pub const MAX_PARTITIONS: usize = 64;

/// The CPUs of a host as the partition rules need them: which are online, which are SMT
/// siblings of one core, and which NUMA node each belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Online logical CPUs.
    pub online: BTreeSet<usize>,
    /// Cores: each a set of logical CPUs that share one physical core (SMT siblings).
    pub cores: Vec<BTreeSet<usize>>,
    /// NUMA node of each CPU (absent: node 0).
    pub node_of: BTreeMap<usize, usize>,
}

/// One requested partition: its id (1..64) and its logical CPUs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartSpec {
    /// Partition id, 1..=64, like `mkpart -p N`.
    pub id: u32,
    /// Logical CPUs given to the partition.
    pub cpus: BTreeSet<usize>,
}

/// Parse a Linux CPU list such as `0-3,8,10-11` (the format of sysfs and of `-c`).
pub fn parse_cpu_list(s: &str) -> std::result::Result<BTreeSet<usize>, String> {
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: usize = a.parse().map_err(|_| format!("'{part}' is not a CPU number or range (e.g. 0, 2-3)"))?;
        let b: usize = b.parse().map_err(|_| format!("'{part}' is not a CPU number or range (e.g. 0, 2-3)"))?;
        if a > b {
            return Err(format!("CPU range '{part}' is empty: write the smaller number first"));
        }
        if b >= 4096 {
            return Err(format!("CPU {b} is beyond any Linux host (4096 CPUs)"));
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err(format!("'{s}' names no CPU: write e.g. 0 or 0-1 or 0,2"));
    }
    Ok(out)
}

/// Format a CPU set back as a compact list (`0-3,8`).
pub fn format_cpu_list(cpus: &BTreeSet<usize>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = cpus.iter().copied().peekable();
    while let Some(a) = it.next() {
        let mut b = a;
        while it.peek() == Some(&(b + 1)) {
            b += 1;
            it.next();
        }
        out.push(if a == b { a.to_string() } else { format!("{a}-{b}") });
    }
    out.join(",")
}

impl Topology {
    /// A machine of `cores` cores with `smt` threads each, split evenly over `nodes` NUMA nodes,
    /// numbered like Linux does (siblings `c` and `c + cores`). For tests and for `plan`.
    pub fn synthetic(cores: usize, smt: usize, nodes: usize) -> Topology {
        let nodes = nodes.max(1);
        let per_node = cores.div_ceil(nodes).max(1);
        let mut t = Topology { online: BTreeSet::new(), cores: Vec::new(), node_of: BTreeMap::new() };
        for c in 0..cores {
            let sib: BTreeSet<usize> = (0..smt.max(1)).map(|s| c + s * cores).collect();
            for &cpu in &sib {
                t.online.insert(cpu);
                t.node_of.insert(cpu, c / per_node);
            }
            t.cores.push(sib);
        }
        t
    }

    /// Read this host's topology from sysfs.
    pub fn read_host() -> Result<Topology> {
        Self::read_from(Path::new("/sys/devices/system"))
    }

    /// Read a topology from a sysfs-like tree rooted at `root` (`cpu/online`,
    /// `cpu/cpuN/topology/thread_siblings_list`, `node/nodeN/cpulist`).
    pub fn read_from(root: &Path) -> Result<Topology> {
        let online_path = root.join("cpu/online");
        let online = std::fs::read_to_string(&online_path)
            .map_err(|e| Error::io(format!("cannot read {}: {e}", online_path.display())))
            .and_then(|s| parse_cpu_list(&s).map_err(|e| Error::failed(format!("{}: {e}", online_path.display()))))?;
        let mut cores: Vec<BTreeSet<usize>> = Vec::new();
        for &cpu in &online {
            if cores.iter().any(|c| c.contains(&cpu)) {
                continue;
            }
            let p = root.join(format!("cpu/cpu{cpu}/topology/thread_siblings_list"));
            let sib = std::fs::read_to_string(&p)
                .ok()
                .and_then(|s| parse_cpu_list(&s).ok())
                .map(|s| s.intersection(&online).copied().collect::<BTreeSet<_>>())
                .filter(|s| s.contains(&cpu))
                .unwrap_or_else(|| BTreeSet::from([cpu]));
            cores.push(sib);
        }
        let mut node_of = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir(root.join("node")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(n) = name.strip_prefix("node").and_then(|n| n.parse::<usize>().ok()) else { continue };
                if let Some(list) =
                    std::fs::read_to_string(e.path().join("cpulist")).ok().and_then(|s| parse_cpu_list(&s).ok())
                {
                    for cpu in list {
                        node_of.insert(cpu, n);
                    }
                }
            }
        }
        Ok(Topology { online, cores, node_of })
    }

    /// NUMA node of `cpu` (0 when the host does not say).
    pub fn node(&self, cpu: usize) -> usize {
        self.node_of.get(&cpu).copied().unwrap_or(0)
    }

    /// NUMA nodes present.
    pub fn nodes(&self) -> BTreeSet<usize> {
        self.online.iter().map(|&c| self.node(c)).collect()
    }

    /// The core (sibling set) holding `cpu`.
    pub fn core_of(&self, cpu: usize) -> Option<&BTreeSet<usize>> {
        self.cores.iter().find(|c| c.contains(&cpu))
    }
}

/// What the rules concluded: the layout is valid, with these warnings to print.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// One line each, already worded for the user.
    pub warnings: Vec<String>,
}

/// Check a requested layout against the host before anything is changed.
///
/// Every rule that fails gives one line; all of them are returned together so the user can
/// fix the command once. `share_cpus` allows partitions to share cores (timing isolation is
/// lost, network and memory isolation remain).
pub fn validate(topo: &Topology, parts: &[PartSpec], share_cpus: bool) -> std::result::Result<Verdict, Vec<String>> {
    let mut errs = Vec::new();
    let mut v = Verdict::default();
    if parts.is_empty() {
        errs.push("no partition given: write e.g. -p 1 -c 0 -p 2 -c 1".to_string());
    }
    if parts.len() > MAX_PARTITIONS {
        errs.push(format!("{} partitions asked, at most {MAX_PARTITIONS} are supported", parts.len()));
    }
    let mut seen = BTreeSet::new();
    for p in parts {
        if p.id == 0 || p.id as usize > MAX_PARTITIONS {
            errs.push(format!("partition id {} is out of range: use 1..{MAX_PARTITIONS}", p.id));
        }
        if !seen.insert(p.id) {
            errs.push(format!("partition id {} is given twice: each -p needs its own id", p.id));
        }
        if p.cpus.is_empty() {
            errs.push(format!("partition {} has no CPU: give it at least one with -c", p.id));
        }
        let missing: BTreeSet<usize> = p.cpus.difference(&topo.online).copied().collect();
        if !missing.is_empty() {
            errs.push(format!(
                "partition {}: CPU {} not online on this host (online: {}); see `wirespeed partition plan`",
                p.id,
                format_cpu_list(&missing),
                format_cpu_list(&topo.online)
            ));
        }
        // SMT siblings travel together: a core is the unit, like an Origin node board.
        for &cpu in p.cpus.intersection(&topo.online) {
            if let Some(core) = topo.core_of(cpu) {
                if !core.is_subset(&p.cpus) {
                    let missing: BTreeSet<usize> = core.difference(&p.cpus).copied().collect();
                    errs.push(format!(
                        "partition {}: CPU {cpu} shares a core with CPU {} (SMT siblings): give the partition the whole core, -c {}",
                        p.id,
                        format_cpu_list(&missing),
                        format_cpu_list(core)
                    ));
                    break;
                }
            }
        }
        let nodes: BTreeSet<usize> = p.cpus.iter().filter(|c| topo.online.contains(c)).map(|&c| topo.node(c)).collect();
        if nodes.len() > 1 {
            v.warnings.push(format!(
                "warning: partition {} straddles NUMA nodes {}: its memory accesses will cross the interconnect",
                p.id,
                nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
            ));
        }
    }
    let ncores = topo.cores.len();
    if parts.len() > ncores && !share_cpus {
        errs.push(format!(
            "{} partitions but this host has {ncores} cores: add --share-cpus (timing isolation is lost, network and memory isolation remain) or use fewer partitions",
            parts.len()
        ));
    }
    let mut overlaps = Vec::new();
    for (i, a) in parts.iter().enumerate() {
        for b in &parts[i + 1..] {
            let common: BTreeSet<usize> = a.cpus.intersection(&b.cpus).copied().collect();
            if !common.is_empty() {
                overlaps.push((a.id, b.id, common));
            }
        }
    }
    if !overlaps.is_empty() {
        if share_cpus {
            for (a, b, c) in &overlaps {
                v.warnings.push(format!(
                    "warning: partitions {a} and {b} share CPU {}: timing isolation is lost; network and memory isolation remain",
                    format_cpu_list(c)
                ));
            }
        } else if parts.len() <= ncores {
            for (a, b, c) in &overlaps {
                errs.push(format!(
                    "partitions {a} and {b} both claim CPU {}: give each its own CPUs, or add --share-cpus",
                    format_cpu_list(c)
                ));
            }
        }
    }
    if errs.is_empty() {
        Ok(v)
    } else {
        Err(errs)
    }
}

/// One row of the host's table of valid configurations (the seed's Table 1 for this host).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanRow {
    /// Number of partitions.
    pub partitions: usize,
    /// Whole cores per partition (0 when cores must be shared).
    pub cores_per_partition: usize,
    /// Logical CPUs per partition.
    pub cpus_per_partition: usize,
    /// Whether --share-cpus is needed.
    pub shared: bool,
    /// An example command that creates it.
    pub example: String,
}

/// The id of `partition plan --json`.
pub const PLAN_SCHEMA: &str = "wirespeed.partition-plan/1";

/// `partition plan --json`: the host's shape and its table of valid even splits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanDoc {
    /// [`PLAN_SCHEMA`].
    pub schema: &'static str,
    /// Online logical CPUs, as a list string (`0-7`).
    pub online_cpus: String,
    /// Online logical CPUs, how many.
    pub cpus: usize,
    /// Physical cores (SMT siblings counted once).
    pub cores: usize,
    /// NUMA nodes with online CPUs.
    pub numa_nodes: usize,
    /// The valid even splits ([`plan`]).
    pub rows: Vec<PlanRow>,
}

/// [`plan`] of `topo` with the host's shape beside it, as `partition plan --json` prints it.
pub fn plan_doc(topo: &Topology) -> PlanDoc {
    PlanDoc {
        schema: PLAN_SCHEMA,
        online_cpus: format_cpu_list(&topo.online),
        cpus: topo.online.len(),
        cores: topo.cores.len(),
        numa_nodes: topo.nodes().len(),
        rows: plan(topo),
    }
}

/// The valid even splits of a host: 1..=cores partitions of whole cores (kept inside one NUMA
/// node where possible), and one shared row beyond that.
pub fn plan(topo: &Topology) -> Vec<PlanRow> {
    let ncores = topo.cores.len();
    // Order cores by NUMA node so that consecutive cores stay on one node.
    let mut cores = topo.cores.clone();
    cores.sort_by_key(|c| (c.iter().next().map(|&x| topo.node(x)), c.iter().next().copied()));
    let mut rows = Vec::new();
    for k in 1..=ncores.min(MAX_PARTITIONS) {
        let per = ncores / k;
        if k > 1 && ncores / (k - 1) == per && ncores % k != 0 {
            continue; // same cores per partition as the previous row, with more left over
        }
        let mut example = String::from("wirespeed partition create");
        for i in 0..k {
            let set: BTreeSet<usize> = cores[i * per..(i + 1) * per].iter().flatten().copied().collect();
            example.push_str(&format!(" -p {} -c {}", i + 1, format_cpu_list(&set)));
        }
        let cpus = cores.iter().take(per).map(|c| c.len()).sum::<usize>();
        rows.push(PlanRow {
            partitions: k,
            cores_per_partition: per,
            cpus_per_partition: cpus,
            shared: false,
            example,
        });
    }
    if ncores > 0 && ncores < MAX_PARTITIONS {
        let k = (ncores + 1).clamp(2, MAX_PARTITIONS);
        let mut example = String::from("wirespeed partition create --share-cpus");
        for i in 0..k {
            let core = &cores[i % ncores.max(1)];
            example.push_str(&format!(" -p {} -c {}", i + 1, format_cpu_list(core)));
        }
        rows.push(PlanRow {
            partitions: k,
            cores_per_partition: 0,
            cpus_per_partition: cores.first().map_or(1, |c| c.len()),
            shared: true,
            example,
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: u32, cpus: &str) -> PartSpec {
        PartSpec { id, cpus: parse_cpu_list(cpus).unwrap() }
    }

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(format_cpu_list(&parse_cpu_list("0-3,8,10-11").unwrap()), "0-3,8,10-11");
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("99999").is_err());
    }

    #[test]
    fn disjoint_whole_cores_are_valid() {
        let t = Topology::synthetic(4, 2, 1); // cores {0,4} {1,5} {2,6} {3,7}
        let v = validate(&t, &[p(1, "0,4"), p(2, "1,5,2,6")], false).unwrap();
        assert!(v.warnings.is_empty());
    }

    #[test]
    fn smt_siblings_are_never_split() {
        let t = Topology::synthetic(4, 2, 1);
        let e = validate(&t, &[p(1, "0"), p(2, "4")], false).unwrap_err();
        assert!(e.iter().any(|l| l.contains("SMT siblings") && l.contains("-c 0,4")), "{e:?}");
    }

    #[test]
    fn overlap_needs_share_cpus() {
        let t = Topology::synthetic(2, 1, 1);
        let e = validate(&t, &[p(1, "0"), p(2, "0")], false).unwrap_err();
        assert!(e.iter().any(|l| l.contains("both claim CPU 0")), "{e:?}");
        let v = validate(&t, &[p(1, "0"), p(2, "0")], true).unwrap();
        assert!(v.warnings.iter().any(|w| w.contains("timing isolation is lost")));
    }

    #[test]
    fn more_partitions_than_cores_need_share_cpus() {
        let t = Topology::synthetic(2, 1, 1);
        let three = [p(1, "0"), p(2, "1"), p(3, "0")];
        let e = validate(&t, &three, false).unwrap_err();
        assert!(e.iter().any(|l| l.contains("--share-cpus") && l.contains("2 cores")), "{e:?}");
        assert!(validate(&t, &three, true).is_ok());
    }

    #[test]
    fn numa_straddle_is_a_warning() {
        let t = Topology::synthetic(4, 1, 2); // node 0: 0,1; node 1: 2,3
        let v = validate(&t, &[p(1, "1-2"), p(2, "3")], false).unwrap();
        assert_eq!(v.warnings.len(), 1);
        assert!(v.warnings[0].contains("straddles NUMA nodes 0,1"));
        assert!(validate(&t, &[p(1, "0-1"), p(2, "2-3")], false).unwrap().warnings.is_empty());
    }

    #[test]
    fn ids_cpus_and_counts_are_checked() {
        let t = Topology::synthetic(2, 1, 1);
        let e = validate(&t, &[p(0, "0"), p(65, "1")], false).unwrap_err();
        assert_eq!(e.iter().filter(|l| l.contains("out of range")).count(), 2);
        let e = validate(&t, &[p(1, "0"), p(1, "1")], false).unwrap_err();
        assert!(e.iter().any(|l| l.contains("given twice")));
        let e = validate(&t, &[p(1, "7")], false).unwrap_err();
        assert!(e.iter().any(|l| l.contains("CPU 7 not online")));
        let e = validate(&t, &[PartSpec { id: 1, cpus: BTreeSet::new() }], false).unwrap_err();
        assert!(e.iter().any(|l| l.contains("no CPU")));
        assert!(validate(&t, &[], false).is_err());
        let big = Topology::synthetic(128, 1, 1);
        let many: Vec<PartSpec> = (1..=65).map(|i| p(i, &i.to_string())).collect();
        let e = validate(&big, &many, false).unwrap_err();
        assert!(e.iter().any(|l| l.contains("at most 64")));
    }

    #[test]
    fn plan_lists_whole_core_splits_and_a_shared_row() {
        let t = Topology::synthetic(4, 2, 2);
        let rows = plan(&t);
        let ks: Vec<usize> = rows.iter().map(|r| r.partitions).collect();
        assert_eq!(ks, vec![1, 2, 3, 4, 5]);
        assert_eq!(rows[1].cpus_per_partition, 4);
        assert!(rows.last().unwrap().shared);
        // Every example is itself valid on the host.
        for r in &rows {
            let mut parts = Vec::new();
            let words: Vec<&str> = r.example.split_whitespace().collect();
            let mut i = 0;
            while i + 3 < words.len() {
                if words[i] == "-p" {
                    parts.push(p(words[i + 1].parse().unwrap(), words[i + 3]));
                    i += 4;
                } else {
                    i += 1;
                }
            }
            assert!(validate(&t, &parts, r.shared).is_ok(), "{}", r.example);
        }
    }

    #[test]
    fn reads_a_sysfs_tree() {
        let dir = std::env::temp_dir().join(format!("wirespeed-topo-{}", std::process::id()));
        let w = |rel: &str, s: &str| {
            let f = dir.join(rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, s).unwrap();
        };
        w("cpu/online", "0-3\n");
        for (c, s) in [(0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")] {
            w(&format!("cpu/cpu{c}/topology/thread_siblings_list"), s);
        }
        w("node/node0/cpulist", "0,2\n");
        w("node/node1/cpulist", "1,3\n");
        let t = Topology::read_from(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(t.cores.len(), 2);
        assert_eq!(t.node(3), 1);
        assert!(validate(&t, &[p(1, "0"), p(2, "1,3")], false).is_err());
    }
}
