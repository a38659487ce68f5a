//! What a long-lived rttlab survives from whoever can reach it or hand it a file, each
//! attack replayed end to end against the real binary (issue 27). Every case names its
//! witness.

mod common;

use common::{bin, free_port, privileged, wait_listening};
use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` over a plain TCP connection (HTTP/1.0: the body ends with the
/// connection); the status line and the body. Fails the test after `within`.
fn http_get(port: u16, path: &str, within: Duration) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connecting to the metrics port {port}: {e}"));
    s.set_read_timeout(Some(within)).unwrap();
    s.set_write_timeout(Some(within)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("GET {path} unanswered within {within:?}: {e}"));
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

// ---------------------------------------------------------------------------------
// Bounded inputs and stopping: peers files, the peer cap, SIGTERM.
// ---------------------------------------------------------------------------------

/// File_sd text naming `n` peers on 127.0.0.0/8, on a port nothing listens on.
fn peers_json(n: usize, port: u16) -> String {
    let targets: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "\"127.{}.{}.{}:{port}\"",
                1 + i / 65025,
                (i / 255) % 255,
                1 + i % 255
            )
        })
        .collect();
    format!("[{{\"targets\": [{}]}}]", targets.join(","))
}

/// An agent on loopback probing the peers of `peers_file` (TCP_RR once a minute: the
/// cases here are about its files, not its probes), its stderr in `dir`/agent.err.
struct AgentChild {
    child: Killed,
    metrics_port: u16,
    err: PathBuf,
}

impl AgentChild {
    fn start(dir: &Path, peers_file: &Path, extra: &[&str]) -> Self {
        let metrics_port = free_port();
        let err = dir.join("agent.err");
        let child = Command::new(bin())
            .args(["agent", "--peers-file"])
            .arg(peers_file)
            .args(["-L", &format!("127.0.0.1:{}", free_port())])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            .args(["--probes", "tcp_rr", "--interval", "60s"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        wait_listening("127.0.0.1", metrics_port, None);
        Self {
            child: Killed(child),
            metrics_port,
            err,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Wait (at most 20 s) until its stderr holds `text`.
    fn wait_for(&self, text: &str) {
        let t0 = Instant::now();
        while !self.stderr().contains(text) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no {text:?} on the agent's stderr in 20 s: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its RSS in kB.
    fn rss_kb(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.0.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// SIGTERM, then the time until it has exited (fails after 5 s).
    fn terminate(&mut self) -> Duration {
        let pid = i32::try_from(self.child.0.id()).unwrap();
        let t0 = Instant::now();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        loop {
            if let Some(status) = self.child.0.try_wait().unwrap() {
                assert!(status.success(), "exit after SIGTERM: {status:?}");
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the agent ignored SIGTERM for 5 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Replace `path` by a rename (as file_sd tools do), which the agent sees as a change.
fn replace_with_symlink(path: &Path, to: &Path) {
    let tmp = path.with_extension("new");
    symlink(to, &tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Witness: the agent's own answers. A peers file replaced by a symlink to /dev/zero
/// (once: 187 MB → 5.1 GB in 10 s, SIGTERM ignored) is refused by name as a character
/// device; the running peers stay, `/metrics` answers at once with the reload marked
/// failed, RSS does not grow, and SIGTERM ends the agent within a second. At start,
/// the same file is an error naming it.
#[test]
fn a_peers_file_that_is_dev_zero_is_refused_by_name_and_the_agent_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers.json");
    std::fs::write(&peers, peers_json(3, free_port())).unwrap();
    let mut agent = AgentChild::start(dir.path(), &peers, &[]);
    let (status, body) = http_get(agent.metrics_port, "/metrics", Duration::from_secs(5));
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("rttlab_agent_peers 3"), "{body}");
    let rss_before = agent.rss_kb();
    replace_with_symlink(&peers, Path::new("/dev/zero"));
    agent.wait_for("a character device, not a regular file");
    let t0 = Instant::now();
    let (status, body) = http_get(agent.metrics_port, "/metrics", Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("rttlab_agent_peers 3"), "{body}");
    assert!(
        body.contains("rttlab_agent_config_last_reload_successful 0"),
        "{body}"
    );
    let rss_after = agent.rss_kb();
    assert!(
        rss_after < rss_before + 20_000,
        "RSS {rss_before} → {rss_after} kB"
    );
    assert!(
        agent.stderr().contains(&format!(
            "reload failed, keeping the previous peers: peers file {}: a character device",
            peers.display()
        )),
        "{}",
        agent.stderr()
    );
    let took = agent.terminate();
    assert!(took < Duration::from_secs(1), "SIGTERM to exit: {took:?}");
    eprintln!("RSS {rss_before} → {rss_after} kB; SIGTERM to exit {took:?}");

    let o = Command::new(bin())
        .args(["agent", "--peers-file"])
        .arg(&peers)
        .args(["-L", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "rttlab: peers file {}: a character device, not a regular file",
            peers.display()
        )
    );
}

/// Witness: the agent's own answers. A 200 000-peer file (once: 20 000 accepted and a
/// 125 MB exposition; with /dev/zero as well, the agent wedged) is refused by
/// --max-peers (default 5000) on reload, the running peers stay, `/metrics` answers,
/// SIGTERM ends it within a second; at start it is an error.
#[test]
fn a_200000_peer_file_is_refused_by_the_peer_cap_and_the_agent_stays_responsive() {
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers.json");
    let port = free_port();
    std::fs::write(&peers, peers_json(3, port)).unwrap();
    let big = dir.path().join("big.json");
    std::fs::write(&big, peers_json(200_000, port)).unwrap();
    let mut agent = AgentChild::start(dir.path(), &peers, &[]);
    std::fs::copy(&big, dir.path().join("peers.new")).unwrap();
    std::fs::rename(dir.path().join("peers.new"), &peers).unwrap();
    // While the reload thread reads and parses it, /metrics answers.
    let t0 = Instant::now();
    let (status, _) = http_get(agent.metrics_port, "/metrics", Duration::from_secs(5));
    assert!(status.contains("200"), "{status}");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    agent.wait_for("200000 peers named");
    assert!(
        agent.stderr().contains("more than --max-peers 5000"),
        "{}",
        agent.stderr()
    );
    let (_, body) = http_get(agent.metrics_port, "/metrics", Duration::from_secs(5));
    assert!(body.contains("rttlab_agent_peers 3"), "{body}");
    let took = agent.terminate();
    assert!(took < Duration::from_secs(1), "SIGTERM to exit: {took:?}");

    let o = Command::new(bin())
        .args(["agent", "--peers-file"])
        .arg(&big)
        .args(["-L", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("200000 peers named") && stderr(&o).contains("--max-peers 5000"),
        "{}",
        stderr(&o)
    );
}

/// Witness: the file system. `--textfile` at a symlink to another file: the write is
/// refused with a message each interval, and the file it points to is unchanged.
#[test]
fn a_textfile_that_is_a_symlink_is_refused_and_its_target_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers.json");
    std::fs::write(&peers, peers_json(1, free_port())).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let prom = dir.path().join("rttlab.prom");
    symlink(&victim, &prom).unwrap();
    let mut agent = AgentChild::start(dir.path(), &peers, &["--textfile", prom.to_str().unwrap()]);
    agent.wait_for("is a symbolic link: refusing to write through it");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(&prom)
        .unwrap()
        .file_type()
        .is_symlink());
    agent.terminate();
}

// ---------------------------------------------------------------------------------
// `rttlab report`: bounded inputs, missing or foreign histograms, writes through
// symlinks.
// ---------------------------------------------------------------------------------

/// A copy of the recorded interval-sweep run (its report reads trials.jsonl only and
/// lists <tool>-<interval>us.hist.csv files).
fn sweep_copy(into: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/interval-sweep");
    let dst = into.join("sweep");
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

/// `rttlab report` with `args`, killed (failing the test) after 20 s.
fn report(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = Killed(
        Command::new(bin())
            .arg("report")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while child.0.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(20), "report hangs");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = Vec::new();
    let mut err = Vec::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut err)
        .unwrap();
    Output {
        status: child.0.wait().unwrap(),
        stdout: out,
        stderr: err,
    }
}

/// Witness: the file system. `report --out OUT` where OUT/report.html is a symlink to a
/// file elsewhere (once: that file overwritten, exit 0): refused with one message
/// naming the link, the file it points to unchanged.
#[test]
fn report_out_over_a_planted_symlink_leaves_its_target_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let run = sweep_copy(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    symlink(&victim, out.join("report.html")).unwrap();
    let o = report(&[run.as_os_str(), "--out".as_ref(), out.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "{} is a symbolic link: refusing to write through it",
            out.join("report.html").display()
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // Without the link, the same command writes the report.
    std::fs::remove_file(out.join("report.html")).unwrap();
    let o = report(&[run.as_os_str(), "--out".as_ref(), out.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(out.join("report.html"))
        .unwrap()
        .contains("<html"));
}

/// Witness: the exit and the clock. run.json a symlink to /dev/zero (once: report hung)
/// is refused at once by name; so is a run.json that is a FIFO, which nobody writes.
#[test]
fn report_refuses_a_run_json_that_is_dev_zero_or_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let run = sweep_copy(dir.path());
    std::fs::remove_file(run.join("run.json")).unwrap();
    symlink("/dev/zero", run.join("run.json")).unwrap();
    let o = report(&[run.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("{}", run.join("run.json").display())),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(run.join("run.json")).unwrap();
    let c = std::ffi::CString::new(run.join("run.json").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let o = report(&[run.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("run.json: a FIFO, not a regular file"),
        "{}",
        stderr(&o)
    );
}

/// Witness: report's stderr and exit status. A missing histogram and one that is a
/// symlink to /etc/passwd (once: exit 0, no word) are each named on stderr; the tables
/// are still printed and the exit status is 1.
#[test]
fn report_names_a_missing_and_a_foreign_histogram_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let run = sweep_copy(dir.path());
    std::fs::remove_file(run.join("icmp-1us.hist.csv")).unwrap();
    std::fs::remove_file(run.join("icmp-2us.hist.csv")).unwrap();
    symlink("/etc/passwd", run.join("icmp-2us.hist.csv")).unwrap();
    std::fs::write(
        run.join("icmp-5us.hist.csv"),
        "root:x:0:0:root:/root:/bin/sh\n",
    )
    .unwrap();
    let o = report(&[run.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    let line = |name: &str| {
        err.lines()
            .find(|l| l.contains(&run.join(name).display().to_string()))
            .unwrap_or_else(|| panic!("{name} not named: {err}"))
            .to_string()
    };
    assert!(line("icmp-1us.hist.csv").contains("No such file"), "{err}");
    assert!(
        line("icmp-2us.hist.csv").contains("a symlink pointing out of"),
        "{err}"
    );
    assert!(
        line("icmp-5us.hist.csv").contains("not a histogram rttlab wrote"),
        "{err}"
    );
    assert!(err.contains("3 histogram file(s)"), "{err}");
    assert!(!o.stdout.is_empty(), "the tables are printed all the same");
}

// ---------------------------------------------------------------------------------
// Daemons start clean.
// ---------------------------------------------------------------------------------

/// Witness: /proc/PID/fd of the lab's daemon. Started with descriptor 7 open on a file
/// (`exec 7>f; rttlab lab up`; once: held until `lab down`), the daemon holds no
/// descriptor on that file, and its stdin and stderr are /dev/null.
#[test]
fn the_lab_daemon_holds_nothing_of_its_callers() {
    if !privileged("the_lab_daemon_holds_nothing_of_its_callers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("held");
    let name = "t-fds";
    let _ = Command::new(bin())
        .args(["lab", "down", "--name", name])
        .output();
    let script = format!(
        "exec 7>'{}'; exec '{}' lab up --name {name} --emulator sleep",
        held.display(),
        bin().display()
    );
    let up = Command::new("bash").args(["-c", &script]).output().unwrap();
    let down = || {
        let _ = Command::new(bin())
            .args(["lab", "down", "--name", name])
            .output();
    };
    if !up.status.success() {
        down();
        panic!("lab up: {}", stderr(&up));
    }
    let info = std::fs::read_to_string(format!("/run/rttlab/lab/{name}/lab.json")).unwrap();
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    let pid = info["owner_pid"].as_i64().unwrap();
    let mut fds = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let e = e.unwrap();
        let to = std::fs::read_link(e.path()).unwrap_or_default();
        fds.push((e.file_name().to_string_lossy().to_string(), to));
    }
    down();
    assert!(
        !fds.iter().any(|(_, to)| to == &held),
        "the daemon holds the caller's file: {fds:?}"
    );
    for n in ["0", "2"] {
        let to = fds.iter().find(|(fd, _)| fd == n).map(|(_, to)| to.clone());
        assert_eq!(to, Some(PathBuf::from("/dev/null")), "fd {n}: {fds:?}");
    }
}
