//! `--help` names the values a user must type, so that a user can find them without reading
//! the source: `--scenario initial|member_left`, and the strategy and assignor names that
//! `--strategy NAME` and `--assignor NAME` take.

use rebalance_core::assignor::AssignorRegistry;
use rebalance_core::strategy::StrategyRegistry;

mod common;

use common::rebalance_text;

/// `text` without case, `_` and `-`: `round_robin`, `roundrobin` and `RoundRobin` alike.
fn spelled_alike(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn help(command: &str) -> String {
    let run = rebalance_text(&[command, "--help"]);
    assert_eq!(run.code, Some(0), "{command} --help: {}", run.stderr);
    run.stdout
}

/// The text of `--option`'s entry in a `--help` page: from its line to the next option.
fn entry<'a>(page: &'a str, option: &str) -> &'a str {
    let start = page
        .find(&format!("      {option} "))
        .unwrap_or_else(|| panic!("{option} missing from:\n{page}"));
    let rest = &page[start + option.len() + 6..];
    let end = rest.find("\n      --").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn bench_help_names_both_scenarios() {
    let page = help("bench");
    let scenario = entry(&page, "--scenario");
    for value in ["initial", "member_left"] {
        assert!(
            scenario.contains(value),
            "`{value}` missing from --scenario's help:\n{scenario}"
        );
    }
}

#[test]
fn the_scenario_names_in_the_help_are_accepted() {
    for value in ["initial", "member_left"] {
        let run = rebalance_text(&[
            "bench",
            "--assignor",
            "range",
            "--topics",
            "1",
            "--partitions",
            "4",
            "--members",
            "3",
            "--scenario",
            value,
            "--runs",
            "1",
            "--json",
        ]);
        assert_eq!(run.code, Some(0), "--scenario {value}: {}", run.stderr);
        let line: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
        assert_eq!(line["scenario"], value);
    }
    let run = rebalance_text(&[
        "bench",
        "--assignor",
        "range",
        "--topics",
        "1",
        "--partitions",
        "4",
        "--members",
        "3",
        "--scenario",
        "sideways",
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("member_left"), "{}", run.stderr);
}

#[test]
fn strategy_options_name_the_strategies() {
    for command in ["bench", "simulate", "plan", "describe"] {
        let page = help(command);
        let strategy = entry(&page, "--strategy");
        // The Java client's names (`AVG`, `CONSISTENT_HASH`, ...) are aliases.
        let registry = StrategyRegistry::default();
        for name in registry
            .names()
            .filter(|n| !n.chars().any(|c| c.is_uppercase()))
        {
            assert!(
                strategy.contains(name),
                "{command}: `{name}` missing from --strategy's help:\n{strategy}"
            );
        }
    }
}

#[test]
fn assignor_options_name_the_assignors() {
    for command in ["bench", "simulate"] {
        let page = help(command);
        let assignor = entry(&page, "--assignor");
        let registry = AssignorRegistry::default();
        for name in registry.names() {
            assert!(
                // `round_robin` and `cooperative-sticky` are spellings of the names shown.
                spelled_alike(assignor).contains(&spelled_alike(name)),
                "{command}: `{name}` missing from --assignor's help:\n{assignor}"
            );
        }
    }
}
