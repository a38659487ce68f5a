//! netperf's command line for `rttlab rr`, so that a netperf command can be pasted
//! with `netperf` replaced by `rttlab rr`.
//!
//! netperf splits its options at `--`: global options before it, the test's own
//! after it, and some letters mean one thing on one side and another on the other
//! (`-P 0` before `--` turns the banner off, `-P 65432` after it fixes the data
//! ports; `-o` before it is a buffer offset, after it the output selectors). When an
//! `rr` command line has a `--`, its short options are read by that rule, netperf's
//! meanings, and rewritten into rttlab's long spellings before clap sees them; long
//! options pass through on either side. Without `--` nothing is rewritten: rttlab's
//! own short options keep their meanings (`-P` the data port, `-o` rttlab's
//! selector lines).
//!
//! Values are read as netperf reads them (netperf 2.7, `src/netsh.c` and
//! `src/nettest_omni.c`): a pair `A,B` where one value without a comma sets both
//! (`-r 64`, `-P 65432`, `-T 1`, `-s 128K`) or only the first (`-w`, `-b`, `-H`,
//! `-L`, `-p`, `-D`), as netperf decides per option; sizes with netperf's suffixes
//! (K = 2^10, k = 10^3); `-w` in milliseconds unless it says `u` or `s`, and `-b`
//! without a `-w` before it pacing every millisecond; a negative `-l` is a count of
//! transactions; `-i` floored at 3 and capped at 30, and `-i` alone asking `-I 99,5`.
//!
//! A netperf option rttlab does not do is refused with one line naming it and what
//! to use instead (exit 2), never ignored; the few accepted with no effect are those
//! whose effect rttlab always has (`-j` keeps the latency statistics, `-r` takes the
//! confidence from throughput alone, test-specific `-D` sets TCP_NODELAY, `-n` a
//! connected UDP socket).

use std::ffi::OsString;

/// `argv` as clap should read it: an `rttlab rr` line with a `--` rewritten from
/// netperf's options; every other line unchanged.
///
/// # Errors
/// A netperf option rttlab does not do, or a value netperf would read otherwise than
/// rttlab could: one line naming it and what to use instead.
pub fn argv(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let is_rr = args.get(1).is_some_and(|a| a == "rr");
    let split = args.iter().skip(2).position(|a| a == "--");
    let (Some(split), true) = (split, is_rr) else {
        return Ok(args);
    };
    let Some(strings) = args
        .iter()
        .map(|a| a.to_str().map(str::to_owned))
        .collect::<Option<Vec<String>>>()
    else {
        return Ok(args);
    };
    let (global, test) = strings[2..].split_at(split);
    let mut out: Vec<String> = strings[..2].to_vec();
    out.extend(translate(global, &test[1..])?);
    Ok(out.into_iter().map(OsString::from).collect())
}

/// What netperf means by `arg`, a short option an `rr` line without `--` gave and rr
/// does not take (`next`: the word after it, its value if it takes one): netperf's
/// global option of that letter and its test-specific one, each with what rr does
/// with it in a line with `--`. `None` for a letter netperf has on neither side.
pub fn unknown_option(arg: &str, next: Option<&str>) -> Option<String> {
    let rest = arg.strip_prefix('-').filter(|r| !r.starts_with('-'))?;
    let c = rest.chars().next()?;
    let attached = &rest[c.len_utf8()..];
    let value = match (
        attached.is_empty(),
        GLOBAL_WITH_ARG.contains(c) || TEST_WITH_ARG.contains(c),
    ) {
        (false, _) => attached.to_string(),
        (true, true) => next.unwrap_or_default().to_string(),
        (true, false) => String::new(),
    };
    let unknown = |e: &str| e.contains("is not one of netperf's");
    let said = |line: Line, side: &str| -> String {
        if line.out.is_empty() {
            format!("netperf's {side} -{c}, which rr always does")
        } else {
            format!(
                "netperf's {side} -{c}, which rr reads as {}",
                line.out.join(" ")
            )
        }
    };
    let mut line = Line::default();
    let global = match global_option(&mut line, c, value.clone()) {
        Ok(()) => Some(said(line, "global")),
        Err(e) => (!unknown(&e)).then_some(e),
    };
    let mut line = Line::default();
    let test = match test_option(&mut line, c, Some(value.clone())) {
        Ok(()) => Some(said(line, "test-specific")),
        Err(e) => (!unknown(&e)).then_some(e),
    };
    if global.is_none() && test.is_none() {
        return None;
    }
    let shown = if value.is_empty() {
        format!("-{c}")
    } else {
        format!("-{c} {value}")
    };
    let side = |s: Option<String>| s.unwrap_or_else(|| format!("netperf has no -{c} there"));
    Some(format!(
        "{shown}: rr has no -{c}; netperf's letters are read as netperf's in a line with -- (rttlab rr [GLOBAL] -- {shown}). Before --: {}. After --: {}",
        side(global),
        side(test)
    ))
}

