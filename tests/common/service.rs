//! Services nobody here wrote, and `rttlab explain` watching them: started, waited
//! for, stopped; explain's JSON lines read as they come.

use super::bin;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// True when `program` runs (`--version`); CI installs `package`, so there its absence
/// fails the test.
pub fn installed(test: &str, program: &str, package: &str) -> bool {
    if Command::new(program).arg("--version").output().is_ok() {
        return true;
    }
    let required = std::env::var("RTTLAB_REQUIRE_PRIVILEGED_TESTS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: {program} is not installed (apt-get install {package})"
    );
    eprintln!("skipping {test}: {program} is not installed");
    false
}

/// A service's process, stopped when dropped.
pub struct Service(pub Child);

impl Service {
    /// `child`, once something listens on `port` of loopback (`name` for the failure).
    pub fn listening(child: Child, port: u16, name: &str) -> Self {
        let service = Self(child);
        // A retry only for "not listening yet".
        for _ in 0..100 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return service;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{name} on port {port} did not listen within 5 s");
    }
}

impl Drop for Service {
    /// SIGTERM first: nginx's master stops its workers on it, where SIGKILL would
    /// leave them running; SIGKILL if it is still there after 5 s.
    fn drop(&mut self) {
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(i32::try_from(self.0.id()).unwrap(), libc::SIGTERM) };
        for _ in 0..100 {
            if self.0.try_wait().is_ok_and(|s| s.is_some()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One line from `r` (a RESP reply, a memcached reply, a status line).
pub fn reply(r: &mut impl BufRead) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    line
}

/// `rttlab explain --port P --json` running, attached, its output read as it comes
/// (a full pipe would stop it reading the kernel's records).
pub struct Watch {
    child: Child,
    err: BufReader<std::process::ChildStderr>,
    out: std::thread::JoinHandle<String>,
}

impl Watch {
    pub fn start(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    pub fn start_with(port: u16, args: &[&str]) -> Self {
        let port = port.to_string();
        Self::selecting(&[&["--port", &port], args].concat()).0
    }

    /// With `args` choosing what it watches (and more); also its first line, which
    /// names the ports.
    pub fn selecting(args: &[&str]) -> (Self, String) {
        let mut child = Command::new(bin())
            .args(["explain", "--json", "-l", "120"])
            // Every transaction printed: these tests count them.
            .args(["--json-rate", "100000000"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let first = reply(&mut err);
        assert!(first.contains("watching TCP "), "{first}");
        let mut stdout = child.stdout.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut out = String::new();
            stdout.read_to_string(&mut out).unwrap();
            out
        });
        (Self { child, err, out }, first)
    }

    /// Interrupt it: every transaction's JSON object, and its stderr (the summary).
    pub fn stop(mut self) -> (Vec<serde_json::Value>, String) {
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGINT) };
        let out = self.out.join().unwrap();
        let mut rest = String::new();
        self.err.read_to_string(&mut rest).unwrap();
        assert!(self.child.wait().unwrap().success(), "{rest}");
        // Every line held to its schema (docs/schema/explain-transaction.json).
        let txns = super::assert_schema_lines(&out);
        (txns, rest)
    }
}

/// A number of a transaction's JSON object.
pub fn num(t: &serde_json::Value, k: &str) -> f64 {
    t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"))
}
