//! The lab, end to end (root). Each test names its independent witness: iputils ping,
//! the receiving socket's own count, the kernel's tcp_info, or the file system.
//!
//! Lab tests that time the path hold `common::serial::machine` (a 2-vCPU machine); the
//! others share it as `busy`.

use crate::common;

use crate::common::{bin, privileged};
use rttlab::kernel::netns;
use rttlab::lab::emulator::Dir;
use rttlab::lab::impair::{ImpairmentPatch, Impairments, Loss, QueueLimit};
use rttlab::lab::socket::Start;
use rttlab::lab::{Lab, LabSpec, Node};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn ms(x: u64) -> u64 {
    x * 1_000_000
}

/// iputils ping's per-packet times (ms) and its summary line's loss count.
fn ping(lab: &Lab, args: &[&str]) -> (Vec<f64>, u64, u64) {
    let o = lab.command(Node::A, "ping").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let times = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    let summary = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary: {text}"));
    let num = |key: &str| -> u64 {
        summary
            .split(',')
            .find(|p| p.contains(key))
            .and_then(|p| p.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    (times, num("transmitted"), num("received"))
}

/// The value a `q` fraction of the way up the sorted samples.
fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}

#[test]
fn ping_across_the_lab_shows_the_configured_rtt() {
    if !privileged("ping_across_the_lab_shows_the_configured_rtt") {
        return;
    }
    let _g = common::serial::machine();
    let lab = Lab::up(&LabSpec::new(
        "t-rtt",
        Impairments {
            delay_ns: ms(20),
            ..Default::default()
        },
    ))
    .unwrap();
    // Witness: iputils ping, over IPv4 and IPv6 by the lab's names.
    for fam in ["-4", "-6"] {
        let (t, sent, got) = ping(&lab, &[fam, "-c", "20", "-i", "0.05", "b"]);
        assert_eq!((sent, got), (20, 20));
        let min = t.iter().copied().fold(f64::MAX, f64::min);
        assert!(
            (40.0..41.0).contains(&min),
            "{fam}: min {min} ms for 2 × 20 ms"
        );
        // A quarter within 2 ms of the configured RTT: the emulator's tails under a
        // busy or stolen vCPU are measured by bench/lab_fidelity.py, not here.
        assert!(quantile(t.clone(), 0.25) < 42.0, "{fam}: {t:?}");
    }
    // A change applies to new frames: 5 ms each way now.
    lab.set(
        &Dir::BOTH,
        &ImpairmentPatch {
            delay_ns: Some(ms(5)),
            ..Default::default()
        },
    )
    .unwrap();
    let (t, _, _) = ping(&lab, &["-4", "-c", "10", "-i", "0.05", "b"]);
    let min = t.iter().copied().fold(f64::MAX, f64::min);
    assert!((10.0..11.0).contains(&min), "after set: {t:?}");
    // Every frame the emulator took in is sent on once its delay has passed; a frame
    // still in its 5 ms (a late neighbour or router message) may be read in flight, so
    // read again until none is, for at most a second.
    let mut st = lab.status();
    for _ in 0..100 {
        if st.a2b.counters.rx_frames == st.a2b.counters.tx_frames {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        st = lab.status();
    }
    assert_eq!(st.emulator, "running");
    assert_eq!(st.a2b.counters.rx_frames, st.a2b.counters.tx_frames);
    assert!(st.a2b.counters.rx_frames >= 50);
}

#[test]
fn ping_one_in_flight_never_overlaps_its_requests() {
    if !privileged("ping_one_in_flight_never_overlaps_its_requests") {
        return;
    }
    let _g = common::serial::machine();
    let lab = Lab::up(&LabSpec::new(
        "t-1in",
        Impairments {
            delay_ns: ms(1),
            ..Default::default()
        },
    ))
    .unwrap();
    let run = |extra: &[&str]| {
        let o = lab
            .command(Node::A, bin().to_str().unwrap())
            .args(["ping", "b", "-c", "50", "-i", "1us", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        assert_eq!(v["received"], 50, "{v}");
        let busy = v["rtt"]["mean_us"].as_f64().unwrap() * 50.0 / 1e6;
        (v["elapsed_s"].as_f64().unwrap(), busy, v)
    };
    // Arithmetic: with one request in flight the round trips (each ≥ 2 ms here) are
    // disjoint in time, so the run lasts at least their sum.
    let (elapsed, busy, v) = run(&["--one-in-flight"]);
    assert_eq!(v["settings"]["one_in_flight"], true);
    assert!(busy >= 0.1, "{v}");
    assert!(
        elapsed >= busy,
        "elapsed {elapsed} s < sum of RTTs {busy} s"
    );
    // Control: on the clock alone, 1 µs apart, the 50 requests are all in flight at once.
    let (elapsed, busy, _) = run(&[]);
    assert!(
        elapsed < busy / 4.0,
        "elapsed {elapsed} s, sum of RTTs {busy} s"
    );
}

#[test]
fn configured_loss_shows_in_ping_and_in_the_counters() {
    if !privileged("configured_loss_shows_in_ping_and_in_the_counters") {
        return;
    }
    // Counts and files, not times: beside another busy test.
    let _g = common::serial::busy();
    let lab = Lab::up(&LabSpec {
        seed: Some(42),
        impairments: [
            Impairments {
                loss: Loss::Bernoulli { p: 0.2 },
                ..Default::default()
            },
            Impairments::default(),
        ],
        ..LabSpec::new("t-loss", Impairments::default())
    })
    .unwrap();
    // Let the hosts' IPv6 start-up chatter pass, then count from here.
    lab.wait_quiet(Duration::from_millis(1200), Duration::from_secs(6));
    let c0 = lab.status().a2b.counters;
    let n = 1000u64;
    let (_, sent, got) = ping(&lab, &["-4", "-c", "1000", "-i", "0.002", "-W", "1", "b"]);
    assert_eq!(sent, n);
    let st = lab.status();
    let c1 = st.a2b.counters;
    let c = rttlab::lab::emulator::CounterSnapshot {
        rx_frames: c1.rx_frames - c0.rx_frames,
        tx_frames: c1.tx_frames - c0.tx_frames,
        drop_loss: c1.drop_loss - c0.drop_loss,
        ..c1
    };
    // Witness: ping's own loss count equals the emulator's drop counter exactly (loss
    // only a→b, so every lost request is one dropped frame) ...
    assert_eq!(n - got, c.drop_loss, "{c:?}");
    assert_eq!(c.rx_frames, n);
    assert_eq!(c.tx_frames, got);
    // ... and lies inside the 99 % binomial interval of 20 % (arithmetic: ±2.576 σ).
    let sigma = (n as f64 * 0.2 * 0.8).sqrt();
    let lost = (n - got) as f64;
    assert!((lost - 200.0).abs() < 2.576 * sigma, "{lost} lost of {n}");
    assert_eq!(st.b2a.counters.drop_loss, 0);
}

#[test]
fn bulk_tcp_through_10_mbit_gets_the_rate_and_fills_the_queue() {
    if !privileged("bulk_tcp_through_10_mbit_gets_the_rate_and_fills_the_queue") {
        return;
    }
    let _g = common::serial::machine();
    let queue = 100_000u64;
    let rate = 10_000_000u64;
    let lab = Lab::up(&LabSpec::new(
        "t-bulk",
        Impairments {
            delay_ns: ms(10),
            rate_bps: Some(rate),
            queue: QueueLimit::Bytes(queue),
            ..Default::default()
        },
    ))
    .unwrap();
    let b = lab.info().b.ipv4;
    let listener = netns::run_in(Some(lab.netns(Node::B)), || {
        TcpListener::bind((b, 5001)).unwrap()
    })
    .unwrap();
    // Goodput between 1 s and 3.5 s after the connection: past slow start, and clear
    // of the close, whose tail loss may wait for an RTO.
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        let t0 = Instant::now();
        let mut marks = Vec::new();
        loop {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n as u64;
                    marks.push((t0.elapsed(), total));
                }
            }
        }
        let at = |t: Duration| *marks.iter().find(|m| m.0 >= t).unwrap();
        let (t1, b1) = at(Duration::from_millis(1000));
        let (t2, b2) = at(Duration::from_millis(3500));
        (b2 - b1) as f64 * 8.0 / (t2 - t1).as_secs_f64()
    });
    let mut s = netns::run_in(Some(lab.netns(Node::A)), || {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_tcp_congestion("cubic".as_bytes()).unwrap();
        sock.connect(&SocketAddr::from((b, 5001)).into()).unwrap();
        TcpStream::from(sock)
    })
    .unwrap();
    let chunk = vec![0x55u8; 1 << 16];
    let t0 = Instant::now();
    let c0 = lab.status().a2b.counters;
    // The kernel's srtt after slow start, once per 64 KiB written (~50 ms).
    let mut srtt_us = Vec::new();
    while t0.elapsed() < Duration::from_secs(4) {
        std::io::Write::write_all(&mut s, &chunk).unwrap();
        if t0.elapsed() > Duration::from_secs(1) {
            srtt_us.push(rttlab::kernel::sockopt::tcp_info(&s).unwrap().rtt_us);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let c1 = lab.status().a2b.counters;
    drop(s);
    let goodput = receiver.join().unwrap();
    // Witness 1: the receiving socket's byte count. Payload is 1448 of every 1514
    // bytes on the link (TCP timestamps on), so ~9.56 Mbit/s at 10 Mbit/s. Reads are
    // bursty: a repaired hole releases up to a window (queue + BDP ≈ 125 kB, 0.4
    // Mbit/s over the 2.5 s window) at once, on either side of a window edge.
    assert!(
        (8.5e6..10.1e6).contains(&goodput),
        "goodput {goodput} bit/s at a 10 Mbit/s link"
    );
    // The link itself (arithmetic on frame bytes sent on, over the sender's 4 s,
    // which includes slow start's first RTTs): within 2 % below the rate, never above.
    let link = (c1.tx_bytes - c0.tx_bytes) as f64 * 8.0 / elapsed;
    assert!(
        link <= rate as f64 * 1.01 && link > rate as f64 * 0.9,
        "link {link}"
    );
    // Witness 2: the kernel's srtt rises by about queue ÷ rate = 80 ms over the
    // 20 ms base RTT, and the queue was full (drops, and the backlog reached the limit).
    // Cubic's sawtooth drains the queue after each loss, so the upper quartile of srtt
    // is its full level; a single maximum would be one hypervisor stall.
    let queueing_ms = queue as f64 * 8.0 / rate as f64 * 1e3;
    srtt_us.sort_unstable();
    let srtt_ms = f64::from(srtt_us[srtt_us.len() * 3 / 4]) / 1e3;
    assert!(
        srtt_ms > 20.0 + 0.7 * queueing_ms && srtt_ms < 20.0 + 1.3 * queueing_ms,
        "upper-quartile srtt {srtt_ms} ms, expected about {}; all: {srtt_us:?}",
        20.0 + queueing_ms
    );
    assert!(c1.drop_queue > 0, "{c1:?}");
    assert!(
        c1.max_backlog_bytes > queue - 1514 && c1.max_backlog_bytes <= queue,
        "{c1:?}"
    );
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn a_scheduled_blackout_drops_exactly_the_packets_inside_the_window() {
    if !privileged("a_scheduled_blackout_drops_exactly_the_packets_inside_the_window") {
        return;
    }
    let _g = common::serial::machine();
    let lab = Lab::up(&LabSpec::new("t-blackout", Impairments::default())).unwrap();
    let b = lab.info().b.ipv4;
    let rx = netns::run_in(Some(lab.netns(Node::B)), || {
        UdpSocket::bind((b, 5001)).unwrap()
    })
    .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let tx = netns::run_in(Some(lab.netns(Node::A)), || {
        UdpSocket::bind("0.0.0.0:0").unwrap()
    })
    .unwrap();
    let other = netns::run_in(Some(lab.netns(Node::A)), || {
        UdpSocket::bind("0.0.0.0:0").unwrap()
    })
    .unwrap();
    let rx_other = netns::run_in(Some(lab.netns(Node::B)), || {
        UdpSocket::bind((b, 5002)).unwrap()
    })
    .unwrap();
    rx_other
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let w = lab
        .blackout(
            &Dir::BOTH,
            Duration::from_millis(200),
            Some(5001),
            Start::After { ns: ms(300) },
        )
        .unwrap();
    let collect = |rx: UdpSocket| {
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while let Ok(n) = rx.recv(&mut buf) {
                if n >= 4 {
                    got.push(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]));
                }
            }
            got
        })
    };
    // A receive buffer for the whole run (3200 packets), so a collector thread the
    // 2-vCPU machine preempts loses nothing to a full socket.
    for r in [&rx, &rx_other] {
        let size: libc::c_int = 8 << 20;
        // SAFETY: setsockopt on an open socket with an int value.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(r),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        assert_eq!(rc, 0);
    }
    let (collector, collector_other) = (collect(rx), collect(rx_other));
    // 1 packet every 250 µs on port 5001, and one on port 5002 every 10th, for 800 ms.
    let mut sent = Vec::new();
    let t0 = Instant::now();
    let mut i = 0u32;
    while t0.elapsed() < Duration::from_millis(800) {
        let due = Duration::from_micros(250) * i;
        while t0.elapsed() < due {
            std::hint::spin_loop();
        }
        let before = realtime_ns();
        tx.send_to(&i.to_be_bytes(), (b, 5001)).unwrap();
        let after = realtime_ns();
        if i % 10 == 0 {
            other.send_to(&i.to_be_bytes(), (b, 5002)).unwrap();
        }
        sent.push((i, before, after));
        i += 1;
    }
    let got: std::collections::HashSet<u32> = collector.join().unwrap().into_iter().collect();
    let other_got = collector_other.join().unwrap().len();
    // Witness: the receiving socket. A packet sent (both stamps) 0.5 ms clear of the
    // window arrives iff it is outside: the router stamps it when the sender's veth
    // hands it over, inside the sender's send().
    let margin = 500_000;
    let mut missing_inside = 0;
    for &(i, before, after) in &sent {
        if after + margin < w.start_ns || before > w.end_ns + margin {
            assert!(
                got.contains(&i),
                "packet {i} outside the window was lost; window {w:?}, sent {before}..{after}; {:?}",
                lab.status().a2b.counters
            );
        } else if before > w.start_ns + margin && after + margin < w.end_ns {
            assert!(
                !got.contains(&i),
                "packet {i} inside the window got through"
            );
            missing_inside += 1;
        }
    }
    // 800 when the sender keeps its pace; a preempted sender sends fewer.
    assert!(
        missing_inside > 50,
        "only {missing_inside} packets inside the window"
    );
    let lost = sent.len() - got.len();
    let st = lab.status();
    assert_eq!(st.a2b.counters.drop_blackout as usize, lost);
    // The other port is untouched.
    assert_eq!(other_got, sent.len().div_ceil(10));
    // The window's length, from the receiver: the emulator stamps a packet inside its
    // sender's send(), between `before` and `after`, and drops it iff that stamp lies in
    // the window; the lost packets are one run of consecutive sends. So the window
    // began after the last packet before the run was stamped and no later than the
    // first lost one was, and ended after the last lost one and no later than the first
    // one after the run: D lies between the two spans below, whatever the pacing.
    let lost_ix: Vec<usize> = (0..sent.len())
        .filter(|&k| !got.contains(&sent[k].0))
        .collect();
    let (first, last) = (lost_ix[0], *lost_ix.last().unwrap());
    assert_eq!(
        last - first + 1,
        lost_ix.len(),
        "the lost packets are one run"
    );
    assert!(
        first > 0 && last + 1 < sent.len(),
        "packets on both sides of the window"
    );
    let inner = sent[last].1.saturating_sub(sent[first].2);
    let outer = sent[last + 1].2 - sent[first - 1].1;
    assert!(
        inner < ms(200) && ms(200) < outer,
        "D = 200 ms outside ({inner}, {outer}) ns from the receiver"
    );
}

