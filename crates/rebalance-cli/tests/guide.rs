//! The guide's page of the command (`docs/guide/cli.md`) covers every subcommand and every flag
//! that `--help` lists: a flag added to the command without a word in the guide fails here.
//!
//! A subcommand's section is the one whose `## ` heading names it between backticks
//! (`` ## `rebalance simulate` ``); `local-cluster`'s subcommands (`up`, `down`, `status`) are
//! in its section. A flag is covered when its section writes it between backticks, alone or
//! with its value (`` `--queues N` ``, `` `--strategy NAME`, `--param k=v` ``), or in a list of
//! flags (`` `--access-key`, `--secret-key`, ... ``).

mod common;

use common::rebalance_text;

const GUIDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guide/cli.md");

/// `--help`'s page of `args` (`["simulate"]`, `["local-cluster", "up"]`).
fn help(args: &[&str]) -> String {
    let mut with_help = args.to_vec();
    with_help.push("--help");
    let run = rebalance_text(&with_help);
    assert_eq!(run.code, Some(0), "{args:?} --help: {}", run.stderr);
    run.stdout
}

/// The subcommands a `--help` page lists under "Commands:" (without `help`).
fn subcommands(page: &str) -> Vec<String> {
    page.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The long flags a `--help` page lists (without `--help` and `--version`).
fn flags(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|line| {
            let entry = line.trim_start();
            let entry = entry.strip_prefix("-h, ").unwrap_or(entry);
            let entry = entry.strip_prefix("-V, ").unwrap_or(entry);
            let flag = entry.strip_prefix("--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (line.starts_with("  ") && !name.is_empty()).then(|| format!("--{name}"))
        })
        .filter(|flag| flag != "--help" && flag != "--version")
        .collect()
}

/// The section of `guide` whose `## ` heading names `` `rebalance NAME` ``.
fn section<'a>(guide: &'a str, name: &str) -> Option<&'a str> {
    let heading = format!("## `rebalance {name}`");
    let start = guide.find(&format!("\n{heading}\n"))? + 1;
    let rest = &guide[start + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    Some(&guide[start..start + heading.len() + end])
}

/// Whether `text` writes `flag` between backticks: `` `--flag` ``, `` `--flag VALUE` `` or
/// in a list `` `--flag`, ``.
fn mentions(text: &str, flag: &str) -> bool {
    text.split('`')
        .skip(1)
        .step_by(2)
        .any(|code| code == flag || code.starts_with(&format!("{flag} ")))
}

#[test]
fn the_guide_covers_every_subcommand_and_flag() {
    let guide = std::fs::read_to_string(GUIDE).expect("read docs/guide/cli.md");
    let commands = subcommands(&help(&[]));
    assert!(
        commands.len() >= 10 && commands.iter().any(|c| c == "simulate"),
        "the subcommands were not found in `rebalance --help`: {commands:?}"
    );
    let mut missing = Vec::new();
    for command in &commands {
        let Some(text) = section(&guide, command) else {
            missing.push(format!("no section ## `rebalance {command}`"));
            continue;
        };
        let page = help(&[command]);
        let nested = subcommands(&page);
        let mut pages = vec![(command.clone(), page)];
        for sub in &nested {
            if !mentions(text, &format!("rebalance {command} {sub}")) {
                missing.push(format!(
                    "`rebalance {command} {sub}` is not named in its section"
                ));
            }
            pages.push((format!("{command} {sub}"), help(&[command, sub])));
        }
        for (name, page) in pages {
            for flag in flags(&page) {
                if !mentions(text, &flag) {
                    missing.push(format!("rebalance {name}: {flag}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/guide/cli.md does not cover (add them to the subcommand's section):\n{}",
        missing.join("\n")
    );
}

#[test]
fn help_pages_are_read_as_the_guide_expects() {
    let page = "Usage: rebalance <COMMAND>\n\nCommands:\n  allocate  Run cases\n  local-cluster  Run servers\n  help  Print this\n\nOptions:\n  -h, --help     Print help\n  -V, --version  Print version\n";
    assert_eq!(subcommands(page), ["allocate", "local-cluster"]);
    let page = "Options:\n      --queues <QUEUES>\n          Queues\n          [alias: --queues-per-topic]\n      --json  JSON\n  -h, --help\n";
    assert_eq!(flags(page), ["--queues", "--json"]);
    let guide = "# x\n\n## `rebalance a`\n\n| `--queues N` | 8 |\n`--tls`, `--json`\n\n## `rebalance b`\n\n`--other`\n";
    let a = section(guide, "a").expect("section a");
    assert!(mentions(a, "--queues") && mentions(a, "--tls") && mentions(a, "--json"));
    assert!(!mentions(a, "--other") && !mentions(a, "--queue"));
    assert!(section(guide, "c").is_none());
}
