//! The crate docs' layer table (`src/lib.rs`, "# Layers") is the rule this test checks: it
//! reads the table, then every `.rs` file of each layer, and fails for each path that names
//! a layer, or an item of one, that the layer's row does not list under "may import".
//!
//! What counts as naming: a path through `crate::` (in the binary, `leasehold::`), in a
//! `use` or in code, tests included, comments and doc comments not (an intra-doc link
//! imports nothing). A name at the crate root counts for the layer whose module it is
//! re-exported from (`crate::LeaseClient` is the lease core's). A `super::` path is not
//! followed: the layers are the crate's top-level modules, so climbing out of one that way
//! would take `super::` from its root module, where none leaves it.
//!
//! The binary's layer is checked when its sources are beside the library's (a workspace
//! checkout); the published library package carries no `cli/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One row of the table.
#[derive(Debug)]
struct Layer {
    name: String,
    /// `src/runtime/`, `src/telemetry.rs`, `cli/src/`.
    place: String,
    may_import: Vec<Allowed>,
}

/// One entry of a row's "may import".
#[derive(Debug)]
struct Allowed {
    layer: String,
    items: Items,
}

#[derive(Debug)]
enum Items {
    All,
    /// Only these items (the names in backticks in the entry's parentheses).
    Only(BTreeSet<String>),
    /// Only what the crate root re-exports from the layer.
    RootReexports,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lib_rs() -> String {
    fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs")
}

/// The table under "# Layers" in the crate docs.
fn layers(lib: &str) -> Vec<Layer> {
    let docs: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let start = docs
        .iter()
        .position(|l| *l == "# Layers")
        .expect("a # Layers section in the crate docs");
    let rows: Vec<&str> = docs[start + 1..]
        .iter()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .copied()
        .collect();
    assert!(rows.len() > 2, "the layer table has no rows");
    let header = cells(rows[0]);
    assert_eq!(
        header,
        ["layer", "where", "what", "may import"],
        "the table's columns"
    );
    rows[2..]
        .iter()
        .map(|row| {
            let cells = cells(row);
            assert_eq!(cells.len(), 4, "a row of four cells: {row}");
            let place = cells[1].trim_matches('`').to_string();
            Layer {
                name: cells[0].clone(),
                place,
                may_import: allowed(&cells[3]),
            }
        })
        .collect()
}

fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// "lease core, protocol, backend (`A` and `B` only: …)" — entries split at commas outside
/// parentheses; "nothing" is none.
fn allowed(cell: &str) -> Vec<Allowed> {
    if cell == "nothing" {
        return Vec::new();
    }
    let mut entries = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                entries.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    entries.push(current);
    entries
        .iter()
        .map(|entry| {
            let entry = entry.trim();
            match entry.split_once('(') {
                None => Allowed {
                    layer: entry.to_string(),
                    items: Items::All,
                },
                Some((layer, rest)) => {
                    let named: BTreeSet<String> = rest
                        .split('`')
                        .skip(1)
                        .step_by(2)
                        .map(str::to_string)
                        .collect();
                    let items = if rest.contains("crate root") {
                        Items::RootReexports
                    } else {
                        assert!(!named.is_empty(), "which items of {layer}: {entry}");
                        Items::Only(named)
                    };
                    Allowed {
                        layer: layer.trim().to_string(),
                        items,
                    }
                }
            }
        })
        .collect()
}

/// The crate's top-level modules (`mod x;`, `pub mod x;`).
fn modules(lib: &str) -> BTreeSet<String> {
    // A module declared under `#[path = "file.rs"]` is named by its file, as the code
    // names it through its `use … as` alias.
    let mut path = None;
    let mut names = BTreeSet::new();
    for l in lib.lines() {
        let l = l.trim();
        if let Some(file) = l
            .strip_prefix("#[path = \"")
            .and_then(|f| f.strip_suffix(".rs\"]"))
        {
            path = Some(file.to_string());
            continue;
        }
        let l = l.strip_prefix("pub ").unwrap_or(l);
        if let Some(name) = l.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
            names.insert(path.take().unwrap_or_else(|| name.to_string()));
        } else if !l.starts_with("#[") {
            path = None;
        }
    }
    names
}

