//! The module structure docs/ARCHITECTURE.md draws, read from the source: data flows
//! one way. Every `crate::…` and `super::…` path outside `#[cfg(test)]` code is an edge
//! from the file that names it to the module it names; the test fails on any import
//! circle between files, and on any edge between top-level modules that does not go
//! down the floors the document draws (a report that imports an experiment, a source
//! that imports a presentation, one source that imports another on its floor).
//!
//! Witnesses: the source files themselves, parsed here, and the drawing in
//! docs/ARCHITECTURE.md, read here; the checker is itself tested on a made-up graph
//! with a circle, an upward edge and an edge along a floor, so it can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The library's floors, lowest first, as docs/ARCHITECTURE.md draws them in its
/// `floors` block (the top floor first): a module imports only from floors below its
/// own, never from one beside it.
fn floors() -> Vec<Vec<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .unwrap();
    let block = doc
        .split("```floors\n")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has no ```floors block")
        .split("```")
        .next()
        .unwrap();
    let mut floors: Vec<Vec<String>> = block
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|f| !f.is_empty())
        .collect();
    floors.reverse();
    floors
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path of a source file: `src/report/compare.rs` → `report::compare`,
/// `src/report/mod.rs` → `report`.
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code a build without tests compiles: everything before the first
/// `#[cfg(test)]`, with line comments removed.
fn non_test_code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers after each occurrence of `prefix` (`crate::a::b` → ["a", "b"]).
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    code.match_indices(prefix)
        .filter(|(i, _)| {
            // A whole word: not `foo_crate::`.
            code[..*i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .map(|(i, _)| {
            let rest = &code[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .take(2)
                .collect()
        })
        .collect()
}

/// The deepest known module a path names.
fn target(modules: &BTreeSet<String>, segs: &[&str]) -> Option<String> {
    (1..=segs.len())
        .rev()
        .map(|n| segs[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// The import graph of the library under `src`.
fn library_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let files: Vec<_> = files
        .into_iter()
        .filter(|f| {
            let m = module_of(src, f);
            m != "lib" && m != "main" && m.split("::").next() != Some("cli")
        })
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();
    let mut g = Graph::new();
    for f in &files {
        let m = module_of(src, f);
        let code = non_test_code(&std::fs::read_to_string(f).unwrap());
        let parent: Vec<&str> = m.split("::").collect();
        let parent = &parent[..parent.len().saturating_sub(1)];
        let mut named: Vec<String> = paths_after(&code, "crate::")
            .into_iter()
            .filter_map(|segs| target(&modules, &segs))
            .collect();
        for segs in paths_after(&code, "super::") {
            let full: Vec<&str> = parent.iter().copied().chain(segs).collect();
            if let Some(t) = target(&modules, &full) {
                // `super::Item` names the parent module itself, which declares this
                // file: not an import.
                if t != parent.join("::") {
                    named.push(t);
                }
            }
        }
        let edges = g.entry(m.clone()).or_default();
        edges.extend(named.into_iter().filter(|t| *t != m));
    }
    g
}

/// Every import circle (strongly connected component of more than one module).
fn circles(g: &Graph) -> Vec<Vec<String>> {
    // Kosaraju: finish order on g, then components on the reverse graph.
    fn visit(g: &Graph, v: &str, seen: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if !seen.insert(v.to_string()) {
            return;
        }
        for w in g.get(v).into_iter().flatten() {
            visit(g, w, seen, out);
        }
        out.push(v.to_string());
    }
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for v in g.keys() {
        visit(g, v, &mut seen, &mut order);
    }
    let mut rev = Graph::new();
    for (a, bs) in g {
        for b in bs {
            rev.entry(b.clone()).or_default().insert(a.clone());
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for v in order.iter().rev() {
        let mut comp = Vec::new();
        visit(&rev, v, &mut seen, &mut comp);
        if comp.len() > 1 {
            comp.sort();
            out.push(comp);
        }
    }
    out
}

/// Every edge between top-level modules that does not go down `floors` (or that
/// leaves a top-level module the drawing lacks).
fn edges_off_the_floors(g: &Graph, floors: &[Vec<String>]) -> Vec<String> {
    let floor = |m: &str| {
        let top = m.split("::").next().unwrap();
        floors.iter().position(|f| f.iter().any(|x| x == top))
    };
    let top = |m: &str| m.split("::").next().unwrap().to_string();
    let mut bad = Vec::new();
    for (a, bs) in g {
        for b in bs.iter().filter(|b| top(b) != top(a)) {
            match (floor(a), floor(b)) {
                (Some(x), Some(y)) if y < x => {}
                _ => bad.push(format!("{a} -> {b}")),
            }
        }
    }
    bad
}

#[test]
fn data_flows_one_way_through_the_library() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = library_graph(&src);
    // The parser found the imports it must: a sanity floor, so an empty graph cannot pass.
    assert!(
        g.get("report::blackout")
            .is_some_and(|e| e.contains("results::blackout")),
        "report::blackout's import of results::blackout not seen: {:?}",
        g.get("report::blackout")
    );
    assert!(g.values().map(BTreeSet::len).sum::<usize>() > 100);
    assert_eq!(circles(&g), Vec::<Vec<String>>::new(), "import circles");
    // The drawing names every top-level module of the library once.
    let floors = floors();
    let drawn: Vec<&String> = floors.iter().flatten().collect();
    let tops: BTreeSet<String> = g
        .keys()
        .map(|m| m.split("::").next().unwrap().to_string())
        .collect();
    let drawn_set: BTreeSet<String> = drawn.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        drawn.len(),
        drawn_set.len(),
        "a module drawn twice: {floors:?}"
    );
    assert_eq!(drawn_set, tops, "the drawing's modules against src/'s");
    assert_eq!(
        edges_off_the_floors(&g, &floors),
        Vec::<String>::new(),
        "imports that do not go down docs/ARCHITECTURE.md's floors"
    );
}

#[test]
fn the_checker_finds_a_circle_and_an_upward_edge() {
    let mut g = Graph::new();
    let mut edge = |a: &str, b: &str| {
        g.entry(a.into()).or_default().insert(b.into());
    };
    edge("report::blackout", "experiment::blackout");
    edge("experiment::blackout", "report::blackout");
    edge("experiment::blackout", "stats");
    assert_eq!(
        circles(&g),
        vec![vec![
            "experiment::blackout".to_string(),
            "report::blackout".to_string()
        ]]
    );
    // One source importing another beside it on its floor, and one going down.
    g.entry("lab::emulator".into())
        .or_default()
        .extend(["passive".to_string(), "kernel::packet".to_string()]);
    let floors: Vec<Vec<String>> = [
        vec!["kernel"],
        vec!["lab", "passive"],
        vec!["report"],
        vec!["experiment"],
    ]
    .iter()
    .map(|f| f.iter().map(|m| m.to_string()).collect())
    .collect();
    assert_eq!(
        edges_off_the_floors(&g, &floors),
        vec![
            "experiment::blackout -> stats".to_string(),
            "lab::emulator -> passive".to_string(),
            "report::blackout -> experiment::blackout".to_string(),
        ]
    );
    let code = "use crate::results::blackout::{a, b};\nfoo_crate::x; super::svg::Series";
    assert_eq!(
        paths_after(code, "crate::"),
        vec![vec!["results", "blackout"]]
    );
    assert_eq!(paths_after(code, "super::"), vec![vec!["svg", "Series"]]);
}
