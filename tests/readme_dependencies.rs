//! The README's Rust examples compile in fresh crates with exactly the `[dependencies]` lines
//! the README gives: one crate for the in-memory cluster's lines and examples, one for the
//! RocketMQ ones. The only change made to those lines is the checkout's path (`../rebalance`
//! becomes this repository). The build is offline and pinned to this workspace's `Cargo.lock`,
//! in a target directory of its own that later runs reuse.
//!
//! (The README's examples also run as the facade's doc tests, `ReadmeDoctests`; those use the
//! facade's dev-dependencies, which are more than the README's lines, so they alone could not
//! catch a missing dependency or feature.)

use std::path::{Path, PathBuf};
use std::process::Command;

const README: &str = include_str!("../README.md");
const WORKSPACE: &str = env!("CARGO_MANIFEST_DIR");
const SCRATCH: &str = env!("CARGO_TARGET_TMPDIR");

/// A fenced block of the README.
struct Block {
    /// The info string (`rust,no_run`, `toml`).
    info: String,
    /// The lines between the fences.
    code: String,
}

/// The README's fenced blocks, in order (indented ones included).
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
    assert!(open.is_none(), "the README has an unclosed code block");
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

/// Writes a crate named `name` with the README's `dependencies` block and `examples` as its
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
        "the README's dependency lines name the checkout `../rebalance`:\n{dependencies}"
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
        "the README's {name} examples do not build with its dependency lines:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_readme_examples_build_with_exactly_the_readme_dependencies() {
    let blocks = blocks(README);
    let manifests: Vec<&Block> = blocks.iter().filter(|b| is(b, "toml")).collect();
    let rocketmq =
        |code: &str| code.contains("rebalance-rocketmq") || code.contains("rebalance_rocketmq");
    let [in_memory_deps] = manifests
        .iter()
        .filter(|b| !rocketmq(&b.code))
        .collect::<Vec<_>>()[..]
    else {
        panic!("the README has one dependency block for the in-memory cluster");
    };
    // TLS examples need the transport's `tls` feature, which the plain RocketMQ lines leave off.
    let tls = |code: &str| code.contains("\"tls\"") || code.contains("rebalance_rocketmq::tls");
    let [rocketmq_deps] = manifests
        .iter()
        .filter(|b| rocketmq(&b.code) && !tls(&b.code))
        .collect::<Vec<_>>()[..]
    else {
        panic!("the README has one dependency block for RocketMQ");
    };
    let [tls_deps] = manifests
        .iter()
        .filter(|b| tls(&b.code))
        .collect::<Vec<_>>()[..]
    else {
        panic!("the README has one dependency block for RocketMQ with TLS");
    };
    let (with_rocketmq, in_memory): (Vec<&Block>, Vec<&Block>) = blocks
        .iter()
        .filter(|b| is(b, "rust"))
        .partition(|b| rocketmq(&b.code));
    let (with_tls, with_rocketmq): (Vec<&Block>, Vec<&Block>) =
        with_rocketmq.into_iter().partition(|b| tls(&b.code));
    assert!(
        in_memory.len() >= 3 && !with_rocketmq.is_empty() && !with_tls.is_empty(),
        "the README's examples were not found: {} in memory, {} with RocketMQ, {} with TLS",
        in_memory.len(),
        with_rocketmq.len(),
        with_tls.len()
    );
    assert!(
        in_memory_deps.code.contains("test-util"),
        "the in-memory examples use `start_paused`, which needs tokio's `test-util`"
    );
    build("in-memory", &in_memory_deps.code, &in_memory);
    build("rocketmq", &rocketmq_deps.code, &with_rocketmq);
    build("tls", &tls_deps.code, &with_tls);
}

#[test]
fn hidden_lines_are_shown_and_a_missing_main_is_added() {
    let source = as_binary("# use std::fmt;\nfn f() {}\n#\n");
    assert!(source.contains("use std::fmt;\nfn f() {}"), "{source}");
    assert!(source.ends_with("fn main() {}\n"), "{source}");
    assert_eq!(as_binary("fn main() {}"), "fn main() {}");
}
