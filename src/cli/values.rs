//! Parsers for command-line values: durations, rates, lists. Errors name the value
//! and the expected form.

pub use rttlab::stats::units::{parse_duration as duration, parse_seconds as seconds};

/// `REQ,RESP` sizes in bytes (netperf's `-r 1,1`); one number sets both.
///
/// # Errors
/// Not one or two positive integers.
pub fn sizes(s: &str) -> Result<(u32, u32), String> {
    let parse = |x: &str| {
        x.trim()
            .parse::<u32>()
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| format!("{x:?} is not a size in bytes (1 or more)"))
    };
    match s.split_once(',') {
        Some((a, b)) => Ok((parse(a)?, parse(b)?)),
        None => parse(s).map(|v| (v, v)),
    }
}

/// `LCPU,RCPU`, either side may be empty (netperf's `-T`).
///
/// # Errors
/// Not CPU numbers.
pub fn cpu_pair(s: &str) -> Result<(Option<usize>, Option<usize>), String> {
    let one = |x: &str| -> Result<Option<usize>, String> {
        let x = x.trim();
        if x.is_empty() {
            Ok(None)
        } else {
            x.parse()
                .map(Some)
                .map_err(|_| format!("{x:?} is not a CPU number"))
        }
    };
    match s.split_once(',') {
        Some((a, b)) => Ok((one(a)?, one(b)?)),
        None => Ok((one(s)?, None)),
    }
}

/// A rate: `1000`, `1000/s`, `50k/s`.
///
/// # Errors
/// Not a positive rate.
pub fn rate(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches("/s");
    let (num, mult) = match t.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1e3),
        None => (t, 1.0),
    };
    num.parse::<f64>()
        .ok()
        .map(|x| x * mult)
        .filter(|x| x.is_finite() && *x > 0.0 && *x <= 10e6)
        .ok_or_else(|| format!("{s:?} is not a rate; use e.g. 1000/s or 50k/s (at most 10M/s)"))
}

/// A loss-injection ratio `1/N` or `N`.
///
/// # Errors
/// Not a positive N.
pub fn one_in(s: &str) -> Result<u32, String> {
    let t = s.trim().strip_prefix("1/").unwrap_or(s.trim());
    t.parse::<u32>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{s:?} is not 1/N with N ≥ 1"))
}

/// A percentage `5%` or `5` (netem's form) as a fraction in [0, 1].
///
/// # Errors
/// Not a number, or outside 0–100 %.
pub fn percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    t.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && (0.0..=100.0).contains(x))
        .map(|x| x / 100.0)
        .ok_or_else(|| format!("{s:?} is not a percentage between 0% and 100%"))
}

/// A link rate in tc's units: `10mbit`, `500kbit`, `1gbit`, `64000bit`, or bytes per
/// second `1mbps`/`100kbps`/`bps`; `none` (or `0`) for no limit.
///
/// # Errors
/// An unknown unit or a negative number.
pub fn bitrate(s: &str) -> Result<Option<u64>, String> {
    let t = s.trim().to_ascii_lowercase();
    if t == "none" || t == "0" {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult = match unit.trim().trim_end_matches("/s") {
        "bit" | "" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => {
            return Err(format!(
                "{s:?} is not a rate; use e.g. 10mbit, 500kbit, 1gbit or none"
            ))
        }
    };
    num.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .map(|x| Some((x * mult).round() as u64))
        .ok_or_else(|| format!("{s:?} is not a positive rate; use e.g. 10mbit or none"))
}

/// `100kB` → (100, "kB"): a number of at least 1 and the unit after it (trimmed).
fn number_and_unit(s: &str) -> Option<(f64, &str)> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .ok()
        .filter(|x: &f64| x.is_finite() && *x >= 1.0)?;
    Some((x, unit.trim()))
}

/// A queue limit: bytes `100kB` (kB = 1000, KiB = 1024, MB, B) or packets `1000p`
/// (`pkt`, `packets`).
///
/// # Errors
/// An unknown unit, zero, or not a number.
pub fn queue(s: &str) -> Result<rttlab::lab::impair::QueueLimit, String> {
    use rttlab::lab::impair::QueueLimit;
    let (x, unit) = number_and_unit(s)
        .ok_or_else(|| format!("{s:?} is not a queue size; use e.g. 100kB or 1000p"))?;
    let bytes = |m: f64| Ok(QueueLimit::Bytes((x * m).round() as u64));
    match unit {
        "p" | "pkt" | "pkts" | "packets" => Ok(QueueLimit::Packets(x.round() as u64)),
        "" | "b" | "B" => bytes(1.0),
        "kB" | "KB" | "kb" => bytes(1e3),
        "KiB" | "kiB" => bytes(1024.0),
        "MB" | "mb" => bytes(1e6),
        "MiB" => bytes(1024.0 * 1024.0),
        _ => Err(format!(
            "{s:?} has an unknown unit; use B, kB, KiB, MB or p (packets)"
        )),
    }
}

