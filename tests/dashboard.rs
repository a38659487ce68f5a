//! The Grafana dashboards `deploy/grafana/rttlab.json` (every layer of a pair) and
//! `rttlab-fleet.json` (the fleet by levels), checked field by field. No
//! package registry publishes a JSON Schema of Grafana's dashboard model (on npm,
//! `@grafana/schema` 13.2.3 and `@grafana/grafana-foundation-sdk` 0.0.21 ship
//! TypeScript types only; on PyPI, `grafana-foundation-sdk` ships Python classes only),
//! so each rule an import relies on is written out here.
//!
//! Witnesses: the agent's own exposition (`Metrics::new(..).text()`
//! with a series in every family: its `# TYPE` and sample lines name every metric and
//! label the agent exports, so a misspelt metric or label in a query fails;
//! `deploy/rules.yml`'s records and `deploy/prometheus.yml`'s relabelling for the
//! fleet's), Grafana's
//! 24-column grid, and promtool (every query, its variables substituted as the 4-host
//! lab test substitutes them, must parse as PromQL). That every query finds the
//! agents' series in a real Prometheus is the lab test's part (`tests/agent.rs`).

use crate::common::grafana::{
    all_panels, dashboard, legend_labels, panel_queries, sample_value, substitute, DASHBOARDS,
    INTERVAL_VARIABLES, MULTI_VALUE_VARIABLES,
};
use regex::Regex;
use rttlab::agent::metrics::{labels, Metrics};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::process::Command;

/// Panel types Grafana ships that this dashboard may use.
const PANEL_TYPES: [&str; 8] = [
    "row",
    "timeseries",
    "heatmap",
    "bargauge",
    "stat",
    "table",
    "text",
    "barchart",
];

/// What a panel or variable may name as its data source: the import's input, or the
/// dashboard's data source variable.
const DATASOURCES: [&str; 3] = ["${DS_PROMETHEUS}", "${datasource}", "$datasource"];

/// Labels Prometheus gives every series it scrapes (and `__name__`, which a matcher
/// may name).
const TARGET_LABELS: [&str; 3] = ["instance", "job", "__name__"];

/// Each dashboard's filters: variables taking many values (and All).
const FILTERS: [&[&str]; 2] = [
    &["job", "instance", "zone", "peer", "layer"],
    &[
        "src_region",
        "region",
        "src_zone",
        "zone",
        "src_rack",
        "rack",
    ],
];

/// The names the agent exports.
struct Exported {
    /// Every metric name a query may use: families (`rttlab_rtt_seconds`, the native
    /// histogram's name) and samples (`rttlab_rtt_seconds_bucket`, …).
    metrics: BTreeSet<String>,
    /// The families alone, as the exposition's `# TYPE` lines name them.
    families: BTreeSet<String>,
    /// The histogram families.
    histograms: BTreeSet<String>,
    /// Every label name on a sample.
    labels: BTreeSet<String>,
}

