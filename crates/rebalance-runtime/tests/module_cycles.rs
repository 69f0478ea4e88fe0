//! No import circles between the runtime's top-level modules.
//!
//! The runtime is layered: value types at the bottom, then the configuration and the assignment,
//! the running info, the leases, the listener and the table, and the service and the consumer on
//! top. This test reads `src/` and finds every reference a module's production code makes to
//! another top-level module (`use crate::…`, `crate::…` paths in code, `super::…` that climbs
//! to the crate root, and the crate root's re-exports resolved to the module they come from), then
//! looks for strongly-connected components among the modules: each one is a circle of imports.
//!
//! Run it with `cargo test -p rebalance-runtime --test module_cycles -- --nocapture` to see the
//! modules in dependency order (each line depends only on lines above it).
//!
//! What it leaves out, on purpose: comments and doc links (they do not make a module depend on
//! another), and test code (`#[cfg(test)]` items, `tests.rs` files): a test may use whatever
//! helps it. The modules in [`NOT_YET_CHECKED`] are neither read nor counted as targets.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules this test does not check: none (the consume layer moved to its own crate;
/// the in-memory cluster is checked like the rest). Add a name to leave a module out.
const NOT_YET_CHECKED: &[&str] = &[];

/// One reference from a module to another: the file and line it is made on.
#[derive(Debug, Clone)]
struct Reference {
    file: String,
    line: usize,
}

/// The module graph: for each module, the modules it refers to, with one reference each.
type Graph = BTreeMap<String, BTreeMap<String, Reference>>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules `lib.rs` declares, and the crate root's re-exports (`pub use
/// module::{A, B};`): name to the module it comes from.
fn root_items(lib: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let code = strip_comments(lib);
    let mut modules = BTreeSet::new();
    let mut reexports = BTreeMap::new();
    for statement in code.split(';') {
        let statement = statement.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut statement = statement.trim_start_matches(|c: char| c == '}' || c.is_whitespace());
        // Attributes before the item: `#![warn(..)]`, `#[cfg(..)]`.
        while statement.starts_with('#') {
            let end = statement.find(']').map_or(statement.len(), |i| i + 1);
            statement = statement[end..].trim_start();
        }
        if let Some(name) = statement
            .strip_prefix("pub mod ")
            .or_else(|| statement.strip_prefix("mod "))
        {
            modules.insert(name.trim().to_owned());
        } else if let Some(path) = statement.strip_prefix("pub use ") {
            let path = path.trim().trim_start_matches("crate::");
            let Some((module, rest)) = path.split_once("::") else {
                continue;
            };
            let rest = rest.trim().trim_start_matches('{').trim_end_matches('}');
            for item in split_top_level(rest) {
                let name = item.rsplit(" as ").next().unwrap_or(&item).trim();
                let name = name.rsplit("::").next().unwrap_or(name).trim();
                if !name.is_empty() {
                    reexports.insert(name.to_owned(), module.to_owned());
                }
            }
        }
    }
    (modules, reexports)
}

/// The source with `//` comments blanked out (line numbers kept). A `//` inside a string ends
/// the line's code too: harmless here, as no path follows one on the same line.
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The source with every `#[cfg(test)]` item blanked out (line numbers kept): the attribute,
/// then the item up to its `;` or the `}` that closes its first `{`.
fn strip_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut skipping = false;
    let mut depth = 0usize;
    let mut opened = false;
    for (i, c) in code.char_indices() {
        if !skipping && code[i..].starts_with("#[cfg(test)]") {
            skipping = true;
            depth = 0;
            opened = false;
        }
        if skipping {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    if opened && depth == 0 {
                        skipping = false;
                    }
                }
                ';' if !opened => skipping = false,
                _ => {}
            }
            out.push(if c == '\n' { '\n' } else { ' ' });
        } else {
            out.push(c);
        }
    }
    out
}

