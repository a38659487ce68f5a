//! Parsers for command-line values: durations, rates, lists. Errors name the value
//! and the expected form.

use std::time::Duration;

/// A duration: `0`, `250us`, `250µs`, `10ms`, `1.5s`, `2m`, `500ns` (humantime forms
/// too). A bare number is taken in `bare_unit`.
///
/// # Errors
/// Not a duration, or negative.
pub fn duration_with(s: &str, bare_unit: Duration) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative; durations are ≥ 0"));
    }
    if let Ok(x) = t.parse::<f64>() {
        if !x.is_finite() {
            return Err(format!("{s:?} is not a duration"));
        }
        return Ok(bare_unit.mul_f64(x));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let factor_ns: f64 = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" | "usec" => 1e3,
        "ms" | "msec" => 1e6,
        "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => {
            return humantime::parse_duration(t)
                .map_err(|e| format!("{s:?} is not a duration ({e}); use e.g. 250us, 10ms, 1.5s"))
        }
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration; use e.g. 250us, 10ms, 1.5s"))?;
    Ok(Duration::from_nanos((x * factor_ns).round() as u64))
}

/// A duration where a bare number means seconds (netperf's `-l`).
///
/// # Errors
/// As [`duration_with`].
pub fn seconds(s: &str) -> Result<Duration, String> {
    duration_with(s, Duration::from_secs(1))
}

/// A duration that needs its unit, except `0`.
///
/// # Errors
/// As [`duration_with`], or a bare non-zero number.
pub fn duration(s: &str) -> Result<Duration, String> {
    if s.trim().parse::<f64>().is_ok_and(|x| x != 0.0) {
        return Err(format!("{s:?} needs a unit: e.g. {s}ms or {s}us"));
    }
    duration_with(s, Duration::ZERO)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("10ms").unwrap(), Duration::from_millis(10));
        assert_eq!(duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(duration("250µs").unwrap(), Duration::from_micros(250));
        assert_eq!(duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(duration("0").unwrap(), Duration::ZERO);
        assert!(duration("10").is_err());
        assert!(duration("-1ms").is_err());
        assert!(duration("fast").is_err());
        assert_eq!(seconds("10").unwrap(), Duration::from_secs(10));
        assert_eq!(seconds("0.5").unwrap(), Duration::from_millis(500));
    }

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
}
