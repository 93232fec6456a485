//! The crates' areas are layers: a file may use its own area and the areas
//! below it, never one above. Read from the source as a newcomer would: the
//! `use crate::…` and `use super::…` lines, and any `crate::…` path in the
//! code (test modules are left out: tests may reach anywhere).
//!
//! Root re-exports (`pub use runtime::tasks;` in `lib.rs`) are followed to
//! what they name, so a short path counts as the area it points into.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// `domain/src`'s areas, lowest first; `lib.rs` (the root) is above them all.
const DOMAIN: &[&[&str]] = &[
    &["kernel"],
    &["identity"],
    &["models"],
    &["memory"],
    &["catalogue"],
    &["runtime"],
    &["tools"],
];

/// `api/src`'s areas, lowest first: the GraphQL plumbing every area uses,
/// the schema (its own plumbing, its areas, then the roots assembled from
/// them), then the transports that serve it. An area is a module path; a
/// file belongs to the longest area its path starts with.
const API: &[&[&str]] = &[
    &["coercion"],
    &["error"],
    &["cost", "metrics", "auth"],
    // The schema's plumbing.
    &["schema::ids"],
    &[
        "schema::context",
        "schema::page",
        "schema::loaders",
        "schema::order",
        "schema::plain_list",
    ],
    &["schema::limits", "schema::admission"],
    &["schema::operation"],
    // The schema's areas.
    &["schema::identity"],
    &["schema::plans", "schema::graph"],
    &["schema::tasks"],
    &[
        "schema::memory",
        "schema::capabilities",
        "schema::admin",
        "schema::conversations",
        "schema::prompts",
        "schema::policy",
        "schema::guardrails",
        "schema::schedules",
        "schema::usage",
        "schema::webhooks",
        "schema::queue",
    ],
    // The roots, assembled from the areas.
    &["schema::node", "schema::subscription"],
    &["schema"],
    // The transports: reading an upload's body, then the edge.
    &["upload"],
    &["edge"],
    &["fanout"],
    &["state"],
    &["ws", "hooks", "mcp"],
    &["http"],
];

#[test]
fn areas_only_use_areas_below_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offences = Vec::new();
    for (crate_dir, areas) in [("domain/src", DOMAIN), ("api/src", API)] {
        let files = read_crate(&root.join(crate_dir));
        offences.extend(back_edges(crate_dir, &files, areas));
    }
    assert!(
        offences.is_empty(),
        "imports against the layers (area -> higher area):\n{}",
        offences.join("\n")
    );
}

#[test]
fn a_planted_back_edge_is_found() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = read_crate(&root.join("domain/src"));
    assert!(back_edges("domain/src", &files, DOMAIN).is_empty());
    // The kernel's error module reaching up into the runtime, through the
    // short path the root re-exports, and a use tree.
    let error = files
        .get_mut(&vec!["kernel".to_owned(), "error".to_owned()])
        .expect("kernel/error.rs");
    error
        .code
        .push_str("\nuse crate::{Result, tasks::{Task, TaskStatus}};\n");
    let offences = back_edges("domain/src", &files, DOMAIN);
    assert_eq!(
        offences,
        ["domain/src: kernel::error -> runtime::tasks (kernel uses runtime)"]
    );
}

#[test]
fn use_trees_expand_to_their_leaves() {
    assert_eq!(
        use_leaves("crate::{a::{self, B}, c::D as E, f}"),
        ["crate::a", "crate::a::B", "crate::c::D", "crate::f"]
    );
    assert_eq!(use_leaves("super::x::Y"), ["super::x::Y"]);
}

struct File {
    /// The code without comments, string contents or test modules.
    code: String,
    /// Whether the file is a module root (`mod.rs`, `lib.rs`): `super::`
    /// then starts from its parent.
    is_root: bool,
}

type Module = Vec<String>;

fn read_crate(dir: &Path) -> BTreeMap<Module, File> {
    let mut files = BTreeMap::new();
    for path in rust_files(dir) {
        let relative = path.strip_prefix(dir).expect("under the crate");
        let mut module: Module = relative
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let is_root = matches!(module.last().map(String::as_str), Some("mod") | Some("lib"));
        if is_root {
            module.pop();
        }
        let source = fs::read_to_string(&path).expect("readable source");
        files.insert(
            module,
            File {
                code: code_of(&source),
                is_root,
            },
        );
    }
    files
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).expect("readable dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The source without `//` comments, with string literals emptied, and cut
/// at its test module.
fn code_of(source: &str) -> String {
    let source = match source.find("#[cfg(test)]") {
        Some(at) => &source[..at],
        None => source,
    };
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                out.push('"');
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push('"');
            }
            // A char literal such as '"' or '{' must not open a string.
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                let mut it = rest.chars();
                match (it.next(), it.next(), it.next()) {
                    (Some('\\'), Some(_), Some('\'')) => {
                        chars.nth(2);
                    }
                    (Some(_), Some('\''), _) => {
                        chars.nth(1);
                    }
                    _ => out.push('\''),
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The leaves of a use tree: `a::{b, c::{d, self}}` gives `a::b`, `a::c::d`,
/// `a::c`. Renames (`as x`) are dropped.
fn use_leaves(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim();
    if let Some(open) = tree.find('{')
        && tree.ends_with('}')
    {
        let prefix = tree[..open].trim_end_matches("::").trim();
        let inner = &tree[open + 1..tree.len() - 1];
        let mut items = Vec::new();
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[start..]);
        return items
            .into_iter()
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .flat_map(use_leaves)
            .map(|leaf| match (prefix.is_empty(), leaf.as_str()) {
                (true, _) => leaf,
                (false, "self") => prefix.to_owned(),
                (false, _) => format!("{prefix}::{leaf}"),
            })
            .collect();
    }
    let leaf = tree.split(" as ").next().unwrap_or(tree).trim();
    vec![leaf.replace(' ', "")]
}

/// Every `crate::`/`super::` path the code names: the leaves of its use
/// trees and the paths written inline.
fn paths_in(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        let statement = &rest[at + 4..];
        rest = statement;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if !(statement.starts_with("crate::") || statement.starts_with("super::")) {
            continue;
        }
        if let Some(end) = statement.find(';') {
            paths.extend(use_leaves(&statement[..end]));
        }
    }
    for anchor in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(anchor) {
            let start = from + at;
            from = start + anchor.len();
            let before = code[..start].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // `crate::{…}` is a use tree, read above.
            let path = path.trim_end_matches(':');
            if path.len() > anchor.len() {
                paths.push(path.to_owned());
            }
        }
    }
    paths
}

