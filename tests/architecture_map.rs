//! ARCHITECTURE.md cannot drift: every path, name and test it cites exists. The same holds for
//! the guide's page of deliberate deviations from Java and Kafka (`docs/guide/deviations.md`,
//! which was the map's section and cites the code the same way): [`CHECKED`].
//!
//! What the map cites is what it writes between backticks, read outside fenced code blocks:
//! - **A path** (a token with a `/`, or a file name such as `route_sync.rs`, `README.md`): an
//!   existing file (a directory when it ends with `/`), found by its last components within what
//!   its section is about: the crate named in the section's heading (`### … (`crates/X`)`), the
//!   repository outside `crates/` under "The root package", the whole repository elsewhere. A
//!   path from the repository's root is found anywhere. `*` matches within one component;
//!   a token with `<…>` is a placeholder (`target/<profile>/`), not a path.
//! - **A name** (`Service::run_round`, `RouteTable`, `lock_lifetime`, `ready()`): each
//!   `::`-separated part is a word of the workspace's Rust code (comments left out) or of a
//!   `Cargo.toml` (features, dependencies), or one of the Java client's names the map compares
//!   ours with ([`JAVA_NAMES`]).
//! - **A test** (a snake_case name of four words or more, such as
//!   `a_wake_up_during_a_round_is_not_lost`): a `fn` of that name exists; when it is a test
//!   (`#[test]`, `#[tokio::test]`, proptest's) and the same paragraph, list item or table row
//!   cites a `.rs` file before it, it is in that file (or in that file's module directory).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Names of the Java client that the map cites to say what ours mirror or where they differ:
/// our code need not have them.
const JAVA_NAMES: &[&str] = &[
    "AclClientRPCHook",
    "ConsumerRunningInfo",
    "MAX_TIME_CONSUME_CONTINUOUSLY",
    "MQClientInstance",
    "RebalanceImpl",
    "postSubscriptionWhenPull",
    "topicRouteData2TopicPublishInfo",
];

/// The repository's files and directories ('/'-separated, relative to its root), without build
/// outputs (`target/`) and hidden directories.
struct Repo {
    files: Vec<String>,
    dirs: Vec<String>,
    /// Every word of the Rust code (outside comments) and of the `Cargo.toml` files.
    words: BTreeSet<String>,
    /// Each `fn` name, with the files defining it and whether one of them is a test.
    fns: BTreeMap<String, Vec<(String, bool)>>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

impl Repo {
    fn read() -> Self {
        let mut repo = Repo {
            files: Vec::new(),
            dirs: Vec::new(),
            words: BTreeSet::new(),
            fns: BTreeMap::new(),
        };
        let mut pending = vec![String::new()];
        while let Some(dir) = pending.pop() {
            let entries = fs::read_dir(root().join(&dir)).expect("read a directory");
            for entry in entries {
                let entry = entry.expect("read a directory entry");
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') || name == "target" {
                    continue;
                }
                let path = if dir.is_empty() {
                    name.clone()
                } else {
                    format!("{dir}/{name}")
                };
                if entry.file_type().expect("a file type").is_dir() {
                    repo.dirs.push(path.clone());
                    pending.push(path);
                } else {
                    if name.ends_with(".rs") || name == "Cargo.toml" {
                        let text = fs::read_to_string(root().join(&path)).unwrap_or_default();
                        repo.index(&path, &text);
                    }
                    repo.files.push(path);
                }
            }
        }
        repo
    }

    fn index(&mut self, path: &str, text: &str) {
        let rust = path.ends_with(".rs");
        let mut attributes_say_test = false;
        for line in text.lines() {
            let code = if rust {
                line.split("//").next().unwrap_or("")
            } else {
                line
            };
            let words = identifiers(code);
            let trimmed = code.trim();
            if trimmed.starts_with("#[") {
                attributes_say_test |= !trimmed.contains("cfg(")
                    && (trimmed.contains("test]") || trimmed.contains("test("));
            }
            if rust {
                for pair in words.windows(2) {
                    if pair[0] == "fn" {
                        self.fns
                            .entry(pair[1].clone())
                            .or_default()
                            .push((path.to_owned(), attributes_say_test));
                    }
                }
            }
            if !trimmed.is_empty() && !trimmed.starts_with("#[") {
                attributes_say_test = false;
            }
            self.words.extend(words);
        }
    }

    /// The files (or directories, for `dir/`) that `cited` names in `scope`.
    fn resolve(&self, cited: &str, scope: &Scope) -> Vec<&str> {
        let want_dir = cited.ends_with('/');
        let pattern: Vec<&str> = cited.trim_end_matches('/').split('/').collect();
        let pool = if want_dir { &self.dirs } else { &self.files };
        pool.iter()
            .map(String::as_str)
            .filter(|candidate| {
                let parts: Vec<&str> = candidate.split('/').collect();
                let from_root = parts.len() == pattern.len();
                (from_root || scope.holds(candidate)) && ends_with(&parts, &pattern)
            })
            .collect()
    }
}