fn lab_cmd(args: &[&str]) -> std::process::Output {
    Command::new(bin()).arg("lab").args(args).output().unwrap()
}

fn leftovers(name: &str) -> Vec<String> {
    let mut v: Vec<String> = netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&format!("rttlab-lab-{name}-")))
        .collect();
    for p in [
        format!("/etc/netns/rttlab-lab-{name}-a"),
        format!("/etc/netns/rttlab-lab-{name}-b"),
        format!("/run/rttlab/lab/{name}"),
    ] {
        if std::path::Path::new(&p).exists() {
            v.push(p);
        }
    }
    v
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn the_command_line_builds_uses_and_removes_a_lab_even_after_sigkill() {
    if !privileged("the_command_line_builds_uses_and_removes_a_lab_even_after_sigkill") {
        return;
    }
    // Alone: any other lab's `lab up` sweeps the lab whose owner this test kills,
    // before its own `lab down` (it happened beside a test's lab under a CPU hog).
    let _g = common::serial::machine();
    let _ = lab_cmd(&["down", "--name", "t-cli"]);
    let up = lab_cmd(&[
        "up",
        "--name",
        "t-cli",
        "--emulator",
        "sleep",
        "--delay",
        "5ms",
        "--loss",
        "0",
        "--rate",
        "1gbit",
        "--queue",
        "64KiB",
    ]);
    assert!(up.status.success(), "{}", stderr(&up));
    let text = String::from_utf8_lossy(&up.stdout).to_string();
    assert!(
        text.contains("198.18.") && text.contains("2001:2:"),
        "{text}"
    );
    // A name clash is one line, and the first lab keeps working.
    let again = lab_cmd(&["up", "--name", "t-cli"]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("exists already"),
        "{}",
        stderr(&again)
    );
    assert_eq!(stderr(&again).lines().count(), 1);
    // exec by name; names resolve inside the lab (witness: iputils ping).
    let p = lab_cmd(&[
        "exec", "--name", "t-cli", "a", "--", "ping", "-4", "-c", "2", "-i", "0.1", "b",
    ]);
    assert!(p.status.success(), "{}", stderr(&p));
    assert!(String::from_utf8_lossy(&p.stdout).contains("2 received"));
    let set = lab_cmd(&[
        "set",
        "--name",
        "t-cli",
        "--dir",
        "a2b",
        "--delay",
        "7ms",
        "--blackout",
        "50ms",
        "--port",
        "9",
        "--at",
        "+10s",
    ]);
    assert!(set.status.success(), "{}", stderr(&set));
    let list = lab_cmd(&["list", "--json"]);
    let v: serde_json::Value = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["info"]["name"] == "t-cli")
        .unwrap();
    assert_eq!(v["a2b"]["impairments"]["delay_ns"], 7_000_000);
    assert_eq!(v["b2a"]["impairments"]["delay_ns"], 5_000_000);
    assert_eq!(v["a2b"]["blackouts"][0]["port"], 9);
    // Every frame in is sent on: the counters agree once the 5 ms delay line is empty
    // (a frame a host sent on its own, an IPv6 report, may be in it at any one read).
    let counters = || -> serde_json::Value {
        let list = lab_cmd(&["list", "--json"]);
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["info"]["name"] == "t-cli")
            .unwrap()["a2b"]["counters"]
            .clone()
    };
    let t0 = std::time::Instant::now();
    let mut a2b = counters();
    while a2b["tx_frames"] != a2b["rx_frames"] && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        a2b = counters();
    }
    assert!(a2b["tx_frames"].as_u64().unwrap() >= 2, "{a2b}");
    assert_eq!(a2b["tx_frames"], a2b["rx_frames"], "{a2b}");
    // A process left inside the lab, then the emulator killed with SIGKILL.
    let mut sleeper = Command::new(bin())
        .args(["lab", "exec", "--name", "t-cli", "b", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = v["info"]["owner_pid"].as_i64().unwrap() as i32;
    // SAFETY: killing the lab daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_dead(pid);
    let dead = lab_cmd(&["set", "--name", "t-cli", "--delay", "1ms"]);
    assert!(!dead.status.success());
    assert!(stderr(&dead).contains("lab down"), "{}", stderr(&dead));
    assert!(!leftovers("t-cli").is_empty());
    let down = lab_cmd(&["down", "--name", "t-cli"]);
    assert!(down.status.success(), "{}", stderr(&down));
    // Witness: the file system and the process table.
    assert_eq!(leftovers("t-cli"), Vec::<String>::new());
    let status = sleeper.wait().unwrap();
    assert!(
        !status.success(),
        "the process inside the lab was not killed"
    );
    let none = lab_cmd(&["down", "--name", "t-cli"]);
    assert!(stderr(&none).contains("no lab named"));
}

/// Waits until `pid` has exited. A killed process takes a while to exit on a loaded
/// machine (closing packet sockets waits for RCU grace periods); until it has, its
/// lab is rightly not stale.
fn wait_dead(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while rttlab::lab::topology::alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !rttlab::lab::topology::alive(pid),
        "pid {pid} outlived SIGKILL by 20 s"
    );
}