/// What `lib.rs` re-exports at the root: alias -> the path it names; an
/// empty path for another crate's item, which is in no area.
fn root_aliases(files: &BTreeMap<Module, File>) -> BTreeMap<String, Vec<String>> {
    let mut aliases = BTreeMap::new();
    let Some(lib) = files.get(&Vec::new()) else {
        return aliases;
    };
    let mut rest = lib.code.as_str();
    while let Some(at) = rest.find("pub use ") {
        let statement = &rest[at + 8..];
        rest = statement;
        let Some(end) = statement.find(';') else {
            break;
        };
        for leaf in use_leaves(&statement[..end]) {
            let segments: Vec<String> = leaf
                .trim_start_matches("crate::")
                .split("::")
                .map(str::to_owned)
                .collect();
            let Some(name) = segments.last().cloned() else {
                continue;
            };
            if files.contains_key(&segments[..1].to_vec()) {
                aliases.insert(name, segments);
            } else {
                aliases.insert(name, Vec::new());
            }
        }
    }
    aliases
}

/// The module `path` (written in `from`) points into.
fn resolve(
    from: &Module,
    is_root: bool,
    path: &str,
    files: &BTreeMap<Module, File>,
    aliases: &BTreeMap<String, Vec<String>>,
) -> Option<Module> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Module = match segments.first() {
        Some(&"crate") => {
            segments.remove(0);
            Vec::new()
        }
        Some(&"super") => {
            let mut base = from.clone();
            if !is_root {
                base.pop();
            }
            while segments.first() == Some(&"super") {
                segments.remove(0);
                base.pop();
            }
            // `super::super` from a file counts its own parent once.
            if !is_root && base.len() < from.len().saturating_sub(1) {
                return None;
            }
            base
        }
        _ => return None,
    };
    if base.is_empty()
        && let Some(first) = segments.first()
        && let Some(target) = aliases.get(*first)
    {
        if target.is_empty() {
            return None;
        }
        let mut full: Vec<String> = target.clone();
        full.extend(segments[1..].iter().map(|s| (*s).to_owned()));
        return Some(longest_module(&full, files));
    }
    base.extend(segments.iter().map(|s| (*s).to_owned()));
    Some(longest_module(&base, files))
}

fn longest_module(path: &[String], files: &BTreeMap<Module, File>) -> Module {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| files.contains_key(m))
        .unwrap_or_default()
}

/// The rank of a module's area and the area's name: the longest area the
/// module's path starts with. The root is above every area.
fn rank(module: &Module, areas: &[&[&str]]) -> (usize, String) {
    if module.is_empty() {
        return (areas.len(), "root".to_owned());
    }
    let mut best: Option<(usize, usize, &str)> = None;
    for (rank, tier) in areas.iter().enumerate() {
        for area in tier.iter() {
            let segments: Vec<&str> = area.split("::").collect();
            let matches = segments.len() <= module.len()
                && segments.iter().zip(module).all(|(a, m)| *a == m.as_str());
            if matches && best.is_none_or(|(_, len, _)| segments.len() > len) {
                best = Some((rank, segments.len(), area));
            }
        }
    }
    match best {
        Some((rank, _, area)) => (rank, area.to_owned()),
        None => (areas.len(), format!("{} (in no area)", module.join("::"))),
    }
}

/// `crate: from -> to (area uses area)` for each import of a higher area or
/// of another area of the same rank (peers stay apart, so they cannot form
/// a cycle), and for each module in no area.
fn back_edges(crate_dir: &str, files: &BTreeMap<Module, File>, areas: &[&[&str]]) -> Vec<String> {
    let aliases = root_aliases(files);
    let mut offences = BTreeSet::new();
    for (module, file) in files {
        let (from_rank, from_area) = rank(module, areas);
        if !module.is_empty() && from_rank == areas.len() {
            offences.insert(format!("{crate_dir}: {} is in no area", module.join("::")));
        }
        for path in paths_in(&file.code) {
            let Some(target) = resolve(module, file.is_root, &path, files, &aliases) else {
                continue;
            };
            let (to_rank, to_area) = rank(&target, areas);
            let peer = to_rank == from_rank && to_area != from_area;
            if to_rank > from_rank || peer {
                offences.insert(format!(
                    "{crate_dir}: {} -> {} ({from_area} uses {to_area})",
                    display(module),
                    display(&target)
                ));
            }
        }
    }
    offences.into_iter().collect()
}

fn display(module: &Module) -> String {
    if module.is_empty() {
        "root".to_owned()
    } else {
        module.join("::")
    }
}