/// Whether `parts` ends with components matching `pattern` (`*` within a component).
fn ends_with(parts: &[&str], pattern: &[&str]) -> bool {
    parts.len() >= pattern.len()
        && parts[parts.len() - pattern.len()..]
            .iter()
            .zip(pattern)
            .all(|(part, pattern)| glob(pattern, part))
}

/// `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.starts_with(head)
                && (head.len()..=text.len())
                    .any(|i| text.is_char_boundary(i) && glob(tail, &text[i..]))
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn identifiers(text: &str) -> Vec<String> {
    text.split(|c: char| !is_ident_char(c))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .map(str::to_owned)
        .collect()
}

/// What a section of the map is about.
#[derive(Debug, Clone)]
enum Scope {
    /// One crate: `crates/X/`.
    Crate(String),
    /// The root package and the rest: everything outside `crates/`.
    Root,
    Everything,
}

impl Scope {
    fn of_heading(heading: &str) -> Self {
        if let Some(start) = heading.find("(`crates/") {
            let rest = &heading[start + 2..];
            let end = rest.find('`').unwrap_or(rest.len());
            Scope::Crate(format!("{}/", rest[..end].trim_end_matches('/')))
        } else if heading.contains("root package") {
            Scope::Root
        } else {
            Scope::Everything
        }
    }

    fn holds(&self, path: &str) -> bool {
        match self {
            Scope::Crate(dir) => path.starts_with(dir.as_str()),
            Scope::Root => !path.starts_with("crates/"),
            Scope::Everything => true,
        }
    }
}

/// The map's paragraphs, list items and table rows (a heading starts a section), each with its
/// section's scope and first line.
fn blocks(map: &str) -> Vec<(Scope, usize, String)> {
    let mut blocks = Vec::new();
    let mut scope = Scope::Everything;
    let mut current: Option<(usize, String)> = None;
    let mut fenced = false;
    for (n, line) in map.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let trimmed = line.trim_start();
        let starts_block = line.trim().is_empty()
            || line.starts_with('#')
            || trimmed.starts_with("- ")
            || trimmed.starts_with("| ")
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if starts_block && let Some(block) = current.take() {
            blocks.push((scope.clone(), block.0, block.1));
        }
        if line.starts_with('#') {
            scope = Scope::of_heading(line);
            continue;
        }
        if !line.trim().is_empty() {
            let block = current.get_or_insert_with(|| (n + 1, String::new()));
            block.1.push(' ');
            block.1.push_str(line);
        }
    }
    if let Some(block) = current {
        blocks.push((scope, block.0, block.1));
    }
    blocks
}

/// The tokens between backticks.
fn cited(block: &str) -> Vec<&str> {
    block.split('`').skip(1).step_by(2).collect()
}

fn is_path(token: &str) -> bool {
    const EXTENSIONS: &[&str] = &[
        ".rs", ".md", ".toml", ".jsonl", ".json", ".lock", ".svg", ".sh", ".py",
    ];
    !token.contains(char::is_whitespace)
        && !token.contains("::")
        && !token.starts_with('-')
        && (token.contains('/') || EXTENSIONS.iter().any(|e| token.ends_with(e)))
}

/// `a::B::c`, or a call of one (`ready()`, `Trigger::wake(WakeReasons::ROUTE_CHANGED)`): its
/// parts.
fn name_parts(token: &str) -> Option<Vec<&str>> {
    let path = match token.split_once('(') {
        Some((path, _)) if token.ends_with(')') => path,
        Some(_) => return None,
        None => token,
    };
    let parts: Vec<&str> = path.split("::").collect();
    parts
        .iter()
        .all(|p| {
            p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && p.chars().all(is_ident_char)
        })
        .then_some(parts)
}

