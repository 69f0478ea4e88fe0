//! `rebalance simulate --json`: the line shapes, convergence under churn for several
//! strategies, and reproducibility.

mod common;

use serde_json::Value;

fn simulate(args: &[&str]) -> (bool, Vec<Value>) {
    let run = common::rebalance(&[&["simulate"], args].concat(), None);
    (run.success, run.lines)
}

const CHURN: &str =
    "join@5s,join@6s,leave:2@10s,crash:3@15s,ns-down@20s,join@30s,ns-up@40s,leave:0@50s";

#[test]
fn churn_converges_with_several_strategies() {
    for strategy in [
        "averagely",
        "averagely_by_circle",
        "consistent_hash",
        "machine_room_nearby",
    ] {
        let (ok, lines) = simulate(&[
            "--strategy",
            strategy,
            "--topics",
            "2",
            "--queues",
            "12",
            "--consumers",
            "4",
            "--events",
            CHURN,
            "--duration",
            "300s",
            "--seed",
            "7",
            "--json",
        ]);
        assert!(ok, "{strategy}");
        let summary = &lines.last().expect("summary")["summary"];
        assert_eq!(summary["converged"], true, "{strategy}: {summary}");
        assert!(summary["rounds"].as_u64().unwrap() > 10);
        assert!(summary["moves"].as_u64().unwrap() > 0);
        // The crashed client held queues that nobody consumed until it expired.
        assert!(summary["unowned_queue_ms"].as_u64().unwrap() > 0);

        let clients: Vec<&Value> = lines.iter().filter(|l| l.get("status").is_some()).collect();
        assert_eq!(clients.len(), 7, "4 initial + 3 joined");
        let statuses: Vec<&str> = clients
            .iter()
            .map(|c| c["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            [
                "left", "running", "left", "crashed", "running", "running", "running"
            ]
        );
        let owned: usize = clients
            .iter()
            .map(|c| c["owned"].as_array().unwrap().len())
            .sum();
        assert_eq!(
            owned, 24,
            "{strategy}: running clients own every queue exactly once"
        );

        let callbacks: Vec<&Value> = lines.iter().filter(|l| l.get("event").is_some()).collect();
        let mut last = 0;
        for c in &callbacks {
            let t = c["t_ms"].as_u64().unwrap();
            assert!(t >= last, "callbacks in time order");
            last = t;
            assert!(["added", "removed"].contains(&c["event"].as_str().unwrap()));
            assert!(c["topic"].as_str().unwrap().starts_with("topic-"));
            for q in c["queues"].as_array().unwrap() {
                assert_eq!(q.as_array().unwrap().len(), 3);
            }
        }
    }
}

/// The summary line of `simulate --json` with `args`.
fn summary_of(args: &[&str]) -> Value {
    let (ok, lines) = simulate(args);
    assert!(ok, "{args:?}");
    let summary = lines.last().expect("summary")["summary"].clone();
    assert_eq!(summary["converged"], true, "{args:?}: {summary}");
    summary
}

fn moves(s: &Value) -> u64 {
    s["moves"].as_u64().unwrap()
}

fn double(s: &Value) -> u64 {
    s["double_owned_queue_ms"].as_u64().unwrap()
}

fn unowned(s: &Value) -> u64 {
    s["unowned_queue_ms"].as_u64().unwrap()
}

/// Ten members starting within 500 ms, then ten joining 500 ms apart: with `--settle 1s`, and by
/// default (adaptive), every client waits for the group to settle, so queues move far less and
/// are never held twice.
///
/// By default the first of the ten starts alone (the next one arrives 55 ms later with this
/// seed): it takes every queue 20 ms after its start (a lone member does not wait for
/// a group: BENCHMARKS.md, "A lone member's first message"), and gives them all back at once when the second arrives, so that nothing is ever
/// held twice; that costs the queues it ends without, 180 moves, measured apart here (the same
/// start without the joins). The joins themselves move as few queues as with the fixed window.
#[test]
fn settling_damps_a_burst_of_joins() {
    let burst: Vec<String> = (0..10)
        .map(|i| format!("join@{}ms", 5000 + 500 * i))
        .collect();
    let burst = burst.join(",");
    let summary = |settle: &str, events: &str| {
        let mut args = vec![
            "--strategy",
            "balanced_sticky",
            "--queues",
            "200",
            "--brokers",
            "4",
            "--consumers",
            "10",
            "--events",
            events,
            "--json",
        ];
        // `default`: no `--settle`, the consumers' default (adaptive).
        if settle != "default" {
            args.extend(["--settle", settle]);
        }
        summary_of(&args)
    };
    let eager = summary("0s", &burst);
    let settled = summary("1s", &burst);
    let adaptive = summary("default", &burst);
    assert_eq!(adaptive, summary("adaptive", &burst));
    assert!(
        moves(&settled) * 3 < moves(&eager),
        "moves: {} settled, {} eager",
        moves(&settled),
        moves(&eager)
    );
    assert!(double(&eager) > 0);
    assert_eq!(
        double(&settled),
        0,
        "every hand-off happens in one settled round"
    );
    // The default adapts to the joins' pace (500 ms), and never holds a queue twice.
    assert_eq!(double(&adaptive), 0, "{adaptive}");
    let start_only = |settle| summary(settle, "");
    let (eager_start, settled_start, adaptive_start) =
        (start_only("0s"), start_only("1s"), start_only("default"));
    assert_eq!(double(&adaptive_start), 0, "{adaptive_start}");
    assert_eq!(moves(&settled_start), 0);
    assert!(
        moves(&adaptive_start) <= 200 - 200 / 10,
        "only the queues the first member gave back move: {adaptive_start}"
    );
    let joins = |all: &Value, start: &Value| moves(all) - moves(start);
    assert!(
        joins(&adaptive, &adaptive_start) * 4 <= joins(&settled, &settled_start) * 5,
        "the joins move about as few queues as with the fixed window: {} adaptive, {} settled",
        joins(&adaptive, &adaptive_start),
        joins(&settled, &settled_start)
    );
    assert!(
        joins(&adaptive, &adaptive_start) < joins(&eager, &eager_start),
        "{adaptive} against {eager}"
    );
}

