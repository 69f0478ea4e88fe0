//! The README's Rust examples compile in fresh crates with exactly the `[dependencies]` lines
//! the README gives: one crate for the in-memory cluster's lines and examples, one for the
//! RocketMQ ones, one for TLS. The only change made to those lines is the checkout's path
//! (`../rebalance` becomes this repository). The build is offline and pinned to this workspace's
//! `Cargo.lock`, in a target directory of its own that later runs reuse.
//!
//! The same holds for every page of the guide (`docs/guide/*.md`) that gives dependency lines (a
//! `toml` block with `[dependencies]`), such as the production page's TLS lines. A page's RocketMQ examples build with its plain RocketMQ lines,
//! or with its TLS lines when it gives only those. The other pages give none: their examples
//! run as doc tests only.
//!
//! (The README's and the guide's examples also run as the facade's doc tests, `ReadmeDoctests`
//! and `guide`; those use the facade's dev-dependencies, which are more than the README's
//! lines, so they alone could not catch a missing dependency or feature.)

use std::path::{Path, PathBuf};
use std::process::Command;

const WORKSPACE: &str = env!("CARGO_MANIFEST_DIR");
const SCRATCH: &str = env!("CARGO_TARGET_TMPDIR");

/// A fenced block of a document.
struct Block {
    /// The info string (`rust,no_run`, `toml`).
    info: String,
    /// The lines between the fences.
    code: String,
}