/// The agent's exposition with a series in every family (the encoder leaves out a
/// family without one), the peer carrying the lab's file_sd label `zone`.
fn exported() -> Exported {
    let m = Metrics::new(&"10us:10s:3".parse().unwrap());
    let l = labels(
        "b:9812",
        "tcp_rr",
        &[("zone".to_string(), "lab".to_string())],
    );
    m.rtt.get_or_create(&l).observe(0.001);
    for f in [
        &m.sent,
        &m.lost,
        &m.timed_out,
        &m.errors,
        &m.retransmissions,
        &m.late,
    ] {
        f.get_or_create(&l).inc();
    }
    m.srtt.get_or_create(&l).set(0.001);
    m.min_rtt.get_or_create(&l).set(0.001);
    m.reloads
        .get_or_create(&vec![("result".to_string(), "success".to_string())])
        .inc();
    m.peers.set(1);
    m.lag.observe(0.0001);
    m.passive_packets.inc();
    m.passive_rate_limited.inc();
    m.passive_samples
        .get_or_create(&vec![("layer".to_string(), "passive_seq".to_string())])
        .inc();
    m.passive_dropped
        .get_or_create(&vec![("reason".to_string(), "flow_map_full".to_string())])
        .inc();
    m.passive_engine
        .get_or_create(&vec![
            ("engine".to_string(), "bpf".to_string()),
            ("attach".to_string(), "tcx".to_string()),
        ])
        .set(1);
    let text = m.text();
    let label_name = Regex::new(r#"(?:^|,)([A-Za-z_][A-Za-z0-9_]*)=""#).unwrap();
    let mut ex = Exported {
        metrics: BTreeSet::new(),
        families: BTreeSet::new(),
        histograms: BTreeSet::new(),
        labels: BTreeSet::new(),
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let name = words.next().unwrap_or("").to_string();
            let kind = words.next().unwrap_or("");
            match kind {
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        ex.metrics.insert(format!("{name}{suffix}"));
                    }
                    ex.histograms.insert(name.clone());
                }
                "counter" if !name.ends_with("_total") => {
                    ex.metrics.insert(format!("{name}_total"));
                }
                "info" => {
                    ex.metrics.insert(format!("{name}_info"));
                }
                _ => {}
            }
            ex.metrics.insert(name.clone());
            ex.families.insert(name);
        } else if !line.is_empty() && !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            ex.metrics.insert(line[..end].to_string());
            if let (Some(open), Some(close)) = (line.find('{'), line.rfind('}')) {
                for c in label_name.captures_iter(&line[open + 1..close]) {
                    ex.labels.insert(c[1].to_string());
                }
            }
        }
    }
    ex
}

/// Whether a data source reference names the Prometheus input or variable.
fn prometheus(ds: &Value) -> bool {
    ds["type"] == "prometheus" && ds["uid"].as_str().is_some_and(|u| DATASOURCES.contains(&u))
}

/// (where, text) of every PromQL expression: panels' targets, unsubstituted.
fn exprs(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in all_panels(d) {
        let title = p["title"].as_str().unwrap_or("");
        for t in p["targets"].as_array().into_iter().flatten() {
            let refid = t["refId"].as_str().unwrap_or("?");
            let expr = t["expr"].as_str().unwrap_or("");
            out.push((format!("{title} [{refid}]"), expr.to_string()));
        }
    }
    out
}

