//! smokeping_prober's names for the ICMP layer (`--smokeping-names`), so that its
//! users' dashboards, recording rules and alerts keep working on rttlab's echoes:
//! `smokeping_requests_total`, `smokeping_response_duration_seconds` (its default
//! classic buckets, 50 µs doubling to 26.2144 s, and a native histogram of schema 4, as
//! its `--native-histogram-factor` 1.05 gives) and `smokeping_send_errors_total`, each
//! labelled `ip`, `host`, `source`, `tos` and then the peer's own labels, as
//! smokeping_prober 0.10 and later label them (`buildLabelNamesFromConfig` in its
//! main.go; 0.6 to 0.9 have `ip` and `host` alone).
//!
//! What is counted follows its pinger (pro-bing): a request counts once it was sent
//! (`PacketsSent`), a reply is observed with its round trip. One difference: a reply
//! later than the agent's timeout (the interval, at most `--timeout`) is lost to rttlab
//! and not observed, where pro-bing, which has no per-echo timeout, observes it late.

use super::histogram::{NATIVE_MAX_BUCKETS, NATIVE_SCHEMA};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::{Histogram, NativeHistogramConfig};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};

/// smokeping_prober's default `--buckets`: `prometheus.ExponentialBuckets(0.00005, 2,
/// 20)`.
pub const BUCKETS: [f64; 20] = [
    5e-05, 0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512, 0.1024,
    0.2048, 0.4096, 0.8192, 1.6384, 3.2768, 6.5536, 13.1072, 26.2144,
];

/// A series' labels, in order.
type Labels = Vec<(String, String)>;

/// A peer as its smokeping series name it: its target (`HOST:PORT`, what it is
/// known by), its host as given, and its file_sd labels.
pub struct Pinged<'a> {
    /// `HOST:PORT`.
    pub target: &'a str,
    /// The host as given: smokeping_prober's `host`.
    pub host: &'a str,
    /// Its own labels.
    pub labels: &'a [(String, String)],
}

/// The labels smokeping_prober sets itself; a peer's file_sd label of the same name is
/// left out, as it leaves out a target's.
const OWN_LABELS: [&str; 4] = ["ip", "host", "source", "tos"];

/// Makes `smokeping_response_duration_seconds`' series.
#[derive(Clone, Copy, Debug, Default)]
pub struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new_classic_and_native(
            BUCKETS.iter().copied(),
            NativeHistogramConfig::with_schema(NATIVE_SCHEMA).max_buckets(NATIVE_MAX_BUCKETS),
        )
    }
}

/// The three families, registered once.
pub struct Families {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, Buckets>,
    send_errors: Family<Labels, Counter>,
    /// The targets writing each label set: two targets on one host (two ports) share
    /// its series, as smokeping_prober has one per host; the last to go drops them.
    made: Mutex<HashMap<Labels, Vec<String>>>,
}

impl Default for Families {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(Buckets),
            send_errors: Family::default(),
            made: Mutex::default(),
        }
    }
}

impl Families {
    /// Register the families in `r`.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "smokeping_requests",
            "Number of ping requests sent",
            self.requests.clone(),
        );
        r.register(
            "smokeping_response_duration_seconds",
            "A histogram of latencies for ping responses",
            self.duration.clone(),
        );
        r.register(
            "smokeping_send_errors",
            "The number of errors when Pinger attempts to send packets",
            self.send_errors.clone(),
        );
    }

    /// The series of `peer` pinged at `ip`, looked up (made at 0 if new) once per
    /// address: a lookup takes the family's lock, which a scrape holds.
    pub fn series(&self, peer: &Pinged<'_>, ip: IpAddr) -> Series {
        let l = labels(peer, ip);
        let s = Series {
            ip,
            requests: self.requests.get_or_create_owned(&l),
            duration: self.duration.get_or_create_owned(&l),
            send_errors: self.send_errors.get_or_create_owned(&l),
        };
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let targets = made.entry(l).or_default();
        if !targets.iter().any(|t| t == peer.target) {
            targets.push(peer.target.to_string());
        }
        s
    }

    /// The peer of `target` is no longer probed: the series only it wrote are dropped.
    pub fn forget(&self, target: &str) {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.retain(|l, targets| {
            targets.retain(|t| t != target);
            if targets.is_empty() {
                self.requests.remove(l);
                self.duration.remove(l);
                self.send_errors.remove(l);
            }
            !targets.is_empty()
        });
    }
}

