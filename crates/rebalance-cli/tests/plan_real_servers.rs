//! `rebalance plan` against a real RocketMQ name server and broker (started by the test kit).

use std::process::{Command, Output};

use rebalance_core::ClientId;
use rebalance_rocketmq::testkit::TestCluster;
use rebalance_rocketmq::{BrokerClient, NameServerClient};
use rebalance_runtime::{
    GroupDirectory, Registration,
    config::{ConsumeFrom, ConsumeOrder, MessageModel},
};
use serde_json::{Value, json};

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rebalance"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run rebalance plan")
}

/// Registers `ids` in `group` for `topic`, each with its own connections (like separate
/// processes). The returned clients keep the registrations alive.
async fn join(cluster: &TestCluster, group: &str, topic: &str, ids: &[&str]) -> Vec<BrokerClient> {
    let mut clients = Vec::new();
    for id in ids {
        let brokers =
            BrokerClient::new(NameServerClient::from_addresses(&cluster.namesrv_addr()).unwrap());
        brokers
            .register(&Registration {
                client_id: ClientId::from(*id),
                group: group.into(),
                message_model: MessageModel::Clustering,
                consume_order: ConsumeOrder::Concurrent,
                consume_from: ConsumeFrom::LastOffset,
                subscriptions: vec![rebalance_runtime::subscription::Subscription::all(topic)],
            })
            .await
            .unwrap();
        clients.push(brokers);
    }
    clients
}

#[tokio::test]
async fn plan_shows_the_whole_group_from_the_real_servers() {
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("PlanTopic", 8).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    // Registered out of order; the plan sorts them the Java way ("10.0.0.10" < "10.0.0.2").
    let _clients = join(
        &cluster,
        "PG",
        "PlanTopic",
        &["10.0.0.2@1", "10.0.0.3@1", "10.0.0.10@1"],
    )
    .await;

    let output = tokio::task::spawn_blocking(move || {
        plan(&[
            "--namesrv",
            &namesrv,
            "--group",
            "PG",
            "--topic",
            "PlanTopic",
            "--json",
        ])
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one JSON line: {stdout}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    let q = |i: i32| json!(["PlanTopic", "broker-a", i]);
    assert_eq!(answer["group"], "PG");
    assert_eq!(answer["topic"], "PlanTopic");
    assert_eq!(
        answer["plan"],
        json!({
            "10.0.0.10@1": [q(0), q(1), q(2)],
            "10.0.0.2@1": [q(3), q(4), q(5)],
            "10.0.0.3@1": [q(6), q(7)],
        })
    );

    // Another strategy with a parameter, as a table: every member listed, all 8 queues given once.
    let namesrv = cluster.namesrv_addr();
    let output = tokio::task::spawn_blocking(move || {
        plan(&[
            "--namesrv",
            &namesrv,
            "--group",
            "PG",
            "--topic",
            "PlanTopic",
            "--strategy",
            "consistent_hash",
            "--param",
            "virtual_node_count=16",
        ])
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(
        table.starts_with(
            "group PG, topic PlanTopic, strategy consistent_hash: 8 queues, 3 members\n"
        ),
        "{table}"
    );
    for id in ["10.0.0.2@1", "10.0.0.3@1", "10.0.0.10@1"] {
        assert!(
            table.lines().any(|l| l.starts_with(id)),
            "{id} missing:\n{table}"
        );
    }
    assert!(!table.contains("unassigned"), "{table}");
    let counted: usize = table
        .lines()
        .skip(2)
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(counted, 8, "{table}");
}

#[tokio::test]
async fn plan_reports_unknown_topics_empty_groups_and_dead_name_servers() {
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic("Lonely", 2).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let outputs = tokio::task::spawn_blocking(move || {
        (
            plan(&[
                "--namesrv",
                &namesrv,
                "--group",
                "G",
                "--topic",
                "Missing",
                "--json",
            ]),
            plan(&[
                "--namesrv",
                &namesrv,
                "--group",
                "Nobody",
                "--topic",
                "Lonely",
                "--json",
            ]),
            plan(&[
                "--namesrv",
                &format!("{dead};{namesrv}"),
                "--group",
                "Nobody",
                "--topic",
                "Lonely",
                "--json",
            ]),
            plan(&[
                "--namesrv",
                &dead,
                "--group",
                "G",
                "--topic",
                "Lonely",
                "--timeout",
                "1s",
            ]),
        )
    })
    .await
    .unwrap();

    let (missing, empty, failover, unreachable) = outputs;
    // The server's answer, not the arguments, failed the run: exit status 1.
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("topic `Missing` not found"), "{stderr}");

    assert!(
        empty.status.success(),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    let answer: Value = serde_json::from_slice(&empty.stdout).unwrap();
    assert_eq!(answer["plan"], json!({}));

    assert!(
        failover.status.success(),
        "{}",
        String::from_utf8_lossy(&failover.stderr)
    );
    assert_eq!(failover.stdout, empty.stdout);

    assert_eq!(unreachable.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(stderr.contains("unreachable"), "{stderr}");
}