/// What the two halves leave to be written once both are read.
#[derive(Default)]
struct Line {
    out: Vec<String>,
    host: Option<String>,
    bind: Option<String>,
    /// `-w`'s interval in µs as netperf keeps it (negative: no wait).
    interval_us: Option<i64>,
    confidence: bool,
    iterations: bool,
}

impl Line {
    fn push(&mut self, flag: &str, value: impl Into<String>) {
        self.out.push(flag.into());
        self.out.push(value.into());
    }

    fn flag(&mut self, flag: &str) {
        self.out.push(flag.into());
    }

    fn family(&mut self, fam: &str, option: &str) -> Result<(), String> {
        match fam {
            "" | "0" | "AF_UNSPEC" | "unspec" => {}
            "4" | "inet" | "AF_INET" => self.flag("-4"),
            "6" | "inet6" | "AF_INET6" => self.flag("-6"),
            _ => {
                return Err(format!(
                    "{option}: {fam:?} is not an address family (4 or 6)"
                ))
            }
        }
        Ok(())
    }

    /// Global and test-specific `-L` are one `--bind`: rttlab sends control and data
    /// from one address.
    fn bind(&mut self, addr: &str, option: &str) -> Result<(), String> {
        if let Some(b) = &self.bind {
            if b != addr {
                return Err(format!("{option} {addr}: rttlab binds control and data to one address, and -L {b} was given too; use one --bind ADDR"));
            }
            return Ok(());
        }
        self.bind = Some(addr.to_owned());
        self.push("--bind", addr);
        Ok(())
    }
}

fn translate(global: &[String], test: &[String]) -> Result<Vec<String>, String> {
    let mut line = Line::default();
    let mut args = Getopt::new(global, GLOBAL_WITH_ARG, "");
    while let Some(o) = args.next()? {
        match o {
            Opt::Long(a) => line.out.extend(a),
            Opt::Short(c, v) => global_option(&mut line, c, v.unwrap_or_default())?,
        }
    }
    if let Some(us) = line.interval_us {
        line.push("--interval", format!("{}us", us.max(0)));
    }
    if line.iterations && !line.confidence {
        line.push("-I", "99,5");
    }
    let mut args = Getopt::new(test, TEST_WITH_ARG, "oO");
    while let Some(o) = args.next()? {
        match o {
            Opt::Long(a) if a[0] == "--" => {
                return Err(
                    "a second --: netperf's global options come before --, the test's after it"
                        .into(),
                )
            }
            Opt::Long(a) => line.out.extend(a),
            Opt::Short(c, v) => test_option(&mut line, c, v)?,
        }
    }
    Ok(line.out)
}

/// netperf's global options that take a value (its `GLOBAL_CMD_LINE_ARGS`).
const GLOBAL_WITH_ARG: &str = "AabBDfFHiIkKlLnOoPpstTvWwyYZ";
/// The test-specific ones (`OMNI_ARGS`); `-o`/`-O` take one only if it follows.
const TEST_WITH_ARG: &str = "bdeGHijKlLmMpPqrRsStTuwW";