#[test]
fn a_killed_owner_is_swept_by_the_next_up_and_drop_leaves_nothing() {
    if !privileged("a_killed_owner_is_swept_by_the_next_up_and_drop_leaves_nothing") {
        return;
    }
    // Alone: another test's `lab up` would sweep the killed owner's lab first.
    let _g = common::serial::machine();
    let up = lab_cmd(&["up", "--name", "t-stale"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let pid: i32 = std::fs::read_to_string("/run/rttlab/lab/t-stale/lab.json")
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["owner_pid"].as_i64())
        .unwrap() as i32;
    // SAFETY: killing the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_dead(pid);
    let lab = Lab::up(&LabSpec::new("t-next", Impairments::default())).unwrap();
    assert_eq!(leftovers("t-stale"), Vec::<String>::new());
    assert!(!leftovers("t-next").is_empty());
    drop(lab);
    assert_eq!(leftovers("t-next"), Vec::<String>::new());
}

#[test]
fn labs_started_at_the_same_moment_all_come_up_on_their_own_addresses() {
    if !privileged("labs_started_at_the_same_moment_all_come_up_on_their_own_addresses") {
        return;
    }
    // Counts and files, not times: beside another busy test.
    let _g = common::serial::busy();
    // Witness: the file system and each lab's own ping. A lab whose lab.json was
    // not yet written used to look dead to a neighbour's sweep, which removed it.
    for round in 0..3 {
        let start = std::sync::Arc::new(std::sync::Barrier::new(4));
        let labs: Vec<Lab> = (0..4)
            .map(|i| {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    Lab::up(&LabSpec::new(&format!("t-race{i}"), Impairments::default()))
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("round {round}: {e}"))
            })
            .collect();
        let mut indices: Vec<u8> = labs.iter().map(|l| l.info().index).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), 4, "round {round}: shared address indices");
        for lab in &labs {
            let b = lab.info().b.ipv4.to_string();
            let (times, _, received) = ping(lab, &["-c", "1", "-W", "2", &b]);
            assert_eq!((times.len(), received), (1, 1), "{}", lab.info().name);
        }
        drop(labs);
        for i in 0..4 {
            assert_eq!(leftovers(&format!("t-race{i}")), Vec::<String>::new());
        }
    }
}

#[test]
fn bad_input_is_one_line_and_leaves_nothing() {
    if !privileged("bad_input_is_one_line_and_leaves_nothing") {
        return;
    }
    // Counts and files, not times: beside another busy test.
    let _g = common::serial::busy();
    for args in [
        &["up", "--name", "t-bad", "--loss", "150%"][..],
        &["up", "--name", "t-bad", "--delay", "-5ms"],
        &["up", "--name", "t-bad", "--rate", "0kbit"],
        &["up", "--name", "t-bad", "--queue", "0p"],
        &["up", "--name", "Bad/Name"],
        &["set", "--name", "t-none", "--delay", "1ms"],
        &["exec", "--name", "t-none", "a", "--", "true"],
    ] {
        let o = lab_cmd(args);
        assert!(!o.status.success(), "{args:?}");
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.starts_with("rttlab: "), "{args:?}: {e}");
    }
    assert_eq!(leftovers("t-bad"), Vec::<String>::new());
    // Without root: one line saying so, nothing made (setpriv from util-linux).
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["lab", "up", "--name", "t-user"])
        .env("RTTLAB_STATE_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("needs root"), "{}", stderr(&o));
    assert_eq!(leftovers("t-user"), Vec::<String>::new());
}
