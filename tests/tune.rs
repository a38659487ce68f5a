//! `rttlab tune` in namespaces the test makes: the effect is checked on a new
//! connection's tcp_info.rto (the kernel's own word) against docs/ARCHITECTURE.md's rule R1 at
//! this kernel's HZ, and on `ip route show` / the sysctl files — not on rttlab's output.

use crate::common;

use crate::common::{bin, NetnsPair};
use rttlab::kernel::{hz, route};
use std::process::{Command, Output};

struct Tune {
    state: tempfile::TempDir,
}

impl Tune {
    fn new() -> Self {
        Self {
            state: tempfile::tempdir().unwrap(),
        }
    }
    fn run(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .arg("tune")
            .args(args)
            .env("RTTLAB_STATE_DIR", self.state.path())
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

/// Forget cached RTTs in `ns`: `tcp_init_metrics` would otherwise start a new
/// connection's RTO from the last one's RTT (docs/ARCHITECTURE.md §10).
fn flush_metrics(ns: &str) {
    let o = Command::new("ip")
        .args(["-n", ns, "tcp_metrics", "flush", "all"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// rto in ms the probe reported.
fn probed_rto_ms(out: &str) -> f64 {
    let after = out
        .split("has rto ")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    after.split(" ms").next().unwrap().parse().unwrap()
}

/// Rule R1 at this kernel's HZ: rto_min in whole jiffies plus one.
fn expected_ms(rto_min_us: u64) -> f64 {
    let hz = hz::detect(200_000).unwrap();
    hz::predicted_rto_us(rto_min_us, hz) as f64 / 1000.0
}

/// The probed RTO is R1's, or one jiffy more when the handshake's RTT sample was slow
/// (a preempted VM): `usecs_to_jiffies(srtt + rto_min)`.
fn assert_rto(out: &str, rto_min_us: u64) {
    let got = probed_rto_ms(out);
    let want = expected_ms(rto_min_us);
    let jiffy = 1000.0 / f64::from(hz::detect(200_000).unwrap());
    assert!(
        got == want || got == want + jiffy,
        "rto {got} ms, want {want} ms: {out}"
    );
}

fn route_show(ns: &str, v6: bool) -> String {
    let mut c = Command::new("ip");
    c.args(["-n", ns]);
    if v6 {
        c.arg("-6");
    }
    String::from_utf8_lossy(&c.args(["route", "show"]).output().unwrap().stdout).into_owned()
}

#[test]
fn route_rto_min_sets_a_new_connections_rto_and_reverts() {
    if !common::privileged("route_rto_min_sets_a_new_connections_rto_and_reverts") {
        return;
    }
    let n = NetnsPair::new();
    let srv = n.serve_in_b("::", 12866, &[]);
    let t = Tune::new();
    for (prefix, target, v6) in [
        ("198.18.200.0/24", format!("{}:12866", n.b4), false),
        ("2001:2:0:200::/64", format!("[{}]:12866", n.b6), true),
    ] {
        let dry = t.ok(&[
            "rto-min",
            "set",
            "5ms",
            "--route",
            prefix,
            "--netns",
            &n.a,
            "--dry-run",
        ]);
        assert!(
            dry.contains("route replace") && dry.contains("rto_min 5ms"),
            "{dry}"
        );
        assert!(
            !route_show(&n.a, v6).contains("rto_min"),
            "dry run changed nothing"
        );
        t.ok(&["rto-min", "set", "5ms", "--route", prefix, "--netns", &n.a]);
        assert!(
            route_show(&n.a, v6).contains("rto_min lock 5ms"),
            "{}",
            route_show(&n.a, v6)
        );
        flush_metrics(&n.a);
        let out = t.ok(&["rto-min", "show", "--netns", &n.a, "--probe", &target]);
        assert_rto(&out, 5_000);
        t.ok(&["rto-min", "revert", "--netns", &n.a]);
        assert!(
            !route_show(&n.a, v6).contains("rto_min"),
            "{}",
            route_show(&n.a, v6)
        );
        flush_metrics(&n.a);
        let out = t.ok(&["rto-min", "show", "--netns", &n.a, "--probe", &target]);
        assert_rto(&out, 200_000);
    }
    drop(srv);
}

#[test]
fn sysctl_rto_min_and_thin_are_per_namespace_and_revert() {
    if !common::privileged("sysctl_rto_min_and_thin_are_per_namespace_and_revert") {
        return;
    }
    let n = NetnsPair::new();
    let srv = n.serve_in_b(n.b4, 12866, &[]);
    let t = Tune::new();
    let host_before = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rto_min_us").unwrap();
    t.ok(&["rto-min", "set", "50ms", "--sysctl", "--netns", &n.a]);
    flush_metrics(&n.a);
    let out = t.ok(&[
        "rto-min",
        "show",
        "--netns",
        &n.a,
        "--probe",
        &format!("{}:12866", n.b4),
    ]);
    assert_rto(&out, 50_000);
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rto_min_us").unwrap(),
        host_before,
        "the host is untouched"
    );
    t.ok(&["thin", "set", "on", "--netns", &n.a]);
    assert!(t.ok(&["thin", "show", "--netns", &n.a]).contains("= 1"));
    // Set twice: revert restores the original value, not the intermediate one.
    t.ok(&["rto-min", "set", "5ms", "--sysctl", "--netns", &n.a]);
    let all = t.ok(&["revert", "--all"]);
    assert_eq!(all.matches("reverted:").count(), 2, "{all}");
    let v = Command::new("ip")
        .args([
            "netns",
            "exec",
            &n.a,
            "cat",
            "/proc/sys/net/ipv4/tcp_rto_min_us",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), "200000");
    assert!(t.ok(&["thin", "show", "--netns", &n.a]).contains("= 0"));
    assert!(
        !t.state.path().join("tune.json").exists(),
        "the journal is empty after revert --all"
    );
    drop(srv);
}

#[test]
fn bad_input_changes_nothing() {
    let t = Tune::new();
    for (args, needle) in [
        (vec!["rto-min", "set", "0", "--sysctl"], "more than 0"),
        (
            vec!["rto-min", "set", "5ms", "--route", "nonsense"],
            "not an address",
        ),
        (
            vec!["rto-min", "set", "1500us", "--route", "127.0.0.1"],
            "whole milliseconds",
        ),
        (
            vec!["thin", "set", "on", "--netns", "rttlab-no-such-ns"],
            "not found",
        ),
        (
            vec![
                "rto-min",
                "set",
                "5ms",
                "--route",
                "192.0.2.0/24",
                "--netns",
                "rttlab-no-such-ns",
            ],
            "not found",
        ),
    ] {
        let o = t.run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    }
    assert!(
        !t.state.path().join("tune.json").exists(),
        "failed changes leave no journal entry"
    );
}

fn ip_in(ns: &str, args: &[&str]) -> String {
    let o = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every route of every table, as iproute2 prints them in detail; without the IPv6
/// link-local ones, which the kernel adds on its own as the veth's address comes up.
fn all_routes(ns: &str) -> String {
    ip_in(ns, &["-4", "-d", "route", "show", "table", "all"])
        + &ip_in(ns, &["-6", "-d", "route", "show", "table", "all"])
            .lines()
            .filter(|l| !l.contains("fe80:"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
}

/// A route with more than a gateway (metric, source, locked mtu, window, realm, an
/// unlocked rto_min) and a route of a policy-routing table: setting rto_min changes the
/// route the kernel uses for the address and nothing else, and revert puts back every
/// route exactly (the unlocked rto_min unlocked). Witness: iproute2's own listing.
#[test]
fn routes_round_trip_exactly_through_set_and_revert() {
    if !common::privileged("routes_round_trip_exactly_through_set_and_revert") {
        return;
    }
    let n = NetnsPair::new();
    let t = Tune::new();
    ip_in(
        &n.a,
        &[
            "route",
            "add",
            "198.18.77.0/24",
            "via",
            n.b4,
            "dev",
            &n.dev_a,
            "metric",
            "77",
            "src",
            n.a4,
            "mtu",
            "lock",
            "1400",
            "window",
            "65535",
            "realm",
            "7",
            "rto_min",
            "30ms",
        ],
    );
    ip_in(
        &n.a,
        &["rule", "add", "to", "198.18.88.0/24", "table", "100"],
    );
    ip_in(
        &n.a,
        &[
            "route",
            "add",
            "198.18.88.0/24",
            "via",
            n.b4,
            "dev",
            &n.dev_a,
            "table",
            "100",
        ],
    );
    // iproute2 always locks rto_min; unlock it (checked by iproute2 below) to have a
    // route whose rto_min TCP ignores, which revert must put back unlocked.
    let r = route::lookup(Some(&n.a), "198.18.77.1".parse().unwrap()).unwrap();
    route::set_rto_min(
        Some(&n.a),
        &r,
        Some(route::RtoMin {
            ms: 30,
            locked: false,
        }),
    )
    .unwrap();
    let before = all_routes(&n.a);
    assert!(
        before.contains("rto_min 30ms") && !before.contains("rto_min lock"),
        "{before}"
    );

    t.ok(&[
        "rto-min",
        "set",
        "5ms",
        "--route",
        "198.18.77.1",
        "--netns",
        &n.a,
    ]);
    let set = ip_in(&n.a, &["-d", "route", "show", "198.18.77.0/24"]);
    assert!(set.contains("rto_min lock 5ms"), "{set}");
    for kept in [
        "metric 77",
        "mtu lock 1400",
        "window 65535",
        "realm 7",
        n.a4,
    ] {
        assert!(set.contains(kept), "{kept} lost: {set}");
    }
    t.ok(&[
        "rto-min",
        "set",
        "5ms",
        "--route",
        "198.18.88.1",
        "--netns",
        &n.a,
    ]);
    let table100 = ip_in(&n.a, &["route", "show", "table", "100"]);
    assert!(table100.contains("rto_min lock 5ms"), "{table100}");
    assert!(
        !ip_in(&n.a, &["route", "show", "table", "main", "198.18.88.0/24"]).contains("198.18.88"),
        "a policy-routed address must change its own table's route, not add one to main"
    );
    t.ok(&["rto-min", "revert", "--netns", &n.a]);
    assert_eq!(all_routes(&n.a), before);

    // Loopback is a local route of the local table, never the default route.
    let dry = t.ok(&[
        "rto-min",
        "set",
        "5ms",
        "--route",
        "127.0.0.1",
        "--netns",
        &n.a,
        "--dry-run",
    ]);
    assert!(
        dry.contains("route replace local 127.0.0.1/32") && dry.contains("table local"),
        "{dry}"
    );
}

/// Two `rttlab tune` processes at once each record their change; reverting all undoes
/// both. Witness: the sysctl files.
#[test]
fn concurrent_tune_runs_lose_no_journal_entry() {
    if !common::privileged("concurrent_tune_runs_lose_no_journal_entry") {
        return;
    }
    let n = NetnsPair::new();
    let t = Tune::new();
    let read = |ns: &str, key: &str| NetnsPair::sysctl(ns, key);
    let before: Vec<String> = [&n.a, &n.b]
        .iter()
        .flat_map(|ns| {
            [
                read(ns, "net.ipv4.tcp_rto_min_us"),
                read(ns, "net.ipv4.tcp_thin_linear_timeouts"),
            ]
        })
        .collect();
    for _ in 0..5 {
        std::thread::scope(|s| {
            for ns in [&n.a, &n.b] {
                s.spawn(|| t.ok(&["rto-min", "set", "7ms", "--sysctl", "--netns", ns]));
                s.spawn(|| t.ok(&["thin", "set", "on", "--netns", ns]));
            }
        });
        let journal: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(t.state.path().join("tune.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(journal.as_array().unwrap().len(), 4, "{journal}");
        t.ok(&["revert", "--all"]);
        let after: Vec<String> = [&n.a, &n.b]
            .iter()
            .flat_map(|ns| {
                [
                    read(ns, "net.ipv4.tcp_rto_min_us"),
                    read(ns, "net.ipv4.tcp_thin_linear_timeouts"),
                ]
            })
            .collect();
        assert_eq!(after, before);
    }
}