fn global_option(line: &mut Line, c: char, v: String) -> Result<(), String> {
    let refuse = |what: &str, instead: &str| {
        Err(format!(
            "netperf's global -{c} ({what}) is not something rttlab rr does: {instead}"
        ))
    };
    match c {
        'H' => {
            let (host, fam) = explicit(&v);
            if !host.is_empty() {
                line.host = Some(host.to_owned());
                line.push("-H", host);
            }
            line.family(fam, "-H")?;
        }
        'L' => {
            let (addr, fam) = explicit(&v);
            if !addr.is_empty() {
                line.bind(addr, "-L")?;
            }
            line.family(fam, "-L")?;
        }
        't' => line.push("--test", v),
        'l' => match v.trim().parse::<i64>() {
            Ok(n) if n < 0 => line.push("--count", n.unsigned_abs().to_string()),
            _ => line.push("--duration", v),
        },
        'w' => {
            let (w, remote) = explicit(&v);
            if !remote.is_empty() {
                return refuse(
                    "the server's own interval after a comma",
                    "rttlab's server answers each request as it comes; give -w one value",
                );
            }
            line.interval_us = Some(timespec_us(w)?);
        }
        'b' => {
            let (b, remote) = explicit(&v);
            if !remote.is_empty() {
                return refuse(
                    "the server's own burst after a comma",
                    "give -b one value",
                );
            }
            line.push("--burst", size(b, "-b")?.to_string());
            // netsh.c: a burst with no interval yet paces every millisecond.
            if line.interval_us.unwrap_or(0) == 0 {
                line.interval_us = Some(1000);
            }
        }
        'P' => match v.trim() {
            "0" => line.flag("--no-banner"),
            "1" => {}
            _ => {
                return Err(format!(
                    "-P {v} before --: netperf's global -P is the banner, 0 or 1; the data ports go after --: -- -P LOCAL,REMOTE (e.g. -- -P ,{v})"
                ))
            }
        },
        'T' => {
            let (l, r) = both(&v);
            line.push("-T", format!("{l},{r}"));
        }
        'c' => line.flag("--local-cpu"),
        'C' => line.flag("--remote-cpu"),
        'I' => {
            let (level, width) = both(&v);
            line.confidence = true;
            line.push("-I", format!("{level},{width}"));
        }
        'i' => {
            let (a, b) = both(&v);
            // An empty side keeps netperf's initial 1, raised to 3 below.
            let count = |x: &str| if x.trim().is_empty() { Ok(1) } else { size(x, "-i") };
            let (mut max, mut min) = (count(a)?, count(b)?);
            // netsh.c: max at least min, both at least 3; the manual: max at most 30.
            max = max.max(min).clamp(3, 30);
            min = min.clamp(3, max);
            line.iterations = true;
            line.push("-i", format!("{max},{min}"));
        }
        'D' => {
            let (secs, _units) = explicit(&v);
            if secs.trim_start().starts_with('-') {
                return refuse(
                    "a negative interval: interim results timestamped on every unit",
                    "give -D SECONDS",
                );
            }
            // The units are netperf's first guess of the work per interval, to spare
            // clock reads; rttlab reads the clock, so they change nothing.
            line.push("--interim", secs);
        }
        'B' => line.push("--brand", v),
        'p' => {
            let (port, local) = explicit(&v);
            if !local.is_empty() {
                return refuse(
                    "the control connection's local port after a comma",
                    "rttlab's control connection takes any local port; give -p PORT",
                );
            }
            line.push("--port", port);
        }
        '4' | '6' => line.flag(&format!("-{c}")),
        'h' => line.flag("--help"),
        // Accepted with no effect: rttlab does this always.
        'j' | 'r' => {}
        'a' | 'A' => return refuse("buffer alignment", "rttlab does not align its buffers on request"),
        'd' => return refuse("debug output", "--json carries every measurement and setting"),
        'f' => return refuse("throughput units", "rr reports transactions per second (THROUGHPUT_UNITS Trans/s)"),
        'F' => return refuse("a fill file for the buffers", "rttlab's requests carry its own bytes"),
        'k' | 'K' => return refuse("dirty/clean buffer counts", "not supported"),
        'n' => return refuse("the CPU count for CPU utilisation", "rttlab counts the CPUs online; a number of transactions is -l -N or --count N"),
        'N' => return refuse("no control connection", "rttlab rr needs `rttlab serve` at -H (or none: an in-process server)"),
        'o' | 'O' => return refuse("a buffer offset", "output selectors go after --: -- -o LIST or -- -O LIST"),
        's' => return refuse("a sleep before the test", "not supported"),
        'S' => return refuse("SO_KEEPALIVE on the data socket", "not supported"),
        'v' => return refuse("verbosity", "-- -o THROUGHPUT for the single figure, --histogram for the histogram"),
        'V' => return refuse("the version", "rttlab --version"),
        'W' => return refuse("the buffer ring's width", "not supported"),
        'y' => return refuse("SO_PRIORITY", "not supported"),
        'Y' => return refuse("the IP TOS", "--tos BYTE or --dscp N, which both ends use"),
        'Z' => return refuse("a passphrase", "--secret-file FILE, as `rttlab serve` takes it"),
        _ => return Err(format!("-{c} is not one of netperf's global options (before --)")),
    }
    Ok(())
}

