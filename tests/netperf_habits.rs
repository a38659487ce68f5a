//! netperf command lines pasted into `rttlab rr` (docs/GUIDE.md, "From netperf: paste the
//! command"). The guide's table is read and every rttlab line in it is run against
//! an `rttlab serve` on loopback, its host swapped for 127.0.0.1, its run shortened to
//! `-l 1` and its fixed data ports swapped for free ones; the output must have
//! netperf's shape. The refusals and `-L` are checked here too.
//!
//! Witnesses: the header names are netperf 2.7.1's own, as it printed them for these
//! selectors on loopback (written out below, not taken from rttlab's code); the values
//! must be ordered as statistics of one sample are (MIN ≤ P50 ≤ P90 ≤ P99 ≤ MAX, the
//! mean between MIN and MAX); the banner must name the data ports asked for; and the
//! sizes asked with `-- -r` must reach the wire: the same line run again with `--json`
//! instead of `-o` must show the kernel's `tcpi_bytes_acked`/`tcpi_bytes_received` of
//! the client's data socket at transactions × request and × response bytes. `-L` is
//! witnessed by the server's own log, which names each test's source address.

use crate::common;

use crate::common::{bin, free_port, wait_listening, ServeChild};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// netperf 2.7.1's header for each selector the table uses (`netperf -- -o …`).
const NETPERF_NAMES: &[(&str, &str)] = &[
    ("THROUGHPUT", "Throughput"),
    ("THROUGHPUT_UNITS", "Throughput Units"),
    ("MIN_LATENCY", "Minimum Latency Microseconds"),
    ("MAX_LATENCY", "Maximum Latency Microseconds"),
    ("MEAN_LATENCY", "Mean Latency Microseconds"),
    ("STDDEV_LATENCY", "Stddev Latency Microseconds"),
    ("P50_LATENCY", "50th Percentile Latency Microseconds"),
    ("P90_LATENCY", "90th Percentile Latency Microseconds"),
    ("P99_LATENCY", "99th Percentile Latency Microseconds"),
    ("RT_LATENCY", "Round Trip Latency usec/tran"),
    ("ELAPSED_TIME", "Elapsed Time (sec)"),
    ("LOCAL_TRANSPORT_RETRANS", "Local Transport Retransmissions"),
    (
        "REMOTE_TRANSPORT_RETRANS",
        "Remote Transport Retransmissions",
    ),
    ("RESULT_BRAND", "Result Tag"),
    ("LOCAL_CPU_UTIL", "Local CPU Util %"),
    ("REMOTE_SD", "Remote Service Demand"),
    ("CONFIDENCE_ITERATION", "Confidence Iterations Run"),
    ("THROUGHPUT_CONFID", "Throughput Confidence Width (%)"),
];

struct Row {
    netperf: String,
    rttlab: String,
    note: String,
}

/// The table's rows: `| \`netperf …\` | \`rttlab rr …\` | note |`.
fn table() -> Vec<Row> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/GUIDE.md")).unwrap();
    let section = readme
        .split("### From netperf")
        .nth(1)
        .expect("docs/GUIDE.md has its From netperf section");
    let section = section.split("\n### ").next().unwrap();
    let rows: Vec<Row> = section
        .lines()
        .filter(|l| l.starts_with("| `netperf "))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let code = |c: &str| c.trim_matches('`').to_owned();
            Row {
                netperf: code(cells[1]),
                rttlab: code(cells[2]),
                note: cells[3].to_owned(),
            }
        })
        .collect();
    assert!((6..=10).contains(&rows.len()), "{} rows", rows.len());
    rows
}

/// Words as a shell splits them, double quotes honoured.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut w, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '"' => (quoted, any) = (!quoted, true),
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut w));
                }
                any = false;
            }
            _ => {
                w.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(w);
    }
    out
}

