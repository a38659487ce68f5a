//! `rttlab passive` with tcpdump's filter expressions (issue 31, item 3). The witness
//! throughout is tcpdump: the packets it keeps of a capture, fed to rttlab, must give
//! exactly what rttlab gives filtering the same capture itself; live, a simultaneous
//! tcpdump capture with the same expression must give the same samples. tcpdump
//! compiles with the same libpcap, so what it witnesses is rttlab's use of it (the
//! link type, the program run on every packet, the length on the wire, the words
//! joined), not libpcap's compiler. Traffic: echo conversations on loopback, each
//! bounded in rounds and by socket timeouts.

use crate::common;

use crate::common::{bin, privileged};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

/// An echo server on `addr` (port 0: any) answering `conns` connections one after
/// another; returns its port.
fn echo_server(addr: &str, conns: usize) -> u16 {
    let l = TcpListener::bind(addr).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for _ in 0..conns {
            let Ok((mut s, _)) = l.accept() else { return };
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = s.read(&mut buf) {
                if s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    });
    port
}

/// `rounds` messages of `size` bytes to `to`, each read back whole before the next;
/// returns the client's port.
fn converse(to: SocketAddr, rounds: usize, size: usize) -> u16 {
    let mut s = TcpStream::connect_timeout(&to, TIMEOUT).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    let msg = vec![b'x'; size];
    let mut back = vec![0u8; size];
    for _ in 0..rounds {
        s.write_all(&msg).unwrap();
        s.read_exact(&mut back).unwrap();
    }
    s.local_addr().unwrap().port()
}

