//! Commands run as an unprivileged user (`nobody`, through `setpriv`): what the
//! kernel lets any user do works, and every refusal for privilege is one line naming
//! the capability and the fix, with a non-zero exit. Witness: the kernel's own
//! refusals (EPERM/EACCES) to a process without capabilities, and its acceptance of
//! an ICMP datagram socket when `net.ipv4.ping_group_range` holds the user's group.

use crate::common::{bin, privileged};
use std::path::PathBuf;
use std::process::{Command, Output};

/// `net.ipv4.ping_group_range`, restored when dropped.
struct PingRange(String);

const RANGE: &str = "/proc/sys/net/ipv4/ping_group_range";

impl PingRange {
    fn set(to: &str) -> Self {
        let before = std::fs::read_to_string(RANGE).unwrap();
        std::fs::write(RANGE, to).unwrap();
        Self(before)
    }
}

impl Drop for PingRange {
    fn drop(&mut self) {
        let _ = std::fs::write(RANGE, self.0.trim());
    }
}

/// The binary where `nobody` may run it (the checkout may sit in root's home).
fn nobodys_copy(dir: &tempfile::TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join("rttlab");
    std::fs::copy(bin(), &path).unwrap();
    for p in [dir.path(), path.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    path
}

/// `rttlab ARGS` as nobody, with no capability at all.
fn as_nobody(rttlab: &PathBuf, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
        ])
        .arg(rttlab)
        .args(args)
        .env_remove("RTTLAB_SECRET")
        .env("RTTLAB_STATE_DIR", "/run/rttlab")
        .output()
        .expect("setpriv (util-linux)")
}

/// The refusal: a failure whose last line (the error; a warning may come before)
/// names every one of `words`.
fn refused(o: &Output, what: &str, words: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{what} worked as nobody: {err}");
    let line = err.lines().last().unwrap_or("");
    for w in words {
        assert!(
            line.contains(w),
            "{what}: {w:?} not in its refusal {line:?}"
        );
    }
    eprintln!("{what}: {line}");
}

#[test]
fn unprivileged_commands_work_or_name_the_capability_and_the_fix() {
    if !privileged("unprivileged_commands_work_or_name_the_capability_and_the_fix") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rttlab = nobodys_copy(&dir);

    // ICMP: refused with both fixes while the range admits nobody; a datagram socket
    // once it does, for IPv4 and IPv6, with the kernel's receive stamps and TTLs.
    {
        let _range = PingRange::set("1 0");
        let o = as_nobody(&rttlab, &["ping", "-c", "1", "127.0.0.1"]);
        refused(
            &o,
            "ping",
            &["CAP_NET_RAW", "setcap cap_net_raw+ep", "ping_group_range"],
        );
        // As iputils: no `PING …` header for a socket that never opened, exit 2.
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert_eq!(o.status.code(), Some(2));
        let o = as_nobody(
            &rttlab,
            &[
                "agent",
                "--peer",
                "127.0.0.1:1",
                "--metrics-listen",
                "127.0.0.1:0",
                "-L",
                "127.0.0.1:0",
            ],
        );
        refused(&o, "agent", &["ICMP", "CAP_NET_RAW", "ping_group_range"]);
    }
    {
        let _range = PingRange::set("0 2147483647");
        for target in ["127.0.0.1", "::1"] {
            let o = as_nobody(
                &rttlab,
                &["ping", "-c", "3", "-i", "0.05", "--summary", target],
            );
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{target}: {out}{}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(out.contains("3 packets transmitted, 3 received"), "{out}");
            assert!(out.contains("Dgram socket"), "{out}");
            assert!(out.contains("kernel receive"), "{out}");
            assert!(out.contains("ttl=64"), "{out}");
        }
    }

    let admin = ["CAP_NET_ADMIN", "setcap cap_net_admin+ep"];
    let o = as_nobody(
        &rttlab,
        &["rr", "-H", "127.0.0.1", "-l", "1", "--mark", "5"],
    );
    refused(&o, "rr --mark", &admin);
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}"))
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let (allowed, available) = (
        read("tcp_allowed_congestion_control"),
        read("tcp_available_congestion_control"),
    );
    // Loaded but not allowed: the capability or the sysctl; not loaded: the module.
    if let Some(cc) = available.iter().find(|c| !allowed.contains(c)) {
        let o = as_nobody(&rttlab, &["rr", "-H", "127.0.0.1", "-l", "1", "--cc", cc]);
        refused(
            &o,
            "rr --cc (not allowed)",
            &["CAP_NET_ADMIN", "tcp_allowed_congestion_control", "setcap"],
        );
    }
    let missing = ["vegas", "htcp", "westwood", "illinois"]
        .into_iter()
        .find(|c| !available.iter().any(|a| a == c))
        .unwrap();
    let o = as_nobody(
        &rttlab,
        &["rr", "-H", "127.0.0.1", "-l", "1", "--cc", missing],
    );
    refused(&o, "rr --cc (not loaded)", &["CAP_NET_ADMIN", "modprobe"]);

    let start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if start > 1 {
        let port = (start - 1).to_string();
        let o = as_nobody(&rttlab, &["serve", "-L", "127.0.0.1", "-p", &port]);
        refused(
            &o,
            "serve -p",
            &[
                "CAP_NET_BIND_SERVICE",
                "setcap cap_net_bind_service+ep",
                "ip_unprivileged_port_start",
            ],
        );
    }

    let o = as_nobody(&rttlab, &["passive", "-i", "lo", "-c", "1"]);
    refused(&o, "passive -i", &["CAP_NET_RAW", "setcap cap_net_raw+ep"]);
    let o = as_nobody(&rttlab, &["lab", "up", "--name", "nobody1"]);
    refused(
        &o,
        "lab up",
        &["root", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "sudo"],
    );
    // A run refused for privilege leaves no results directory behind: nobody may
    // write where it would go, so only the refusal keeps it from being made.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    for what in ["compare", "resreq-interval"] {
        let target = open.join(what);
        let out = target.to_str().unwrap();
        let args: Vec<&str> = if what == "compare" {
            vec!["compare", "-l", "1s", "--out", out]
        } else {
            vec!["experiment", what, "--out", out]
        };
        let o = as_nobody(&rttlab, &args);
        refused(&o, what, &["root", "sudo"]);
        assert!(!target.exists(), "{args:?} left {out}");
    }
    let o = as_nobody(&rttlab, &["tune", "thin", "set", "on"]);
    refused(&o, "tune thin set", &["root", "CAP_NET_ADMIN", "sudo"]);
    // Reading needs nothing.
    let o = as_nobody(&rttlab, &["tune", "thin", "show"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
