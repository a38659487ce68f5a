//! A mesh by levels (`--mesh levels:rack/zone/region,per-group:K`), as Pingmesh
//! (Guo et al., Pingmesh: A Large-Scale System for Data Center Network Latency
//! Measurement and Analysis) and NetNORAD probe: every peer of this host's innermost
//! group, and at each outer level K peers of each sibling group, so that every pair
//! of sibling groups is probed at every epoch with a bounded number of probes per
//! host, and no controller: the choice is a pure function of the peer list, this
//! host, the levels, K and the epoch, which every host computes for itself.
//!
//! A group at level i is the peers that share the values of labels i.. (innermost
//! first): `rack` within its `zone` within its `region`. The siblings of this host's
//! group at level i−1 are the other groups of level i−1 inside its group of level i;
//! above the outermost label, the whole fleet. Host j of a group (by target, from 0)
//! probes members `(j + epoch)·K + t mod m` of a sibling group of m, t < K: its K
//! are consecutive, the group's hosts start at different places (together they cover
//! a sibling group of m ≤ (their number)·K at every epoch), and each epoch moves every
//! host on by K, so one host has probed every member of a sibling group of m after
//! ⌈m / K⌉ epochs.
//!
//! Probes per host: (its group's size − 1) + Σ over levels, over sibling groups G,
//! min(K, |G|). Ten racks of 40 in each of 4 zones, K = 2: 39 + 9·2 + 3·2 = 63 peers
//! instead of 1 599.

use super::peers::{Peer, PeerError};
use std::collections::BTreeMap;

/// A peer's values of `levels`, innermost first; `None` when it lacks one.
fn path<'a>(p: &'a Peer, levels: &[String]) -> Option<Vec<&'a str>> {
    levels.iter().map(|l| p.label(l)).collect()
}

/// The peers `me` probes out of `others` (every peer but `me`, sorted by target,
/// without duplicates), at `epoch`; peers without every label of `levels` are
/// not placed, so not probed.
///
/// # Errors
/// `me` lacks a label of `levels`.
pub fn choose(
    levels: &[String],
    per_group: usize,
    epoch: u64,
    others: &[Peer],
    me: &Peer,
) -> Result<Vec<Peer>, PeerError> {
    let mine = path(me, levels).ok_or_else(|| PeerError::SelfUnlabelled {
        label: levels
            .iter()
            .find(|l| me.label(l).is_none())
            .cloned()
            .unwrap_or_default(),
        target: me.target.clone(),
    })?;
    let placed: Vec<(&Peer, Vec<&str>)> = others
        .iter()
        .filter_map(|p| Some((p, path(p, levels)?)))
        .collect();
    let mut chosen: Vec<Peer> = placed
        .iter()
        .filter(|(_, v)| *v == mine)
        .map(|(p, _)| (*p).clone())
        .collect();
    for i in 1..=levels.len() {
        // This host's group at level i, and in it its own group at level i − 1,
        // with this host: its rank there (by target) is where it starts.
        let inside = |v: &[&str]| v[i..] == mine[i..];
        let own_rank = placed
            .iter()
            .filter(|(p, v)| inside(v) && v[i - 1] == mine[i - 1] && p.target < me.target)
            .count();
        let mut siblings: BTreeMap<&str, Vec<&Peer>> = BTreeMap::new();
        for (p, v) in placed
            .iter()
            .filter(|(_, v)| inside(v) && v[i - 1] != mine[i - 1])
        {
            siblings.entry(v[i - 1]).or_default().push(p);
        }
        for members in siblings.values() {
            chosen.extend(
                pick(members, own_rank, per_group, epoch)
                    .into_iter()
                    .cloned(),
            );
        }
    }
    chosen.sort();
    Ok(chosen)
}

