//! Shared by the integration tests: a real `rttlab serve` child, privilege checks, and
//! network namespaces joined by a veth pair (addresses from 198.18.0.0/15 and
//! 2001:2::/48; no default route, so nothing can leave the machine).

pub mod grafana;
pub mod serial;
pub mod service;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rttlab"))
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Wait until something accepts TCP connections on `host` port `port`, inside `ns` if given.
pub fn wait_listening(host: &str, port: u16, ns: Option<&str>) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let ok = match ns {
            None => std::net::TcpStream::connect((host, port)).is_ok(),
            Some(ns) => Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns,
                    "bash",
                    "-c",
                    &format!("exec 3<>/dev/tcp/{host}/{port}"),
                ])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        };
        if ok {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listening on {host} port {port}");
}

/// A `rttlab serve` child process, killed on drop.
pub struct ServeChild {
    pub child: Child,
    pub port: u16,
}

impl ServeChild {
    /// Serve on 127.0.0.1 with extra arguments.
    pub fn start(extra: &[&str]) -> Self {
        let port = free_port();
        let child = Command::new(bin())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_listening("127.0.0.1", port, None);
        Self { child, port }
    }

    /// `rttlab rr -H 127.0.0.1 -p PORT` plus `args`, as a command.
    pub fn rr_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(["rr", "-H", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args);
        c
    }

    /// Run it to the end.
    pub fn rr(&self, args: &[&str]) -> Output {
        self.rr_command(args).output().unwrap()
    }

    /// Start it with stdout and stderr piped.
    pub fn spawn_rr(&self, args: &[&str]) -> Child {
        self.rr_command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parse stdout as JSON.
pub fn json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

/// True when privileged tests can run. Without root they are skipped with a reason,
/// unless RTTLAB_REQUIRE_PRIVILEGED_TESTS=1 (CI), where a missing privilege fails.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["ip", "nft"].iter().all(|t| {
        Command::new(t)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
    if root && tools {
        return true;
    }
    let why = if root {
        "the ip and nft commands are missing (apt-get install iproute2 nftables)"
    } else {
        "not root"
    };
    assert!(!required, "{test}: privileged test cannot run: {why}");
    eprintln!(
        "skipping {test}: {why} (set RTTLAB_REQUIRE_PRIVILEGED_TESTS=1 to make this a failure)"
    );
    false
}

/// True when the machine has two CPUs or more, which the tests that move work between
/// CPUs need. Without them the test is skipped with a reason, unless
/// RTTLAB_REQUIRE_PRIVILEGED_TESTS=1 (CI), where it fails.
pub fn two_cpus(test: &str) -> bool {
    if std::thread::available_parallelism().map_or(1, usize::from) >= 2 {
        return true;
    }
    let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: needs two CPUs, and this machine has one"
    );
    eprintln!(
        "skipping {test}: one CPU (set RTTLAB_REQUIRE_PRIVILEGED_TESTS=1 to make this a failure)"
    );
    false
}

/// Run a command; fail the test with its stderr if it fails.
pub fn sh(args: &[&str]) {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Two namespaces `a` and `b` joined by a veth pair, removed on drop.
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    /// The veth end in `a`.
    pub dev_a: String,
    pub a4: &'static str,
    pub b4: &'static str,
    pub a6: &'static str,
    pub b6: &'static str,
}

impl NetnsPair {
    pub fn new() -> Self {
        Self::addressed(
            ["198.18.200.1", "198.18.200.2"],
            ["2001:2:0:200::1", "2001:2:0:200::2"],
        )
    }

    /// A pair on 198.18.203.0/24 and 2001:2:0:203::/64, which no other test's pairs
    /// use: for a test that changes how every connection to its prefix behaves, as a
    /// cgroup's sock_ops override does for the whole test process.
    pub fn apart() -> Self {
        Self::addressed(
            ["198.18.203.1", "198.18.203.2"],
            ["2001:2:0:203::1", "2001:2:0:203::2"],
        )
    }

