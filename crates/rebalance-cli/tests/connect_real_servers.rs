//! The connection flags of `rebalance send` and `rebalance plan` reach the wire, against a real
//! RocketMQ name server and broker: `--namespace` (a namespaced send is pulled by a consumer of
//! that namespace, and by no other), and `--access-key` / `--secret-key` (or
//! `ROCKETMQ_SECRET_KEY`) against a broker enforcing authentication.

use std::process::{Command, Output};
use std::time::Duration;

use rebalance_consume::{MessageSource, PullRequest, PullResult};
use rebalance_core::{ClientId, MessageQueue};
use rebalance_rocketmq::testkit::{ClusterOptions, TestCluster};
use rebalance_rocketmq::{BrokerClient, Credentials, NameServerClient, Namespace};
use rebalance_runtime::config::{ConsumeFrom, ConsumeOrder, MessageModel};
use rebalance_runtime::subscription::{Subscription, TagExpression};
use rebalance_runtime::{GroupDirectory, Registration};
use serde_json::Value;

const SECRET: &str = "12345678";

/// Runs `rebalance` with `args`, with `ROCKETMQ_SECRET_KEY` set to `secret_env` (or unset).
async fn rebalance(args: Vec<String>, secret_env: Option<&'static str>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rebalance"));
        command.args(args).env_remove("ROCKETMQ_SECRET_KEY");
        if let Some(secret) = secret_env {
            command.env("ROCKETMQ_SECRET_KEY", secret);
        }
        command.output().expect("run rebalance")
    })
    .await
    .unwrap()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn json_lines(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The bodies of `queue` from offset 0 that `brokers` pulls within a few seconds.
async fn bodies(brokers: &BrokerClient, queue: MessageQueue) -> Vec<String> {
    let mut bodies = Vec::new();
    let mut offset = 0;
    for _ in 0..3 {
        let request = PullRequest::new("ns-reader", queue.clone(), offset, TagExpression::all())
            .with_suspend(Duration::from_millis(300));
        match brokers.pull(&request).await {
            Ok(PullResult::Found {
                messages,
                next_offset,
                ..
            }) => {
                bodies.extend(
                    messages
                        .iter()
                        .map(|m| String::from_utf8_lossy(m.body()).into_owned()),
                );
                offset = next_offset;
            }
            Ok(PullResult::NoNewMessage { next_offset }) => offset = next_offset,
            other => panic!("{other:?}"),
        }
    }
    bodies
}

fn in_namespace(cluster: &TestCluster, ns: &str) -> BrokerClient {
    BrokerClient::new(
        NameServerClient::builder(&cluster.namesrv_addr())
            .namespace(Namespace::new(ns).unwrap())
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn a_namespaced_send_reaches_that_namespaces_consumers_only() {
    let cluster = TestCluster::start().unwrap();
    for ns in ["tenant1", "tenant2"] {
        cluster
            .create_topic(&format!("{ns}%Shared"), 1)
            .await
            .unwrap();
    }
    let namesrv = cluster.namesrv_addr();
    let output = rebalance(
        strings(&[
            "send",
            "--namesrv",
            &namesrv,
            "--namespace",
            "tenant1",
            "--topic",
            "Shared",
            "--count",
            "3",
            "--json",
        ]),
        None,
    )
    .await;
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l["topic"] == "Shared"), "{lines:?}");

    let queue = MessageQueue::new("Shared", "broker-a", 0);
    let tenant1 = bodies(&in_namespace(&cluster, "tenant1"), queue.clone()).await;
    assert_eq!(tenant1, ["msg-0", "msg-1", "msg-2"]);
    let tenant2 = bodies(&in_namespace(&cluster, "tenant2"), queue).await;
    assert!(tenant2.is_empty(), "{tenant2:?}");

    // `plan` in the namespace sees the namespace's member, under plain names.
    let member = in_namespace(&cluster, "tenant1");
    member
        .register(&Registration {
            client_id: ClientId::from("10.0.0.1@1"),
            group: "G".into(),
            message_model: MessageModel::Clustering,
            consume_order: ConsumeOrder::Concurrent,
            consume_from: ConsumeFrom::LastOffset,
            subscriptions: vec![Subscription::all("Shared")],
        })
        .await
        .unwrap();
    let plan = |ns: &'static str| {
        strings(&[
            "plan",
            "--namesrv",
            &namesrv,
            "--namespace",
            ns,
            "--group",
            "G",
            "--topic",
            "Shared",
            "--json",
        ])
    };
    let one = json_lines(&rebalance(plan("tenant1"), None).await);
    let text = one[0].to_string();
    assert!(text.contains("10.0.0.1@1"), "{text}");
    assert!(!text.contains("tenant1%"), "plain names: {text}");
    let two = json_lines(&rebalance(plan("tenant2"), None).await);
    assert!(!two[0].to_string().contains("10.0.0.1@1"), "{}", two[0]);
}

#[tokio::test]
async fn signed_commands_pass_a_broker_enforcing_authentication() {
    let cluster = TestCluster::start_with(ClusterOptions {
        authentication: Some(Credentials::new("rocketmq2", SECRET).unwrap()),
        ..Default::default()
    })
    .unwrap();
    cluster.create_topic("Signed", 2).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let send = |extra: &[&str]| {
        let mut args = strings(&[
            "send",
            "--namesrv",
            &namesrv,
            "--topic",
            "Signed",
            "--count",
            "2",
            "--json",
        ]);
        args.extend(strings(extra));
        args
    };
    let plan = |extra: &[&str]| {
        let mut args = strings(&[
            "plan",
            "--namesrv",
            &namesrv,
            "--group",
            "SG",
            "--topic",
            "Signed",
            "--json",
        ]);
        args.extend(strings(extra));
        args
    };

    // Unsigned, and with a wrong secret: refused by the broker (a failed run, exit 1).
    for (what, output) in [
        ("unsigned send", rebalance(send(&[]), None).await),
        (
            "wrong secret",
            rebalance(
                send(&["--access-key", "rocketmq2", "--secret-key", "wrong"]),
                None,
            )
            .await,
        ),
        ("unsigned plan", rebalance(plan(&[]), None).await),
    ] {
        assert_eq!(output.status.code(), Some(1), "{what}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(" denied "), "{what}: {stderr}");
    }

    // Signed, the secret from the flag or from the environment: stored, and never printed.
    for (output, how) in [
        (
            rebalance(
                send(&["--access-key", "rocketmq2", "--secret-key", SECRET]),
                None,
            )
            .await,
            "flag",
        ),
        (
            rebalance(send(&["--access-key", "rocketmq2"]), Some(SECRET)).await,
            "environment",
        ),
    ] {
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(json_lines(&output).len(), 2, "{how}: {printed}");
        assert!(!printed.contains(SECRET), "{how}");
    }
    let planned = rebalance(plan(&["--access-key", "rocketmq2"]), Some(SECRET)).await;
    assert_eq!(json_lines(&planned).len(), 1);

    // A secret key without its access key is a usage error (exit 2) that does not show it.
    let lone = rebalance(send(&["--secret-key", "hush-hush"]), None).await;
    assert_eq!(lone.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&lone.stderr);
    assert!(stderr.contains("--access-key"), "{stderr}");
    assert!(!stderr.contains("hush-hush"), "{stderr}");
}