/// A memory size: `512MiB`, `2GiB`, `100MB`, or bare bytes.
///
/// # Errors
/// An unknown unit, zero, or not a number.
pub fn bytes(s: &str) -> Result<u64, String> {
    let (x, unit) =
        number_and_unit(s).ok_or_else(|| format!("{s:?} is not a size; use e.g. 512MiB"))?;
    let m = match unit {
        "" | "B" => 1.0,
        "kB" | "KB" => 1e3,
        "KiB" => 1024.0,
        "MB" => 1e6,
        "MiB" => 1024.0 * 1024.0,
        "GB" => 1e9,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit; use B, kB, KiB, MB, MiB, GB or GiB"
            ))
        }
    };
    Ok((x * m).round() as u64)
}

/// netem's Gilbert–Elliott loss `P,R[,LOSS_BAD[,LOSS_GOOD]]` in percent (`1%,10%`):
/// P(good→bad), P(bad→good), loss in the bad state (default 100 %), in the good one
/// (default 0 %).
///
/// # Errors
/// Not two to four percentages.
pub fn gemodel(s: &str) -> Result<rttlab::lab::impair::Loss, String> {
    let parts: Vec<f64> = s.split(',').map(percent).collect::<Result<_, _>>()?;
    match parts[..] {
        [p, r] => Ok((p, r, 1.0, 0.0)),
        [p, r, b] => Ok((p, r, b, 0.0)),
        [p, r, b, g] => Ok((p, r, b, g)),
        _ => Err(format!(
            "{s:?}: give P,R[,LOSS_BAD[,LOSS_GOOD]], e.g. 1%,10%"
        )),
    }
    .map(
        |(p, r, loss_bad, loss_good)| rttlab::lab::impair::Loss::GilbertElliott {
            p,
            r,
            loss_bad,
            loss_good,
        },
    )
}

/// A TOS byte, decimal or 0x hex (iputils ping's -Q).
///
/// # Errors
/// Not a number from 0 to 255.
pub fn tos_byte(s: &str) -> Result<u8, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("{s:?} is not a TOS byte (0-255, or 0x00-0xff)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others() {
        assert_eq!(sizes("1,2").unwrap(), (1, 2));
        assert_eq!(sizes("64").unwrap(), (64, 64));
        assert!(sizes("0,1").is_err());
        assert!(sizes("a").is_err());
        assert_eq!(cpu_pair("0,1").unwrap(), (Some(0), Some(1)));
        assert_eq!(cpu_pair(",1").unwrap(), (None, Some(1)));
        assert_eq!(cpu_pair("1").unwrap(), (Some(1), None));
        assert_eq!(rate("50k/s").unwrap(), 50_000.0);
        assert!(rate("0").is_err());
        assert_eq!(one_in("1/10").unwrap(), 10);
        assert!(one_in("1/0").is_err());
    }

    #[test]
    fn link_values() {
        use rttlab::lab::impair::{Loss, QueueLimit};
        assert_eq!(percent("5%").unwrap(), 0.05);
        assert_eq!(percent("0.5").unwrap(), 0.005);
        assert!(percent("101%").is_err() && percent("-1%").is_err());
        assert_eq!(bitrate("10mbit").unwrap(), Some(10_000_000));
        assert_eq!(bitrate("1Gbit").unwrap(), Some(1_000_000_000));
        assert_eq!(bitrate("100kbps").unwrap(), Some(800_000));
        assert_eq!(bitrate("none").unwrap(), None);
        assert!(bitrate("10 furlongs").is_err() && bitrate("-5mbit").is_err());
        assert_eq!(queue("100kB").unwrap(), QueueLimit::Bytes(100_000));
        assert_eq!(queue("64KiB").unwrap(), QueueLimit::Bytes(65_536));
        assert_eq!(queue("1000p").unwrap(), QueueLimit::Packets(1000));
        assert!(queue("0p").is_err() && queue("10 parsecs").is_err());
        assert_eq!(
            gemodel("1%,10%").unwrap(),
            Loss::GilbertElliott {
                p: 0.01,
                r: 0.1,
                loss_bad: 1.0,
                loss_good: 0.0
            }
        );
        assert!(gemodel("1%").is_err());
    }
}

/// The lab emulator's wait between frames: one flag (`--emulator`) with one default for
/// every command that builds a lab.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Emulator {
    /// Poll while the lab's emulator threads leave a CPU free (a two-host lab on two
    /// or more CPUs), else sleep.
    #[default]
    Auto,
    /// Busy-poll one CPU per link: frames leave within µs of their time.
    Poll,
    /// Sleep in ppoll(2) between frames: no CPU spent, ms-late under load or steal.
    Sleep,
}

impl Emulator {
    /// Whether the emulator busy-polls in a lab with `links` emulated links.
    #[must_use]
    pub fn polls(self, links: usize) -> bool {
        match self {
            Self::Auto => rttlab::lab::polls_by_default(links),
            Self::Poll => true,
            Self::Sleep => false,
        }
    }
}
