//! The second audit's repro commands: each must now end at once with a clear error that names
//! the argument or file (exit status 2, nothing on standard output), never abort, hang or
//! silently do something else. Every refusal happens before anything is built, so these runs
//! need neither memory nor time.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{rebalance, rebalance_text};

/// Runs `args`, expects exit status 2, nothing on standard output, and standard error holding
/// every one of `needles`.
fn refused(args: &[&str], needles: &[&str]) {
    let run = rebalance_text(args);
    assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
    assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout);
    for needle in needles {
        assert!(
            run.stderr.contains(needle),
            "{args:?}: `{needle}` missing from {}",
            run.stderr
        );
    }
    assert!(!run.stderr.contains("panicked"), "{args:?}: {}", run.stderr);
}

const GOOD_CASE: &str = r#"{"id":0,"assignor":"range","partitions_per_topic":{"t":3},"members":{"a":{"topics":["t"]}}}"#;
const HUGE_CASE: &str = r#"{"id":1,"assignor":"broadcast","partitions_per_topic":{"t":3000000000},"members":{"a":{"topics":["t"]}}}"#;

#[test]
fn assign_answers_the_good_line_and_refuses_a_huge_partition_count() {
    let input = format!("{GOOD_CASE}\n{HUGE_CASE}\n{GOOD_CASE}\n");
    let run = rebalance(&["assign"], Some(&input));
    assert!(!run.success);
    assert_eq!(run.lines.len(), 3, "{:?}", run.lines);
    assert_eq!(run.lines[0]["assignment"]["a"].as_array().unwrap().len(), 3);
    assert_eq!(run.lines[1]["line"], 2);
    assert_eq!(run.lines[1]["id"], 1);
    let error = run.lines[1]["error"].as_str().unwrap();
    assert!(
        error.contains("partitions_per_topic `t`: 3000000000 is more than 2147483647"),
        "{error}"
    );
    assert_eq!(run.lines[2]["id"], 0, "the run goes on after the bad line");
}

#[test]
fn assign_refuses_negative_counts_and_too_many_partitions_per_case() {
    let cases = [
        r#"{"id":"neg","assignor":"range","partitions_per_topic":{"t":-3},"members":{"a":{"topics":["t"]}}}"#,
        r#"{"id":"big","assignor":"range","partitions_per_topic":{"t":2000000000,"u":2000000000},"members":{"a":{"topics":["t","u"]}}}"#,
        r#"{"id":"fan","assignor":"broadcast","partitions_per_topic":{"t":5000000},"members":{"a":{"topics":["t"]},"b":{"topics":["t"]},"c":{"topics":["t"]}}}"#,
    ];
    let run = rebalance(&["assign"], Some(&cases.join("\n")));
    assert!(!run.success);
    let errors: Vec<&str> = run
        .lines
        .iter()
        .map(|l| l["error"].as_str().unwrap())
        .collect();
    assert!(errors[0].contains("`t`: -3 is negative"), "{errors:?}");
    assert!(
        errors[1].contains("4000000000 partitions in all; at most 10000000 per case"),
        "{errors:?}"
    );
    assert!(
        errors[2].contains("15000000 member-partition pairs"),
        "{errors:?}"
    );
}