    fn addressed([a4, b4]: [&'static str; 2], [a6, b6]: [&'static str; 2]) -> Self {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}-{n}", std::process::id() % 100_000);
        let (a, b) = (format!("rttlab-test-a{tag}"), format!("rttlab-test-b{tag}"));
        let pair = Self {
            a,
            b,
            dev_a: format!("rtv{tag}a"),
            a4,
            b4,
            a6,
            b6,
        };
        sh(&["ip", "netns", "add", &pair.a]);
        sh(&["ip", "netns", "add", &pair.b]);
        let va = format!("rtv{tag}a");
        let vb = format!("rtv{tag}b");
        sh(&[
            "ip", "link", "add", &va, "netns", &pair.a, "type", "veth", "peer", "name", &vb,
            "netns", &pair.b,
        ]);
        for (ns, dev, v4, v6) in [
            (&pair.a, &va, pair.a4, pair.a6),
            (&pair.b, &vb, pair.b4, pair.b6),
        ] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v4}/24"),
                "dev",
                dev,
            ]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        // A fresh veth passes no IPv6 for ~100 ms after it comes up: wait until both
        // families answer, so tests measure the path, not its start-up.
        for addr in [pair.b4, pair.b6] {
            let t0 = Instant::now();
            while !Self::exec(&pair.a, &["ping", "-c", "1", "-W", "1", addr])
                .output()
                .is_ok_and(|o| o.status.success())
            {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "{addr} never became reachable"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        pair
    }

    /// Run a command inside namespace `ns`.
    pub fn exec(ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    /// Start `rttlab serve` in `b` listening on `host` port `port`; killed on drop.
    pub fn serve_in_b(&self, host: &str, port: u16, extra: &[&str]) -> KillOnDrop {
        let bin = bin();
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let child = Self::exec(
            &self.b,
            &[bin.to_str().unwrap(), "serve", "--listen", &addr],
        )
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        wait_listening(host, port, Some(&self.b));
        KillOnDrop(child)
    }

    /// A sysctl's value inside `ns`, as sysctl(8) reads it.
    pub fn sysctl(ns: &str, key: &str) -> String {
        let o = Self::exec(ns, &["sysctl", "-n", key]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Run `rttlab ARGS` in `a`.
    pub fn rttlab_in_a(&self, args: &[&str]) -> Output {
        let bin = bin();
        let mut v = vec![bin.to_str().unwrap()];
        v.extend_from_slice(args);
        Self::exec(&self.a, &v).output().unwrap()
    }

    /// `nft -f -` inside `ns`.
    pub fn nft(ns: &str, script: &str) {
        use std::io::Write;
        let mut c = Self::exec(ns, &["nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "nft: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Packets counted by the named nft counter rule (`counter name X`) in `ns`.
    pub fn nft_counter(ns: &str, table: &str, counter: &str) -> u64 {
        let o = Self::exec(
            ns,
            &["nft", "-j", "list", "counter", "inet", table, counter],
        )
        .output()
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["nftables"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|x| x["counter"]["packets"].as_u64())
            .unwrap()
    }
}

/// A child process killed when the guard goes, also when a test panics.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            // Deleting a namespace does not end what runs in it: kill that first.
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    // SAFETY: signalling a process of the test's own namespace.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Validate `doc` against `docs/schema/<kind>.json`, its kind read from the document's
/// own `"schema"` key (`rttlab.<kind>/<version>`); panics naming every violation.
/// Witness: the committed JSON Schema files, read by the `jsonschema` crate.
pub fn assert_schema(doc: &serde_json::Value) {
    let name = doc["schema"]
        .as_str()
        .unwrap_or_else(|| panic!("no \"schema\" key in {doc}"));
    let errors: Vec<String> = validator(name)
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:#?}\nin {doc}");
}

/// The validator of schema `name` (`rttlab.<kind>/<version>`), built once a kind:
/// every line of a command's output is checked, thousands of them.
fn validator(name: &str) -> std::sync::Arc<jsonschema::Validator> {
    static BUILT: std::sync::Mutex<
        std::collections::BTreeMap<String, std::sync::Arc<jsonschema::Validator>>,
    > = std::sync::Mutex::new(std::collections::BTreeMap::new());
    let kind = name
        .strip_prefix("rttlab.")
        .and_then(|r| r.split_once('/'))
        .map(|(k, _)| k)
        .unwrap_or_else(|| panic!("schema name {name:?} is not rttlab.<kind>/<version>"));
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(v) = built.get(kind) {
        return v.clone();
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/schema");
    let read = |f: &str| -> serde_json::Value {
        let p = dir.join(f);
        serde_json::from_slice(
            &std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    // Every file, by its own $id, so that one schema may refer to another's $defs.
    let mut builder = jsonschema::Registry::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let f = entry.unwrap().file_name().into_string().unwrap();
        let s = read(&f);
        let id = s["$id"]
            .as_str()
            .unwrap_or_else(|| panic!("{f} has no $id"))
            .to_owned();
        builder = builder.add(id, s).unwrap();
    }
    let registry = builder.prepare().unwrap();
    let schema = read(&format!("{kind}.json"));
    let v = jsonschema::options()
        .with_registry(&registry)
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{kind}.json: {e}"));
    let v = std::sync::Arc::new(v);
    built.insert(kind.to_owned(), v.clone());
    v
}

/// Every line of `text` parsed as JSON and validated (`assert_schema`); returns them.
pub fn assert_schema_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert_schema(&v);
            v
        })
        .collect()
}

/// A file of the test corpus (`tests/corpus`).
pub fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name)
}

/// The corpus file `name` (gzip) decompressed.
pub fn corpus_bytes(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(corpus(name)).unwrap()),
        &mut out,
    )
    .unwrap();
    out
}

/// A lab of two hosts (`rttlab lab up`) with `rttlab serve` in b, removed on drop.
pub struct Lab {
    pub name: String,
    server: Option<KillOnDrop>,
    /// Its share of the machine: a polling emulator busy-polls a CPU while up, and
    /// any `lab up` sweeps the labs of dead owners.
    _busy: serial::Token,
}

impl Lab {
    /// `rttlab lab up --name TAG<pid> --emulator poll ARGS`, and a server in b: frames
    /// leave within µs of their time, for a test that times the path.
    pub fn up(tag: &str, args: &[&str]) -> Self {
        Self::with_emulator(tag, "poll", args)
    }

    /// The same with `--emulator sleep`: no CPU spent between frames, which leave ms
    /// late when the machine is busy. For a test that counts (losses, retransmissions,
    /// which transactions are the slowest) and judges no time: beside polling labs it
    /// took 5–10 times as long as alone. It holds a share of the machine all the same:
    /// its `lab up` sweeps labs whose owner died, which a test that kills one must not
    /// meet.
    pub fn counting(tag: &str, args: &[&str]) -> Self {
        Self::with_emulator(tag, "sleep", args)
    }

    fn with_emulator(tag: &str, emulator: &str, args: &[&str]) -> Self {
        let name = format!("{tag}{}", std::process::id() % 10_000);
        let mut lab = Self {
            name,
            server: None,
            _busy: serial::busy(),
        };
        lab.cmd(
            &[
                &["up", "--name", &lab.name.clone(), "--emulator", emulator],
                args,
            ]
            .concat(),
        );
        let bin = bin();
        let bin = bin.to_str().unwrap();
        lab.server = Some(KillOnDrop(
            Command::new(bin)
                .args([
                    "lab", "exec", "--name", &lab.name, "b", "--", bin, "serve", "-q",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ));
        lab.wait_served();
        lab
    }

    /// `rttlab lab ARGS`, which must succeed; its stdout.
    pub fn cmd(&self, args: &[&str]) -> String {
        let o = Command::new(bin()).arg("lab").args(args).output().unwrap();
        assert!(
            o.status.success(),
            "lab {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// `rttlab lab set --name NAME ARGS`.
    pub fn set(&self, args: &[&str]) {
        self.cmd(&[&["set", "--name", &self.name], args].concat());
    }

    /// `rttlab ARGS` in host a, run once; its stdout as JSON (the test fails with its
    /// stderr when it fails).
    pub fn in_a(&self, args: &[&str]) -> serde_json::Value {
        let bin = bin();
        let bin = bin.to_str().unwrap();
        let o = Command::new(bin)
            .args(["lab", "exec", "--name", &self.name, "a", "--", bin])
            .args(args)
            .output()
            .unwrap();
        json(&o)
    }

    /// Wait until the server in b accepts connections from a (the only retry: "not
    /// listening yet"), at most 10 s.
    fn wait_served(&self) {
        let bin = bin();
        let t0 = Instant::now();
        loop {
            let listening = Command::new(&bin)
                .args(["lab", "exec", "--name", &self.name, "a", "--"])
                .args(["bash", "-c", "exec 3<>/dev/tcp/b/12866"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if listening {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the server in lab {} never listened",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A TcpExt counter of host `host`'s namespace (/proc/net/netstat).
    pub fn tcp_ext(&self, host: &str, counter: &str) -> u64 {
        let o = Command::new(bin())
            .args([
                "lab",
                "exec",
                "--name",
                &self.name,
                host,
                "--",
                "cat",
                "/proc/net/netstat",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8(o.stdout).unwrap();
        let mut rows = text.lines().filter(|l| l.starts_with("TcpExt:"));
        let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
        let i = names.split_whitespace().position(|n| n == counter).unwrap();
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    }

    /// Host `host`'s IPv4 address: a lab's addresses follow its index among the labs
    /// up at the time, so a test beside another lab cannot assume 198.18.0.x.
    pub fn ipv4(&self, host: &str) -> String {
        self.info()["info"][host]["ipv4"]
            .as_str()
            .unwrap_or_else(|| panic!("no {host} in lab {}", self.name))
            .to_string()
    }

    /// This lab's line of `rttlab lab list --json`.
    fn info(&self) -> serde_json::Value {
        let text = self.cmd(&["list", "--json"]);
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["info"]["name"] == self.name.as_str())
            .unwrap_or_else(|| panic!("lab {} is not listed", self.name))
    }

    /// The emulator's loss drops so far, (a→b, b→a).
    pub fn drops(&self) -> (u64, u64) {
        let v = self.info();
        let d = |dir: &str| v[dir]["counters"]["drop_loss"].as_u64().unwrap();
        (d("a2b"), d("b2a"))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.server.take();
        let _ = Command::new(bin())
            .args(["lab", "down", "--name", &self.name])
            .output();
    }
}

/// The exporter-toolkit files of a TLS and basic-auth agent in `dir`: a CA
/// (`ca.crt`) and a server certificate for 127.0.0.1 and the name `rttlab-agent` made
/// by openssl, the web config (returned) and the password for user `prometheus`.
pub fn tls_files(dir: &std::path::Path) -> (PathBuf, &'static str) {
    let run = |args: &[&str]| {
        let st = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(st.success(), "openssl {args:?}");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-days",
            "2",
            "-subj",
            "/CN=rttlab test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &[
            "-subj",
            "/CN=rttlab-agent",
            "-keyout",
            "agent.key",
            "-out",
            "agent.csr",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:rttlab-agent\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "agent.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "agent.crt",
    ]);
    let password = "correct horse battery staple";
    let hash = bcrypt::hash(password, 6).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: agent.crt\n  key_file: agent.key\nbasic_auth_users:\n  prometheus: '{hash}'\nhttp_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        ),
    )
    .unwrap();
    (web, password)
}

/// Start `cmd` with RLIMIT_NOFILE at `n`, soft and hard (`ulimit -n n` in a shell that
/// cannot raise it again).
pub fn limit_open_files(cmd: &mut Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A passive JSON sample as two captures of the same frames are compared: method, host,
/// `other` (the field that tells flows apart: place or peer), its stamp and RTT (ns).
pub type SampleKey = (String, String, String, u64, u64);

/// [`SampleKey`] of one `passive --json` sample line.
pub fn sample_key(v: &serde_json::Value, other: &str) -> SampleKey {
    (
        v["method"].as_str().unwrap().to_string(),
        v["host"].as_str().unwrap().to_string(),
        v[other].as_str().unwrap().to_string(),
        v["ts_ns"].as_u64().unwrap(),
        (v["rtt_us"].as_f64().unwrap() * 1000.0).round() as u64,
    )
}

/// Two captures' samples of the same frames, sorted alike: the same count, and at
/// most 1 % (or 4, whichever is more) that differ in their flow or by more than 10 µs in
/// stamp or RTT. Frames a host sends are stamped once per capture socket (the kernel
/// clones them to each tap and stamps each clone), so the stamps of one frame differ
/// by a few hundred ns; rarely the kernel is interrupted between stamping the two
/// clones, and that one frame moves up to four samples (a TS and a seq/ACK sample it
/// closes, and the two it opens).
pub fn assert_same_samples(a: &[SampleKey], b: &[SampleKey], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    let differ = a
        .iter()
        .zip(b)
        .filter(|(x, y)| {
            (&x.0, &x.1, &x.2) != (&y.0, &y.1, &y.2)
                || x.3.abs_diff(y.3) > 10_000
                || x.4.abs_diff(y.4) > 10_000
        })
        .count();
    assert!(
        differ <= (a.len() / 100).max(4),
        "{what}: {differ} of {} differ; first {:?} / {:?}",
        a.len(),
        a.first(),
        b.first()
    );
}

/// tcpdump writing every frame it takes to a file as it takes it (`-w FILE -U
/// --immediate-mode -Z root`): started once it says it listens, stopped once the file
/// has stopped growing ([`stop_tcpdump_when_written`]). Fixed waits on either side lost
/// the first or the last frames on a busy machine.
///
/// Its ring is 64 MiB (`-B 65536`): in immediate mode libpcap uses TPACKET_V2, whose
/// slots are a whole snapshot length (256 KiB on a veth, which offloads), so the
/// default 2 MiB held 7 frames and a tcpdump kept off the CPU for a few round trips
/// lost the rest (CI: 33 of 40 UDP_RR packets). [`Tcpdump::stop`] fails a test whose
/// capture the kernel dropped from, by tcpdump's own count.
pub struct Tcpdump {
    child: Option<Child>,
    file: PathBuf,
    drain: Option<std::thread::JoinHandle<String>>,
}

impl Tcpdump {
    /// tcpdump on `iface`, inside namespace `ns` if given, with `args` after the
    /// writing options (a filter expression, `--time-stamp-precision nano`).
    pub fn start(ns: Option<&str>, iface: &str, file: &std::path::Path, args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut cmd = match ns {
            Some(ns) => NetnsPair::exec(ns, &["tcpdump"]),
            None => Command::new("tcpdump"),
        };
        let mut child = cmd
            .args(["-i", iface, "-w"])
            .arg(file)
            .args(["-U", "--immediate-mode", "-B", "65536", "-Z", "root"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (apt-get install tcpdump)");
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            let n = err.read_line(&mut line).unwrap();
            said.push_str(&line);
            assert!(n > 0, "tcpdump ended before listening: {said}");
            if line.contains("listening on") {
                break;
            }
        }
        // Keep reading what it says: a closed pipe would end it at its next message,
        // and its last words count what the kernel dropped.
        let drain = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut rest);
            rest
        });
        Self {
            child: Some(child),
            file: file.to_path_buf(),
            drain: Some(drain),
        }
    }

    /// Stop it once everything it took is in its file; fail if the kernel dropped a
    /// frame it should have taken ("N packets dropped by kernel", its exit summary).
    pub fn stop(mut self) {
        if let Some(child) = self.child.take() {
            stop_tcpdump_when_written(child, &self.file);
        }
        if let Some(d) = self.drain.take() {
            let said = d.join().unwrap();
            let dropped = said
                .lines()
                .find_map(|l| l.strip_suffix(" packets dropped by kernel"))
                .unwrap_or_else(|| panic!("tcpdump did not count its drops: {said}"));
            assert_eq!(dropped.trim(), "0", "tcpdump's ring overflowed: {said}");
        }
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stop tcpdump once its file has stopped growing while tcpdump itself sleeps: with -U
/// it writes each frame as it takes it from its ring, and on SIGINT it leaves what is
/// still queued there unwritten (under load, half a run). A file that stops growing
/// because tcpdump waits for a CPU is not done: only asleep (`S` in /proc/PID/stat,
/// blocked in poll with its ring empty, `--immediate-mode` waking it for any frame) has
/// it taken everything (a frame went missing that way under a CPU hog). At most 20 s.
pub fn stop_tcpdump_when_written(mut dump: Child, file: &std::path::Path) {
    let asleep = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('S')))
            .unwrap_or(false)
    };
    let (mut size, mut still) = (0, 0);
    for _ in 0..400 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = std::fs::metadata(file).map_or(0, |m| m.len());
        still = if now == size && asleep(dump.id()) {
            still + 1
        } else {
            0
        };
        size = now;
        if still >= 10 {
            break;
        }
    }
    // SAFETY: signalling the child the test started.
    unsafe { libc::kill(dump.id() as i32, libc::SIGINT) };
    dump.wait().unwrap();
}

/// A process's CPU time so far, s (utime + stime of /proc/PID/stat).
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap())
}

/// The CPU time so far, s, of the threads of process `pid` named `name` (their comm).
pub fn thread_cpu_seconds(pid: u32, name: &str) -> f64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| {
            let t = t.ok()?.path();
            let comm = std::fs::read_to_string(t.join("comm")).ok()?;
            (comm.trim_end() == name)
                .then(|| std::fs::read_to_string(t.join("stat")).ok())
                .flatten()
        })
        .map(|stat| stat_cpu_seconds(&stat))
        .sum()
}

fn stat_cpu_seconds(stat: &str) -> f64 {
    // After the command name's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[0] + f[1]) as f64 / hz
}
