//! The Grafana dashboard's queries, made concrete for a real Prometheus: used by
//! `tests/dashboard.rs` (structure, names, PromQL syntax) and by the 4-host lab test in
//! `tests/agent.rs` (every panel's query against the agents' real series).

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The dashboards' files in the repository: every layer of a pair, and the fleet by
/// levels (which reads deploy/rules.yml's records).
pub const DASHBOARDS: [&str; 2] = [
    "deploy/grafana/rttlab.json",
    "deploy/grafana/rttlab-fleet.json",
];

/// The range every range-taking Grafana variable stands for in the lab: ten scrapes
/// at 1 s, twenty probes at 500 ms.
pub const LAB_RANGE: &str = "10s";

/// Grafana's interval variables, longest name first (`$__range` is a prefix of
/// `$__range_s`), and the fleet dashboard's `baseline` (how long before now its
/// baselines are taken: a day or a week, in the lab ten seconds, which its short life
/// has).
pub const INTERVAL_VARIABLES: [&str; 7] = [
    "__rate_interval",
    "baseline",
    "__interval_ms",
    "__interval",
    "__range_ms",
    "__range_s",
    "__range",
];

/// The dashboards' multi-value variables (and the fleet's single `layer`): each stands
/// for a regular expression in an `=~` matcher, `.+` in the lab (every value, and the
/// label present).
pub const MULTI_VALUE_VARIABLES: [&str; 10] = [
    "job",
    "instance",
    "zone",
    "peer",
    "layer",
    "src_region",
    "region",
    "src_zone",
    "src_rack",
    "rack",
];

/// The dashboard at `file` (one of [`DASHBOARDS`]), parsed.
pub fn dashboard(file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One target of one panel, as the lab runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct PanelQuery {
    /// The panel's title (with its `$layer` when it repeats), and the target's refId:
    /// `"Probe lag [B]"`.
    pub panel: String,
    /// The target's expr with every Grafana variable replaced (see [`substitute`]).
    pub expr: String,
    /// The labels the target's legendFormat names (`{{peer}}` → `peer`), in order:
    /// every result must carry each of them.
    pub labels: Vec<String>,
}

/// Every panel of the dashboard, rows' nested panels included, in order.
pub fn all_panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        for q in p["panels"].as_array().into_iter().flatten() {
            out.push(q);
        }
    }
    out
}

/// Every target of every panel, with Grafana's variables substituted for the lab: its
/// interval variables (`$__rate_interval`, `$__interval`, `$__range`) by
/// [`LAB_RANGE`], its multi-value variables (`$instance`, `$peer`, `$layer`, `$zone`,
/// `$job`) by `.+`. Panels without targets (rows) give nothing.
pub fn panel_queries(dashboard: &Value) -> Vec<PanelQuery> {
    let mut out = Vec::new();
    for p in all_panels(dashboard) {
        let title = p["title"].as_str().unwrap_or("");
        for t in p["targets"].as_array().into_iter().flatten() {
            let refid = t["refId"].as_str().unwrap_or("?");
            let expr = t["expr"].as_str().unwrap_or("");
            let legend = t["legendFormat"].as_str().unwrap_or("");
            out.push(PanelQuery {
                panel: format!("{title} [{refid}]"),
                expr: substitute(expr),
                labels: legend_labels(legend),
            });
        }
    }
    out
}

/// `expr` with Grafana's variables replaced for the lab (see [`panel_queries`]), in
/// both spellings, `$name` and `${name}`. `$1` in a label_replace is not a variable
/// (Grafana leaves what names no variable alone) and stays.
pub fn substitute(expr: &str) -> String {
    let mut s = expr.to_string();
    for v in INTERVAL_VARIABLES {
        s = s.replace(&format!("${{{v}}}"), LAB_RANGE);
        s = s.replace(&format!("${v}"), LAB_RANGE);
    }
    for v in MULTI_VALUE_VARIABLES {
        s = s.replace(&format!("${{{v}}}"), ".+");
        s = replace_variable(&s, v, ".+");
    }
    s
}

/// `$name` replaced by `value` where the name ends there (`$peer`, not `$peers`).
fn replace_variable(s: &str, name: &str, value: &str) -> String {
    let pattern = format!("${name}");
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(&pattern) {
        let after = &rest[i + pattern.len()..];
        let continues = after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        out.push_str(&rest[..i]);
        if continues {
            out.push_str(&pattern);
        } else {
            out.push_str(value);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The labels a legendFormat names: `"{{instance}} → {{ peer }}"` → instance, peer.
pub fn legend_labels(legend: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = legend;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        let Some(j) = after.find("}}") else {
            break;
        };
        let name = after[..j].trim();
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
        rest = &after[j + 2..];
    }
    out
}

/// The value of one element of an instant query's `data.result`: a float sample is
/// `"value": [ts, "1.5"]`; a native histogram sample (a `rate()` or `sum()` of
/// `rttlab_rtt_seconds` when Prometheus stores it natively, as the heatmaps ask) is
/// `"histogram": [ts, {"count": "…", "sum": "…", "buckets": [[boundary, "lo", "hi",
/// "count"], …]}]`, given here as its count. None for anything else.
pub fn sample_value(result: &Value) -> Option<f64> {
    if let Some(v) = result["value"][1].as_str() {
        return v.parse().ok();
    }
    result["histogram"][1]["count"].as_str()?.parse().ok()
}

/// The labels of one element of an instant query's `data.result`.
pub fn sample_labels(result: &Value) -> BTreeMap<String, String> {
    result["metric"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect()
}

/// What the lab requires of one query's results: at least one, and each carrying
/// every label its legend names. The error says which query and what came back.
pub fn check_results<'a>(
    q: &PanelQuery,
    results: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> Result<(), String> {
    let mut n = 0;
    for labels in results {
        n += 1;
        let missing: Vec<&String> = q
            .labels
            .iter()
            .filter(|l| !labels.contains_key(*l))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{}: a result without {missing:?}: {labels:?}\n  {}",
                q.panel, q.expr
            ));
        }
    }
    if n == 0 {
        return Err(format!("{}: no result\n  {}", q.panel, q.expr));
    }
    Ok(())
}
