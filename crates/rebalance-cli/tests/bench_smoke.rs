//! The quick smoke of `rebalance bench` and `rebalance compare` that CI runs: tiny sizes, and a
//! check of the JSON lines' shape (the benchmarks themselves are run by hand, see BENCHMARKS.md).

mod common;

use serde_json::Value;

fn rebalance(args: &[&str]) -> Vec<Value> {
    let run = common::rebalance(args, None);
    assert!(run.success, "rebalance {args:?}: {}", run.stderr);
    run.lines
}

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

#[test]
fn strategy_bench_prints_one_json_line() {
    for (strategy, extra) in [
        ("averagely", None),
        (
            "machine_room_nearby",
            Some("inner_strategy=consistent_hash"),
        ),
        ("by_machine_room", None),
        ("balanced_sticky", None),
    ] {
        let mut args = vec![
            "bench",
            "--strategy",
            strategy,
            "--queues",
            "40",
            "--consumers",
            "6",
            "--runs",
            "3",
            "--json",
        ];
        if let Some(p) = extra {
            args.extend(["--param", p]);
        }
        let lines = rebalance(&args);
        assert_eq!(lines.len(), 1);
        let v = &lines[0];
        assert_eq!(v["strategy"], strategy);
        assert_eq!(v["queues"], 40);
        assert_eq!(v["consumers"], 6);
        assert_eq!(v["runs"], 3);
        assert!(
            number(v, "single_us") > 0.0 && number(v, "plan_us") > 0.0,
            "{v}"
        );
    }
}

#[test]
fn assignor_bench_prints_one_json_line_with_moves() {
    for (assignor, scenario) in [
        ("range", "initial"),
        ("sticky", "member_left"),
        ("cooperative_sticky", "member_left"),
    ] {
        let lines = rebalance(&[
            "bench",
            "--assignor",
            assignor,
            "--topics",
            "3",
            "--partitions",
            "10",
            "--members",
            "4",
            "--scenario",
            scenario,
            "--runs",
            "3",
            "--json",
        ]);
        assert_eq!(lines.len(), 1);
        let v = &lines[0];
        for (key, expected) in [
            ("assignor", Value::from(assignor)),
            ("topics", Value::from(3)),
            ("partitions", Value::from(10)),
            ("members", Value::from(4)),
            ("scenario", Value::from(scenario)),
        ] {
            assert_eq!(v[key], expected, "{key} in {v}");
        }
        assert!(number(v, "median_us") > 0.0);
        assert_eq!(v["moved"], 0, "sticky assignors keep what members own: {v}");
    }
}

#[test]
fn bench_refuses_incomplete_arguments() {
    let run = common::rebalance(
        &["bench", "--strategy", "averagely", "--queues", "10"],
        None,
    );
    assert!(!run.success);
    assert!(run.stderr.contains("--consumers"));
}

#[test]
fn compare_prints_a_line_per_strategy_and_event_and_draws_the_chart() {
    let svg = std::env::temp_dir().join(format!("rebalance-compare-{}.svg", std::process::id()));
    let svg_arg = svg.to_string_lossy().to_string();
    let lines = rebalance(&[
        "compare",
        "--queues",
        "64",
        "--consumers",
        "5",
        "--events",
        "join,leave:3,join,leave:0",
        "--strategies",
        "averagely,balanced_sticky",
        "--json",
        "--svg",
        &svg_arg,
    ]);
    // A start line and four events, for each of the two strategies.
    assert_eq!(lines.len(), 10);
    for v in &lines {
        for key in [
            "strategy",
            "event",
            "spread",
            "max_over_mean",
            "moved",
            "min_moves",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        // Both strategies keep shares within one, so the minimum is a lower bound for them.
        assert!(v["moved"].as_u64() >= v["min_moves"].as_u64(), "{v}");
    }
    let sticky: Vec<&Value> = lines
        .iter()
        .filter(|v| v["strategy"] == "balanced_sticky")
        .collect();
    assert!(sticky.iter().all(|v| v["spread"].as_u64() <= Some(1)));
    assert_eq!(sticky[2]["event"], "leave:3");
    let chart = std::fs::read_to_string(&svg).expect("chart written");
    let _ = std::fs::remove_file(&svg);
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
    assert!(chart.contains("balanced_sticky") && chart.contains("leave:3"));
}

#[test]
fn compare_sample_reports_totals_per_strategy() {
    let lines = rebalance(&[
        "compare",
        "--queues",
        "200",
        "--consumers",
        "20",
        "--sample",
        "6",
        "--strategies",
        "balanced_sticky,averagely",
        "--json",
    ]);
    assert_eq!(lines.len(), 2);
    for v in &lines {
        assert_eq!(v["samples"], 6);
        assert!(v["moved"].as_u64() >= v["min_moves"].as_u64(), "{v}");
    }
}
