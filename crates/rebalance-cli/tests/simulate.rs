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

/// Ten members starting together, then ten joining 500 ms apart: with `--settle 1s`, and by
/// default (adaptive), every client waits for the group to settle, so queues move far less and
/// are never held twice.
#[test]
fn settling_damps_a_burst_of_joins() {
    let burst: Vec<String> = (0..10)
        .map(|i| format!("join@{}ms", 5000 + 500 * i))
        .collect();
    let burst = burst.join(",");
    let summary = |settle: &str| {
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
            &burst,
            "--json",
        ];
        // `default`: no `--settle`, the consumers' default (adaptive).
        if settle != "default" {
            args.extend(["--settle", settle]);
        }
        let (ok, lines) = simulate(&args);
        assert!(ok, "--settle {settle}");
        let summary = lines.last().expect("summary")["summary"].clone();
        assert_eq!(summary["converged"], true, "--settle {settle}: {summary}");
        summary
    };
    let eager = summary("0s");
    let settled = summary("1s");
    let adaptive = summary("default");
    assert_eq!(adaptive, summary("adaptive"));
    let moves = |s: &Value| s["moves"].as_u64().unwrap();
    let double = |s: &Value| s["double_owned_queue_ms"].as_u64().unwrap();
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
    // The default adapts to the joins' pace (500 ms): as calm as the fixed window.
    assert!(
        moves(&adaptive) * 3 < moves(&eager),
        "moves: {} adaptive, {} eager",
        moves(&adaptive),
        moves(&eager)
    );
    assert_eq!(double(&adaptive), 0, "{adaptive}");
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