/// Each name the crate root re-exports (`pub use module::…;`), with its module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let code = strip_comments(lib);
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let tree = &statement[at + "pub use ".len()..];
        for path in use_paths(tree) {
            let module = path[0].clone();
            let name = path.last().unwrap().clone();
            names.insert(name, module);
        }
    }
    names
}

/// `a::b::{c, d::{e as f, self}}` as its leaf paths (an alias dropped: `a::b::d::e`).
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    let mut unaliased = String::new();
    let mut tokens = tree.split_whitespace();
    while let Some(token) = tokens.next() {
        if token == "as" {
            let alias = tokens.next().unwrap_or("");
            unaliased.push_str(alias.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'));
        } else {
            unaliased.push_str(token);
        }
    }
    let mut chars = unaliased.chars().collect::<Vec<_>>().into_iter().peekable();
    let mut out = Vec::new();
    parse_tree(&mut chars, Vec::new(), &mut out);
    out
}

fn parse_tree(
    chars: &mut std::iter::Peekable<std::vec::IntoIter<char>>,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    loop {
        if chars.peek() == Some(&'{') {
            chars.next();
            loop {
                if chars.peek() == Some(&'}') {
                    chars.next();
                    return;
                }
                parse_tree(chars, prefix.clone(), out);
                match chars.next() {
                    Some(',') => continue,
                    Some('}') | None => return,
                    Some(other) => panic!("unexpected {other:?} in a use tree"),
                }
            }
        }
        let mut segment = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_alphanumeric() || c == '_' || c == '*' {
                segment.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if segment.is_empty() {
            if !prefix.is_empty() {
                out.push(prefix);
            }
            return;
        }
        prefix.push(segment);
        // `::` continues the path; anything else ends it.
        let mut ahead = chars.clone();
        if ahead.next() == Some(':') && ahead.next() == Some(':') {
            chars.next();
            chars.next();
            continue;
        }
        out.push(prefix);
        return;
    }
}

/// The source without its comments (line, doc and block); string contents stay.
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    let mut in_string = false;
    while let Some(c) = rest.chars().next() {
        if in_string {
            if c == '\\' {
                let skip = rest.chars().take(2).map(char::len_utf8).sum::<usize>();
                out.push_str(&rest[..skip]);
                rest = &rest[skip..];
                continue;
            }
            if c == '"' {
                in_string = false;
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
        } else if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            rest = &rest[end..];
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            // Keep the line count, so line numbers stay right.
            out.extend(rest[..end].chars().filter(|c| *c == '\n'));
            rest = &rest[end..];
        } else {
            if c == '"' && !out.ends_with('\'') {
                in_string = true;
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Every path through `prefix::` (`crate`, `leasehold`) in `code`, with its line.
fn named_paths(code: &str, prefix: &str) -> Vec<(usize, Vec<String>)> {
    let needle = format!("{prefix}::");
    let mut found = Vec::new();
    for (at, _) in code.match_indices(&needle) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let tree = &code[at + needle.len()..];
        let end = tree
            .find([';', '(', ')', '<', '>', '='])
            .unwrap_or(tree.len());
        let tree = balanced(&tree[..end]);
        for path in use_paths(tree) {
            found.push((line, path));
        }
    }
    found
}

/// `tree` cut where a `{…}` it opened is left unclosed or a closing brace of the code around
/// it appears.
fn balanced(tree: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in tree.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth < 0 {
                    return &tree[..i];
                }
            }
            ' ' | '\n' | ',' if depth == 0 => return &tree[..i],
            _ => {}
        }
    }
    tree
}