/// A document's fenced blocks, in order (indented ones included).
fn blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match open.as_mut() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some(Block {
                        info: info.trim().to_string(),
                        code: String::new(),
                    });
                }
            }
            Some(block) => {
                if trimmed == "```" {
                    blocks.extend(open.take());
                } else {
                    block.code.push_str(line);
                    block.code.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    blocks
}

/// Whether a block's info string names `language` (`rust,no_run` names `rust`).
fn is(block: &Block, language: &str) -> bool {
    block.info.split(',').next() == Some(language)
}

/// A Rust block as a binary's source: rustdoc's hidden lines (`# ...`) shown, and an empty
/// `main` added to a block that has none (as rustdoc wraps such a block).
fn as_binary(code: &str) -> String {
    let shown: Vec<&str> = code
        .lines()
        .map(|line| match line.trim_start() {
            "#" => "",
            l if l.starts_with("# ") => &l[2..],
            _ => line,
        })
        .collect();
    let source = shown.join("\n");
    if source.contains("fn main(") {
        source
    } else {
        format!("#![allow(dead_code)]\n{source}\nfn main() {{}}\n")
    }
}

/// Writes a crate named `name` with a document's `dependencies` block and `examples` as its
/// binaries, and builds it offline; panics with cargo's output when it does not build.
fn build(name: &str, dependencies: &str, examples: &[&Block]) {
    let dir = Path::new(SCRATCH).join("readme-crates").join(name);
    let bin = dir.join("src").join("bin");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("remove the previous scratch crate");
    }
    std::fs::create_dir_all(&bin).expect("create the scratch crate");
    assert!(
        dependencies.contains("path = \"../rebalance"),
        "{name}: the dependency lines name the checkout `../rebalance`:\n{dependencies}"
    );
    let dependencies = dependencies.replace(
        "path = \"../rebalance",
        &format!("path = \"{}", WORKSPACE.replace('\\', "/")),
    );
    let manifest = format!(
        "[package]\nname = \"readme-{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         # Not a member of the repository's workspace.\n[workspace]\n\n{dependencies}"
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("write Cargo.toml");
    std::fs::copy(
        Path::new(WORKSPACE).join("Cargo.lock"),
        dir.join("Cargo.lock"),
    )
    .expect("copy the workspace's Cargo.lock");
    for (i, example) in examples.iter().enumerate() {
        std::fs::write(bin.join(format!("readme_{i}.rs")), as_binary(&example.code))
            .expect("write an example");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target: PathBuf = Path::new(SCRATCH).join("readme-target");
    let output = Command::new(cargo)
        .arg("build")
        .arg("--offline")
        .arg("--bins")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo");
    assert!(
        output.status.success(),
        "the {name} examples do not build with their document's dependency lines:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether a block is about RocketMQ (names the transport).
fn rocketmq(code: &str) -> bool {
    code.contains("rebalance-rocketmq") || code.contains("rebalance_rocketmq")
}

/// Whether a block needs the transport's `tls` feature.
fn tls(code: &str) -> bool {
    code.contains("\"tls\"") || code.contains("rebalance_rocketmq::tls")
}

/// The dependency block of `kind` in `document`, if it gives one; panics when it gives two.
fn one<'a>(
    document: &str,
    kind: &str,
    manifests: &[&'a Block],
    pick: impl Fn(&str) -> bool,
) -> Option<&'a Block> {
    let found: Vec<&Block> = manifests
        .iter()
        .copied()
        .filter(|b| pick(&b.code))
        .collect();
    assert!(
        found.len() <= 1,
        "{document} has {} dependency blocks for {kind}: give one",
        found.len()
    );
    found.first().copied()
}

/// Builds `document`'s Rust examples with its own dependency lines, one crate per kind
/// (`{name}-in-memory`, `{name}-rocketmq`, `{name}-tls`); returns how many examples of each
/// kind it built.
fn check(document: &str, name: &str) -> [usize; 3] {
    let text = std::fs::read_to_string(Path::new(WORKSPACE).join(document))
        .unwrap_or_else(|e| panic!("read {document}: {e}"));
    let blocks = blocks(&text);
    let manifests: Vec<&Block> = blocks
        .iter()
        .filter(|b| is(b, "toml") && b.code.contains("[dependencies]"))
        .collect();
    let in_memory_deps = one(document, "the in-memory cluster", &manifests, |c| {
        !rocketmq(c)
    });
    let rocketmq_deps = one(document, "RocketMQ", &manifests, |c| rocketmq(c) && !tls(c));
    let tls_deps = one(document, "RocketMQ with TLS", &manifests, tls);
    let (with_rocketmq, in_memory): (Vec<&Block>, Vec<&Block>) = blocks
        .iter()
        .filter(|b| is(b, "rust"))
        .partition(|b| rocketmq(&b.code));
    let (with_tls, with_rocketmq): (Vec<&Block>, Vec<&Block>) =
        with_rocketmq.into_iter().partition(|b| tls(&b.code));
    let kinds = [
        ("in-memory", in_memory_deps, &in_memory),
        ("rocketmq", rocketmq_deps.or(tls_deps), &with_rocketmq),
        ("tls", tls_deps, &with_tls),
    ];
    for (kind, deps, examples) in kinds {
        if examples.is_empty() {
            continue;
        }
        let deps = deps.unwrap_or_else(|| {
            panic!("{document} has {kind} examples but no dependency lines to build them with")
        });
        if kind == "in-memory" && examples.iter().any(|b| b.code.contains("start_paused")) {
            assert!(
                deps.code.contains("test-util"),
                "{document}: the in-memory examples use `start_paused`, which needs tokio's `test-util`"
            );
        }
        build(&format!("{name}-{kind}"), &deps.code, examples);
    }
    [in_memory.len(), with_rocketmq.len(), with_tls.len()]
}

#[test]
fn the_readme_examples_build_with_exactly_the_readme_dependencies() {
    let [in_memory, with_rocketmq, with_tls] = check("README.md", "readme");
    assert!(
        in_memory >= 1 && with_rocketmq >= 1,
        "the README's examples were not found: {in_memory} in memory, {with_rocketmq} with RocketMQ, {with_tls} with TLS",
    );
}

#[test]
fn the_guide_examples_build_with_exactly_their_pages_dependencies() {
    let dir = Path::new(WORKSPACE).join("docs/guide");
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .expect("read docs/guide")
        .map(|entry| {
            entry
                .expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .filter(|name| {
            let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            blocks(&text)
                .iter()
                .any(|b| is(b, "toml") && b.code.contains("[dependencies]"))
        })
        .collect();
    pages.sort();
    for page in &pages {
        let name = format!("guide-{}", page.trim_end_matches(".md").to_lowercase());
        let built = check(&format!("docs/guide/{page}"), &name);
        assert!(
            built.iter().sum::<usize>() >= 1,
            "docs/guide/{page} gives dependency lines but no Rust example"
        );
    }
}

#[test]
fn hidden_lines_are_shown_and_a_missing_main_is_added() {
    let source = as_binary("# use std::fmt;\nfn f() {}\n#\n");
    assert!(source.contains("use std::fmt;\nfn f() {}"), "{source}");
    assert!(source.ends_with("fn main() {}\n"), "{source}");
    assert_eq!(as_binary("fn main() {}"), "fn main() {}");
}
