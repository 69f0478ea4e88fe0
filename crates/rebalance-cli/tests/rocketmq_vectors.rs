//! Every RocketMQ reference vector through the `rebalance allocate` binary: same queues in the
//! same order for every queried id, and an error exactly where Java threw one.

use std::process::Command;

use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/rocketmq-allocate.jsonl"
);

#[test]
fn allocate_matches_every_java_vector() {
    let output = Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .args(["allocate", VECTORS])
        .output()
        .expect("run rebalance");
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(VECTORS).expect("vectors");
    let cases: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("vector"))
        .collect();
    let answers: Vec<Value> = String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("answer line is JSON"))
        .collect();
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .arg("allocate")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run rebalance");
    let input = concat!(
        "{\"id\":\"ok\",\"strategy\":\"averagely\",\"params\":{},\"group\":\"G\",\"mq_all\":[[\"T\",\"b\",0]],\"cid_all\":[\"a\"]}\n",
        "{oops\n",
        "{\"id\":\"bad\",\"strategy\":\"averagely\",\"params\":{},\"group\":\"G\",\"mq_all\":\"x\",\"cid_all\":[\"a\"]}\n",
        "{\"id\":\"ok2\",\"strategy\":\"averagely_by_circle\",\"params\":{},\"group\":\"G\",\"mq_all\":[[\"T\",\"b\",0]],\"cid_all\":[\"a\"]}\n",
    );
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let output = child.wait_with_output().expect("wait");
    assert!(!output.status.success());
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("every output line is JSON"))
        .collect();
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