/// A member alone in its group takes its queues `AdaptiveSettle::min` (20 ms)
/// after its start, not after a group's settle window: against a fixed 1 s window, each of the
/// 2,000 queues is unowned at least 900 ms less (the member's start is the same in both runs).
#[test]
fn a_lone_member_does_not_wait_for_a_group() {
    let lone = |settle: &str| {
        let mut args = vec![
            "--queues",
            "2000",
            "--brokers",
            "4",
            "--consumers",
            "1",
            "--duration",
            "5s",
            "--json",
        ];
        if settle != "default" {
            args.extend(["--settle", settle]);
        }
        summary_of(&args)
    };
    let (adaptive, settled) = (lone("default"), lone("1s"));
    assert_eq!(moves(&adaptive), 0);
    assert!(
        unowned(&settled) - unowned(&adaptive) >= 2000 * 900,
        "{adaptive} against {settled}"
    );
    assert_eq!(unowned(&settled) - unowned(&adaptive), 2000 * 980);
}

#[test]
fn group_assignors_converge_leaderlessly() {
    for assignor in ["range", "roundrobin", "cooperative_sticky"] {
        let (ok, lines) = simulate(&[
            "--assignor",
            assignor,
            "--topics",
            "2",
            "--queues",
            "6",
            "--consumers",
            "3",
            "--events",
            CHURN,
            "--duration",
            "300s",
            "--json",
        ]);
        assert!(ok, "{assignor}");
        let summary = &lines.last().expect("summary")["summary"];
        assert_eq!(summary["converged"], true, "{assignor}: {summary}");
    }
}

#[test]
fn the_same_seed_gives_the_same_story() {
    let args = [
        "--consumers",
        "5",
        "--events",
        CHURN,
        "--duration",
        "120s",
        "--seed",
        "3",
        "--json",
    ];
    assert_eq!(simulate(&args), simulate(&args));
}

#[test]
fn bad_arguments_are_reported() {
    let (ok, _) = simulate(&["--events", "leave:9@1s"]);
    assert!(!ok);
    let (ok, _) = simulate(&["--strategy", "nope"]);
    assert!(!ok);
    let (ok, _) = simulate(&["--events", "dance@1s"]);
    assert!(!ok);
}

/// The floor of a start-up storm's unowned time is real (BENCHMARKS.md, "Start-up storm"). Fifty members start
/// within 500 ms on 2,000 queues; whatever the settle window, a run that moves no queue leaves
/// every queue unowned until the last member has started (a plan made before then gives the
/// members present more than their final shares, which they must hand over), so its unowned
/// time is at least 2,000 x the last start; and a run that owns queues sooner moves queues.
/// BENCHMARKS.md ("Start-up storm") has the same sweep on 500 members and 20,000 queues.
#[test]
fn a_start_without_moves_owns_nothing_before_the_last_member_arrives() {
    const QUEUES: u64 = 2000;
    let mut move_free = 0;
    let mut sooner = 0;
    for settle in ["1ms", "5ms", "20ms", "100ms", "1s", "default"] {
        let mut args = vec![
            "--queues",
            "2000",
            "--brokers",
            "4",
            "--consumers",
            "50",
            "--duration",
            "3s",
            "--json",
        ];
        if settle != "default" {
            args.extend(["--settle", settle]);
        }
        let (ok, lines) = simulate(&args);
        assert!(ok, "{args:?}");
        let summary = lines.last().expect("summary")["summary"].clone();
        let last_start = lines
            .iter()
            .filter_map(|l| l.get("started_ms").and_then(Value::as_u64))
            .max()
            .expect("clients started");
        let floor = QUEUES * last_start;
        if moves(&summary) == 0 {
            move_free += 1;
            assert!(
                unowned(&summary) >= floor,
                "--settle {settle}: {summary}, floor {floor}"
            );
        }
        if unowned(&summary) < floor {
            sooner += 1;
            assert!(moves(&summary) > 0, "--settle {settle}: {summary}");
        }
    }
    assert!(move_free > 0 && sooner > 0, "the sweep shows both sides");
}