/// Splits a `{…}` group's inside at its top-level commas.
fn split_top_level(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
        .into_iter()
        .map(|item| item.trim().to_owned())
        .filter(|item| !item.is_empty())
        .collect()
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The first path segments named after `prefix` (`crate::` or a `super::` chain that reaches
/// the crate root) in `code`, each with its line: `crate::a::B` gives `a`, `crate::{a::B, C}`
/// gives `a` and `C`.
fn first_segments(code: &str, prefix: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut start = 0;
    while let Some(at) = code[start..].find(prefix) {
        let at = start + at;
        start = at + prefix.len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| is_ident_char(c) || c == ':') {
            continue; // `other_crate::`, or a `super::` in the middle of a longer chain
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = code[start..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1usize;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            for item in split_top_level(&group[..end]) {
                let name: String = item.chars().take_while(|&c| is_ident_char(c)).collect();
                if !name.is_empty() && name != "self" {
                    found.push((name, line));
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident_char(c)).collect();
            if !name.is_empty() {
                found.push((name, line));
            }
        }
    }
    found
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("read a source directory") {
            let path = entry.expect("read a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module graph of the crate whose sources are in `src`, for every top-level module but
/// those in `skip`.
fn module_graph(src: &Path, skip: &[&str]) -> Graph {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let (modules, reexports) = root_items(&lib);
    let resolve = |name: &str| -> Option<String> {
        if modules.contains(name) {
            Some(name.to_owned())
        } else {
            reexports.get(name).cloned()
        }
    };
    let mut graph = Graph::new();
    let mut unresolved = Vec::new();
    for module in &modules {
        if !skip.contains(&module.as_str()) {
            graph.entry(module.clone()).or_default();
        }
    }
    for path in rust_files(src) {
        let relative = path.strip_prefix(src).expect("a file under src");
        let parts: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let Some(owner) = parts.first().map(|p| p.trim_end_matches(".rs").to_owned()) else {
            continue;
        };
        let is_test_file = parts
            .iter()
            .any(|p| p == "tests.rs" || p == "tests" || p == "testing.rs");
        if owner == "lib" || skip.contains(&owner.as_str()) || is_test_file {
            continue;
        }
        // How deep the file's module is: `a.rs` and `a/mod.rs` are 1, `a/b.rs` is 2.
        let depth = parts.len() - usize::from(parts.last().is_some_and(|p| p == "mod.rs"));
        let source = fs::read_to_string(&path).expect("read a source file");
        let code = strip_test_items(&strip_comments(&source));
        let to_root = "super::".repeat(depth);
        let mut names = first_segments(&code, "crate::");
        names.extend(first_segments(&code, &to_root));
        let file = format!("src/{}", parts.join("/"));
        for (name, line) in names {
            match resolve(&name) {
                Some(target) if target == owner || skip.contains(&target.as_str()) => {}
                Some(target) => {
                    graph
                        .entry(owner.clone())
                        .or_default()
                        .entry(target)
                        .or_insert(Reference {
                            file: file.clone(),
                            line,
                        });
                }
                None => unresolved.push(format!("{file}:{line}: crate::{name}")),
            }
        }
    }
    assert!(
        unresolved.is_empty(),
        "references the test cannot place in a module (teach `root_items` the new form):\n{}",
        unresolved.join("\n")
    );
    graph
}

/// The strongly-connected components of more than one module (Tarjan's algorithm), each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flat_map(|m| m.keys()) {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found.sort();
    walk.found
}

/// The modules in layers: each module after every module it depends on (only for a graph
/// without cycles).
fn layers(graph: &Graph) -> Vec<Vec<String>> {
    let mut level: BTreeMap<&str, usize> = BTreeMap::new();
    fn level_of<'a>(
        graph: &'a Graph,
        node: &'a str,
        level: &mut BTreeMap<&'a str, usize>,
    ) -> usize {
        if let Some(&l) = level.get(node) {
            return l;
        }
        let l = graph
            .get(node)
            .into_iter()
            .flat_map(|m| m.keys())
            .map(|next| level_of(graph, next, level) + 1)
            .max()
            .unwrap_or(0);
        level.insert(node, l);
        l
    }
    for node in graph.keys() {
        level_of(graph, node, &mut level);
    }
    let mut out: Vec<Vec<String>> = Vec::new();
    for (node, l) in level {
        if out.len() <= l {
            out.resize(l + 1, Vec::new());
        }
        out[l].push(node.to_owned());
    }
    out
}

/// A component's edges, with the line each is made on, to show what to move.
fn describe(graph: &Graph, component: &[String]) -> String {
    let mut out = format!("circle among {{{}}}:\n", component.join(", "));
    for from in component {
        for (to, reference) in &graph[from] {
            if component.contains(to) {
                let _ = writeln!(
                    out,
                    "  {from} -> {to}  ({}:{})",
                    reference.file, reference.line
                );
            }
        }
    }
    out
}

#[test]
fn the_runtimes_modules_import_each_other_in_no_circle() {
    let graph = module_graph(&src_dir(), NOT_YET_CHECKED);
    let found = cycles(&graph);
    let report: Vec<String> = found.iter().map(|c| describe(&graph, c)).collect();
    assert!(
        found.is_empty(),
        "{} import circle(s) between the runtime's modules; move the types each edge names to \
         the lower module:\n{}",
        found.len(),
        report.join("")
    );
    println!("the runtime's modules, each depending only on the lines above it:");
    for (n, layer) in layers(&graph).iter().enumerate() {
        println!("  {n}: {}", layer.join(", "));
    }
}

#[test]
fn the_checker_finds_a_circle_and_reads_every_form_of_reference() {
    let dir = std::env::temp_dir().join(format!("module_cycles_{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("b")).expect("create a scratch crate");
    let write = |name: &str, text: &str| fs::write(src.join(name), text).expect("write");
    write(
        "lib.rs",
        "pub mod a;\nmod b;\nmod c;\nmod d;\nmod skipped;\npub use c::{Cee, Other as Renamed};\n",
    );
    // a -> b through a grouped import, b -> c through a root re-export, c -> a through an
    // inline path: one circle. d -> a through `super::` only, and the test code of a names d.
    write(
        "a.rs",
        "use crate::{b::Bee, d};\n// use crate::c; (a comment)\n#[cfg(test)]\nmod tests {\n    use crate::d::Dee;\n    fn f() { let _ = crate::skipped::X; }\n}\n",
    );
    write("b/mod.rs", "mod inner;\n");
    write("b/inner.rs", "use crate::Renamed;\n");
    write("c.rs", "fn f() -> crate::a::Ay { todo!() }\n");
    write("d.rs", "use super::a::Ay;\n");
    write("skipped.rs", "use crate::a;\n");
    let graph = module_graph(&src, &["skipped"]);
    fs::remove_dir_all(&dir).expect("remove the scratch crate");
    let edges: Vec<(String, String)> = graph
        .iter()
        .flat_map(|(from, to)| to.keys().map(move |to| (from.clone(), to.clone())))
        .collect();
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        edges,
        pairs(&[("a", "b"), ("a", "d"), ("b", "c"), ("c", "a"), ("d", "a")])
    );
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c", "d"]]);
    let mut acyclic = graph.clone();
    acyclic.get_mut("c").expect("c").clear();
    acyclic.get_mut("a").expect("a").remove("d");
    assert!(cycles(&acyclic).is_empty());
    assert_eq!(
        layers(&acyclic),
        vec![vec!["c"], vec!["b"], vec!["a"], vec!["d"]]
    );
}
