//! docs/ARCHITECTURE.md names the places a change goes, and the README, the guides and
//! CONTRIBUTING.md name the files and items a user or a contributor is sent to; this
//! test holds them to the code. Every backticked name in them that looks like a place
//! in the repository must exist:
//! a path (`wire/`, `tests/agent.rs`) as a file or directory, a module path
//! (`probe::server::budget`) as a module file, an item (`capture::open`,
//! `passive::Analyzer::packet`, `Lab::blackout_link`) as a definition in its module.
//!
//! Witness: the source tree itself, read here. The resolver is tested on names that do
//! not exist (a removed method, a module that was renamed), so it can fail.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The file of module `segments` below `src/` (`["probe", "server"]` →
/// `src/probe/server/mod.rs`), if there is one.
fn module_file(segments: &[&str]) -> Option<PathBuf> {
    let base = root().join("src").join(segments.join("/"));
    [base.with_extension("rs"), base.join("mod.rs")]
        .into_iter()
        .find(|p| p.is_file())
}

/// Every module whose last segment is `name`, anywhere in `src/` (for names the
/// document gives relative to their parent, as `prober::Series`).
fn modules_named(name: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            let is_module = (p.is_dir() && p.join("mod.rs").is_file())
                || (p.extension().is_some_and(|x| x == "rs") && stem != "mod");
            if is_module && stem == name {
                let rel = p
                    .strip_prefix(root().join("src"))
                    .unwrap()
                    .with_extension("");
                found.push(
                    rel.components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect(),
                );
            }
        }
    }
    found
}

/// Whether `code` defines `name` (a function, type, trait, constant, module, enum
/// variant or field is not enough: a definition keyword, or a re-export).
fn defines(code: &str, name: &str) -> bool {
    let keywords = [
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
    ];
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .any(|w| keywords.contains(&w[0]) && w[1] == name)
        || code.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("pub use")
                && l.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == name)
        })
}

/// Why `name` names nothing in the repository, or `None` if it names something.
fn unresolved(name: &str) -> Option<String> {
    let name = name.split('(').next().unwrap().trim();
    if name.contains('/') {
        // From the repository's root (`tests/agent.rs`) or from src/ (`wire/`).
        let rel = name.trim_end_matches('/');
        let here = [root().join(rel), root().join("src").join(rel)];
        return (!here.iter().any(|p| p.exists())).then(|| format!("no file or directory {name}"));
    }
    let segments: Vec<&str> = name.split("::").collect();
    // Find where the module path ends: from the crate root, or, for a name the
    // document gives below its parent (`prober::Series`), from any module so named.
    let starts: Vec<Vec<String>> = if module_file(&segments[..1]).is_some() {
        vec![vec![segments[0].to_owned()]]
    } else if segments[0].starts_with(char::is_lowercase) {
        modules_named(segments[0])
    } else {
        // `Type::item`: the type anywhere in the crate.
        return unresolved_in_any_file(&segments);
    };
    if starts.is_empty() {
        return Some(format!("no module {}", segments[0]));
    }
    let mut last = None;
    for start in starts {
        let mut module: Vec<String> = start;
        let mut rest = &segments[1..];
        while let Some((first, tail)) = rest.split_first() {
            let mut next = module.clone();
            next.push((*first).to_owned());
            let refs: Vec<&str> = next.iter().map(String::as_str).collect();
            if module_file(&refs).is_none() {
                break;
            }
            module = next;
            rest = tail;
        }
        let refs: Vec<&str> = module.iter().map(String::as_str).collect();
        let code = std::fs::read_to_string(module_file(&refs).unwrap()).unwrap();
        match rest.iter().find(|item| !defines(&code, item)) {
            None => return None,
            Some(item) => last = Some(format!("{} defines no {item}", module.join("::"))),
        }
    }
    last
}

/// `Type::item`: some file defines the type and, in the same file, the item.
fn unresolved_in_any_file(segments: &[&str]) -> Option<String> {
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let code = std::fs::read_to_string(&p).unwrap();
                if segments.iter().all(|s| defines(&code, s)) {
                    return None;
                }
            }
        }
    }
    Some(format!("no file defines {}", segments.join(" and ")))
}

/// The backticked names in `text` that point into the repository: paths that start
/// at one of its top-level entries or src/'s, and Rust paths (the crate's name taken
/// off); not commands, flags, metric names, kernel sources, schema names or the import
/// prefixes.
fn places(text: &str) -> Vec<&str> {
    let top = |first: &str| root().join(first).exists() || root().join("src").join(first).exists();
    // Backticks pair up within a fenced block and within the text between blocks.
    text.split("```")
        .flat_map(|part| part.split('`').skip(1).step_by(2))
        .filter(|t| !t.contains(' ') || t.contains('('))
        .map(|t| t.strip_prefix("rttlab::").unwrap_or(t))
        .filter(|t| {
            let head = t.split('(').next().unwrap();
            head.contains("::")
                || (head.contains('/')
                    && !head.starts_with('/')
                    && top(head.split('/').next().unwrap()))
        })
        // Build outputs exist only after a build.
        .filter(|t| !t.starts_with("rttlab.") && !t.starts_with("target/"))
        .filter(|t| !t.ends_with("::") && !t.ends_with(".h"))
        .collect()
}

#[test]
fn every_place_the_architecture_and_the_guides_name_exists() {
    for (doc, least) in [
        ("docs/ARCHITECTURE.md", 40),
        ("docs/GUIDE.md", 10),
        ("docs/AGENT.md", 1),
        ("docs/SECURITY.md", 1),
        ("CONTRIBUTING.md", 5),
        ("README.md", 1),
    ] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        let names = places(&text);
        assert!(
            names.len() >= least,
            "{doc}: too few names found: {names:?}"
        );
        let missing: Vec<String> = names.iter().filter_map(|n| unresolved(n)).collect();
        assert!(
            missing.is_empty(),
            "{doc} names what is not there:\n{}",
            missing.join("\n")
        );
    }
}

#[test]
fn the_resolver_fails_on_names_that_are_gone() {
    for gone in [
        "Lab::set_rack",
        "lab::control",
        "kernel::link",
        "experiment::bench",
        "tests/no_such_test.rs",
        "capture::no_such_fn",
        "prober::NoSuchType",
    ] {
        assert!(unresolved(gone).is_some(), "{gone} resolved");
    }
    for here in [
        "Lab::blackout_link",
        "passive::Analyzer::packet(now, link, frame, sink)",
        "capture::Source",
        "prober::Series",
        "tests/corpus",
        "wire/",
    ] {
        assert_eq!(unresolved(here), None, "{here}");
    }
}
