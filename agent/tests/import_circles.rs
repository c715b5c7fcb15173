//! The agent's and the engine's imports point one way: no circle among a crate's top-level
//! modules, nor among the files of any one folder (a plugin imports the framework and
//! helpers, never a plugin that imports it back). A circle is a set of modules each reachable from the others through
//! `crate::`, `super::` or `self::` paths; tests (`#[cfg(test)]` to the end of a file, as
//! the crate writes them) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `src` by module path (`plugins/helper/mod.rs` is `plugins::helper`).
fn modules(src: &Path) -> BTreeMap<Module, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let Ok(rel) = path
                .with_extension("")
                .strip_prefix(src)
                .map(Path::to_path_buf)
            else {
                continue;
            };
            let mut parts: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                parts.clear();
            }
            out.insert(parts, std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a `crate::`/`super::`/`self::` reference spells, a `{a, b::c}` group expanded.
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let at_start = i == 0 || !is_ident(chars[i - 1]) && chars[i - 1] != ':';
        if at_start
            && ["crate::", "super::", "self::"]
                .iter()
                .any(|p| starts(&chars, i, p))
        {
            i = path_at(&chars, i, Vec::new(), &mut out);
        } else {
            i += 1;
        }
    }
    out
}

fn starts(chars: &[char], i: usize, s: &str) -> bool {
    s.chars()
        .enumerate()
        .all(|(k, c)| chars.get(i + k) == Some(&c))
}

/// Reads one path from `i` (segments, then maybe a group), pushes every full path it
/// spells onto `out`, and returns where it ended.
fn path_at(chars: &[char], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut segs = prefix;
    loop {
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if chars.get(i) == Some(&'{') {
            i += 1;
            loop {
                while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                match chars.get(i) {
                    None => return i,
                    Some('}') => return i + 1,
                    Some(c) if is_ident(*c) => i = path_at(chars, i, segs.clone(), out),
                    Some(_) => i += 1,
                }
            }
        }
        let start = i;
        while chars.get(i).is_some_and(|c| is_ident(*c)) {
            i += 1;
        }
        if i == start {
            break;
        }
        segs.push(chars[start..i].iter().collect());
        if starts(chars, i, "::") {
            i += 2;
        } else {
            break;
        }
    }
    if !segs.is_empty() {
        out.push(segs);
    }
    i
}

/// The longest known module a path names, from the module `here` it is written in.
fn resolve(path: &[String], here: &Module, mods: &BTreeMap<Module, String>) -> Option<Module> {
    let (mut base, rest): (Module, &[String]) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("super" | "self") => {
            let mut base = here.clone();
            let mut k = 0;
            while let Some(seg) = path.get(k).filter(|s| *s == "super" || *s == "self") {
                if seg == "super" {
                    base.pop();
                }
                k += 1;
            }
            (base, &path[k..])
        }
        _ => return None,
    };
    let mut best = mods.contains_key(&base).then(|| base.clone());
    for seg in rest {
        base.push(seg.clone());
        if mods.contains_key(&base) {
            best = Some(base.clone());
        }
    }
    best
}

fn edges(mods: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    mods.iter()
        .map(|(m, text)| {
            let code = text
                .find("#[cfg(test)]")
                .map_or(text.as_str(), |i| &text[..i]);
            let to = paths(code)
                .iter()
                .filter_map(|p| resolve(p, m, mods))
                .filter(|t| t != m)
                .collect();
            (m.clone(), to)
        })
        .collect()
}

/// Strongly connected components of more than one node (Tarjan).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.out
}

/// Circles among top-level modules, then among the children of each folder.
fn import_circles(mods: &BTreeMap<Module, String>) -> Vec<String> {
    let edges = edges(mods);
    let mut found = Vec::new();
    let mut folders: BTreeSet<Module> = mods
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    folders.insert(Vec::new());
    for dir in folders {
        let d = dir.len();
        let mut graph = Graph::new();
        for (a, ts) in &edges {
            if a.len() <= d || a[..d] != dir[..] {
                continue;
            }
            for b in ts {
                if b.len() <= d || b[..d] != dir[..] || a[d] == b[d] {
                    continue;
                }
                graph.entry(a[d].clone()).or_default().insert(b[d].clone());
            }
        }
        let where_ = if dir.is_empty() {
            "top-level modules".to_string()
        } else {
            format!("in {}", dir.join("/"))
        };
        for c in circles(&graph) {
            found.push(format!("{where_}: {} -> {}", c.join(" -> "), c[0]));
        }
    }
    found
}

#[test]
fn the_agents_modules_import_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    assert!(mods.len() > 50, "read the crate's sources: {}", mods.len());
    let found = import_circles(&mods);
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The engine's crate by the same rule; that it never imports the agent the compiler
/// sees (the engine does not depend on it).
#[test]
fn the_engines_modules_import_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src");
    let mods = modules(&src);
    assert!(mods.len() > 50, "read the crate's sources: {}", mods.len());
    let found = import_circles(&mods);
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The other crates of the workspace by the same rule.
#[test]
fn the_other_crates_modules_import_in_one_direction() {
    for (krate, least) in [("shared", 20), ("cli", 15), ("tests", 5), ("bench", 3)] {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../{krate}/src"));
        let mods = modules(&src);
        assert!(
            mods.len() >= least,
            "read {krate}'s sources: {}",
            mods.len()
        );
        let found = import_circles(&mods);
        assert!(
            found.is_empty(),
            "import circles in {krate}:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn a_circle_is_found_at_the_top_and_inside_a_folder() {
    let m = |path: &str, code: &str| {
        let parts: Module = if path.is_empty() {
            Vec::new()
        } else {
            path.split('/').map(str::to_string).collect()
        };
        (parts, code.to_string())
    };
    let mods: BTreeMap<Module, String> = [
        m("", "pub mod a; pub mod b; pub mod plugins;"),
        m("a", "use crate::b::Thing;"),
        m("b", "use crate::{a::{self, Other}, plugins};"),
        m("plugins", "pub mod x; pub mod y;"),
        m("plugins/x", "use super::y::helper;"),
        m("plugins/y", "fn f() { crate::plugins::x::g() }"),
    ]
    .into_iter()
    .collect();
    let found = import_circles(&mods);
    assert_eq!(
        found,
        ["top-level modules: a -> b -> a", "in plugins: x -> y -> x"]
    );
    // Tests are left out.
    let mut no_test_circle = mods.clone();
    no_test_circle.insert(
        vec!["plugins".into(), "y".into()],
        "#[cfg(test)]\nmod tests { use crate::plugins::x::g; }".into(),
    );
    assert_eq!(
        import_circles(&no_test_circle),
        ["top-level modules: a -> b -> a"]
    );
}