fn test_option(line: &mut Line, c: char, v: Option<String>) -> Result<(), String> {
    let refuse = |what: &str, instead: &str| {
        Err(format!(
            "netperf's test-specific -{c} ({what}) is not something rttlab rr does: {instead}"
        ))
    };
    let v_or_empty = v.clone().unwrap_or_default();
    match c {
        'r' => {
            // nettest_omni.c: one value sets both; the defaults are 1 byte each.
            let (req, resp) = both(&v_or_empty);
            let req = if req.is_empty() { 1 } else { size(req, "-r")? };
            let resp = if resp.is_empty() {
                1
            } else {
                size(resp, "-r")?
            };
            line.push("--sizes", format!("{req},{resp}"));
        }
        'o' | 'O' => {
            let Some(list) = v else {
                return refuse(
                    "netperf's default selection, its socket buffer sizes among them",
                    "name the selectors, e.g. -o MIN_LATENCY,MEAN_LATENCY,P99_LATENCY,THROUGHPUT",
                );
            };
            if list.eq_ignore_ascii_case("all") || list.contains(';') {
                return refuse(
                    "`all`, or blocks separated by `;`",
                    "list the selectors separated by commas",
                );
            }
            let flag = if c == 'o' {
                "--netperf-csv"
            } else {
                "--netperf-columns"
            };
            line.push(flag, list);
        }
        'P' => {
            let (local, remote) = both(&v_or_empty);
            for (port, flag) in [(local, "--local-data-port"), (remote, "--data-port")] {
                if port.trim().is_empty() {
                    continue;
                }
                let p: u16 = port
                    .trim()
                    .parse()
                    .map_err(|_| format!("-P {v_or_empty}: {port:?} is not a port"))?;
                if p != 0 {
                    line.push(flag, p.to_string());
                }
            }
        }
        's' => {
            let (snd, rcv) = both(&v_or_empty);
            for (v, flag) in [(snd, "--sndbuf"), (rcv, "--rcvbuf")] {
                if !v.trim().is_empty() {
                    line.push(flag, size(v, "-s")?.to_string());
                }
            }
        }
        'L' => {
            let (addr, fam) = explicit(&v_or_empty);
            if addr.contains('/') {
                return refuse("a random source address within a mask", "give one address");
            }
            if !addr.is_empty() {
                line.bind(addr, "-- -L")?;
            }
            line.family(fam, "-- -L")?;
        }
        'H' => {
            let (host, fam) = explicit(&v_or_empty);
            if host.is_empty() || line.host.as_deref() == Some(host) {
                line.family(fam, "-- -H")?;
            } else {
                return refuse(
                    "a data connection to another host than the control connection's",
                    "the data connection goes to the -H server; give the host as -H before --",
                );
            }
        }
        'K' => {
            let (local, remote) = both(&v_or_empty);
            if local != remote {
                return refuse(
                    "different congestion controls at each end",
                    "--cc NAME sets one for both ends' data sockets",
                );
            }
            line.push("--cc", local);
        }
        '4' | '6' => line.flag(&format!("-{c}")),
        'h' => line.flag("--help"),
        // Accepted with no effect: rttlab does this always (both ends' data sockets
        // have TCP_NODELAY; the client's UDP socket is connected).
        'D' | 'n' => {}
        'S' => {
            return refuse(
                "the server's socket buffers",
                "rttlab sets the client's only: -- -s SIZE or --sndbuf/--rcvbuf",
            )
        }
        'b' => {
            return refuse(
                "an initial burst of requests in flight",
                "-b N -w INTERVAL before -- for a burst every interval, or --rate for an open loop",
            )
        }
        'm' | 'M' => {
            return refuse(
                "the send/receive size of a _STREAM test",
                "rr sizes requests and responses with -- -r REQ,RESP",
            )
        }
        'c' => return refuse("an explicit connection test", "-t TCP_CRR"),
        'C' => return refuse("TCP_CORK", "not supported"),
        'd' => return refuse("the test's direction", "rr tests are request/response"),
        'e' => return refuse("a receive timeout", "--timeout DURATION (UDP_RR)"),
        'f' | 'F' | 'g' | 'G' | 'B' | 'a' | 'V' | 'U' => {
            return refuse("a socket option rttlab does not set", "not supported")
        }
        'i' | 'I' | 'j' | 'l' | 'q' | 'R' | 'u' | 'W' => {
            return refuse("an omni option rttlab does not have", "not supported")
        }
        'k' => return refuse("keyword=value output", "-- -o LIST for CSV, or --json"),
        'N' => return refuse("a connected UDP socket at the server", "not supported"),
        'p' => return refuse("TCP_CRR's range of client ports", "not supported"),
        't' | 'T' => {
            return refuse(
                "the socket type or protocol",
                "-t TCP_RR, UDP_RR or TCP_CRR before --",
            )
        }
        _ => {
            return Err(format!(
                "-{c} is not one of netperf's test-specific options (after --)"
            ))
        }
    }
    Ok(())
}

