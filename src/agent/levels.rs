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

use std::collections::BTreeMap;

/// A host of the fleet as the planner sees it: its target and its labels.
pub trait Placed {
    /// `HOST:PORT`: what orders a group's hosts.
    fn target(&self) -> &str;
    /// Its value of label `name`.
    fn label(&self, name: &str) -> Option<&str>;
}

/// This host lacks a label of the levels: the first one it lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unlabelled(pub String);

/// A host's values of `levels`, innermost first; `None` when it lacks one.
fn path<'a, P: Placed>(p: &'a P, levels: &[String]) -> Option<Vec<&'a str>> {
    levels.iter().map(|l| p.label(l)).collect()
}

/// The hosts `me` probes out of `others` (every host but `me`, without duplicates,
/// in any order), at `epoch`, sorted by target; hosts without every label of `levels` are not
/// placed, so not probed.
///
/// # Errors
/// `me` lacks a label of `levels`.
pub fn choose<'a, P: Placed>(
    levels: &[String],
    per_group: usize,
    epoch: u64,
    others: &'a [P],
    me: &P,
) -> Result<Vec<&'a P>, Unlabelled> {
    let mine = path(me, levels).ok_or_else(|| {
        let lacked = levels.iter().find(|l| me.label(l).is_none());
        Unlabelled(lacked.cloned().unwrap_or_default())
    })?;
    // By target: a group's order is its hosts' ranks, whatever order the list has.
    let mut placed: Vec<(&P, Vec<&str>)> = others
        .iter()
        .filter_map(|p| Some((p, path(p, levels)?)))
        .collect();
    placed.sort_by(|a, b| a.0.target().cmp(b.0.target()));
    let mut chosen: Vec<&P> = placed
        .iter()
        .filter(|(_, v)| *v == mine)
        .map(|(p, _)| *p)
        .collect();
    for i in 1..=levels.len() {
        // This host's group at level i, and in it its own group at level i − 1,
        // with this host: its rank there (by target) is where it starts.
        let inside = |v: &[&str]| v[i..] == mine[i..];
        let own_rank = placed
            .iter()
            .filter(|(p, v)| inside(v) && v[i - 1] == mine[i - 1] && p.target() < me.target())
            .count();
        let mut siblings: BTreeMap<&str, Vec<&P>> = BTreeMap::new();
        for (p, v) in placed
            .iter()
            .filter(|(_, v)| inside(v) && v[i - 1] != mine[i - 1])
        {
            siblings.entry(v[i - 1]).or_default().push(p);
        }
        for members in siblings.values() {
            chosen.extend(pick(members, own_rank, per_group, epoch));
        }
    }
    chosen.sort_by(|a, b| a.target().cmp(b.target()));
    Ok(chosen)
}