/// One peer's series at one address.
pub struct Series {
    /// The address they are labelled with.
    pub ip: IpAddr,
    /// `smokeping_requests_total`.
    pub requests: Counter,
    /// `smokeping_response_duration_seconds`.
    pub duration: Histogram,
    /// `smokeping_send_errors_total`.
    pub send_errors: Counter,
}

/// `ip`, `host`, `source` (no `--source` address: empty), `tos` (0), then the peer's
/// own labels but those four.
fn labels(peer: &Pinged<'_>, ip: IpAddr) -> Labels {
    let mut l: Labels = vec![
        ("ip".into(), ip.to_string()),
        ("host".into(), peer.host.to_string()),
        ("source".into(), String::new()),
        ("tos".into(), "0".into()),
    ];
    l.extend(
        peer.labels
            .iter()
            .filter(|(k, _)| !OWN_LABELS.contains(&k.as_str()))
            .cloned(),
    );
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: smokeping_prober's main.go, `defaultBuckets` written out there as
    /// "5e-05,0.0001,…,26.2144": 50 µs doubled 19 times.
    #[test]
    fn the_buckets_are_smokeping_probers_defaults() {
        for (i, b) in BUCKETS.iter().enumerate() {
            let want = 5e-05 * 2f64.powi(i as i32);
            assert!((b - want).abs() < want * 1e-12, "{i}: {b} against {want}");
        }
        assert_eq!(BUCKETS[19], 26.2144);
    }

    /// Two targets on one host (two ports) share its series; the series stay while
    /// either is probed. Witness: the families' own exposition.
    #[test]
    fn a_hosts_series_stay_until_its_last_target_goes() {
        let f = Families::default();
        let peer = |target| Pinged {
            target,
            host: "db1",
            labels: &[],
        };
        let ip = "10.1.2.3".parse().unwrap();
        f.series(&peer("db1:7"), ip).requests.inc();
        f.series(&peer("db1:9"), ip).requests.inc();
        let mut r = Registry::default();
        f.register(&mut r);
        let text = || {
            let mut s = String::new();
            prometheus_client::encoding::text::encode(&mut s, &r).unwrap();
            s
        };
        assert!(
            text().contains(
                "smokeping_requests_total{ip=\"10.1.2.3\",host=\"db1\",source=\"\",tos=\"0\"} 2"
            ),
            "{}",
            text()
        );
        f.forget("db1:9");
        assert!(
            text().contains("smokeping_requests_total{ip=\"10.1.2.3\""),
            "{}",
            text()
        );
        f.forget("db1:7");
        assert!(!text().contains("smokeping_requests_total{"), "{}", text());
    }

    /// A peer's own `ip` or `host` label cannot overwrite the address or the host,
    /// and its other labels follow smokeping's four. Witness: the labels written out.
    #[test]
    fn a_peers_labels_follow_and_never_replace_smokepings_own() {
        let own = [
            ("host".to_string(), "spoof".to_string()),
            ("rack".to_string(), "r1".to_string()),
        ];
        let peer = Pinged {
            target: "db1:12866",
            host: "db1",
            labels: &own,
        };
        let l = labels(&peer, "10.1.2.3".parse().unwrap());
        let names: Vec<(&str, &str)> = l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            names,
            [
                ("ip", "10.1.2.3"),
                ("host", "db1"),
                ("source", ""),
                ("tos", "0"),
                ("rack", "r1")
            ]
        );
    }
}
