//! A plain text table: a header row and rows, columns aligned, numbers right-aligned.

/// Build with [`Table::new`], add rows, then `render`.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row (missing cells are blank, extra cells are dropped).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let mut r: Vec<String> = cells.into_iter().map(Into::into).collect();
        r.resize(self.header.len(), String::new());
        self.rows.push(r);
        self
    }

    /// The table as text, two spaces between columns; the first column left-aligned.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = write_aligned(&mut out, &self.header, || self.rows.iter());
        out
    }
}

/// Write a table whose rows `rows` yields twice — once to measure the columns, once
/// to write them — so that a table of many rows (`passive --summary` over thousands
/// of flows) is never held whole as strings. Same layout as [`Table::render`].
///
/// # Errors
/// As `out`'s.
pub fn write_aligned<W, H, I, R, C>(
    out: &mut W,
    header: &[H],
    rows: impl Fn() -> I,
) -> std::fmt::Result
where
    W: std::fmt::Write,
    H: AsRef<str>,
    I: Iterator<Item = R>,
    R: AsRef<[C]>,
    C: AsRef<str>,
{
    let mut w = vec![0usize; header.len()];
    widen(&mut w, header);
    for r in rows() {
        widen(&mut w, r.as_ref());
    }
    let mut line = String::new();
    write_line(out, &mut line, &w, header)?;
    for r in rows() {
        write_line(out, &mut line, &w, r.as_ref())?;
    }
    Ok(())
}

fn widen<C: AsRef<str>>(w: &mut [usize], cells: &[C]) {
    for (w, c) in w.iter_mut().zip(cells) {
        *w = (*w).max(c.as_ref().chars().count());
    }
}

/// One row: the first cell left-aligned, the others right-aligned, missing cells blank.
fn write_line<W: std::fmt::Write, C: AsRef<str>>(
    out: &mut W,
    line: &mut String,
    w: &[usize],
    cells: &[C],
) -> std::fmt::Result {
    line.clear();
    for (i, &width) in w.iter().enumerate() {
        let c = cells.get(i).map_or("", AsRef::as_ref);
        if i > 0 {
            line.push_str("  ");
        }
        let pad = width - c.chars().count();
        if i == 0 {
            line.push_str(c);
            line.extend(std::iter::repeat_n(' ', pad));
        } else {
            line.extend(std::iter::repeat_n(' ', pad));
            line.push_str(c);
        }
    }
    out.write_str(line.trim_end())?;
    out.write_char('\n')
}

/// A latency in µs for a table: 3 significant decimals below 10 µs, fewer above.
pub fn us(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x < 10.0 => format!("{x:.2}"),
        Some(x) if x < 10_000.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.0}"),
    }
}

/// A percentile `q` (0 to 1) of `samples` for a table, written by `number` as the
/// row's other numbers are: "-" without samples, and where they cannot resolve it
/// (`stats::resolves`) how many it needs, "n<100" for P99, so that no cell shows the
/// maximum under a percentile's name.
pub fn percentile_cell(
    v: Option<f64>,
    q: f64,
    samples: u64,
    number: impl Fn(Option<f64>) -> String,
) -> String {
    match v {
        Some(_) => number(v),
        None if samples == 0 => "-".into(),
        None => format!("n<{}", crate::stats::samples_to_resolve(q)),
    }
}

/// A number with one decimal for a table, "-" when there is none.
pub fn one_decimal(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
}

/// The width text for people is wrapped to when no terminal says otherwise (a file, a
/// pipe): 80 columns.
pub const TEXT_WIDTH: usize = 80;

/// `text` wrapped at spaces to `width` columns: its first line after `first`, the
/// others after `rest` (a bullet and its hanging indent: "- ", "  "). A unit stays on
/// the line of its number ("36 µs"); a word longer than the room stays whole on its
/// own line.
pub fn wrap(text: &str, width: usize, first: &str, rest: &str) -> String {
    const UNITS: [&str; 10] = ["ns", "µs", "ms", "s", "s)", "µs)", "ms)", "%", "µs,", "ms,"];
    let mut words: Vec<String> = Vec::new();
    for w in text.split_whitespace() {
        let unit = UNITS.contains(&w) || w.starts_with("µs") || w.starts_with("ms");
        match words.last_mut() {
            Some(prev) if unit && prev.ends_with(|c: char| c.is_ascii_digit()) => {
                prev.push(' ');
                prev.push_str(w);
            }
            _ => words.push(w.to_string()),
        }
    }
    let mut out = String::from(first);
    let mut col = first.chars().count();
    let mut fresh = true;
    for word in &words {
        let n = word.chars().count();
        if !fresh && col + 1 + n > width {
            out.push('\n');
            out.push_str(rest);
            col = rest.chars().count();
            fresh = true;
        }
        if !fresh {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += n;
        fresh = false;
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut t = Table::new(["name", "value"]);
        t.row(["a", "1"]).row(["longer", "12345"]);
        assert_eq!(t.render(), "name    value\na           1\nlonger  12345\n");
        assert_eq!(us(Some(5.123)), "5.12");
        assert_eq!(us(Some(123.45)), "123.5");
        assert_eq!(us(None), "-");
    }

    /// Witness: the wrapped text's own lines.
    #[test]
    fn wraps_with_a_hanging_indent() {
        let t = "the server's srtt (20087 µs) is above the client's (10068 µs) because of ACKs";
        let w = wrap(t, 30, "- ", "  ");
        assert!(w.lines().all(|l| l.chars().count() <= 30), "{w}");
        assert!(w.starts_with("- the server's") && w.lines().skip(1).all(|l| l.starts_with("  ")));
        assert_eq!(
            w.split_whitespace()
                .filter(|x| *x != "-")
                .collect::<Vec<_>>()
                .join(" "),
            t
        );
        assert_eq!(
            wrap("a-very-long-word b", 5, "", ""),
            "a-very-long-word\nb\n"
        );
        assert_eq!(
            wrap("wake-up (36 µs) on", 12, "", ""),
            "wake-up\n(36 µs) on\n"
        );
    }
}