/// tcpdump on loopback writing `file`, started and listening (it says so on stderr
/// once its socket is bound: from then on it sees every frame).
fn tcpdump_on_lo(file: &Path, snaplen: &str, expression: &str) -> Child {
    let mut dump = Command::new("tcpdump")
        .args(["-U", "--immediate-mode", "-B", "16384", "-s", snaplen])
        .args(["-i", "lo", "-w"])
        .arg(file)
        .arg(expression)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump (apt-get install tcpdump)");
    let mut err = BufReader::new(dump.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        let n = err.read_line(&mut line).unwrap();
        assert!(n > 0, "tcpdump exited before listening");
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    dump
}

fn rttlab(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

/// The counters line (`N packets, …`) of a run's stderr, and its packet count.
fn counters(o: &Output) -> (String, u64) {
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .find(|l| l.contains(" packets, "))
        .unwrap_or_else(|| panic!("no counters line: {err}"))
        .to_string();
    let n = line.split(' ').next().unwrap().parse().unwrap();
    (line, n)
}

/// `tcpdump -r file -w - EXPRESSION | rttlab passive -r - ARGS`.
fn through_tcpdump(file: &Path, expression: &str, args: &[&str]) -> Output {
    let mut dump = Command::new("tcpdump")
        .args(["-r"])
        .arg(file)
        .args(["-w", "-", expression])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let o = Command::new(bin())
        .args(["passive", "-r", "-"])
        .args(args)
        .stdin(dump.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(
        dump.wait().unwrap().success(),
        "tcpdump -r … {expression:?}"
    );
    o
}

/// Five expressions and one on the length on the wire, on a capture of TCP over IPv4
/// and IPv6 cut at 96 bytes. Witness: tcpdump -r FILE -w - EXPR, fed to rttlab, must
/// give the same packets (the counters line) and the same samples (every JSON line,
/// byte for byte) as rttlab filtering the file itself.
#[test]
fn file_expressions_keep_what_tcpdump_keeps_sample_for_sample() {
    let _busy = common::serial::busy();
    if !privileged("file_expressions_keep_what_tcpdump_keeps_sample_for_sample") {
        return;
    }
    let v4 = echo_server("127.0.0.1:0", 3);
    let v6 = echo_server("[::1]:0", 3);
    let other = echo_server("127.0.0.2:0", 2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lo.pcap");
    let dump = tcpdump_on_lo(
        &file,
        "96",
        &format!("tcp and (port {v4} or port {v6} or port {other})"),
    );
    for (to, conns) in [
        (format!("127.0.0.1:{v4}"), 3),
        (format!("[::1]:{v6}"), 3),
        (format!("127.0.0.2:{other}"), 2),
    ] {
        for _ in 0..conns {
            converse(to.parse().unwrap(), 20, 300);
        }
    }
    common::stop_tcpdump_when_written(dump, &file);
    let path = file.to_str().unwrap();
    let args = ["--json", "--method", "both"];
    let (_, all) = counters(&rttlab(&["passive", "-r", path]));
    assert!(all > 300, "{all} packets captured");
    let port = format!("tcp port {v4}");
    let not_port = format!("tcp and not port {v4}");
    for expression in [
        port.as_str(),
        "ip6",
        not_port.as_str(),
        "host 127.0.0.2 or host ::1",
        "tcp[tcpflags] & tcp-syn != 0",
        // Every data segment is longer on the wire than the 96 bytes captured.
        "greater 200",
    ] {
        // As typed at a shell: `tcp port N` unquoted (three words), the rest quoted.
        let words: Vec<&str> = if expression == port {
            expression.split(' ').collect()
        } else {
            vec![expression]
        };
        let ours = rttlab(&[&["passive", "-r", path][..], &args, &words].concat());
        assert!(
            ours.status.success(),
            "{expression}: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
        let witness = through_tcpdump(&file, expression, &args);
        let ((line, n), (wline, _)) = (counters(&ours), counters(&witness));
        assert!(n > 0 && n < all, "{expression}: {n} of {all} packets kept");
        eprintln!(
            "{expression}: {n} of {all} packets, {} sample lines",
            ours.stdout.iter().filter(|&&b| b == b'\n').count()
        );
        assert_eq!(line, wline, "{expression}: packets");
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&witness.stdout),
            "{expression}: samples"
        );
    }
}

/// The JSON sample lines of a run.
fn samples(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The ports of a sample's two ends.
fn ports(v: &serde_json::Value) -> [u16; 2] {
    ["host", "peer"].map(|k| {
        let a: SocketAddr = v[k].as_str().unwrap().parse().unwrap();
        a.port()
    })
}

/// Live, `tcp port N` during traffic on two loopback ports: only port N's flows come
/// out, the kernel counted only port N's frames, and the samples are those of a
/// tcpdump capture with the same expression taken at the same time. Witnesses:
/// tcpdump's file (its frame count bounds the kernel's count of frames given to
/// rttlab's socket, which sees each loopback frame leave and arrive; rttlab reading
/// it gives the samples to compare), and the kernel's PACKET_STATISTICS.
#[test]
fn live_expression_runs_in_the_kernel_and_keeps_what_tcpdump_keeps() {
    let _busy = common::serial::busy();
    if !privileged("live_expression_runs_in_the_kernel_and_keeps_what_tcpdump_keeps") {
        return;
    }
    const WARM_UPS: usize = 50;
    let watched = echo_server("127.0.0.1:0", WARM_UPS + 3);
    let busy = echo_server("127.0.0.1:0", 6);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("watched.pcap");
    let expression = format!("tcp port {watched}");
    let dump = tcpdump_on_lo(&file, "256", &expression);
    let mut live = Command::new(bin())
        .args(["passive", "-i", "lo", "-nn", "--duration", "120", "--json"])
        .args(["--method", "both", "--local", "127.0.0.1"])
        .args(expression.split(' '))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Lines as they come, so that the first sample says the capture has started.
    let (tx, rx) = std::sync::mpsc::channel();
    let out = BufReader::new(live.stdout.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in out.lines() {
            let line = line.unwrap();
            let _ = tx.send(());
            all.push(line);
        }
        all
    });
    let mut err = live.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let to = |p: u16| -> SocketAddr { format!("127.0.0.1:{p}").parse().unwrap() };
    let t0 = Instant::now();
    let mut started = false;
    for _ in 0..WARM_UPS {
        converse(to(watched), 1, 10);
        if rx.recv_timeout(Duration::from_millis(200)).is_ok() {
            started = true;
            break;
        }
    }
    assert!(started, "no sample in {:?} of warm-ups", t0.elapsed());
    let mut main = Vec::new();
    for i in 0..6 {
        converse(to(busy), 40, 500);
        if i % 2 == 0 {
            main.push(converse(to(watched), 20, 300));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: stopping the child this test started (SIGINT ends its loop cleanly).
    unsafe { libc::kill(live.id() as i32, libc::SIGINT) };
    assert!(live.wait().unwrap().success());
    let (lines, err) = (reader.join().unwrap(), err.join().unwrap());
    common::stop_tcpdump_when_written(dump, &file);

    let live_samples = samples(lines.join("\n").as_bytes());
    for v in &live_samples {
        assert!(ports(v).contains(&watched), "not port {watched}: {v}");
    }
    // The kernel's count of frames given to the socket: each frame seen leaving and
    // arriving on lo, the analysis reading the arriving one.
    let kernel: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("kernel: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kernel line: {err}"));
    // The counters line (after the start line, `listening on lo, …`).
    let read: u64 = err
        .lines()
        .find_map(|l| l.split_once(" packets, "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no counters line: {err}"));
    let o = rttlab(&[
        "passive",
        "-r",
        file.to_str().unwrap(),
        "--json",
        "--method",
        "both",
        "--local",
        "127.0.0.1",
    ]);
    let (_, dumped) = counters(&o);
    // tcpdump started first and stopped last: it saw every frame rttlab's socket saw.
    // The busy port's frames (more than the watched port's) would break the bound.
    assert!(
        read > 0 && 2 * read <= kernel && kernel <= 2 * dumped,
        "kernel {kernel}, read {read}, tcpdump {dumped}: {err}"
    );
    let key = |v: &serde_json::Value| common::sample_key(v, "peer");
    let of_main = |v: &[serde_json::Value]| {
        let mut k: Vec<_> = v
            .iter()
            .filter(|v| ports(v).iter().any(|p| main.contains(p)))
            .map(key)
            .collect();
        k.sort();
        k
    };
    let (a, b) = (of_main(&live_samples), of_main(&samples(&o.stdout)));
    assert!(a.len() >= 3 * 20, "{} samples of the main flows", a.len());
    common::assert_same_samples(&a, &b, "live against tcpdump's file");
}

/// `-s 0` is tcpdump's whole-frame snap length, not a zero-second run: the capture
/// runs its --duration and reads the traffic. Witness: the counters line and the
/// clock.
#[test]
fn snaplen_0_live_captures_for_its_duration() {
    let _busy = common::serial::busy();
    if !privileged("snaplen_0_live_captures_for_its_duration") {
        return;
    }
    let port = echo_server("127.0.0.1:0", 20);
    let t0 = Instant::now();
    let live = Command::new(bin())
        .args(["passive", "-i", "lo", "-s", "0", "--duration", "3", "-q"])
        .args(["tcp", "port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        // Longer than 256 bytes: whole frames of a few kB on loopback.
        converse(format!("127.0.0.1:{port}").parse().unwrap(), 2, 5000);
    }
    let o = live.wait_with_output().unwrap();
    let took = t0.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(took >= Duration::from_millis(2900), "exited after {took:?}");
    let (line, n) = counters(&o);
    assert!(n > 0, "{line}");
}

/// An expression libpcap refuses ends the run with exit status 2 and libpcap's own
/// message on one line, before anything is opened (so for an interface too, without
/// privilege). Witness: tcpdump's message for the same expression (`tcpdump -d`).
#[test]
fn an_invalid_expression_exits_2_with_libpcaps_message_on_one_line() {
    let _busy = common::serial::busy();
    let expression = "tcp prot 80";
    let tcpdump = Command::new("tcpdump").args(["-d", expression]).output();
    let libpcap = tcpdump.ok().and_then(|o| {
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        e.lines()
            .find_map(|l| l.strip_prefix("tcpdump: ").map(String::from))
    });
    let corpus = common::corpus("rr-v4-gw.pcap.gz");
    for source in [["-r", corpus.to_str().unwrap()], ["-i", "lo"]] {
        let o = rttlab(&[&["passive"][..], &source, &[expression]].concat());
        assert_eq!(o.status.code(), Some(2), "{source:?}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        let want = format!("rttlab: filter \"{expression}\": ");
        assert!(err.starts_with(&want), "{err}");
        match &libpcap {
            Some(m) => assert_eq!(err.trim_end(), format!("{want}{m}")),
            None => assert!(err.contains("syntax error"), "{err}"),
        }
    }
    // Valid, but not for this file's link type: refused as tcpdump -r refuses it.
    let ethernet = common::corpus("rr-v6-gw.pcapng.gz");
    let o = rttlab(&["passive", "-r", ethernet.to_str().unwrap(), "inbound"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8(o.stderr).unwrap();
    let last = err.lines().last().unwrap();
    assert!(last.starts_with("rttlab: filter \"inbound\": "), "{err}");
}
