//! Text in a chart: escaping, numbers without exponents, durations in SI units, and a
//! conservative guess of how wide a label is drawn, so that labels can be laid out
//! apart without a font file to measure with.

/// The font size of tick labels, legends and axis titles, px.
pub const FONT: f64 = 12.0;

/// Escape text for SVG (XML) content and attributes.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// How wide `s` is drawn at `size` px, erring wide: DejaVu Sans (Debian's sans-serif)
/// draws digits 0.64 em wide and most lower-case letters less; a few wide letters
/// (m, w, capitals) are counted wider still.
pub fn width(s: &str, size: f64) -> f64 {
    s.chars()
        .map(|c| match c {
            'm' | 'w' | 'M' | 'W' | '%' => 0.95,
            'A'..='Z' => 0.75,
            ' ' | '.' | ',' | 'i' | 'l' | 'j' | 't' | 'f' | 'r' | '(' | ')' | '|' => 0.42,
            _ => 0.64,
        })
        .sum::<f64>()
        * size
}

/// `v` with `decimals` digits after the point, never in exponent form and never "-0".
pub fn fixed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        s.trim_start_matches('-').to_string()
    } else {
        s
    }
}

/// `v` to `sig` significant digits, trailing zeros after the point dropped, never in
/// exponent form (12 000, not 1.2e4).
pub fn sig(v: f64, sig: usize) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_finite() {
            "0".into()
        } else {
            "-".into()
        };
    }
    let digits = v.abs().log10().floor() as i32 + 1;
    let decimals = (sig as i32 - digits).max(0) as usize;
    let s = fixed(v, decimals);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The SI units a duration is written in, with their size in seconds, smallest first.
pub const TIME_UNITS: [(&str, f64); 4] = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)];

/// The unit a duration of `seconds` reads best in: the largest whose count is at least
/// 1 (10 ms, not 10 000 µs or 0.01 s).
pub fn time_unit(seconds: f64) -> (&'static str, f64) {
    let a = seconds.abs();
    TIME_UNITS
        .iter()
        .rev()
        .find(|(_, s)| a >= *s * 0.999_95)
        .copied()
        .unwrap_or(TIME_UNITS[0])
}

/// A duration given in seconds as "10.08 ms", "31 µs", "1.2 s": 4 significant digits
/// in the unit it reads best in.
pub fn duration(seconds: f64) -> String {
    let (u, s) = time_unit(seconds);
    format!("{} {u}", sig(seconds / s, 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_never_take_an_exponent() {
        assert_eq!(sig(10160.0, 4), "10160");
        assert_eq!(sig(1.016e4, 3), "10160");
        assert_eq!(sig(0.000_123_4, 2), "0.00012");
        assert_eq!(fixed(-0.000_01, 2), "0.00");
        assert_eq!(duration(0.010_08), "10.08 ms");
        assert_eq!(duration(31e-6), "31 µs");
        assert_eq!(duration(1.5), "1.5 s");
        assert_eq!(duration(0.000_999_9), "999.9 µs");
        for v in [1e-9, 3e-7, 1e-3, 12345.6, 1e9] {
            assert!(!duration(v).contains('e'), "{}", duration(v));
            assert!(!sig(v, 3).contains('e'), "{}", sig(v, 3));
        }
    }
}
