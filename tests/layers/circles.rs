//! No circle among a crate's files: the module a file is (`src/lease/handle.rs`:
//! `lease::handle`) never names, through `crate::` or `super::`, a module that names it
//! back, however many steps around. A file and the modules above or below it are one place and may name
//! each other (a `mod.rs` re-exports its children; a child names a sibling through its
//! parent). Test code — `tests.rs`, files under a `tests/` folder, `cli_tests.rs`, a
//! trailing `#[cfg(test)] mod tests { … }` — is left out: a test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::paths::{named_paths, rust_files, strip_comments};
use crate::root;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// `src/lease/handle.rs` under `src/`: `lease::handle`; `mod.rs`, `lib.rs` and `main.rs`
/// name their folder (the crate root: ""). `None` for test code.
fn module_name(base: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(base).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.last()?.clone();
    if last == "tests"
        || last == "cli_tests"
        || parts[..parts.len() - 1].iter().any(|p| p == "tests")
    {
        return None;
    }
    if ["mod", "lib", "main"].contains(&last.as_str()) {
        parts.pop();
    }
    Some(parts.join("::"))
}

/// A `super::…` path named in `module`'s file, from the crate root: `super` is the module
/// above (`keeper::wire`: `keeper`), `super::super` the one above that. `None` for a path
/// that climbs past the root.
fn above(module: &str, path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = module
        .split("::")
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    base.pop()?;
    let mut rest = path;
    while rest.first().is_some_and(|p| p == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Whether one of `a` and `b` is the other or above it.
fn related(a: &str, b: &str) -> bool {
    let under = |inner: &str, outer: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
    };
    under(a, b) || under(b, a)
}

/// The modules under `base` (e.g. `src/`) and, for each, the unrelated modules its code
/// names through `crate::` or `super::` — each path resolved to the deepest module it goes
/// through.
fn graph(base: &Path) -> Graph {
    let mut sources = BTreeMap::new();
    for file in rust_files(base) {
        if let Some(module) = module_name(base, &file) {
            let source = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
            sources.insert(module, source);
        }
    }
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut graph = Graph::new();
    for (module, source) in &sources {
        let code = strip_comments(source);
        let code = code
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let edges = graph.entry(module.clone()).or_default();
        let from_root = named_paths(code, "crate").into_iter().map(|(_, path)| path);
        let from_parent = named_paths(code, "super")
            .into_iter()
            .filter_map(|(_, path)| above(module, &path));
        for path in from_root.chain(from_parent) {
            let named = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|prefix| modules.contains(prefix));
            if let Some(named) = named.filter(|n| !related(module, n)) {
                edges.insert(named);
            }
        }
    }
    graph
}

/// Every circle of `graph`: its strongly connected parts of more than one module, each
/// sorted (Tarjan's algorithm).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().rposition(|m| *m == v).unwrap_or(0);
                let mut part: Vec<String> = self.stack.drain(at..).map(str::to_owned).collect();
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_file_of_the_library_or_the_binary_names_a_module_that_names_it_back() {
    for base in ["src", "cli/src"] {
        let base = root().join(base);
        if !base.exists() {
            // The published library package carries no `cli/`.
            continue;
        }
        let graph = graph(&base);
        assert!(graph.len() > 5, "{}: too few modules read", base.display());
        let found = circles(&graph);
        assert!(
            found.is_empty(),
            "{}: modules that name each other around a circle: {found:?}",
            base.display()
        );
    }
}

#[test]
fn the_circle_finder_finds_each_circle_and_nothing_else() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry((*a).to_owned())
                .or_default()
                .insert((*b).to_owned());
            g.entry((*b).to_owned()).or_default();
        }
        g
    };
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert!(circles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    assert_eq!(
        circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![names(&["a", "b", "c"])]
    );
    let two = circles(&graph(&[
        ("a", "b"),
        ("b", "a"),
        ("c", "d"),
        ("d", "c"),
        ("b", "c"),
    ]));
    assert_eq!(two.len(), 2, "{two:?}");
    assert!(related("lease", "lease::handle") && related("", "runtime"));
    assert!(!related("lease::handle", "lease::outcome"));
    let path = |p: &str| p.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        above("keeper::wire", &path("machine::Nanos")),
        Some(path("keeper::machine::Nanos"))
    );
    assert_eq!(
        above("keeper::wire", &path("super::Policy")),
        Some(path("Policy"))
    );
    assert_eq!(above("keeper", &path("super::super::x")), None);
}
