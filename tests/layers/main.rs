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
use std::path::PathBuf;

mod circles;
mod paths;

use paths::{named_paths, rust_files, strip_comments, use_paths};

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
