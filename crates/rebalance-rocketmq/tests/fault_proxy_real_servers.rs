//! The test kit's fault proxy between one member and a real broker, the member routed through it
//! by the transport's address override while another member reaches the broker directly:
//! heartbeats and pulls work through it, a black hole times the member's calls out within its
//! request timeout while the direct member goes on, and the heal brings the routed member back
//! (the messages sent meanwhile pulled). Every wait is bounded.

mod common;

use std::time::Duration;

use rebalance_consume::{MessageSource, PullRequest, PullResult, property};
use rebalance_core::MessageQueue;
use rebalance_rocketmq::message::unique_id;
use rebalance_rocketmq::producer::{Message as Outgoing, MessageSender};
use rebalance_rocketmq::testkit::{FaultProxy, TestCluster};
use rebalance_rocketmq::{BrokerClient, ClientConfig, NameServerClient};
use rebalance_runtime::subscription::TagExpression;
use rebalance_runtime::{GroupDirectory, RemoteError};
use tokio::time::Instant;

use common::{client, eventually, init_tracing};

const TOPIC: &str = "ProxiedTopic";
const GROUP: &str = "proxied-group";
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

async fn send(sender: &MessageSender, queue: &MessageQueue, body: &str) {
    let message = Outgoing::new(body.to_string()).with_property(property::UNIQ_KEY, unique_id());
    sender.send(queue, &message).await.unwrap();
}

/// One pull of `queue` from `offset`, held by the broker at most `suspend` (its answer awaited
/// for the request timeout when zero, else for `suspend` and 15 s): the bodies found, or the
/// error.
async fn pull_held(
    brokers: &BrokerClient,
    queue: &MessageQueue,
    offset: i64,
    suspend: Duration,
) -> Result<Vec<String>, String> {
    let request =
        PullRequest::new(GROUP, queue.clone(), offset, TagExpression::all()).with_suspend(suspend);
    match brokers.pull(&request).await {
        Ok(PullResult::Found { messages, .. }) => Ok(messages
            .iter()
            .map(|m| String::from_utf8_lossy(m.body()).into_owned())
            .collect()),
        Ok(_) => Ok(Vec::new()),
        Err(error) => Err(error.to_string()),
    }
}

/// [`pull_held`] for 200 ms.
async fn pull(
    brokers: &BrokerClient,
    queue: &MessageQueue,
    offset: i64,
) -> Result<Vec<String>, String> {
    pull_held(brokers, queue, offset, Duration::from_millis(200)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_routed_through_the_proxy_is_cut_off_by_a_black_hole_and_back_after_the_heal() {
    init_tracing();
    let cluster = TestCluster::start().unwrap();
    cluster.create_topic(TOPIC, 2).await.unwrap();
    let broker = cluster.first_broker_addr();
    let proxy = FaultProxy::start(&broker).await.unwrap();

    // The routed member: the broker's advertised address dialed at the proxy.
    let routed_name_server = NameServerClient::builder(&cluster.namesrv_addr())
        .client_config(ClientConfig {
            request_timeout: REQUEST_TIMEOUT,
            ..ClientConfig::default()
        })
        .connect_via(broker.as_str(), proxy.addr())
        .build()
        .unwrap();
    let routed = BrokerClient::new(routed_name_server.clone());
    let registration = client(&cluster, "routed", GROUP, &[TOPIC]).registration;
    let direct = client(&cluster, "direct", GROUP, &[TOPIC]);
    let sender = MessageSender::new(direct.name_server.clone(), "proxied-producer");
    let queue = MessageQueue::new(TOPIC, "broker-a", 0);

    // Through the proxy: a heartbeat, seen by the direct member, and a pull.
    routed.register(&registration).await.unwrap();
    direct.brokers.register(&direct.registration).await.unwrap();
    let routed_id = registration.client_id.clone();
    eventually(
        "the direct member sees the routed one",
        Duration::from_secs(10),
        || {
            let (direct, routed_id) = (&direct, &routed_id);
            async move {
                let ids = direct.brokers.consumer_ids(GROUP, TOPIC).await.ok()?;
                ids.contains(routed_id).then_some(())
            }
        },
    )
    .await;
    send(&sender, &queue, "before").await;
    assert_eq!(pull(&routed, &queue, 0).await.unwrap(), ["before"]);
    let through = proxy.counters();
    assert!(through.accepted >= 1, "{through:?}");
    assert!(
        through.requests >= 2 && through.bytes_to_client > 0,
        "{through:?}"
    );

    // Black-holed: the routed member's calls time out within the request timeout; the direct
    // member goes on.
    proxy.black_hole();
    let started = Instant::now();
    let error = routed.register(&registration).await.unwrap_err();
    let took = started.elapsed();
    println!("black-holed: the heartbeat failed after {took:?}: {error}");
    assert!(
        matches!(&error, RemoteError::Timeout { service, .. } if *service == broker),
        "{error}"
    );
    assert!(took < REQUEST_TIMEOUT + Duration::from_secs(2), "{took:?}");
    // A pull the broker would not hold is awaited for the request timeout too.
    let started = Instant::now();
    let error = pull_held(&routed, &queue, 1, Duration::ZERO)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        took < REQUEST_TIMEOUT + Duration::from_secs(2),
        "{took:?}: {error}"
    );
    send(&sender, &queue, "during").await;
    direct.brokers.register(&direct.registration).await.unwrap();
    assert_eq!(pull(&direct.brokers, &queue, 1).await.unwrap(), ["during"]);

    // Healed: the routed member works again and pulls what was sent meanwhile.
    proxy.heal();
    let healed = Instant::now();
    eventually(
        "the routed member heartbeats again",
        Duration::from_secs(15),
        || {
            let (routed, registration) = (&routed, &registration);
            async move { routed.register(registration).await.ok() }
        },
    )
    .await;
    let bodies = eventually(
        "the routed member pulls again",
        Duration::from_secs(15),
        || {
            let (routed, queue) = (&routed, &queue);
            async move { pull(routed, queue, 1).await.ok().filter(|b| !b.is_empty()) }
        },
    )
    .await;
    assert_eq!(bodies, ["during"]);
    println!(
        "healed: heartbeat and pull through the proxy again after {:?}",
        healed.elapsed()
    );
    let after = proxy.counters();
    println!("proxy counters: {after:?}");
    assert!(after.bytes_to_server > through.bytes_to_server, "{after:?}");
    assert_eq!(after.resets, 0);
}