/// (where, query) of every query variable: `label_values(SELECTOR, LABEL)`.
fn variable_queries(d: &Value) -> Vec<(String, String)> {
    d["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            (
                format!("variable {}", v["name"]),
                v["query"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn the_dashboards_import_with_a_prometheus_input() {
    for file in DASHBOARDS {
        imports_with_a_prometheus_input(&dashboard(file));
    }
}

fn imports_with_a_prometheus_input(d: &Value) {
    let inputs = d["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS"
            && i["type"] == "datasource"
            && i["pluginId"] == "prometheus"),
        "{inputs:?}"
    );
    let requires = d["__requires"].as_array().expect("__requires");
    let required = |ty: &str, id: &str| requires.iter().any(|r| r["type"] == ty && r["id"] == id);
    assert!(required("grafana", "grafana"), "{requires:?}");
    assert!(required("datasource", "prometheus"), "{requires:?}");
    for p in all_panels(d) {
        let ty = p["type"].as_str().unwrap_or("");
        assert!(
            ty == "row" || required("panel", ty),
            "__requires does not list panel {ty}"
        );
    }
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion {}",
        d["schemaVersion"]
    );
    for key in ["title", "uid"] {
        assert!(
            d[key].as_str().is_some_and(|s| !s.is_empty()),
            "{key}: {}",
            d[key]
        );
    }
    assert!(
        d["time"]["from"].is_string() && d["time"]["to"].is_string(),
        "{}",
        d["time"]
    );
    assert!(d["annotations"]["list"].is_array());
    assert!(d["templating"]["list"].is_array());
    assert!(d["panels"].as_array().is_some_and(|p| !p.is_empty()));
}

#[test]
fn every_panel_has_an_id_a_known_type_a_title_and_its_own_place_on_the_grid() {
    for file in DASHBOARDS {
        panels_have_ids_types_titles_and_places(&dashboard(file));
    }
}

fn panels_have_ids_types_titles_and_places(d: &Value) {
    let panels = all_panels(d);
    let mut ids = BTreeSet::new();
    let mut placed: Vec<(String, [u64; 4])> = Vec::new();
    for p in &panels {
        let title = p["title"]
            .as_str()
            .unwrap_or_else(|| panic!("a panel without a title: {p}"));
        assert!(!title.trim().is_empty(), "an empty title: {p}");
        let id = p["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("{title}: no integer id"));
        assert!(ids.insert(id), "{title}: id {id} is another panel's");
        let ty = p["type"].as_str().unwrap_or("");
        assert!(PANEL_TYPES.contains(&ty), "{title}: type {ty:?}");
        let g = &p["gridPos"];
        let field = |k: &str| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k} in {g}"))
        };
        let (x, y, w, h) = (field("x"), field("y"), field("w"), field("h"));
        assert!(
            w >= 1 && h >= 1 && x + w <= 24,
            "{title}: {g} leaves the 24-column grid"
        );
        if ty == "row" {
            assert_eq!((x, w, h), (0, 24, 1), "{title}: a row spans the grid");
        }
        for (other, [ox, oy, ow, oh]) in &placed {
            let apart = x + w <= *ox || ox + ow <= x || y + h <= *oy || oy + oh <= y;
            assert!(apart, "{title} at {g} overlaps {other}");
        }
        placed.push((title.to_string(), [x, y, w, h]));
    }
    assert!(panels.len() >= 15, "{} panels", panels.len());
}

#[test]
fn every_query_panel_reads_prometheus_and_each_target_has_a_ref_and_an_expr() {
    for file in DASHBOARDS {
        query_panels_read_prometheus(&dashboard(file));
    }
}

fn query_panels_read_prometheus(d: &Value) {
    for p in all_panels(d) {
        let title = p["title"].as_str().unwrap_or("");
        let ty = p["type"].as_str().unwrap_or("");
        if ty == "row" || ty == "text" {
            continue;
        }
        assert!(
            prometheus(&p["datasource"]),
            "{title}: datasource {}",
            p["datasource"]
        );
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("{title}: no targets"));
        assert!(!targets.is_empty(), "{title}: no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            let r = t["refId"]
                .as_str()
                .unwrap_or_else(|| panic!("{title}: a target without refId: {t}"));
            assert!(refs.insert(r), "{title}: refId {r} twice");
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "{title} [{r}]: no expr"
            );
            assert!(
                t["datasource"].is_null() || prometheus(&t["datasource"]),
                "{title} [{r}]: datasource {}",
                t["datasource"]
            );
            if ty == "heatmap" {
                assert_eq!(t["format"], "heatmap", "{title} [{r}]");
            }
        }
    }
}

#[test]
fn every_variable_a_query_uses_is_defined_and_each_filter_takes_many_values() {
    for (file, filters) in DASHBOARDS.iter().zip(FILTERS) {
        variables_are_defined_and_filters_take_many_values(&dashboard(file), filters);
    }
}