/// Members `(rank + epoch)·k + t mod m` of `members` (sorted by target), t < k: all
/// of them when k ≥ m.
fn pick<'a>(members: &[&'a Peer], rank: usize, k: usize, epoch: u64) -> Vec<&'a Peer> {
    let m = members.len();
    if k >= m {
        return members.to_vec();
    }
    // Modulo m first: no product overflows, whatever the epoch.
    let epoch = usize::try_from(epoch % m as u64).unwrap_or(0);
    let start = ((rank % m + epoch) % m * (k % m)) % m;
    (0..k).map(|t| members[(start + t) % m]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::peers::Mesh;
    use std::collections::BTreeSet;

    /// 2 regions × 3 zones × 4 racks × 5 hosts; rack and zone names repeat across
    /// their parents, so a group is known by its whole path.
    fn fleet() -> Vec<Peer> {
        let mut all = Vec::new();
        for region in 0..2 {
            for zone in 0..3 {
                for rack in 0..4 {
                    for host in 0..5 {
                        let n = ((region * 3 + zone) * 4 + rack) * 5 + host;
                        let labels = vec![
                            ("rack".into(), format!("r{rack}")),
                            ("region".into(), format!("g{region}")),
                            ("zone".into(), format!("z{zone}")),
                        ];
                        all.push(
                            Peer::parse(&format!("10.9.{}.{}:12866", n / 200, n % 200), labels)
                                .unwrap(),
                        );
                    }
                }
            }
        }
        all
    }

    fn key(p: &Peer, depth: usize) -> Vec<&str> {
        ["rack", "zone", "region"][depth..]
            .iter()
            .map(|l| p.label(l).unwrap())
            .collect()
    }

    fn mesh(k: usize) -> Mesh {
        format!("levels:rack/zone/region,per-group:{k}")
            .parse()
            .unwrap()
    }

    /// Witness: arithmetic on the fleet's group sizes, per host: 4 rack mates, then
    /// min(K, size) in each of 3 sibling racks (5 each), 2 sibling zones (20 each)
    /// and 1 sibling region (60).
    #[test]
    fn each_host_probes_its_group_and_k_of_each_sibling_group() {
        let all = fleet();
        for k in [1, 2, 7] {
            let m = mesh(k);
            let expected = 4 + 3 * k.min(5) + 2 * k.min(20) + k.min(60);
            for me in &all {
                let sel = m.select(&all, Some(me), 0).unwrap();
                assert_eq!(sel.len(), expected, "K {k}, {}", me.target);
                assert!(sel.iter().all(|p| p.target != me.target));
                let mates = sel.iter().filter(|p| key(p, 0) == key(me, 0)).count();
                assert_eq!(mates, 4);
            }
        }
        // Whatever order the list comes in.
        let mut reversed = all.clone();
        reversed.reverse();
        assert_eq!(
            mesh(2).select(&reversed, Some(&all[33]), 5).unwrap(),
            mesh(2).select(&all, Some(&all[33]), 5).unwrap()
        );
    }

    /// Every ordered pair of sibling groups is probed at every epoch, and a group of
    /// n hosts probing a sibling of m ≤ n·K covers all of it. Witness: the pairs
    /// enumerated from the fleet, against every host's choice.
    #[test]
    fn every_pair_of_sibling_groups_is_probed_at_every_epoch() {
        let all = fleet();
        for k in [1, 2] {
            for epoch in [0, 1, 17, u64::MAX] {
                let m = mesh(k);
                let probed: BTreeSet<(String, String)> = all
                    .iter()
                    .flat_map(|me| {
                        m.select(&all, Some(me), epoch)
                            .unwrap()
                            .into_iter()
                            .map(|p| (me.target.clone(), p.target))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                for depth in 0..3 {
                    // Groups at this depth, by their whole path.
                    let mut groups: BTreeMap<Vec<&str>, Vec<&Peer>> = BTreeMap::new();
                    for p in &all {
                        groups.entry(key(p, depth)).or_default().push(p);
                    }
                    for (a, hosts_a) in &groups {
                        for (b, hosts_b) in &groups {
                            // Siblings: the same parent, different groups.
                            if a == b || a[1..] != b[1..] {
                                continue;
                            }
                            let covered = hosts_b
                                .iter()
                                .filter(|y| {
                                    hosts_a.iter().any(|x| {
                                        probed.contains(&(x.target.clone(), y.target.clone()))
                                    })
                                })
                                .count();
                            assert!(covered > 0, "{a:?} → {b:?}, K {k}, epoch {epoch}");
                            if hosts_a.len() * k >= hosts_b.len() {
                                assert_eq!(covered, hosts_b.len(), "{a:?} → {b:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// One host has probed every member of a sibling group of m after ⌈m / K⌉
    /// epochs, and each epoch's choice differs from the last. Witness: the union of
    /// its choices, against the group.
    #[test]
    fn rotation_covers_every_host_of_a_sibling_group_in_m_over_k_epochs() {
        let all = fleet();
        let me = &all[0];
        for k in [1, 2, 3] {
            let m = mesh(k);
            // A sibling region: 60 hosts.
            let other: BTreeSet<&str> = all
                .iter()
                .filter(|p| p.label("region") != me.label("region"))
                .map(|p| p.target.as_str())
                .collect();
            let epochs = 60_u64.div_ceil(k as u64);
            let mut seen = BTreeSet::new();
            let mut last = Vec::new();
            for e in 1_000..1_000 + epochs {
                let now: Vec<String> = m
                    .select(&all, Some(me), e)
                    .unwrap()
                    .into_iter()
                    .map(|p| p.target)
                    .filter(|t| other.contains(t.as_str()))
                    .collect();
                assert_eq!(now.len(), k);
                assert_ne!(now, last, "epoch {e}");
                seen.extend(now.clone());
                last = now;
            }
            assert_eq!(seen.len(), 60, "K {k} after {epochs} epochs");
        }
    }

    /// Unlabelled peers are not placed; this host unlabelled is an error naming the
    /// label; the forms that mix levels with group or random, or repeat a label, are
    /// refused.
    #[test]
    fn unlabelled_hosts_and_mixed_forms() {
        let mut all = fleet();
        all.push(Peer::parse("10.9.9.9:12866", vec![("rack".into(), "r0".into())]).unwrap());
        let sel = mesh(1).select(&all, Some(&all[0]), 0).unwrap();
        assert!(sel.iter().all(|p| p.target != "10.9.9.9:12866"));
        let e = mesh(1).select(&all, all.last(), 0).unwrap_err().to_string();
        assert!(e.contains("no label \"zone\""), "{e}");
        assert!(mesh(1).select(&all, None, 0).is_err());
        for bad in [
            "levels:rack,group:zone",
            "levels:rack,random:2",
            "per-group:2",
            "rotate:1h",
            "levels:rack/rack",
            "levels:rack,per-group:0",
            "levels:rack,rotate:0s",
            "levels:",
        ] {
            assert!(bad.parse::<Mesh>().is_err(), "{bad}");
        }
        let m: Mesh = "levels:rack/zone,per-group:3,rotate:1h".parse().unwrap();
        assert_eq!((m.levels.len(), m.per_group), (2, 3));
        assert_eq!((m.epoch(7_199), m.epoch(7_200)), (1, 2));
    }
}