/// Reads standard output on another thread, so that a line that never comes fails the test
/// instead of hanging it.
fn lines_of(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn each_answer_is_out_before_the_next_line_is_read() {
    for (command, case) in [
        ("assign", GOOD_CASE),
        (
            "allocate",
            r#"{"id":0,"strategy":"averagely","mq_all":[["T","b",0]],"cid_all":["a"]}"#,
        ),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rebalance"))
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        // The input stays open: the answer must come out while the command waits for more.
        writeln!(stdin, "{case}").unwrap();
        let first = lines.recv_timeout(Duration::from_secs(60));
        writeln!(stdin, "not json").unwrap();
        let second = lines.recv_timeout(Duration::from_secs(60));
        drop(stdin);
        let status = child.wait().unwrap();
        let first = first.unwrap_or_else(|e| panic!("{command}: first answer not flushed: {e}"));
        assert!(first.starts_with(r#"{"id":0,"#), "{command}: {first}");
        let second = second.unwrap_or_else(|e| panic!("{command}: error line not flushed: {e}"));
        assert!(second.contains("line 2: bad JSON"), "{command}: {second}");
        assert_eq!(status.code(), Some(1), "{command}");
    }
}

#[test]
fn simulate_refuses_brokers_it_cannot_build() {
    refused(
        &[
            "simulate",
            "--queues",
            "65537",
            "--brokers",
            "1",
            "--duration",
            "3s",
        ],
        &[
            "rebalance simulate:",
            "--queues 65537 over --brokers 1",
            "at most 65536",
        ],
    );
    refused(
        &["simulate", "--brokers", "0"],
        &["'--brokers <BROKERS>'", "at least 1"],
    );
    // 65,536 per broker is fine: the limit is refused above it only.
    let run = rebalance_text(&[
        "simulate",
        "--queues",
        "131072",
        "--brokers",
        "2",
        "--consumers",
        "0",
        "--duration",
        "1ms",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

#[test]
fn missing_files_are_named() {
    refused(
        &[
            "compare",
            "--queues",
            "10",
            "--consumers",
            "3",
            "--events",
            "join",
            "--svg",
            "/nonexistent/x.svg",
        ],
        &["rebalance compare: --svg `/nonexistent/x.svg`: "],
    );
    refused(
        &["allocate", "/nonexistent/cases.jsonl"],
        &["rebalance allocate: cannot open `/nonexistent/cases.jsonl`: "],
    );
    refused(
        &["assign", "/nonexistent/cases.jsonl"],
        &["rebalance assign: cannot open `/nonexistent/cases.jsonl`: "],
    );
    // A directory opens but cannot be read: named too.
    let dir = env!("CARGO_MANIFEST_DIR");
    refused(
        &["allocate", dir],
        &["rebalance allocate: reading line 1 of `", dir],
    );
}

#[test]
fn compare_writes_the_chart_and_leaves_no_file_when_it_fails() {
    let dir = std::env::temp_dir().join(format!("rebalance-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.svg");
    let args = |events: &str, path: &std::path::Path| {
        rebalance_text(&[
            "compare",
            "--queues",
            "10",
            "--consumers",
            "3",
            "--events",
            events,
            "--strategies",
            "averagely",
            "--svg",
            path.to_str().unwrap(),
        ])
    };
    let run = args("join", &good);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(std::fs::read_to_string(&good).unwrap().starts_with("<svg"));
    let bad = dir.join("bad.svg");
    let run = args("leave:9", &bad);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("leave:9"), "{}", run.stderr);
    assert!(!bad.exists(), "a failed comparison leaves no empty chart");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn absurd_sizes_are_refused_naming_the_argument() {
    refused(
        &[
            "compare",
            "--queues",
            "4294967295",
            "--consumers",
            "3",
            "--events",
            "join",
        ],
        &["'--queues <QUEUES>'", "at most 10000000"],
    );
    refused(
        &[
            "bench",
            "--strategy",
            "averagely",
            "--queues",
            "4000000000",
            "--consumers",
            "2",
        ],
        &["'--queues <QUEUES>'", "at most 10000000"],
    );
    refused(
        &["simulate", "--consumers", "4000000000"],
        &["'--consumers <CONSUMERS>'", "at most 10000"],
    );
    refused(
        &["simulate", "--brokers", "4000000000"],
        &["'--brokers <BROKERS>'", "at most 100000"],
    );
    refused(
        &["simulate", "--topics", "100000000"],
        &["'--topics <TOPICS>'", "at most 100000"],
    );
    refused(
        &[
            "simulate",
            "--topics",
            "1000",
            "--queues",
            "100000",
            "--brokers",
            "100",
        ],
        &["--topics 1000 x --queues 100000", "10000000 queues in all"],
    );
    refused(
        &[
            "bench",
            "--strategy",
            "balanced_sticky",
            "--param",
            "virtual_nodes=65536",
            "--queues",
            "100",
            "--consumers",
            "2000",
        ],
        &["rebalance bench:", "2000 members x 65536 virtual nodes"],
    );
    refused(
        &[
            "bench",
            "--assignor",
            "broadcast",
            "--topics",
            "1000",
            "--partitions",
            "1000",
            "--members",
            "2000",
        ],
        &["rebalance bench:", "member-partition pairs"],
    );
    refused(
        &[
            "bench",
            "--assignor",
            "range",
            "--topics",
            "1000",
            "--partitions",
            "4000000000",
            "--members",
            "2",
        ],
        &["'--partitions <PARTITIONS>'", "at most 10000000"],
    );
}

#[test]
fn huge_durations_and_counts_are_refused() {
    refused(
        &["simulate", "--duration", "99999999999h"],
        &["'--duration <DURATION>'", "at most 604800s"],
    );
    refused(
        &["produce-sim", "--interval", "99999999999h"],
        &["'--interval <INTERVAL>'", "at most 3600s"],
    );
    refused(
        &["produce-sim", "--latency", "99999999999h"],
        &["'--latency <LATENCY>'", "at most 3600s"],
    );
    refused(
        &[
            "produce-sim",
            "--slow-broker",
            "broker-1:18446744073709551615",
        ],
        &["'--slow-broker <SLOW_BROKERS>'", "at most 3600000 ms"],
    );
    refused(
        &[
            "produce-sim",
            "--retries",
            "4294967295",
            "--fail-broker",
            "broker-0",
            "--brokers",
            "1",
        ],
        &["'--retries <RETRIES>'", "at most 100"],
    );
    refused(
        &["produce-sim", "--messages", "10000000", "--retries", "100"],
        &["rebalance produce-sim:", "1010000000 send attempts"],
    );
}

#[test]
fn smaller_findings() {
    // The strategy is built before the (unreachable) name server is asked.
    refused(
        &[
            "plan",
            "--namesrv",
            "127.0.0.1:1",
            "--group",
            "G",
            "--topic",
            "T",
            "--strategy",
            "nope",
        ],
        &["rebalance plan: unknown strategy `nope`"],
    );
    refused(
        &[
            "bench",
            "--strategy",
            "averagely",
            "--queues",
            "10",
            "--consumers",
            "2",
            "--runs",
            "0",
        ],
        &["'--runs <RUNS>'", "at least 1"],
    );
    refused(
        &["simulate", "--events", "join@500s", "--duration", "10s"],
        &[
            "--events: Join at 500s comes after the end",
            "--duration 10s",
        ],
    );
}

#[test]
fn unknown_params_warn_and_known_ones_do_not() {
    for args in [
        &[
            "simulate",
            "--param",
            "foo=bar",
            "--duration",
            "1s",
            "--json",
        ][..],
        &[
            "simulate",
            "--assignor",
            "range",
            "--param",
            "foo=1",
            "--duration",
            "1s",
            "--json",
        ],
    ] {
        let run = rebalance(args, None);
        assert!(run.success, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("rebalance simulate: warning: --param foo:"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.lines.last().unwrap().get("summary").is_some());
    }
    let run = rebalance(
        &[
            "simulate",
            "--strategy",
            "consistent_hash",
            "--param",
            "virtual_node_count=5",
            "--duration",
            "1s",
            "--json",
        ],
        None,
    );
    assert!(run.success, "{}", run.stderr);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    let run = rebalance_text(&[
        "bench",
        "--strategy",
        "consistent_hash",
        "--param",
        "virtual_nodes=4",
        "--queues",
        "16",
        "--consumers",
        "2",
        "--runs",
        "1",
        "--json",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "rebalance bench: warning: --param virtual_nodes: strategy `consistent_hash` does not read it"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn queue_id_runs_do_not_wrap() {
    let case = r#"{"id":1,"strategy":"averagely","mq_all":[["T","b",2147483647],["T","b",-2147483648],["T","b",-2147483647]],"cid_all":["a"]}"#;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .args(["allocate", "--pretty"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{case}").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("T/b:2147483647,-2147483648,-2147483647"),
        "{text}"
    );
}

#[test]
fn every_limit_is_stated_in_the_help() {
    for (command, limits) in [
        ("assign", &["10,000,000 partitions", "2,147,483,647"][..]),
        (
            "simulate",
            &[
                "100,000 topics",
                "65,536 per broker",
                "10,000 clients",
                "168h",
            ],
        ),
        (
            "bench",
            &["10,000,000 queues", "20,000,000 points", "1 to 1,000 runs"],
        ),
        ("compare", &["10,000,000 queues", "1,000,000 samples"]),
        ("produce-sim", &["65,536", "1h", "100 retries"]),
        (
            "send",
            &[
                "100,000,000 messages",
                "100 retries",
                "1,000,000 per second",
            ],
        ),
    ] {
        let run = rebalance_text(&[command, "--help"]);
        assert_eq!(run.code, Some(0));
        for limit in limits {
            assert!(
                run.stdout.contains(limit),
                "{command} --help lacks `{limit}`:\n{}",
                run.stdout
            );
        }
    }
}

/// A strategy's options with an assignor, or an assignor's with a strategy, used to be accepted
/// and ignored: clap's `requires` is met by any member of the strategy/assignor group
/// (clap-rs/clap#4707).
#[test]
fn bench_refuses_the_options_of_the_other_kind() {
    refused(
        &[
            "bench",
            "--assignor",
            "range",
            "--topics",
            "1",
            "--partitions",
            "1",
            "--members",
            "1",
            "--queues",
            "5",
        ],
        &["--queues", "--assignor"],
    );
    refused(
        &[
            "bench",
            "--strategy",
            "averagely",
            "--queues",
            "16",
            "--consumers",
            "2",
            "--scenario",
            "member_left",
        ],
        &["--assignor"],
    );
}

/// Values the members or the client would refuse once running, refused as arguments, in the
/// flag's words (found by review: exit 1 naming `membership_settle` or `route_timeout`).
#[test]
fn a_settle_window_or_a_timeout_that_cannot_work_is_an_argument_error() {
    refused(
        &["simulate", "--settle", "20s", "--duration", "1s"],
        &["--settle 20s must be shorter than the members' rebalance interval (20s)"],
    );
    refused(
        &[
            "send",
            "--namesrv",
            "127.0.0.1:1",
            "--topic",
            "T",
            "--timeout",
            "0s",
        ],
        &["--timeout", "gives each request no time at all"],
    );
    for command in ["plan", "describe"] {
        refused(
            &[
                command,
                "--namesrv",
                "127.0.0.1:1",
                "--group",
                "G",
                "--topic",
                "T",
                "--timeout",
                "0s",
            ],
            &["--timeout", "gives each request no time at all"],
        );
    }
}