fn variables_are_defined_and_filters_take_many_values(d: &Value, filters: &[&str]) {
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| vars.iter().find(|v| v["name"] == name);
    let ds = var("datasource").expect("a datasource variable");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    for &name in filters {
        let v = var(name).unwrap_or_else(|| panic!("no variable {name}"));
        assert_eq!(v["type"], "query", "{name}");
        assert_eq!(v["multi"], true, "{name}");
        assert_eq!(v["includeAll"], true, "{name}");
        assert_eq!(v["allValue"], ".*", "{name}");
        assert!(prometheus(&v["datasource"]), "{name}: {}", v["datasource"]);
        let q = v["query"].as_str().unwrap_or("");
        assert!(
            q.starts_with("label_values(") && q.ends_with(&format!(", {name})")),
            "{name}: {q}"
        );
    }
    let defined: BTreeSet<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    let reference = Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let mut texts = exprs(d);
    texts.extend(variable_queries(d));
    for p in all_panels(d) {
        let title = p["title"].as_str().unwrap_or("").to_string();
        texts.push((format!("title {title}"), title));
        if let Some(r) = p["repeat"].as_str() {
            assert!(
                MULTI_VALUE_VARIABLES.contains(&r),
                "{}: repeats by {r}",
                p["title"]
            );
        }
    }
    for (what, text) in &texts {
        for c in reference.captures_iter(text) {
            let name = &c[1];
            if INTERVAL_VARIABLES.contains(&name) {
                continue;
            }
            assert!(
                defined.contains(name),
                "{what}: ${name} is no variable of the dashboard"
            );
            // A multi-value variable is a regular expression: only in `=~` (the lab
            // test substitutes `.+` for it).
            if MULTI_VALUE_VARIABLES.contains(&name) && !what.starts_with("title ") {
                let start = c.get(0).unwrap().start();
                assert!(
                    text[..start].ends_with("=~\""),
                    "{what}: ${name} outside an =~ matcher: {text}"
                );
            }
        }
    }
}

#[test]
fn every_metric_and_label_a_query_names_is_one_the_agent_exports() {
    let ex = exported();
    // The checker can fail: a misspelt name is not in the set, the true ones are.
    for name in [
        "rttlab_rtt_seconds",
        "rttlab_rtt_seconds_bucket",
        "rttlab_probes_sent_total",
        "rttlab_agent_peers",
    ] {
        assert!(ex.metrics.contains(name), "{name}: {:?}", ex.metrics);
    }
    for name in [
        "rttlab_rtt_second_bucket",
        "rttlab_probes_sent",
        "rttlab_peers",
    ] {
        assert!(!ex.metrics.contains(name), "{name}");
    }
    assert!(
        ex.labels.contains("peer") && ex.labels.contains("layer") && ex.labels.contains("zone")
    );

    let used = names_are_known(&dashboard(DASHBOARDS[0]), &ex, &BTreeSet::new(), &[]);
    // Every family the agent exports is on the per-pair dashboard.
    for f in &ex.families {
        assert!(
            used.contains(f) || used.contains(&format!("{f}_bucket")),
            "no panel shows {f}"
        );
    }
}

/// The fleet dashboard reads deploy/rules.yml's records (`region_pair:…`), which carry
/// the prober's own place as deploy/prometheus.yml relabels it (`src_rack`, …), and
/// names the paths its matrices join (`from`, `to`). Witnesses: those two files as
/// shipped, and the agent's exposition.
#[test]
fn every_record_and_label_the_fleet_dashboard_names_is_one_the_rules_and_relabelling_make() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = std::fs::read_to_string(root.join("deploy/rules.yml")).unwrap();
    let records: BTreeSet<String> = Regex::new(r"(?m)^\s*- record: (\S+)$")
        .unwrap()
        .captures_iter(&rules)
        .map(|c| c[1].to_string())
        .collect();
    assert!(
        records.contains("region_pair:rttlab_rtt_seconds:p50_5m"),
        "{records:?}"
    );
    let scrape = std::fs::read_to_string(root.join("deploy/prometheus.yml")).unwrap();
    let relabelled =
        Regex::new(r"action: labelmap\s+regex: \(([a-z|]+)\)\s+replacement: src_\$\{1\}")
            .unwrap()
            .captures(&scrape)
            .expect("deploy/prometheus.yml maps the agent's own labels to src_…")[1]
            .split('|')
            .map(|l| format!("src_{l}"))
            .collect::<Vec<_>>();
    assert_eq!(relabelled, ["src_rack", "src_zone", "src_region"]);
    let fleet = dashboard(DASHBOARDS[1]);
    // The matrices' paths are made by label_join in the queries that use them.
    for (what, text) in exprs(&fleet) {
        if text.contains("label_join") {
            assert!(
                text.contains("\"from\", \"/\"") && text.contains("\"to\", \"/\""),
                "{what}: {text}"
            );
        }
    }
    let mut extra: Vec<&str> = relabelled.iter().map(String::as_str).collect();
    // The peers' own rack and region pass through as their zone does (the exposition
    // above carries zone alone).
    extra.extend(["from", "to", "rack", "region"]);
    let used = names_are_known(&fleet, &exported(), &records, &extra);
    for level in ["region", "zone", "rack"] {
        for what in [
            "rtt_seconds:p50_5m",
            "rtt_seconds:p99_5m",
            "probes_lost:ratio_5m",
        ] {
            let r = format!("{level}_pair:rttlab_{what}");
            assert!(used.contains(&r), "the fleet dashboard never shows {r}");
        }
    }
}

