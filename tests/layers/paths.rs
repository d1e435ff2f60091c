//! Reading a crate's files for the paths they name: comments stripped, `use` trees
//! expanded, every `crate::…` (or `leasehold::…`) path with its line. Shared by the layer
//! rule and the no-circle rule.

use std::fs;
use std::path::{Path, PathBuf};

/// `a::b::{c, d::{e as f, self}}` as its leaf paths (an alias dropped: `a::b::d::e`).
pub(crate) fn use_paths(tree: &str) -> Vec<Vec<String>> {
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
pub(crate) fn strip_comments(source: &str) -> String {
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
pub(crate) fn named_paths(code: &str, prefix: &str) -> Vec<(usize, Vec<String>)> {
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

pub(crate) fn rust_files(place: &Path) -> Vec<PathBuf> {
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
