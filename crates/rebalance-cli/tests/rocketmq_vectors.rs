//! Every RocketMQ reference vector through the `rebalance allocate` binary: the command reads
//! every case and writes Java's answer in the vectors' own form. (The strategies' own parity,
//! by plan and by each member's call, is the core crate's `tests/rocketmq_vectors.rs`.)

mod common;

use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/rocketmq-allocate.jsonl"
);

#[test]
fn allocate_matches_every_java_vector() {
    matches_every_java_vector(&["allocate", VECTORS]);
}

/// `--each-member` asks every member with its own call: the command's output is the same.
#[test]
fn each_member_gives_the_same_output() {
    let plan = common::rebalance(&["allocate", VECTORS], None);
    let each = common::rebalance(&["allocate", "--each-member", VECTORS], None);
    assert!(each.success, "stderr: {}", each.stderr);
    assert_eq!(plan.lines.len(), each.lines.len());
    assert!(
        plan.lines == each.lines,
        "the two methods answer differently"
    );
}

fn matches_every_java_vector(args: &[&str]) {
    let run = common::rebalance(args, None);
    assert!(run.success, "stderr: {}", run.stderr);
    let text = std::fs::read_to_string(VECTORS).expect("vectors");
    let cases: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("vector"))
        .collect();
    let answers = run.lines;
    assert_eq!(answers.len(), cases.len());
    let mut failures = Vec::new();
    for (case, answer) in cases.iter().zip(&answers) {
        assert_eq!(case["id"], answer["id"]);
        if case["expected"] != answer["plan"] || case["errors"] != answer["errors"] {
            failures.push(format!(
                "{}: expected {} errors {}, got {} errors {}",
                case["id"], case["expected"], case["errors"], answer["plan"], answer["errors"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} RocketMQ vectors passed", cases.len());
}

#[test]
fn malformed_lines_are_reported_and_the_exit_status_says_so() {
    let input = concat!(
        "{\"id\":\"ok\",\"strategy\":\"averagely\",\"params\":{},\"group\":\"G\",\"mq_all\":[[\"T\",\"b\",0]],\"cid_all\":[\"a\"]}\n",
        "{oops\n",
        "{\"id\":\"bad\",\"strategy\":\"averagely\",\"params\":{},\"group\":\"G\",\"mq_all\":\"x\",\"cid_all\":[\"a\"]}\n",
        "{\"id\":\"ok2\",\"strategy\":\"averagely_by_circle\",\"params\":{},\"group\":\"G\",\"mq_all\":[[\"T\",\"b\",0]],\"cid_all\":[\"a\"]}\n",
    );
    let run = common::rebalance(&["allocate"], Some(input));
    assert!(!run.success);
    let lines = run.lines;
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["plan"]["a"], serde_json::json!([["T", "b", 0]]));
    assert!(
        lines[1]["error"]
            .as_str()
            .expect("error")
            .starts_with("line 2: bad JSON")
    );
    assert_eq!(lines[2]["id"], "bad");
    assert!(
        lines[2]["error"]
            .as_str()
            .expect("error")
            .contains("line 3")
    );
    assert_eq!(lines[3]["id"], "ok2");
}