/// What a line asks for, read the way netperf reads it.
#[derive(Debug, Default)]
struct Asked {
    /// `-- -o LIST` (true) or `-- -O LIST` (false), with the list.
    selectors: Option<(bool, Vec<String>)>,
    /// Global `-P 0`.
    no_headers: bool,
    test: String,
    sizes: (u64, u64),
    brand: Option<String>,
    data_ports: Option<(u16, u16)>,
}

/// The line's words for loopback: `-H` is 127.0.0.1 at the server's port, `-l` is 1
/// (2 for a line paced with `-w`: at 10 ms a second holds 90 transactions, which
/// resolve no P99, and rr then leaves it out, as netperf's CSV writes a missing
/// value), `-- -P` two free ports; and what the line asks for.
fn localize(line: &str, port: u16) -> (Vec<String>, Asked) {
    let w = words(line);
    let seconds = if w.iter().any(|x| x == "-w") {
        "2"
    } else {
        "1"
    };
    assert_eq!(&w[..2], ["rttlab", "rr"], "{line}");
    let mut out = Vec::new();
    let mut asked = Asked {
        test: "TCP_RR".into(),
        sizes: (1, 1),
        ..Asked::default()
    };
    let (mut after, mut length) = (false, false);
    let mut it = w[2..].iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap().clone();
        match (after, a.as_str()) {
            (false, "--") => {
                if !length {
                    out.extend(["-l".into(), seconds.into()]);
                }
                after = true;
                out.push(a.clone());
            }
            (false, "-H") => {
                value();
                out.extend(["-H", "127.0.0.1", "-p", &port.to_string()].map(String::from));
            }
            (false, "-l") => {
                value();
                length = true;
                out.extend(["-l".into(), seconds.into()]);
            }
            (false, "-P") => {
                let v = value();
                asked.no_headers = v == "0";
                out.extend(["-P".into(), v]);
            }
            (false, "-t") => {
                asked.test = value();
                out.extend(["-t".into(), asked.test.clone()]);
            }
            (false, "-B") => {
                let v = value();
                asked.brand = Some(v.clone());
                out.extend(["-B".into(), v]);
            }
            (true, "-P") => {
                value();
                let l = free_port();
                let r = (0..100).map(|_| free_port()).find(|&r| r != l).unwrap();
                asked.data_ports = Some((l, r));
                out.extend(["-P".into(), format!("{l},{r}")]);
            }
            (true, "-r") => {
                let v = value();
                let (q, p) = v.split_once(',').unwrap_or((&v, &v));
                asked.sizes = (q.parse().unwrap(), p.parse().unwrap());
                out.extend(["-r".into(), v]);
            }
            (true, o @ ("-o" | "-O")) => {
                let v = value();
                let list = v.split(',').map(|s| s.to_ascii_uppercase()).collect();
                asked.selectors = Some((o == "-o", list));
                out.extend([o.to_owned(), v]);
            }
            _ => out.push(a.clone()),
        }
    }
    assert!(after, "{line}: no --");
    (out, asked)
}

fn run(args: &[String]) -> Output {
    let mut c = Command::new(bin());
    c.arg("rr").args(args);
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Every line is bounded by its -l 1 or 2 (three iterations at most).
    child.wait_with_output().unwrap()
}

/// One CSV line, netperf's way: fields split at commas outside double quotes.
fn csv_fields(line: &str) -> Vec<String> {
    let (mut out, mut f, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                f.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut f)),
            _ => f.push(c),
        }
    }
    out.push(f);
    out
}