/// Members `(rank + epoch)·k + t mod m` of `members` (sorted by target), t < k: all
/// of them when k ≥ m.
fn pick<'a, P>(members: &[&'a P], rank: usize, k: usize, epoch: u64) -> Vec<&'a P> {
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
    use std::collections::BTreeSet;

    /// A host of the test's fleet.
    #[derive(Clone, Debug)]
    struct Host {
        target: String,
        labels: Vec<(&'static str, String)>,
    }

    impl Placed for Host {
        fn target(&self) -> &str {
            &self.target
        }
        fn label(&self, name: &str) -> Option<&str> {
            self.labels
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_str())
        }
    }

    const LEVELS: [&str; 3] = ["rack", "zone", "region"];

    /// The targets `me` probes with K per group at `epoch`, as the agent asks: every
    /// other host, in any order.
    fn select(k: usize, all: &[Host], me: &Host, epoch: u64) -> Result<Vec<String>, Unlabelled> {
        let others: Vec<Host> = all
            .iter()
            .filter(|h| h.target != me.target)
            .cloned()
            .collect();
        let levels: Vec<String> = LEVELS.iter().map(|l| (*l).to_string()).collect();
        Ok(choose(&levels, k, epoch, &others, me)?
            .into_iter()
            .map(|h| h.target.clone())
            .collect())
    }

    /// 2 regions × 3 zones × 4 racks × 5 hosts; rack and zone names repeat across
    /// their parents, so a group is known by its whole path.
    fn fleet() -> Vec<Host> {
        let mut all = Vec::new();
        for region in 0..2 {
            for zone in 0..3 {
                for rack in 0..4 {
                    for host in 0..5 {
                        let n = ((region * 3 + zone) * 4 + rack) * 5 + host;
                        all.push(Host {
                            target: format!("10.9.0.{n:03}:12866"),
                            labels: vec![
                                ("rack", format!("r{rack}")),
                                ("region", format!("g{region}")),
                                ("zone", format!("z{zone}")),
                            ],
                        });
                    }
                }
            }
        }
        all
    }

    fn key(h: &Host, depth: usize) -> Vec<&str> {
        LEVELS[depth..]
            .iter()
            .map(|l| h.label(l).unwrap())
            .collect()
    }

    fn by_target<'a>(all: &'a [Host], t: &str) -> &'a Host {
        all.iter().find(|h| h.target == t).unwrap()
    }

    /// Witness: arithmetic on the fleet's group sizes, per host: 4 rack mates, then
    /// min(K, size) in each of 3 sibling racks (5 each), 2 sibling zones (20 each)
    /// and 1 sibling region (60).
    #[test]
    fn each_host_probes_its_group_and_k_of_each_sibling_group() {
        let all = fleet();
        for k in [1, 2, 7] {
            let expected = 4 + 3 * k.min(5) + 2 * k.min(20) + k.min(60);
            for me in &all {
                let sel = select(k, &all, me, 0).unwrap();
                assert_eq!(sel.len(), expected, "K {k}, {}", me.target);
                assert!(sel.iter().all(|t| *t != me.target));
                let mates = sel
                    .iter()
                    .filter(|t| key(by_target(&all, t), 0) == key(me, 0))
                    .count();
                assert_eq!(mates, 4);
            }
        }
        // Whatever order the list comes in.
        let mut reversed = all.clone();
        reversed.reverse();
        assert_eq!(
            select(2, &reversed, &all[33], 5).unwrap(),
            select(2, &all, &all[33], 5).unwrap()
        );
    }

    /// Every ordered pair of sibling groups (the same parent, different groups) at
    /// every depth, each group by its whole path with its hosts.
    fn sibling_pairs(all: &[Host]) -> Vec<SiblingPair<'_>> {
        let mut out = Vec::new();
        for depth in 0..3 {
            let mut groups: BTreeMap<Vec<&str>, Vec<&Host>> = BTreeMap::new();
            for h in all {
                groups.entry(key(h, depth)).or_default().push(h);
            }
            for (a, hosts_a) in &groups {
                for (b, hosts_b) in &groups {
                    if a != b && a[1..] == b[1..] {
                        out.push((a.clone(), hosts_a.clone(), b.clone(), hosts_b.clone()));
                    }
                }
            }
        }
        out
    }

    /// Two sibling groups: each one's path and hosts.
    type SiblingPair<'a> = (Vec<&'a str>, Vec<&'a Host>, Vec<&'a str>, Vec<&'a Host>);

    /// Every ordered pair of sibling groups is probed at every epoch, and a group of
    /// n hosts probing a sibling of m ≤ n·K covers all of it. Witness: the pairs
    /// enumerated from the fleet, against every host's choice.
    #[test]
    fn every_pair_of_sibling_groups_is_probed_at_every_epoch() {
        let all = fleet();
        for k in [1, 2] {
            for epoch in [0, 1, 17, u64::MAX] {
                let probed: BTreeSet<(String, String)> = all
                    .iter()
                    .flat_map(|me| {
                        select(k, &all, me, epoch)
                            .unwrap()
                            .into_iter()
                            .map(|t| (me.target.clone(), t))
                    })
                    .collect();
                for (a, hosts_a, b, hosts_b) in sibling_pairs(&all) {
                    let covered = hosts_b
                        .iter()
                        .filter(|y| {
                            hosts_a
                                .iter()
                                .any(|x| probed.contains(&(x.target.clone(), y.target.clone())))
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

    /// The plan is symmetric across hosts: every host of a group probes as many of a
    /// sibling group as the others (min(K, m)), and every host of the sibling group is
    /// probed by the group as often as the others, to within one (⌊n·K / m⌋ or
    /// ⌈n·K / m⌉): no host is probed much more than its neighbours, at any epoch.
    /// Witness: the probes counted per host from every host's choice.
    #[test]
    fn every_host_of_a_sibling_group_is_probed_as_often_as_the_others() {
        let all = fleet();
        for k in [1, 2, 7] {
            for epoch in [0, 3, u64::MAX] {
                let choice: BTreeMap<&str, BTreeSet<String>> = all
                    .iter()
                    .map(|me| {
                        let sel = select(k, &all, me, epoch).unwrap();
                        (me.target.as_str(), sel.into_iter().collect())
                    })
                    .collect();
                for (a, hosts_a, b, hosts_b) in sibling_pairs(&all) {
                    let m = hosts_b.len();
                    for x in &hosts_a {
                        let n = hosts_b
                            .iter()
                            .filter(|y| choice[x.target.as_str()].contains(&y.target))
                            .count();
                        assert_eq!(n, k.min(m), "{} → {b:?}", x.target);
                    }
                    let times: Vec<usize> = hosts_b
                        .iter()
                        .map(|y| {
                            hosts_a
                                .iter()
                                .filter(|x| choice[x.target.as_str()].contains(&y.target))
                                .count()
                        })
                        .collect();
                    let total = hosts_a.len() * k.min(m);
                    assert_eq!(times.iter().sum::<usize>(), total);
                    let (lo, hi) = (total / m, total.div_ceil(m));
                    assert!(
                        times.iter().all(|&t| t == lo || t == hi),
                        "{a:?} → {b:?}, K {k}, epoch {epoch}: {times:?}"
                    );
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
            // The sibling region: 60 hosts.
            let other: BTreeSet<&str> = all
                .iter()
                .filter(|h| h.label("region") != me.label("region"))
                .map(|h| h.target.as_str())
                .collect();
            let epochs = 60_u64.div_ceil(k as u64);
            let mut seen = BTreeSet::new();
            let mut last = Vec::new();
            for e in 1_000..1_000 + epochs {
                let now: Vec<String> = select(k, &all, me, e)
                    .unwrap()
                    .into_iter()
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

    /// Hosts missing a label are not placed; this host missing one is told which.
    #[test]
    fn unlabelled_hosts_are_not_placed() {
        let mut all = fleet();
        let lone = Host {
            target: "10.9.9.9:12866".into(),
            labels: vec![("rack", "r0".into())],
        };
        all.push(lone.clone());
        let sel = select(1, &all, &all[0], 0).unwrap();
        assert!(sel.iter().all(|t| *t != lone.target));
        assert_eq!(select(1, &all, &lone, 0), Err(Unlabelled("zone".into())));
    }
}