/// One option as getopt(3) hands it over.
enum Opt {
    /// `-x` with its value, if it takes one.
    Short(char, Option<String>),
    /// `--long` and its value if that is the next word: rttlab's own, passed on;
    /// or `--` itself.
    Long(Vec<String>),
}

/// getopt(3) over one half of the line: letters may be grouped (`-cC`), a value may
/// be glued (`-l10`) or the next word (`-l -10`: a required value is taken whatever
/// it looks like); `optional` letters take the next word only when it does not start
/// with `-` (netperf's `-o [LIST]`).
struct Getopt<'a> {
    words: &'a [String],
    i: usize,
    pending: Vec<char>,
    with_arg: &'static str,
    optional: &'static str,
}

impl<'a> Getopt<'a> {
    fn new(words: &'a [String], with_arg: &'static str, optional: &'static str) -> Self {
        Self {
            words,
            i: 0,
            pending: Vec::new(),
            with_arg,
            optional,
        }
    }

    fn next(&mut self) -> Result<Option<Opt>, String> {
        if self.pending.is_empty() {
            let Some(w) = self.words.get(self.i) else {
                return Ok(None);
            };
            self.i += 1;
            if w.starts_with("--") {
                // rttlab's own; a word after it that is not an option is its value.
                let mut long = vec![w.clone()];
                if w.len() > 2 && !w.contains('=') {
                    if let Some(v) = self.words.get(self.i).filter(|v| !v.starts_with('-')) {
                        long.push(v.clone());
                        self.i += 1;
                    }
                }
                return Ok(Some(Opt::Long(long)));
            }
            let Some(letters) = w.strip_prefix('-').filter(|l| !l.is_empty()) else {
                return Err(format!(
                    "{w:?} is not an option: netperf's global options come before --, the test's after it (e.g. -- -r 1,2)"
                ));
            };
            self.pending = letters.chars().rev().collect();
        }
        let c = self.pending.pop().unwrap_or('?');
        if self.with_arg.contains(c) {
            let glued: String = self.pending.drain(..).rev().collect();
            let value = if glued.is_empty() {
                let v = self
                    .words
                    .get(self.i)
                    .ok_or_else(|| format!("-{c} needs a value"))?;
                self.i += 1;
                v.clone()
            } else {
                glued
            };
            return Ok(Some(Opt::Short(c, Some(value))));
        }
        if self.optional.contains(c) && self.pending.is_empty() {
            let value = self
                .words
                .get(self.i)
                .filter(|w| !w.starts_with('-'))
                .cloned();
            if value.is_some() {
                self.i += 1;
            }
            return Ok(Some(Opt::Short(c, value)));
        }
        Ok(Some(Opt::Short(c, None)))
    }
}