/// `-O`'s columns: each starts where its first header word does; a column's header is
/// its words in the four lines, its value the value line's text under it.
fn columns(header: &[&str], values: &str) -> (Vec<String>, Vec<String>) {
    let first = header[0];
    let mut starts = vec![0];
    let b = first.as_bytes();
    for i in 1..b.len() {
        if b[i - 1] == b' ' && b[i] != b' ' {
            starts.push(i);
        }
    }
    let cell = |l: &str, i: usize| -> String {
        let end = starts.get(i + 1).copied().unwrap_or(l.len());
        l.get(starts[i]..end.min(l.len()))
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    let names = (0..starts.len())
        .map(|i| {
            header
                .iter()
                .map(|l| cell(l, i))
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let vals = (0..starts.len()).map(|i| cell(values, i)).collect();
    (names, vals)
}

/// The values must read as netperf's and agree as one sample's statistics do.
fn check_values(line: &str, asked: &Asked, names: &[String], values: &[String]) {
    assert_eq!(values.len(), names.len(), "{line}: {values:?}");
    let mut num = std::collections::HashMap::new();
    for (sel, v) in names.iter().zip(values) {
        match sel.as_str() {
            "RESULT_BRAND" => {
                let want = asked
                    .brand
                    .as_ref()
                    .map_or(String::new(), |b| format!("\"{b}\""));
                assert_eq!(v.trim(), want, "{line}");
            }
            "THROUGHPUT_UNITS" => assert_eq!(v, "Trans/s", "{line}"),
            _ => {
                let x: f64 = v
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{line}: {sel} = {v:?} is not a number"));
                if sel.ends_with("_LATENCY")
                    && sel != "MEAN_LATENCY"
                    && sel != "RT_LATENCY"
                    && sel != "STDDEV_LATENCY"
                {
                    // netperf prints these as whole microseconds.
                    assert!(!v.contains('.'), "{line}: {sel} = {v}");
                }
                num.insert(sel.as_str(), x);
            }
        }
    }
    let order = [
        "MIN_LATENCY",
        "P50_LATENCY",
        "P90_LATENCY",
        "P99_LATENCY",
        "MAX_LATENCY",
    ];
    let present: Vec<f64> = order.iter().filter_map(|s| num.get(s).copied()).collect();
    assert!(
        present.windows(2).all(|p| p[0] <= p[1]),
        "{line}: {order:?} out of order: {present:?}"
    );
    if let (Some(&mean), Some(&min)) = (num.get("MEAN_LATENCY"), num.get("MIN_LATENCY")) {
        assert!(mean >= min, "{line}: mean {mean} < min {min}");
    }
    if let (Some(&mean), Some(&max)) = (num.get("MEAN_LATENCY"), num.get("MAX_LATENCY")) {
        // MAX is whole µs (rounded down), the mean is not.
        assert!(mean <= max + 1.0, "{line}: mean {mean} > max {max}");
    }
    if let Some(&t) = num.get("THROUGHPUT") {
        assert!(t > 0.0, "{line}: throughput {t}");
    }
    if let Some(&n) = num.get("CONFIDENCE_ITERATION") {
        assert_eq!(n, 3.0, "{line}: -i 3,3 ran {n} iterations");
    }
}

fn netperf_name(sel: &str) -> &'static str {
    NETPERF_NAMES
        .iter()
        .find(|(s, _)| *s == sel)
        .unwrap_or_else(|| panic!("{sel}: add netperf's header for it to NETPERF_NAMES"))
        .1
}

/// The same line with `--json` for `-o`/`-O` (and no `-P 0`, which --json has no use
/// for): the kernel's byte counts of the client's data socket against the sizes asked.
fn sizes_reach_the_wire(line: &str, args: &[String], asked: &Asked) {
    let mut json_args = Vec::new();
    let mut skip = 0;
    let mut after = false;
    for (i, a) in args.iter().enumerate() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        after |= a == "--";
        let next = args.get(i + 1).map(String::as_str);
        if (after && (a == "-o" || a == "-O")) || (!after && a == "-P" && next == Some("0")) {
            skip = 1;
            continue;
        }
        json_args.push(a.clone());
        if after && a == "-P" {
            // Fresh ports: the last run's connection may still be in TIME_WAIT.
            let l = free_port();
            let r = (0..100).map(|_| free_port()).find(|&r| r != l).unwrap();
            json_args.push(format!("{l},{r}"));
            skip = 1;
        }
    }
    json_args.push("--json".into());
    let o = run(&json_args);
    let v = common::json(&o);
    let tx = v["transactions"].as_u64().unwrap();
    let info = &v["local_tcp_info"][0];
    let (acked, received) = (
        info["bytes_acked"].as_u64().unwrap(),
        info["bytes_received"].as_u64().unwrap(),
    );
    let (req, resp) = asked.sizes;
    assert!(tx > 0, "{line}");
    // bytes_acked counts the SYN's sequence number; a request may be in flight at the end.
    assert!(
        (tx * req..=(tx + 1) * req + 1).contains(&acked),
        "{line}: {tx} transactions of {req} bytes, {acked} bytes acked"
    );
    assert!(
        (tx * resp..=(tx + 1) * resp).contains(&received),
        "{line}: {tx} transactions of {resp} bytes back, {received} bytes received"
    );
}

#[test]
fn the_guides_netperf_lines_print_netperfs_shape() {
    // Every line is a TCP_RR or UDP_RR run at full speed on loopback, 22 s in all:
    // two CPUs kept busy, kept away from the tests that judge time.
    let _busy = common::serial::busy();
    let serve = ServeChild::start(&["--data-ports", "1024-65535"]);
    for row in table() {
        if row.note.starts_with("the same line") {
            assert_eq!(
                row.rttlab,
                row.netperf.replacen("netperf", "rttlab rr", 1),
                "said to be the same line"
            );
        }
        let (args, asked) = localize(&row.rttlab, serve.port);
        let t0 = Instant::now();
        let o = run(&args);
        let line = format!("rttlab rr {}", args.join(" "));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        assert!(
            o.status.success(),
            "{line}: {:?}\n{stdout}\n{stderr}",
            o.status
        );
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{line}: took {:?}",
            t0.elapsed()
        );
        let mut lines: Vec<&str> = stdout.lines().collect();
        let Some((csv, names)) = &asked.selectors else {
            // No selectors: rttlab's tables; -P 0 leaves out the settings lines.
            assert!(
                asked.no_headers,
                "{line}: a row without -o/-O is seed 000's -P 0"
            );
            assert!(lines[0].contains(" transactions in "), "{line}: {stdout}");
            assert!(
                !stdout.contains(&format!("{} -r", asked.test)),
                "{line}: {stdout}"
            );
            assert!(stdout.contains("RTT_us "), "{line}: {stdout}");
            continue;
        };
        if asked.no_headers {
            assert!(!stdout.starts_with("rttlab "), "{line}: banner with -P 0");
        } else {
            let banner = lines.remove(0);
            assert!(
                banner.starts_with("rttlab ") && banner.contains(" TEST from 127.0.0.1 port "),
                "{line}: banner {banner:?}"
            );
            if let Some((l, r)) = asked.data_ports {
                assert!(
                    banner.contains(&format!("port {l} AF_INET to 127.0.0.1 port {r} AF_INET")),
                    "{line}: {banner}"
                );
            }
        }
        let want: Vec<&str> = names.iter().map(|s| netperf_name(s)).collect();
        let values = if *csv {
            assert_eq!(
                lines.len(),
                if asked.no_headers { 1 } else { 2 },
                "{line}: {stdout}"
            );
            if !asked.no_headers {
                assert_eq!(lines[0], want.join(","), "{line}");
            }
            csv_fields(lines.last().unwrap())
        } else {
            let (header, vals) = if asked.no_headers {
                assert_eq!(lines.len(), 1, "{line}: {stdout}");
                (None, lines[0])
            } else {
                assert_eq!(lines.len(), 5, "{line}: {stdout}");
                (Some(&lines[..4]), lines[4])
            };
            match header {
                Some(h) => {
                    let (got, vals) = columns(h, vals);
                    assert_eq!(got, want, "{line}");
                    vals
                }
                None => vals.split_whitespace().map(String::from).collect(),
            }
        };
        check_values(&line, &asked, names, &values);
        if asked.test == "TCP_RR" {
            sizes_reach_the_wire(&line, &args, &asked);
        }
    }
}