fn rust_files(place: &Path) -> Vec<PathBuf> {
    if place.is_file() {
        return vec![place.to_path_buf()];
    }
    let mut files = Vec::new();
    let mut dirs = vec![place.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Which layer a path names, and the item in it: `(module, item)` resolved to the layer
/// whose place is `src/<module>…`; `None` for what is not the library's (`ractor`).
fn resolve(
    path: &[String],
    module_layer: &BTreeMap<String, String>,
    reexports: &BTreeMap<String, String>,
) -> Result<Option<(String, String)>, String> {
    let first = &path[0];
    if let Some(layer) = module_layer.get(first) {
        let item = path.get(1).cloned().unwrap_or_default();
        return Ok(Some((layer.clone(), item)));
    }
    match reexports.get(first) {
        Some(module) if module == "ractor" => Ok(None),
        Some(module) => match module_layer.get(module) {
            Some(layer) => Ok(Some((layer.clone(), first.clone()))),
            None => Err(format!(
                "`{first}` is re-exported from `{module}`, in no layer"
            )),
        },
        None if first == "ractor" => Ok(None),
        None => Err(format!(
            "`{}` names nothing the test knows",
            path.join("::")
        )),
    }
}

fn violations(layer: &Layer, all: &[Layer], lib: &str) -> Vec<String> {
    let module_layer: BTreeMap<String, String> = all
        .iter()
        .filter_map(|l| Some((module_of(&l.place)?, l.name.clone())))
        .collect();
    let reexports = root_reexports(lib);
    let prefix = if layer.place.starts_with("src/") {
        "crate"
    } else {
        "leasehold"
    };
    let mut found = Vec::new();
    for file in rust_files(&root().join(&layer.place)) {
        let code = strip_comments(&fs::read_to_string(&file).unwrap());
        let shown = file.strip_prefix(root()).unwrap().display().to_string();
        for (line, path) in named_paths(&code, prefix) {
            let (target, item) = match resolve(&path, &module_layer, &reexports) {
                Ok(Some(resolved)) => resolved,
                Ok(None) => continue,
                Err(e) => {
                    found.push(format!("{shown}:{line}: {e}"));
                    continue;
                }
            };
            if target == layer.name {
                continue;
            }
            let permitted = layer.may_import.iter().any(|a| {
                a.layer == target
                    && match &a.items {
                        Items::All => true,
                        Items::Only(items) => items.contains(&item),
                        Items::RootReexports => reexports.contains_key(&item),
                    }
            });
            if !permitted {
                found.push(format!(
                    "{shown}:{line}: the {} layer names `{}` ({target}), which its row does not allow",
                    layer.name,
                    path.join("::"),
                ));
            }
        }
    }
    found
}

/// `src/runtime/` → `runtime`, `src/telemetry.rs` → `telemetry`; the binary has none.
fn module_of(place: &str) -> Option<String> {
    let rest = place.strip_prefix("src/")?;
    Some(
        rest.trim_end_matches('/')
            .trim_end_matches(".rs")
            .to_string(),
    )
}

#[test]
fn every_layer_imports_only_what_the_crate_docs_allow() {
    let lib = lib_rs();
    let layers = layers(&lib);
    let names: BTreeSet<&str> = layers.iter().map(|l| l.name.as_str()).collect();
    for layer in &layers {
        for allowed in &layer.may_import {
            assert!(
                names.contains(allowed.layer.as_str()),
                "the {} row allows `{}`, which is no layer of the table",
                layer.name,
                allowed.layer
            );
        }
    }
    let mut found = Vec::new();
    let mut checked = 0;
    for layer in &layers {
        if !root().join(&layer.place).exists() {
            assert_eq!(layer.place, "cli/src/", "{} is missing", layer.place);
            eprintln!("no {}: the binary's layer is not checked", layer.place);
            continue;
        }
        checked += 1;
        found.extend(violations(layer, &layers, &lib));
    }
    assert!(checked >= 6, "checked {checked} layers");
    assert!(
        found.is_empty(),
        "imports the layer table in src/lib.rs forbids:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_module_of_the_crate_has_a_row() {
    let lib = lib_rs();
    let places: BTreeSet<String> = layers(&lib)
        .iter()
        .filter_map(|l| module_of(&l.place))
        .collect();
    assert_eq!(
        modules(&lib),
        places,
        "the crate's modules and the table's rows"
    );
}

#[test]
fn the_parser_reads_nested_use_trees() {
    let paths =
        use_paths("{backend::{FailureDetail, FailureKind as Kind}, protocol::limits::{self, X}}");
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "backend::FailureDetail",
            "backend::FailureKind",
            "protocol::limits::self",
            "protocol::limits::X",
        ]
    );
    let code = "fn f() { let x = crate::backend::FailureDetail::new(a); } // crate::runtime::X";
    let found = named_paths(&strip_comments(code), "crate");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1.join("::"), "backend::FailureDetail::new");
}