/// netsh.c's `break_args`: `A,B`; one value without a comma sets both.
fn both(v: &str) -> (&str, &str) {
    v.split_once(',').unwrap_or((v, v))
}

/// `break_args_explicit`: `A,B`; one value sets only the first.
fn explicit(v: &str) -> (&str, &str) {
    v.split_once(',').unwrap_or((v, ""))
}

/// netlib.c's `convert`: a whole number of bytes, times 2^10/2^20/2^30 for K/M/G and
/// 10^3/10^6/10^9 for k/m/g.
fn size(v: &str, option: &str) -> Result<u64, String> {
    let t = v.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| {
        format!(
            "{option} {v}: {t:?} is not a whole number (netperf reads K, M, G, k, m, g after it)"
        )
    })?;
    let mult: u64 = match suffix {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "k" => 1_000,
        "m" => 1_000_000,
        "g" => 1_000_000_000,
        _ => {
            return Err(format!(
                "{option} {v}: {suffix:?} is not one of netperf's units (K, M, G, k, m, g)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{option} {v}: too large"))
}

/// netlib.c's `convert_timespec`: a whole number, in ms if the value has an `m`
/// anywhere, else µs with a `u`, s with an `s`, and ms with nothing (netperf's old
/// default), as µs. A fraction netperf would cut to its whole part is refused.
fn timespec_us(v: &str) -> Result<i64, String> {
    let t = v.trim();
    let body = t.strip_prefix('-').unwrap_or(t);
    let digits = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(digits);
    if num.is_empty() || suffix.contains(|c: char| !c.is_ascii_alphabetic()) {
        return Err(format!(
            "-w {v}: netperf reads a whole number with m, u or s after it (it would read 1.5ms as 1 ms); write e.g. -w 10ms, or --interval 1.5ms"
        ));
    }
    let n: i64 = num.parse().map_err(|_| format!("-w {v}: too large"))?;
    let n = if t.starts_with('-') { -n } else { n };
    let per = if suffix.contains('m') {
        1_000
    } else if suffix.contains('u') {
        1
    } else if suffix.contains('s') {
        1_000_000
    } else {
        1_000
    };
    n.checked_mul(per)
        .ok_or_else(|| format!("-w {v}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(line: &str) -> Result<String, String> {
        let args = line.split(' ').map(OsString::from).collect();
        argv(args).map(|v| {
            v.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
    }

    /// Witness: netperf 2.7's own reading of each option (netsh.c, nettest_omni.c),
    /// written out as the rttlab options with the same effect.
    #[test]
    fn netperf_lines_become_rttlab_lines() {
        let cases = [
            (
                "rttlab rr -H h -t TCP_RR -l 10 -- -r 1,2 -o min_latency,P99_LATENCY -P 13500",
                "rttlab rr -H h --test TCP_RR --duration 10 --sizes 1,2 --netperf-csv min_latency,P99_LATENCY --local-data-port 13500 --data-port 13500",
            ),
            (
                "rttlab rr -H h -t TCP_RR -w 10ms -b 1 -- -r 1,2 -P ,65432",
                "rttlab rr -H h --test TCP_RR --burst 1 --interval 10000us --sizes 1,2 --data-port 65432",
            ),
            // Seed 000: -w -1m is no wait; -P 0 no banner; -b alone paces every ms.
            (
                "rttlab rr -P 0 -t TCP_RR -H boulder -l 900 -w -1m -b 1 -- -r 1409,2",
                "rttlab rr --no-banner --test TCP_RR -H boulder --duration 900 --burst 1 --interval 0us --sizes 1409,2",
            ),
            ("rttlab rr -b 4 -- -r 64", "rttlab rr --burst 4 --interval 1000us --sizes 64,64"),
            ("rttlab rr -w 250u -- -r ,2", "rttlab rr --interval 250us --sizes 1,2"),
            ("rttlab rr -w 2 --", "rttlab rr --interval 2000us"),
            ("rttlab rr -l -1000 -T 1 -cC --", "rttlab rr --count 1000 -T 1,1 --local-cpu --remote-cpu"),
            ("rttlab rr -i 50,1 --", "rttlab rr -i 30,3 -I 99,5"),
            ("rttlab rr -I 95,10 -i 5 --", "rttlab rr -I 95,10 -i 5,5"),
            ("rttlab rr -D 1,1000 -j -r --", "rttlab rr --interim 1"),
            ("rttlab rr -H ::1,6 -L ::1 -p 12900 -- -L ::1 -D", "rttlab rr -H ::1 -6 --bind ::1 --port 12900"),
            ("rttlab rr -- -s ,1M -P 20000,", "rttlab rr --rcvbuf 1048576 --local-data-port 20000"),
            ("rttlab rr -- -s 64K -O THROUGHPUT -K cubic", "rttlab rr --sndbuf 65536 --rcvbuf 65536 --netperf-columns THROUGHPUT --cc cubic"),
            ("rttlab rr -l5 --anatomy -- -r 2k,1 --json", "rttlab rr --duration 5 --anatomy --sizes 2000,1 --json"),
            ("rttlab rr --dscp 46 -t TCP_CRR -- --pace=spin --slow-log f -r 1", "rttlab rr --dscp 46 --test TCP_CRR --pace=spin --slow-log f --sizes 1,1"),
            // Without -- nothing changes: rttlab's own -P and -o.
            ("rttlab rr -P 20000 -o P50_LATENCY", "rttlab rr -P 20000 -o P50_LATENCY"),
            ("rttlab ping -- x", "rttlab ping -- x"),
        ];
        for (netperf, rttlab) in cases {
            assert_eq!(rr(netperf).as_deref(), Ok(rttlab), "{netperf}");
        }
    }

    /// Every refusal is one line that names the option; witness: the line itself.
    #[test]
    fn what_rttlab_does_not_do_is_refused_by_name() {
        let cases = [
            ("rttlab rr -P 65432 -- -r 1,2", "-P 65432 before --"),
            ("rttlab rr -n 4 --", "global -n"),
            ("rttlab rr -o X --", "global -o"),
            ("rttlab rr -v 2 --", "global -v"),
            ("rttlab rr -Y ef --", "--tos"),
            ("rttlab rr -w 10ms,5ms --", "global -w"),
            ("rttlab rr -w 1.5ms --", "--interval 1.5ms"),
            ("rttlab rr -p 12865,5000 --", "global -p"),
            ("rttlab rr -r 1,2 --", "\"1,2\" is not an option"),
            ("rttlab rr -- -S 64K", "test-specific -S"),
            ("rttlab rr -- -b 4", "test-specific -b"),
            ("rttlab rr -- -k", "test-specific -k"),
            ("rttlab rr -- -o", "name the selectors"),
            ("rttlab rr -- -O all", "`all`"),
            ("rttlab rr -- -m 64", "test-specific -m"),
            ("rttlab rr -- -K cubic,bbr", "--cc"),
            ("rttlab rr -H a -- -H b", "test-specific -H"),
            ("rttlab rr -L 127.0.0.1 -- -L 127.0.0.2", "one --bind"),
            ("rttlab rr -- -r 1.5K", "-r 1.5K"),
            ("rttlab rr -- -r 1 -- -o X", "second --"),
            ("rttlab rr -x --", "-x is not one of netperf's global"),
        ];
        for (line, says) in cases {
            let e = rr(line).expect_err(line);
            assert!(e.contains(says) && !e.contains('\n'), "{line}: {e}");
        }
    }

    #[test]
    fn sizes_and_intervals_read_as_netperf_reads_them() {
        assert_eq!(size("128K", "-s"), Ok(131_072));
        assert_eq!(size("2m", "-s"), Ok(2_000_000));
        assert!(size("-1", "-s").is_err());
        assert_eq!(timespec_us("10ms"), Ok(10_000));
        assert_eq!(timespec_us("5m"), Ok(5_000));
        assert_eq!(timespec_us("100us"), Ok(100));
        assert_eq!(timespec_us("2s"), Ok(2_000_000));
        assert_eq!(timespec_us("7"), Ok(7_000));
        assert_eq!(timespec_us("-1m"), Ok(-1_000));
        assert!(timespec_us("ms").is_err());
    }
}
