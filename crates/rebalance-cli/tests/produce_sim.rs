//! `rebalance produce-sim --json`: the line shapes, fault avoidance cutting sends to a slow
//! broker, retries around a failing one, reproducibility and argument errors.

mod common;

use serde_json::Value;

fn produce_sim(args: &[&str]) -> (bool, Vec<Value>, String) {
    let run = common::rebalance(&[&["produce-sim"], args].concat(), None);
    (run.success, run.lines, run.stderr)
}

fn broker_line<'a>(lines: &'a [Value], avoidance: bool, broker: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["avoidance"] == avoidance && l["broker"] == broker && l.get("queue").is_none())
        .unwrap_or_else(|| panic!("no line for {broker}"))
}

#[test]
fn lines_per_broker_and_queue_then_a_summary() {
    let (ok, lines, err) = produce_sim(&[
        "--brokers",
        "3",
        "--queues",
        "2",
        "--messages",
        "60",
        "--slow-broker",
        "broker-1:2000",
        "--json",
    ]);
    assert!(ok, "{err}");
    // Per run: 3 broker lines and 6 queue lines; then one summary.
    assert_eq!(lines.len(), 2 * (3 + 6) + 1);
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["messages"], 60);
    assert_eq!(summary["brokers"], 3);
    assert_eq!(summary["queues_per_broker"], 2);
    assert_eq!(summary["retries"], 2);
    for run in ["without_avoidance", "with_avoidance"] {
        for key in [
            "delivered",
            "lost",
            "attempts",
            "failing_hits",
            "slow_hits",
            "elapsed_ms",
            "mean_send_ms",
        ] {
            assert!(summary[run][key].is_number(), "{run}.{key}: {summary}");
        }
        assert_eq!(summary[run]["delivered"], 60);
    }
    // Round robin without avoidance: a third of the messages waits 2 s each.
    assert_eq!(summary["without_avoidance"]["slow_hits"], 20);
    // With avoidance: one slow send, then broker-1 is avoided for 120 s.
    assert_eq!(summary["with_avoidance"]["slow_hits"], 1);
    let slow = broker_line(&lines, true, "broker-1");
    assert_eq!(slow["slow_ms"], 2000);
    assert_eq!(slow["attempts"], 1);
    assert_eq!(broker_line(&lines, false, "broker-1")["attempts"], 20);
    assert_eq!(
        broker_line(&lines, false, "broker-0")["slow_ms"],
        Value::Null
    );
    // The queue lines add up to their broker's line.
    for avoidance in [false, true] {
        for b in 0..3 {
            let name = format!("broker-{b}");
            let queues: u64 = lines
                .iter()
                .filter(|l| {
                    l["avoidance"] == avoidance
                        && l["broker"] == name.as_str()
                        && l.get("queue").is_some()
                })
                .map(|l| l["attempts"].as_u64().unwrap())
                .sum();
            assert_eq!(broker_line(&lines, avoidance, &name)["attempts"], queues);
        }
    }
    let without = summary["without_avoidance"]["elapsed_ms"].as_u64().unwrap();
    let with = summary["with_avoidance"]["elapsed_ms"].as_u64().unwrap();
    assert!(with * 10 < without, "{with} vs {without}");
}

#[test]
fn failing_brokers_are_retried_around_and_avoided() {
    let (ok, lines, err) = produce_sim(&[
        "--brokers",
        "4",
        "--queues",
        "4",
        "--messages",
        "400",
        "--fail-broker",
        "broker-3",
        "--slow-broker",
        "broker-0:600",
        "--json",
    ]);
    assert!(ok, "{err}");
    let summary = &lines.last().unwrap()["summary"];
    for run in ["without_avoidance", "with_avoidance"] {
        assert_eq!(summary[run]["delivered"], 400, "{summary}");
        assert_eq!(summary[run]["lost"], 0);
        let attempts = summary[run]["attempts"].as_u64().unwrap();
        let failing = summary[run]["failing_hits"].as_u64().unwrap();
        assert_eq!(attempts, 400 + failing, "one retry per failure");
    }
    // About one message in twelve meets broker-3 first (its four queues are one turn: the retry
    // consumes the other three).
    assert!(
        summary["without_avoidance"]["failing_hits"]
            .as_u64()
            .unwrap()
            > 25
    );
    assert_eq!(summary["with_avoidance"]["failing_hits"], 1);
    assert_eq!(summary["with_avoidance"]["slow_hits"], 1);
    let failing = broker_line(&lines, false, "broker-3");
    assert_eq!(failing["failing"], true);
    assert_eq!(failing["delivered"], 0);
    assert_eq!(failing["failed"], failing["attempts"]);
}

#[test]
fn runs_are_reproducible() {
    let args = [
        "--messages",
        "300",
        "--slow-broker",
        "broker-2:3000",
        "--fail-broker",
        "broker-1",
        "--interval",
        "50ms",
        "--json",
    ];
    assert_eq!(produce_sim(&args).1, produce_sim(&args).1);
}

#[test]
fn bad_arguments_are_reported() {
    for args in [
        &["--slow-broker", "broker-7:10"][..],
        &["--slow-broker", "broker-1"],
        &["--fail-broker", "nope"],
        &["--brokers", "0"],
        &["--queues", "-1"],
    ] {
        let (ok, _, err) = produce_sim(args);
        assert!(!ok, "{args:?}");
        assert!(!err.is_empty(), "{args:?}");
    }
}
