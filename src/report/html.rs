//! `report.html`: one self-contained page per results directory — headings, text,
//! inline SVG charts, tables, and the run's settings and host facts — readable offline
//! with nothing beside it (no scripts, fonts or links to fetch).

use std::fmt::Write;

/// A piece of a page, in order.
#[derive(Clone, Debug)]
enum Block {
    Heading(String),
    Para(String),
    Chart {
        id: String,
        caption: String,
        svg: String,
    },
    Table {
        header: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    Pre(String),
}

/// A report page under construction.
#[derive(Clone, Debug)]
pub struct Page {
    title: String,
    blocks: Vec<Block>,
}

/// Escape text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str =
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}\
table{border-collapse:collapse;margin:1em 0;font-size:14px}\
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#eee}td:first-child,th:first-child{text-align:left}\
figure{margin:1.5em 0}figcaption{font-size:13px;color:#555}";

impl Page {
    /// An empty page titled `title` (also its first heading).
    pub fn new(title: &str) -> Self {
        Self {
            title: title.into(),
            blocks: Vec::new(),
        }
    }

    /// A section heading.
    pub fn heading(&mut self, text: &str) -> &mut Self {
        self.blocks.push(Block::Heading(text.into()));
        self
    }

    /// A paragraph of plain text.
    pub fn para(&mut self, text: &str) -> &mut Self {
        self.blocks.push(Block::Para(text.into()));
        self
    }

    /// An SVG chart, with the file it was also written to as its id and a caption.
    pub fn chart(&mut self, id: &str, caption: &str, svg: &str) -> &mut Self {
        self.blocks.push(Block::Chart {
            id: id.into(),
            caption: caption.into(),
            svg: svg.into(),
        });
        self
    }

    /// A table; the first column is left-aligned, the others right-aligned.
    pub fn table(&mut self, header: &[&str], rows: Vec<Vec<String>>) -> &mut Self {
        self.blocks.push(Block::Table {
            header: header.iter().map(|h| (*h).to_string()).collect(),
            rows,
        });
        self
    }

    /// Preformatted text (tables in a seed's layout, JSON).
    pub fn pre(&mut self, text: &str) -> &mut Self {
        self.blocks.push(Block::Pre(text.into()));
        self
    }

    /// The settings and host facts section from a results directory's `run.json`: a
    /// table of each setting and fact by its path in the file (`settings.lab_rtt_s`),
    /// lists joined; the file as it is if it is not JSON.
    pub fn run_facts(&mut self, run_json: &str) -> &mut Self {
        self.heading("Settings and host");
        self.para("As recorded in run.json when the run started.");
        match serde_json::from_str::<serde_json::Value>(run_json) {
            Ok(v) => {
                let mut rows = Vec::new();
                facts(&v, "", &mut rows);
                self.table(&["setting or fact", "value"], rows)
            }
            Err(_) => self.pre(run_json),
        }
    }

    /// The page as HTML.
    pub fn render(&self) -> String {
        let mut o = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1>",
            t = esc(&self.title)
        );
        for b in &self.blocks {
            match b {
                Block::Heading(t) => {
                    let _ = write!(o, "<h2>{}</h2>", esc(t));
                }
                Block::Para(t) => {
                    let _ = write!(o, "<p>{}</p>", esc(t));
                }
                Block::Chart { id, caption, svg } => {
                    let cap = if caption.is_empty() {
                        esc(id)
                    } else {
                        format!("{} ({})", esc(caption), esc(id))
                    };
                    let _ = write!(
                        o,
                        "<figure id=\"{}\">{svg}<figcaption>{cap}</figcaption></figure>",
                        esc(id)
                    );
                }
                Block::Table { header, rows } => {
                    o += "<table><thead><tr>";
                    for h in header {
                        let _ = write!(o, "<th>{}</th>", esc(h));
                    }
                    o += "</tr></thead><tbody>";
                    for r in rows {
                        o += "<tr>";
                        for c in r {
                            let _ = write!(o, "<td>{}</td>", esc(c));
                        }
                        o += "</tr>";
                    }
                    o += "</tbody></table>";
                }
                Block::Pre(t) => {
                    let _ = write!(o, "<pre>{}</pre>", esc(t));
                }
            }
        }
        o += "</body></html>\n";
        o
    }
}

/// Every leaf of `v` as a row (its path, its value), objects in their order, lists of
/// plain values joined with ", ".
fn facts(v: &serde_json::Value, path: &str, rows: &mut Vec<Vec<String>>) {
    use serde_json::Value;
    let plain = |x: &Value| match x {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                facts(x, &p, rows);
            }
        }
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            rows.push(vec![
                path.into(),
                a.iter().map(plain).collect::<Vec<_>>().join(", "),
            ]);
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                facts(x, &format!("{path}[{i}]"), rows);
            }
        }
        other => rows.push(vec![path.into(), plain(other)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_charts_are_inline() {
        let mut p = Page::new("a <b> & c");
        p.para("x < y")
            .chart("c.svg", "a chart", "<svg><text>1</text></svg>")
            .table(&["k", "v"], vec![vec!["<k>".into(), "1".into()]]);
        let h = p.render();
        assert!(h.contains("<h1>a &lt;b&gt; &amp; c</h1>"));
        assert!(h.contains("<p>x &lt; y</p>"));
        assert!(h.contains("<figure id=\"c.svg\"><svg><text>1</text></svg>"));
        assert!(h.contains("<td>&lt;k&gt;</td><td>1</td>"));
        assert!(!h.contains("<script"));
    }

    /// Witness: a run.json written by hand, each leaf found in the table by its path.
    #[test]
    fn run_facts_are_a_table_of_paths_and_values() {
        let mut p = Page::new("t");
        p.run_facts(
            r#"{"experiment": "compare", "settings": {"lab_rtt_s": 0.01, "server": null, "waits_ms": [0, 1.5]}, "host": {"host": {"cpus": 2}}}"#,
        );
        let h = p.render();
        for row in [
            "<td>experiment</td><td>compare</td>",
            "<td>settings.lab_rtt_s</td><td>0.01</td>",
            "<td>settings.server</td><td>-</td>",
            "<td>settings.waits_ms</td><td>0, 1.5</td>",
            "<td>host.host.cpus</td><td>2</td>",
        ] {
            assert!(h.contains(row), "{row}: {h}");
        }
        assert!(!h.contains("<pre>"));
        let mut p = Page::new("t");
        p.run_facts("not json");
        assert!(p.render().contains("<pre>not json</pre>"));
    }
}
