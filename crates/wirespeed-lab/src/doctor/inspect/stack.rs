//! The IP stack between the NIC and the socket: connection tracking (a table lookup per
//! datagram, and a full table drops), firewall rules that match the port, reverse-path
//! filtering (which drops multicast whose source is routed elsewhere) and the IGMP version.

use super::{Ctx, F};
use crate::doctor::{Area, Change, Status};

/// The firewall ruleset as `nft list ruleset` prints it: run on the live system (root),
/// `nft/ruleset` under a snapshot root.
fn ruleset(cx: &Ctx) -> Result<String, String> {
    if !cx.root.is_live() {
        return cx.root.read("/nft/ruleset").ok_or_else(|| "the snapshot has no nft/ruleset".into());
    }
    if !cx.privileged {
        return Err("reading the firewall needs root".into());
    }
    match std::process::Command::new("nft").args(["list", "ruleset"]).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!("nft list ruleset failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(_) => Err("nft is not installed (apt-get install nftables)".into()),
    }
}

/// Chains hooked at input or prerouting and the rule lines in them, from `nft list ruleset`.
/// Each: (table and chain, hook, policy, rules).
pub fn input_chains(ruleset: &str) -> Vec<(String, String, String, Vec<String>)> {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut cur: Option<(String, String, String, Vec<String>)> = None;
    for l in ruleset.lines().map(str::trim) {
        if let Some(t) = l.strip_prefix("table ") {
            table = t.trim_end_matches('{').trim().to_string();
        } else if let Some(c) = l.strip_prefix("chain ") {
            if let Some(done) = cur.take() {
                out.push(done);
            }
            cur = Some((
                format!("{table} {}", c.trim_end_matches('{').trim()),
                String::new(),
                "accept".into(),
                Vec::new(),
            ));
        } else if l.starts_with("type ") && l.contains("hook ") {
            if let Some(c) = cur.as_mut() {
                c.1 = l.split("hook ").nth(1).and_then(|h| h.split_whitespace().next()).unwrap_or("").to_string();
                if let Some(p) = l.split("policy ").nth(1) {
                    c.2 = p.trim_end_matches(';').trim().to_string();
                }
            }
        } else if l == "}" {
            if let Some(done) = cur.take() {
                out.push(done);
            }
        } else if !l.is_empty() {
            if let Some(c) = cur.as_mut() {
                c.3.push(l.to_string());
            }
        }
    }
    out.into_iter().filter(|c| c.1 == "input" || c.1 == "prerouting").collect()
}

/// Set the stack against the stream.
pub fn check(cx: &mut Ctx) {
    let rules = ruleset(cx);
    conntrack(cx, rules.as_ref().ok().map(String::as_str));
    firewall(cx, &rules);
    rp_filter(cx);
    igmp(cx);
}

fn conntrack(cx: &mut Ctx, rules: Option<&str>) {
    let Some(count) = cx.sysctl_u64("net.netfilter.nf_conntrack_count") else {
        cx.push(
            F::new(
                "stack.conntrack",
                Area::Stack,
                Status::Ok,
                "connection tracking is not loaded in this network namespace",
            )
            .why("no table lookup per datagram"),
        );
        return;
    };
    let max = cx.sysctl_u64("net.netfilter.nf_conntrack_max").unwrap_or(0);
    let notrack = rules.map(|r| r.lines().any(|l| l.contains("notrack")));
    let seen = format!(
        "nf_conntrack loaded: {count} of {max} entries{}",
        match notrack {
            Some(true) => "; a notrack rule exists",
            Some(false) => "; no notrack rule",
            None => "",
        }
    );
    if max > 0 && count * 10 >= max * 9 {
        cx.push(
            F::new("stack.conntrack", Area::Stack, Status::Problem, seen)
                .why("the table is over 90 % full: new flows are dropped (\"nf_conntrack: table full, dropping packet\" in dmesg)")
                .change(Change::Sysctl { key: "net.netfilter.nf_conntrack_max".into(), value: (max * 4).to_string() })
                .effect(0.85),
        );
        return;
    }
    if notrack == Some(true) {
        cx.push(
            F::new("stack.conntrack", Area::Stack, Status::Ok, seen)
                .why("a notrack rule exists: check it covers the stream's port"),
        );
        return;
    }
    let port = cx.target.port.map(|p| p.to_string()).unwrap_or_else(|| "PORT".into());
    cx.push(
        F::new("stack.conntrack", Area::Stack, Status::Advice, seen)
            .why("every datagram of the stream is looked up (and its flow kept) in the connection table, on the softirq's CPU")
            .fix(format!(
                "nft add table inet ws_notrack && nft add chain inet ws_notrack pre '{{ type filter hook prerouting priority raw; }}' && nft add rule inet ws_notrack pre udp dport {port} notrack"
            ))
            .effect(0.15),
    );
}