/// A snake_case name of four words or more: what the map's test names look like.
fn looks_like_a_test(name: &str) -> bool {
    name.split('_').count() >= 4
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Whether the test `home` is in the file `file` or in its module's directory.
fn within(home: &str, file: &str) -> bool {
    let module_dir = file
        .strip_suffix("/mod.rs")
        .or_else(|| file.strip_suffix(".rs"))
        .map(|d| format!("{d}/"));
    home == file || module_dir.is_some_and(|d| home.starts_with(&d))
}

/// What is wrong with the map, one line per finding.
fn findings(map: &str, repo: &Repo) -> Vec<String> {
    let mut found = Vec::new();
    for (scope, line, block) in blocks(map) {
        let mut last_file: Option<Vec<&str>> = None;
        for token in cited(&block) {
            if is_path(token) {
                if token.contains('<') {
                    continue;
                }
                let resolved = repo.resolve(token, &scope);
                if resolved.is_empty() {
                    found.push(format!("line {line}: no `{token}` in {scope:?}"));
                }
                // A file not found is reported once, not with every test after it.
                last_file = (token.ends_with(".rs") && !resolved.is_empty()).then_some(resolved);
                continue;
            }
            let Some(parts) = name_parts(token) else {
                continue;
            };
            for part in &parts {
                if !repo.words.contains(*part) && !JAVA_NAMES.contains(part) {
                    found.push(format!("line {line}: `{token}`: no `{part}` in the code"));
                }
            }
            let [name] = parts[..] else { continue };
            if !looks_like_a_test(name) {
                continue;
            }
            let Some(homes) = repo.fns.get(name) else {
                found.push(format!("line {line}: no `fn {name}` in the workspace"));
                continue;
            };
            let tests: Vec<&str> = homes
                .iter()
                .filter(|(_, test)| *test)
                .map(|(file, _)| file.as_str())
                .collect();
            if let Some(files) = &last_file
                && !tests.is_empty()
                && !tests
                    .iter()
                    .any(|home| files.iter().any(|file| within(home, file)))
            {
                found.push(format!(
                    "line {line}: the test `{name}` is in {tests:?}, not in the file cited before it ({files:?})"
                ));
            }
        }
    }
    found
}

/// The documents held to these rules, from the repository's root.
const CHECKED: &[&str] = &["ARCHITECTURE.md", "docs/guide/deviations.md"];

#[test]
fn every_path_name_and_test_the_architecture_map_cites_exists() {
    let repo = Repo::read();
    let mut found = Vec::new();
    for document in CHECKED {
        let map = fs::read_to_string(root().join(document))
            .unwrap_or_else(|e| panic!("read {document}: {e}"));
        found.extend(
            findings(&map, &repo)
                .into_iter()
                .map(|finding| format!("{document}: {finding}")),
        );
    }
    assert!(
        found.is_empty(),
        "the map cites what does not exist (fix the document, or the rule in {}):\n{}",
        file!(),
        found.join("\n")
    );
}

/// The rules catch each kind of drift, and accept what they should.
#[test]
fn the_rules_catch_a_missing_path_name_and_test() {
    let mut repo = Repo {
        files: vec![
            "crates/a/src/route_sync.rs".into(),
            "crates/a/src/service/mod.rs".into(),
            "crates/a/tests/group.rs".into(),
            "crates/b/src/other.rs".into(),
            "tests/e2e_one_real_servers.rs".into(),
            "README.md".into(),
        ],
        dirs: vec!["crates/a/src/service".into(), "tests".into()],
        words: BTreeSet::new(),
        fns: BTreeMap::new(),
    };
    repo.index(
        "crates/a/tests/group.rs",
        "#[tokio::test(start_paused = true)]\nasync fn a_wake_up_is_never_lost() {}\n// fn commented_out_name_of_four() {}\n",
    );
    repo.index(
        "crates/a/src/service/mod.rs",
        "impl Service { fn run_round() {} }\n",
    );
    repo.index(
        "crates/a/src/route_sync.rs",
        "fn the_helper_of_four_words() {}\n",
    );
    let map = "\
Intro `README.md`, `tests/e2e_*_real_servers.rs`, `target/<profile>/`.

### a (`crates/a`)

- `route_sync.rs`, `service/` and `Service::run_round`; `tests/group.rs` `a_wake_up_is_never_lost`.
- `other.rs` is crate b's, `missing.rs` nobody's, `route_sync.rs/` no directory.
- `Service::walk`, `ready()`, `commented_out_name_of_four`; Java's `RebalanceImpl`.
- `route_sync.rs` `a_wake_up_is_never_lost`, but `route_sync.rs` `the_helper_of_four_words` is no test.

```
`not/a/path.rs` in a fence
```
";
    let found = findings(map, &repo);
    assert_eq!(
        found,
        [
            "line 6: no `other.rs` in Crate(\"crates/a/\")",
            "line 6: no `missing.rs` in Crate(\"crates/a/\")",
            "line 6: no `route_sync.rs/` in Crate(\"crates/a/\")",
            "line 7: `Service::walk`: no `walk` in the code",
            "line 7: `ready()`: no `ready` in the code",
            "line 7: `commented_out_name_of_four`: no `commented_out_name_of_four` in the code",
            "line 7: no `fn commented_out_name_of_four` in the workspace",
            "line 8: the test `a_wake_up_is_never_lost` is in [\"crates/a/tests/group.rs\"], not in the file cited before it ([\"crates/a/src/route_sync.rs\"])",
        ]
    );
}
