//! Quantities and their units: durations as the command line and the config files
//! write them; conversions from a `Duration` to whole units, which saturate (a `u128`
//! cut to `u64` with `as` would wrap a long duration to a short one); and serde
//! adapters that put a unit in its key rather than in its shape
//! (`crate::results::schema`'s convention for every JSON document rttlab writes).

use std::time::Duration;

/// A `Duration` in JSON as seconds (`"duration_s": 1.5`), the unit in the key
/// (`schema`'s convention); read back from seconds or from serde's own
/// `{"secs", "nanos"}`, which results of rttlab 0.1 hold.
pub mod seconds {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    /// # Errors
    /// Neither form, or a negative or non-finite number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Seconds(f64),
            Serde(Duration),
        }
        match Form::deserialize(d)? {
            Form::Seconds(s) => Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom),
            Form::Serde(d) => Ok(d),
        }
    }
}

/// A `Duration` in JSON as whole microseconds (`"lab_rtt_us": 10000`), the form the
/// lab experiments' settings have always had; a sub-µs remainder is dropped on write.
pub mod micros {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::us(*d))
    }

    /// # Errors
    /// Not a whole, non-negative number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_micros)
    }
}

/// A `Duration` in JSON as whole milliseconds (`"base_rtt_ms": 100`).
pub mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::ms(*d))
    }

    /// # Errors
    /// Not a whole, non-negative number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// A duration: `0`, `250us`, `250µs`, `10ms`, `1.5s`, `2m`, `500ns` (humantime forms
/// too). A bare number is taken in `bare_unit`.
///
/// # Errors
/// Not a duration, or negative.
pub fn parse_duration_with(s: &str, bare_unit: Duration) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative; durations are ≥ 0"));
    }
    if let Ok(x) = t.parse::<f64>() {
        if !x.is_finite() {
            return Err(format!("{s:?} is not a duration"));
        }
        return longest(bare_unit.as_secs_f64() * x, s);
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
                .and_then(|d| longest(d.as_secs_f64(), s))
        }
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration; use e.g. 250us, 10ms, 1.5s"))?;
    longest(x * factor_ns / 1e9, s)
}

/// The longest duration taken: a billion seconds (31 years). Longer ones would
/// overflow a deadline computed from now (`Instant + Duration` panics).
const LONGEST_S: f64 = 1e9;

/// `secs` as a duration, or why not (`s` as given).
fn longest(secs: f64, s: &str) -> Result<Duration, String> {
    if secs > LONGEST_S {
        return Err(format!(
            "{s:?} is too long: at most {LONGEST_S:e} s (31 years)"
        ));
    }
    Ok(Duration::from_nanos((secs * 1e9).round() as u64))
}

/// A duration where a bare number means seconds (netperf's `-l`).
///
/// # Errors
/// As [`parse_duration_with`].
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    parse_duration_with(s, Duration::from_secs(1))
}

/// A duration that needs its unit, except `0`.
///
/// # Errors
/// As [`parse_duration_with`], or a bare non-zero number.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim().parse::<f64>().is_ok_and(|x| x != 0.0) {
        return Err(format!("{s:?} needs a unit: e.g. {s}ms or {s}us"));
    }
    parse_duration_with(s, Duration::ZERO)
}

/// Whole nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Whole microseconds, saturating.
#[inline]
pub fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Whole milliseconds, saturating.
#[inline]
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_too_long_for_a_deadline_is_refused() {
        // Witness: Instant + Duration panics past the clock's range; 1e19 s is there.
        for s in ["1e19", "1e25", "10000000000s", "100000years"] {
            assert!(parse_seconds(s).is_err(), "{s}");
        }
        assert_eq!(parse_seconds("1e9"), Ok(Duration::from_secs(1_000_000_000)));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms").unwrap(), Duration::from_millis(10));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("250µs").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("-1ms").is_err());
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_seconds("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
    }

    /// Witness: arithmetic. A duration past u64's nanoseconds saturates, where `as`
    /// would keep its low 64 bits.
    #[test]
    fn conversions_saturate() {
        let long = Duration::from_secs(u64::MAX);
        assert_eq!(ns(long), u64::MAX);
        assert!((long.as_nanos() as u64) < ns(long));
        assert_eq!(us(long), u64::MAX);
        assert_eq!(ms(long), u64::MAX);
        assert_eq!(ms(Duration::from_micros(2_999)), 2);
        assert_eq!(us(Duration::from_nanos(1_999)), 1);
        assert_eq!(ns(Duration::from_millis(3)), 3_000_000);
    }
}
