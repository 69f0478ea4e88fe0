//! The Kafka reference vectors through the `rebalance assign` binary: the command reads every
//! case and writes Kafka's answer in the vectors' own form, exactly for the assignors whose
//! result Kafka fixes (range, round robin) and for every error. The assignors' own checks (the
//! sticky ones' validity, balance and movement, sequences, cooperative follow-ups) are the core
//! crate's `tests/kafka_vectors.rs`.

mod common;

use serde_json::{Value, json};

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/kafka-assign.jsonl"
);

fn run_assign(input: &str) -> (bool, Vec<Value>) {
    let run = common::rebalance(&["assign"], Some(input));
    (run.success, run.lines)
}

#[test]
fn assign_writes_kafkas_answers_in_the_vectors_form() {
    let text = std::fs::read_to_string(VECTORS).expect("vectors");
    let cases: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("vector"))
        .collect();
    let (ok, answers) = run_assign(&text);
    assert!(ok, "rebalance assign failed on the vectors");
    assert_eq!(answers.len(), cases.len());
    let mut failures = Vec::new();
    let mut exact = 0;
    for (case, answer) in cases.iter().zip(&answers) {
        assert_eq!(case["id"], answer["id"]);
        let fixed = case["assignor"] == "range" || case["assignor"] == "roundrobin";
        // Kafka's sticky assignors fail or keep a nonexistent owned partition; ours ignore it.
        let kept = case["category"] == "edge_owned_partition_out_of_range";
        if fixed || (!case["error"].is_null() && !kept) {
            exact += 1;
            if case["expected"] != answer["assignment"] || case["error"] != answer["error"] {
                failures.push(format!(
                    "{}: expected {} / {}, got {} / {}",
                    case["id"],
                    case["expected"],
                    case["error"],
                    answer["assignment"],
                    answer["error"]
                ));
            }
        } else if !answer["error"].is_null() || !answer["assignment"].is_object() {
            failures.push(format!("{}: no assignment: {answer}", case["id"]));
        }
    }
    assert!(exact > 50, "only {exact} exact cases");
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn malformed_lines_are_reported_and_the_exit_status_says_so() {
    let input = concat!(
        "{\"id\":\"ok\",\"assignor\":\"range\",\"partitions_per_topic\":{\"t\":2},\"members\":{\"a\":{\"topics\":[\"t\"]}}}\n",
        "{oops\n",
        "{\"id\":\"bad\",\"assignor\":\"range\",\"partitions_per_topic\":\"x\",\"members\":{}}\n",
        "{\"id\":\"unknown\",\"assignor\":\"nope\",\"partitions_per_topic\":{},\"members\":{}}\n",
        "{\"id\":\"ok2\",\"assignor\":\"broadcast\",\"partitions_per_topic\":{\"t\":1},\"members\":{\"b\":{\"topics\":[\"t\"]}}}\n",
    );
    let (ok, lines) = run_assign(input);
    assert!(!ok);
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0]["assignment"]["a"], json!([["t", 0], ["t", 1]]));
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
            .starts_with("line 3: ")
    );
    assert!(
        lines[3]["error"]
            .as_str()
            .expect("error")
            .contains("unknown assignor `nope`")
    );
    assert_eq!(lines[4]["assignment"]["b"], json!([["t", 0]]));
}
