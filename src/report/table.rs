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
        let n = self.header.len();
        let mut w = vec![0usize; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = w[i] - c.chars().count();
                if i == 0 {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
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
}
