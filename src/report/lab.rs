//! How labs are shown: their hosts, each direction's impairments, counters.

use super::table::Table;
use crate::lab::impair::{Impairments, JitterDist, Loss, QueueLimit};
use crate::lab::socket::Status;
use crate::lab::LabInfo;

fn ms(ns: u64) -> String {
    let x = ns as f64 / 1e6;
    if x == x.trunc() {
        format!("{x:.0} ms")
    } else {
        format!("{x} ms")
    }
}

fn pct(x: f64) -> String {
    format!("{} %", (x * 1e4).round() / 1e2)
}

/// One line: `delay 50 ms, jitter 1 ms, loss 1 %, rate 10 Mbit/s, queue 100000 B`.
pub fn impairments(i: &Impairments) -> String {
    let mut parts = vec![format!("delay {}", ms(i.delay_ns))];
    if i.jitter_ns > 0 {
        let dist = match i.jitter_dist {
            JitterDist::Uniform => "",
            JitterDist::Normal => " normal",
        };
        let order = if i.reorder { " reordering" } else { "" };
        parts.push(format!("jitter {}{dist}{order}", ms(i.jitter_ns)));
    }
    match i.loss {
        Loss::None => {}
        Loss::Bernoulli { p } => parts.push(format!("loss {}", pct(p))),
        Loss::GilbertElliott {
            p,
            r,
            loss_bad,
            loss_good,
        } => parts.push(format!(
            "gemodel p {} r {} bad {} good {} (mean {})",
            pct(p),
            pct(r),
            pct(loss_bad),
            pct(loss_good),
            pct(i.loss.mean())
        )),
    }
    if let Some(r) = i.rate_bps {
        parts.push(format!("rate {} Mbit/s", r as f64 / 1e6));
        parts.push(match i.queue {
            QueueLimit::Bytes(b) => format!("queue {b} B"),
            QueueLimit::Packets(p) => format!("queue {p} packets"),
        });
    }
    parts.join(", ")
}

/// The hosts of a lab, for `lab up`.
pub fn hosts(info: &LabInfo) -> String {
    if info.fleet.is_some() {
        let mut t = Table::new(["HOST", "RACK", "ZONE", "IPV4", "IPV6", "NETNS"]);
        for h in info.all_hosts() {
            t.row([
                h.name.clone(),
                h.rack.clone().unwrap_or_default(),
                h.zone.clone().unwrap_or_default(),
                h.ipv4.to_string(),
                h.ipv6.to_string(),
                h.netns.clone(),
            ]);
        }
        return t.render();
    }
    let mut t = Table::new(["HOST", "IPV4", "IPV6", "MAC", "NETNS"]);
    for h in info.all_hosts() {
        t.row([
            h.name.clone(),
            h.ipv4.to_string(),
            h.ipv6.to_string(),
            h.mac.clone(),
            h.netns.clone(),
        ]);
    }
    t.render()
}

/// `lab list`: each lab, its state, impairments and counters.
pub fn list(labs: &[(String, Result<Status, crate::lab::LabError>)]) -> String {
    if labs.is_empty() {
        return "no labs\n".into();
    }
    let mut out = String::new();
    for (name, st) in labs {
        match st {
            Err(why) => out.push_str(&format!("lab {name}: {}\n\n", crate::error_chain(why))),
            Ok(s) => {
                let i = &s.info;
                out.push_str(&format!(
                    "lab {name}: emulator {} ({}, {}, pid {}{})\n",
                    s.emulator,
                    i.engine,
                    if i.poll {
                        "busy-poll"
                    } else {
                        "sleeping between frames"
                    },
                    i.owner_pid,
                    if i.daemon { ", lab up" } else { "" }
                ));
                out.push_str(&hosts(i));
                let mut t = Table::new([
                    "DIR",
                    "RX",
                    "TX",
                    "BLACKOUT",
                    "LOSS",
                    "QUEUE",
                    "OVERFLOW",
                    "TX_ERR",
                    "RING_DROP",
                    "MAX_BACKLOG_B",
                ]);
                let mut dirs = vec![("a2b".to_string(), &s.a2b), ("b2a".to_string(), &s.b2a)];
                if !s.links.is_empty() {
                    dirs = s
                        .links
                        .iter()
                        .flat_map(|l| {
                            [
                                (format!("{}-up", l.host), &l.up),
                                (format!("{}-down", l.host), &l.down),
                            ]
                        })
                        .collect();
                }
                for (d, ds) in &dirs {
                    let c = &ds.counters;
                    t.row([
                        d.to_string(),
                        c.rx_frames.to_string(),
                        c.tx_frames.to_string(),
                        c.drop_blackout.to_string(),
                        c.drop_loss.to_string(),
                        c.drop_queue.to_string(),
                        c.drop_overflow.to_string(),
                        c.tx_errors.to_string(),
                        c.ring_drops.to_string(),
                        c.max_backlog_bytes.to_string(),
                    ]);
                }
                for (d, ds) in &dirs {
                    out.push_str(&format!("{d}: {}\n", impairments(&ds.impairments)));
                    for b in &ds.blackouts {
                        out.push_str(&format!(
                            "{d}: blackout {} from {} ns{}\n",
                            ms(b.end_ns - b.start_ns),
                            b.start_ns,
                            b.port.map(|p| format!(" port {p}")).unwrap_or_default()
                        ));
                    }
                }
                out.push_str(&t.render());
                if let Some(e) = &i.events {
                    if i.is_star() || i.fleet.is_some() {
                        // Each link of a star or a fleet logs to its own file.
                        let stem = e.with_extension("");
                        let link = if i.is_star() { "host" } else { "rackN|zoneN" };
                        out.push_str(&format!("events: {}-<{link}>.jsonl\n", stem.display()));
                    } else {
                        out.push_str(&format!("events: {}\n", e.display()));
                    }
                }
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impairment_line() {
        let i = Impairments {
            delay_ns: 50_000_000,
            jitter_ns: 1_500_000,
            loss: Loss::Bernoulli { p: 0.01 },
            rate_bps: Some(10_000_000),
            queue: QueueLimit::Bytes(100_000),
            ..Default::default()
        };
        assert_eq!(
            impairments(&i),
            "delay 50 ms, jitter 1.5 ms, loss 1 %, rate 10 Mbit/s, queue 100000 B"
        );
    }
}