/// What netperf has and rttlab does not do: one line on stderr naming the option,
/// nothing on stdout, exit 2, before anything touches the network.
#[test]
fn refused_netperf_options_say_so_in_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "-H",
                "127.0.0.1",
                "-t",
                "TCP_RR",
                "--",
                "-r",
                "1,2",
                "-S",
                "128K",
            ],
            "-S",
        ),
        (&["-t", "TCP_RR", "-Y", "ef", "--", "-r", "1,1"], "-Y"),
        (&["-t", "TCP_RR", "--", "-k"], "-k"),
        (&["-t", "TCP_RR", "--", "-b", "4"], "-b"),
        (&["-P", "65432", "--", "-r", "1,2"], "-P 65432"),
        (&["-v", "2", "--"], "-v"),
        (&["-n", "4", "--", "-r", "1,1"], "-n"),
        (&["-w", "10ms,5ms", "--"], "-w"),
        (&["--", "-o"], "-o"),
        (&["--", "-o", "NO_SUCH_SELECTOR"], "NO_SUCH_SELECTOR"),
    ];
    for (args, names) in cases {
        let o = Command::new(bin()).arg("rr").args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("rttlab: ") && err.contains(names),
            "{args:?}: {err}"
        );
    }
}

/// `-L` before `--`, after it and without `--` is the source address: the server's
/// log names each test's source, and the banner the data connection's.
#[test]
fn l_is_the_source_address_on_either_side() {
    let port = free_port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let _serve = common::KillOnDrop(
        Command::new(bin())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap(),
    );
    wait_listening("127.0.0.1", port, None);
    let p = port.to_string();
    let cases: [(&str, Vec<&str>); 3] = [
        (
            "127.0.0.2",
            vec!["-L", "127.0.0.2", "--", "-o", "THROUGHPUT"],
        ),
        (
            "127.0.0.3",
            vec!["--", "-L", "127.0.0.3", "-o", "THROUGHPUT"],
        ),
        ("127.0.0.4", vec!["-L", "127.0.0.4", "-o", "THROUGHPUT"]),
    ];
    for (addr, extra) in cases {
        let o = Command::new(bin())
            .args([
                "rr",
                "-H",
                "127.0.0.1",
                "-p",
                &p,
                "-t",
                "TCP_RR",
                "-l",
                "0.3",
            ])
            .args(&extra)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        if extra.contains(&"--") {
            assert!(
                out.starts_with(&format!(
                    "rttlab TCP REQUEST/RESPONSE TEST from {addr} port "
                )),
                "{out}"
            );
        }
        let t0 = Instant::now();
        loop {
            let seen = std::fs::read_to_string(log.path()).unwrap();
            if seen.contains(&format!(": {addr}:")) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "server saw no {addr}: {seen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A netperf option pasted without its `--`: rr has no such letter, and the one line
/// says what netperf means by it on each side of `--` and what rr does with it there,
/// exit 2, nothing measured. Witness: netperf 2.7's option tables (`src/netsh.c`, the
/// global `-s` a sleep before the test; `src/nettest_omni.c`, the test-specific `-s`
/// the socket buffer sizes), as this file's pasted lines check them on the wire.
#[test]
fn a_netperf_option_without_its_split_says_what_netperf_means() {
    let o = Command::new(bin())
        .args(["rr", "-t", "TCP_RR", "-s", "128K", "-l", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    for said in [
        "rr has no -s",
        "global -s (a sleep before the test)",
        "test-specific -s, which rr reads as --sndbuf 131072 --rcvbuf 131072",
    ] {
        assert!(err.contains(said), "{said}: {err}");
    }
    // A letter netperf has on neither side keeps clap's own message.
    let o = Command::new(bin())
        .args(["rr", "-Q", "3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '-Q'"), "{err}");
}