fn firewall(cx: &mut Ctx, rules: &Result<String, String>) {
    let text = match rules {
        Ok(t) => t,
        Err(why) => {
            cx.push(
                F::new("stack.firewall", Area::Stack, Status::Unknown, "the firewall rules were not read")
                    .why(why.clone()),
            );
            return;
        }
    };
    let chains = input_chains(text);
    let n: usize = chains.iter().map(|c| c.3.len()).sum();
    let port = cx.target.port;
    let matching: Vec<String> = chains
        .iter()
        .flat_map(|c| c.3.iter().map(move |r| (c, r)))
        .filter(|(_, r)| {
            port.is_some_and(|p| r.contains(&format!("dport {p}"))) || r.contains("drop") || r.contains("reject")
        })
        .map(|(c, r)| format!("{}: {r}", c.0))
        .collect();
    let dropping = chains.iter().filter(|c| c.2 == "drop").map(|c| c.0.clone()).collect::<Vec<_>>();
    let accepts_port = port.is_some_and(|p| {
        chains.iter().any(|c| c.3.iter().any(|r| r.contains(&format!("dport {p}")) && r.contains("accept")))
    });
    let seen = format!(
        "{} input/prerouting chain(s), {n} rule(s){}{}",
        chains.len(),
        if dropping.is_empty() { String::new() } else { format!("; policy drop in {}", dropping.join(", ")) },
        if matching.is_empty() {
            String::new()
        } else {
            format!("; {}", matching.iter().take(4).cloned().collect::<Vec<_>>().join("; "))
        }
    );
    if !dropping.is_empty() && !accepts_port {
        let p = port.map(|p| p.to_string()).unwrap_or_else(|| "PORT".into());
        cx.push(
            F::new("stack.firewall", Area::Stack, Status::Problem, seen)
                .why("a chain drops by default and no rule accepts the stream's port: the datagrams are dropped before the socket, and only the ledger sees it")
                .fix(format!("nft insert rule {} udp dport {p} accept", dropping[0]))
                .effect(0.9),
        );
    } else if matching.iter().any(|m| m.contains("drop") || m.contains("reject")) {
        cx.push(
            F::new("stack.firewall", Area::Stack, Status::Advice, seen)
                .why("rules that drop or reject may match the stream (a numgen or limit rule drops a share): read them against its addresses and port")
                .effect(0.4),
        );
    } else {
        cx.push(F::new("stack.firewall", Area::Stack, Status::Ok, seen).why("no input rule drops the stream"));
    }
}

fn rp_filter(cx: &mut Ctx) {
    let Some(all) = cx.sysctl_u64("net.ipv4.conf.all.rp_filter") else { return };
    let Some(i) = cx.iface.clone() else { return };
    let own = cx.sysctl_u64(&format!("net.ipv4.conf.{i}.rp_filter")).unwrap_or(0);
    let eff = all.max(own);
    let seen = format!("rp_filter: all {all}, {i} {own} (in force: {eff})");
    if eff == 1 {
        let mut f = F::new("stack.rp_filter", Area::Stack, Status::Advice, seen)
            .why(format!("strict reverse-path filtering drops a datagram (multicast included) whose source is not routed back out of {i}: a sender on another subnet, or a multicast source, is silently dropped"))
            .effect(0.3);
        if all == 1 {
            f = f.change(Change::Sysctl { key: "net.ipv4.conf.all.rp_filter".into(), value: "2".into() });
        }
        if own == 1 {
            f = f.change(Change::Sysctl { key: format!("net.ipv4.conf.{i}.rp_filter"), value: "2".into() });
        }
        cx.push(f);
    } else {
        cx.push(
            F::new("stack.rp_filter", Area::Stack, Status::Ok, seen)
                .why("no strict reverse-path filter (0 off, 2 loose)"),
        );
    }
}

fn igmp(cx: &mut Ctx) {
    let Some(i) = cx.iface.clone() else { return };
    let forced = cx.sysctl_u64(&format!("net.ipv4.conf.{i}.force_igmp_version")).unwrap_or(0);
    let all = cx.sysctl_u64("net.ipv4.conf.all.force_igmp_version").unwrap_or(0);
    let text = cx.root.read("/proc/net/igmp").unwrap_or_default();
    let querier = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(i.as_str()))
        .and_then(|l| l.split_whitespace().last().map(str::to_string));
    let seen = format!(
        "{i}: force_igmp_version {} (all {all}){}",
        forced,
        querier.map(|q| format!(", querier {q}")).unwrap_or_default()
    );
    cx.push(
        F::new("stack.igmp", Area::Stack, Status::Ok, seen)
            .why("joins are announced with IGMPv3 unless forced (0 = the querier's version); a switch that snoops only IGMPv2 needs force_igmp_version 2 to forward a group"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_chains_are_read_with_policy_and_rules() {
        let r = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\ttcp dport 22 accept\n\t}\n\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n\t}\n}\n";
        let c = input_chains(r);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0, "inet filter input");
        assert_eq!(c[0].2, "drop");
        assert_eq!(c[0].3, vec!["tcp dport 22 accept".to_string()]);
    }
}