/// Every metric, record and label `d`'s queries and variables name is the agent's (its
/// exposition `ex`), one of `records`, or one of `extra` labels; the names used.
fn names_are_known(
    d: &Value,
    ex: &Exported,
    records: &BTreeSet<String>,
    extra: &[&str],
) -> BTreeSet<String> {
    let record = Regex::new(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b").unwrap();
    let metric = Regex::new(r"\b(?:rttlab|process)_[a-z0-9_]+\b").unwrap();
    let matcher = Regex::new(r#"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*""#).unwrap();
    let grouping = Regex::new(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)").unwrap();
    let known_label = |l: &str| {
        ex.labels.contains(l) || TARGET_LABELS.contains(&l) || l == "le" || extra.contains(&l)
    };
    let mut texts = exprs(d);
    texts.extend(variable_queries(d));
    let mut used = BTreeSet::new();
    for (what, text) in &texts {
        for r in record.find_iter(text) {
            assert!(
                records.contains(r.as_str()),
                "{what}: {} is no record of deploy/rules.yml ({records:?})",
                r.as_str()
            );
            used.insert(r.as_str().to_string());
        }
        // A record's middle names the metric it was made from, not one it reads.
        let plain = record.replace_all(text, "");
        for m in metric.find_iter(&plain) {
            assert!(
                ex.metrics.contains(m.as_str()),
                "{what}: {} is not a metric the agent exports ({:?})",
                m.as_str(),
                ex.metrics
            );
            used.insert(m.as_str().to_string());
        }
        for c in matcher.captures_iter(text) {
            assert!(
                known_label(&c[1]),
                "{what}: label {} is not one the series carry",
                &c[1]
            );
        }
        for c in grouping.captures_iter(text) {
            for l in c[1].split(',').map(str::trim).filter(|l| !l.is_empty()) {
                assert!(
                    known_label(l),
                    "{what}: groups by {l}, which no series carries"
                );
            }
        }
    }
    // Legends name labels the results carry (label_replace's copies of instance
    // as peer included).
    for q in panel_queries(d) {
        for l in &q.labels {
            assert!(known_label(l), "{}: legend names {l}", q.panel);
        }
    }
    used
}

#[test]
fn every_histogram_query_reads_the_native_histogram_or_else_the_classic_buckets() {
    let ex = exported();
    for (what, text) in DASHBOARDS.iter().flat_map(|f| exprs(&dashboard(f))) {
        for h in &ex.histograms {
            let native = text.matches(&format!("{h}{{")).count();
            let classic = text.matches(&format!("{h}_bucket{{")).count();
            assert_eq!(
                native, classic,
                "{what}: {h} read {native} times natively and {classic} times by its buckets: {text}"
            );
            if native > 0 {
                assert!(text.contains(" or "), "{what}: {text}");
            }
        }
    }
}

/// Witness: promtool's PromQL parser, on every query as the lab test runs it (each a
/// recording rule of a rules file).
#[test]
fn every_query_parses_as_promql_once_its_variables_are_substituted() {
    for file in DASHBOARDS {
        queries_parse_as_promql(&dashboard(file));
    }
}

fn queries_parse_as_promql(d: &Value) {
    let queries = panel_queries(d);
    assert_eq!(queries.len(), exprs(d).len());
    let leftover = Regex::new(r"\$[A-Za-z_{]").unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        assert!(
            !leftover.is_match(&q.expr),
            "{}: a variable is left: {}",
            q.panel,
            q.expr
        );
        // A JSON string is a YAML double-quoted scalar.
        rules.push_str(&format!(
            "      - record: dashboard_query_{i}\n        expr: {}\n",
            Value::String(q.expr.clone())
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-rules.yml");
    std::fs::write(&path, &rules).unwrap();
    let o = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool (apt-get install prometheus)");
    assert!(
        o.status.success(),
        "promtool check rules: {}{}\n{rules}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{said}"
    );
}

/// Witness: Grafana's variable syntax (`$name`, `${name}`; `$1` names none) and the
/// Prometheus HTTP API's two sample shapes, written out by hand.
#[test]
fn the_lab_helpers_substitute_variables_and_read_both_kinds_of_sample() {
    assert_eq!(
        substitute(
            r#"rate(x{peer=~"$peer", layer=~"${layer}", a="$peers"}[$__rate_interval]) + y[$__range]"#
        ),
        r#"rate(x{peer=~".+", layer=~".+", a="$peers"}[10s]) + y[10s]"#
    );
    let swap = r#"label_replace(up{instance=~"$peer"}, "peer", "$1", "instance", "(.*)")"#;
    assert_eq!(
        substitute(swap),
        r#"label_replace(up{instance=~".+"}, "peer", "$1", "instance", "(.*)")"#
    );
    assert_eq!(
        legend_labels("{{instance}} → {{ peer }} P50 {{instance}}"),
        vec!["instance".to_string(), "peer".to_string()]
    );
    assert!(legend_labels("").is_empty());
    let float = json!({"metric": {"peer": "b:9812"}, "value": [1700000000.5, "0.0125"]});
    assert_eq!(sample_value(&float), Some(0.0125));
    let histogram = json!({
        "metric": {},
        "histogram": [1700000000.5, {
            "count": "42",
            "sum": "0.5",
            "buckets": [[0, "0.0078125", "0.009290680585958758", "12"]]
        }]
    });
    assert_eq!(sample_value(&histogram), Some(42.0));
    assert_eq!(sample_value(&json!({"metric": {}})), None);
}

/// The fleet rules' alerts and records on a day of steady probes and 41 minutes in which
/// two paths degrade (`deploy/rules.test.yml`): each latency and loss alert fires at the
/// level whose groups the degradation dominates and stays quiet where healthy pairs
/// outnumber it, none before its 10 minutes, and the merged medians are what
/// histogram_quantile's arithmetic gives on those buckets. Witness: promtool's rule
/// evaluator against the values worked out in the test file.
#[test]
fn the_fleet_alerts_fire_where_a_path_degraded_and_nowhere_else() {
    // promtool evaluating the fleet rules: a CPU kept busy for seconds.
    let _busy = crate::common::serial::busy();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let o = Command::new("promtool")
        .args(["test", "rules", "rules.test.yml"])
        .current_dir(&root)
        .output()
        .expect("promtool (apt-get install prometheus)");
    assert!(
        o.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Every alert of the rules file has its case.
    let rules = std::fs::read_to_string(root.join("rules.yml")).unwrap();
    let cases = std::fs::read_to_string(root.join("rules.test.yml")).unwrap();
    for alert in Regex::new(r"(?m)^\s*- alert: (\S+)$")
        .unwrap()
        .captures_iter(&rules)
        .map(|c| c[1].to_string())
        .filter(|a| !a.starts_with("RttlabPeer") && a != "RttlabRetransmissions")
    {
        assert!(
            cases.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - "
            )),
            "{alert}: no firing case in rules.test.yml"
        );
    }
}
