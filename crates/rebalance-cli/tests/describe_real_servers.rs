//! `rebalance describe` against a real RocketMQ name server and broker (started by the test
//! kit), with a group of three consumer processes: the `rocketmq_consumer` example, built by
//! `cargo test --workspace` (or `cargo build --example rocketmq_consumer`).

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use rebalance_core::MessageQueue;
use rebalance_rocketmq::NameServerClient;
use rebalance_rocketmq::producer::{Message, MessageSender};
use rebalance_rocketmq::testkit::{TestCluster, wait_until};
use serde_json::Value;

/// The example's binary, next to this test's (`target/debug/examples`).
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = dir.join("examples").join("rocketmq_consumer");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --example rocketmq_consumer` (cargo test --workspace builds it)",
        path.display()
    );
    path
}

/// A consumer process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn describe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .arg("describe")
        .args(args)
        .output()
        .expect("run rebalance describe")
}

/// `describe --json`'s lines for group DG and topic DescribeT: the queue rows and the summary.
async fn describe_json(namesrv: String) -> (Vec<Value>, Value, String) {
    describe_json_with(vec![
        "--namesrv".into(),
        namesrv,
        "--group".into(),
        "DG".into(),
        "--topic".into(),
        "DescribeT".into(),
    ])
    .await
}

/// `describe --json`'s lines with `args`: the queue rows and the summary.
async fn describe_json_with(mut args: Vec<String>) -> (Vec<Value>, Value, String) {
    args.push("--json".into());
    let output = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        describe(&args)
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = lines.pop().unwrap();
    (lines, summary, stderr)
}

#[tokio::test]
async fn a_group_of_three_processes_shows_every_queue_owned_once_with_its_lag() {
    let example = example();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("DescribeT", 8).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let _members: Vec<Process> = (0..3)
        .map(|_| {
            Process(
                Command::new(&example)
                    .args([
                        "--namesrv",
                        &namesrv,
                        "--group",
                        "DG",
                        "--topic",
                        "DescribeT",
                        "--rebalance-interval",
                        "2s",
                        "--consume",
                        "--json",
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start a consumer process"),
            )
        })
        .collect();

    // Every queue owned once, by the member the strategy predicts.
    let ns = namesrv.clone();
    let owned = wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        let ns = ns.clone();
        async move {
            let (rows, summary, _) = describe_json(ns).await;
            let settled = summary["members"] == 3
                && summary["queues"] == 8
                && summary["double_owned"] == 0
                && summary["unowned"] == 0
                && rows.iter().all(|r| r["owners"][0] == r["predicted"]);
            settled.then_some((rows, summary))
        }
    })
    .await;
    let (rows, summary) = owned.expect("every queue owned once within 60 s");
    assert_eq!(summary["diverging_members"], serde_json::json!([]));
    let owners: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r["owners"][0].as_str().unwrap())
        .collect();
    assert_eq!(owners.len(), 3, "every member owns queues: {rows:?}");

    // Send 5 messages to each queue; the members consume them all: lag 0, max 5 everywhere.
    let sender = MessageSender::new(NameServerClient::from_addresses(&namesrv).unwrap(), "DP");
    for i in 0..40 {
        let queue = MessageQueue::new("DescribeT", "broker-a", i % 8);
        sender
            .send(&queue, &Message::new(format!("m{i}")))
            .await
            .unwrap();
    }
    let ns = namesrv.clone();
    let consumed = wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        let ns = ns.clone();
        async move {
            let (rows, summary, _) = describe_json(ns).await;
            let done = summary["lag"] == 0
                && rows
                    .iter()
                    .all(|r| r["max"] == 5 && r["committed"] == 5 && r["lag"] == 0);
            done.then_some(summary)
        }
    })
    .await;
    let summary = consumed.expect("everything sent is consumed and committed within 60 s");
    assert_eq!(summary["double_owned"], 0);
    assert_eq!(summary["unowned"], 0);

    // The table names the same.
    let output =
        tokio::task::spawn_blocking(move || describe(&["--namesrv", &namesrv, "--group", "DG"]))
            .await
            .unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    assert!(table.contains("group DG: 3 members, 8 queues"), "{table}");
    assert!(
        table.contains("double owned: 0, unowned: 0, lag: 0"),
        "{table}"
    );
}

#[tokio::test]
async fn a_member_that_does_not_answer_is_reported_not_hidden() {
    // A member registered by heartbeat only (no running info to give: this client answers
    // nothing, like a client without GET_CONSUMER_RUNNING_INFO).
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("DescribeMute", 2).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let remoting = rebalance_rocketmq::RemotingClient::default();
    let name_server = NameServerClient::new(remoting, &namesrv).unwrap();
    let brokers = rebalance_rocketmq::BrokerClient::new(name_server);
    use rebalance_runtime::GroupDirectory;
    brokers
        .register(&rebalance_runtime::Registration {
            client_id: "10.0.0.1@mute".into(),
            group: "DG".into(),
            message_model: rebalance_runtime::config::MessageModel::Clustering,
            consume_order: rebalance_runtime::config::ConsumeOrder::Concurrent,
            consume_from: rebalance_runtime::config::ConsumeFrom::LastOffset,
            subscriptions: vec![rebalance_runtime::subscription::Subscription::all(
                "DescribeMute",
            )],
        })
        .await
        .unwrap();
    let output = tokio::task::spawn_blocking(move || {
        describe(&[
            "--namesrv",
            &namesrv,
            "--group",
            "DG",
            "--topic",
            "DescribeMute",
            "--json",
        ])
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "owners column incomplete: member 10.0.0.1@mute did not answer its running info"
        ),
        "{stderr}"
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["members"], 1);
    assert_eq!(summary["unowned"], 2);
    // Its queues may be its own: said so, on each row and in the summary.
    assert_eq!(summary["owner_unknown"], 2);
    let rows: Vec<Value> = stdout
        .lines()
        .rev()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["owner_unknown"] == true), "{stdout}");
}

/// A namespaced group, described with `--namespace`, whose member is stuck on the first message
/// of each queue: the lag is what was sent and not consumed, per queue; without the namespace
/// the same names are another (empty) group.
#[tokio::test]
async fn a_namespaced_group_shows_the_lag_of_what_it_has_not_consumed() {
    let example = example();
    let cluster = TestCluster::start().unwrap();
    // The topic as the servers know it in namespace `NSD`.
    cluster.create_topic("NSD%DescribeLag", 4).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let _member = Process(
        Command::new(&example)
            .args([
                "--namesrv",
                &namesrv,
                "--namespace",
                "NSD",
                "--group",
                "DL",
                "--topic",
                "DescribeLag",
                "--rebalance-interval",
                "2s",
                "--consume",
                // Each message takes an hour: the first of each queue is not acknowledged in this test.
                "--consume-time",
                "3600s",
                "--json",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a consumer process"),
    );
    let args = |namespace: bool| {
        let mut args: Vec<String> = ["--namesrv", namesrv.as_str(), "--group", "DL", "--topic"]
            .into_iter()
            .map(String::from)
            .collect();
        args.push("DescribeLag".into());
        if namespace {
            args.extend(["--namespace".to_string(), "NSD".to_string()]);
        }
        args
    };
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let owned = wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        let args = args(true);
        let last = last.clone();
        async move {
            let (rows, summary, stderr) = describe_json_with(args).await;
            *last.lock().unwrap() = format!("{rows:?}\n{summary}\n{stderr}");
            let settled = summary["members"] == 1
                && summary["queues"] == 4
                && summary["unowned"] == 0
                && rows.iter().all(|r| r["committed"] == 0);
            settled.then_some(rows)
        }
    })
    .await;
    let Some(rows) = owned else {
        panic!(
            "the member owns the 4 queues, committed at 0, within 60 s; last:\n{}",
            last.lock().unwrap()
        );
    };
    assert!(
        rows.iter()
            .all(|r| r["topic"] == "DescribeLag" && r["owners"].as_array().map(Vec::len) == Some(1)),
        "rows name the plain topic, each owned once: {rows:?}"
    );

    // 1, 2, 3 and 4 messages to queues 0 to 3.
    let sender = MessageSender::new(NameServerClient::from_addresses(&namesrv).unwrap(), "DP");
    for queue_id in 0..4 {
        for i in 0..=queue_id {
            let queue = MessageQueue::new("NSD%DescribeLag", "broker-a", queue_id);
            sender
                .send(&queue, &Message::new(format!("m{queue_id}-{i}")))
                .await
                .unwrap();
        }
    }
    let lagging = wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        let args = args(true);
        async move {
            let (rows, summary, _) = describe_json_with(args).await;
            let seen = rows.len() == 4 && rows.iter().all(|r| r["max"].as_i64() > Some(0));
            seen.then_some((rows, summary))
        }
    })
    .await;
    let (rows, summary) = lagging.expect("the broker's max offsets within 30 s");
    let lags: Vec<(i64, i64, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["max"].as_i64().unwrap(),
                r["committed"].as_i64().unwrap(),
                r["lag"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        lags,
        vec![(1, 0, 1), (2, 0, 2), (3, 0, 3), (4, 0, 4)],
        "max, committed and lag per queue: {rows:?}"
    );
    assert_eq!(summary["lag"], 10, "{summary}");

    // The plain names are another group, on a topic the servers do not have.
    let output = tokio::task::spawn_blocking({
        let args = args(false);
        move || {
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            args.push("--json");
            describe(&args)
        }
    })
    .await
    .unwrap();
    assert!(
        !output.status.success(),
        "without the namespace the topic is unknown: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// Three `--pop` members: each pops every queue of the broker, and every queue shows as
/// shared by all three (not as double owned), committed and lagging as the brokers say.
#[tokio::test]
async fn popping_members_share_every_queue() {
    let example = example();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("DescribePop", 4).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let _members: Vec<Process> = (0..3)
        .map(|_| {
            Process(
                Command::new(&example)
                    .args([
                        "--namesrv",
                        &namesrv,
                        "--group",
                        "DPop",
                        "--topic",
                        "DescribePop",
                        "--rebalance-interval",
                        "2s",
                        "--consume",
                        "--pop",
                        "--json",
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start a consumer process"),
            )
        })
        .collect();
    let args = |namesrv: &str| -> Vec<String> {
        [
            "--namesrv",
            namesrv,
            "--group",
            "DPop",
            "--topic",
            "DescribePop",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let ns = namesrv.clone();
    let shared = wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        let args = args(&ns);
        async move {
            let (rows, summary, _) = describe_json_with(args).await;
            let settled = summary["members"] == 3
                && summary["shared"] == 4
                && rows.iter().all(|r| {
                    r["shared"] == true && r["owners"].as_array().is_some_and(|o| o.len() == 3)
                });
            settled.then_some(summary)
        }
    })
    .await;
    let summary = shared.expect("every queue shared by the three within 60 s");
    assert_eq!(summary["double_owned"], 0, "{summary}");
    assert_eq!(summary["unowned"], 0, "{summary}");
    let output = tokio::task::spawn_blocking(move || {
        describe(&[
            "--namesrv",
            &namesrv,
            "--group",
            "DPop",
            "--topic",
            "DescribePop",
        ])
    })
    .await
    .unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    assert!(table.contains("shared (pop)"), "{table}");
    assert!(table.contains("double owned: 0, unowned: 0"), "{table}");
}
