//! End to end on the real servers, how messages are delivered: orderly consumers keep each
//! queue's order and never share a queue while the group grows (Apache RocketMQ's
//! `OrderMsgRebalanceIT`), a failed first delivery comes again through `%RETRY%{group}`, and a
//! message that always fails ends in `%DLQ%{group}` after `max_reconsume_times`. Consumers are
//! separate processes (the `rocketmq_consumer` example, `--consume --json`) on a topic of 8
//! queues over two brokers; every test fails when a message sent is never consumed (or, for the
//! dead letters, never reaches them).
//!
//! `cargo build --example rocketmq_consumer && cargo test --test e2e_delivery_real_servers -- --nocapture`

mod e2e;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::{ConsumerProcess, Log, Producer, Queue, queue_set};
use rebalance::MessageQueue;
use rebalance::runtime::RemoteError;
use rebalance::runtime::consume::{MessageSource, PullError, PullRequest, PullResult};
use rebalance::runtime::subscription::TagExpression;
use rebalance_rocketmq::{BrokerClient, NameServerClient};

const PARTITION_WITHIN: Duration = Duration::from_secs(30);
const CONSUMED_WITHIN: Duration = Duration::from_secs(60);

/// Sends `per_queue` messages to every queue, numbered on from `first` in each queue (bodies
/// `{broker}-{queue}-{n}`), one queue after the other; returns the bodies.
async fn send_per_queue(producer: &Producer, first: usize, per_queue: usize) -> Vec<String> {
    let mut bodies = Vec::new();
    for n in first..first + per_queue {
        for queue in producer.queues() {
            let body = format!("{}-{}-{n}", queue.broker_name, queue.queue_id);
            producer.send_to(queue, &body).await;
            bodies.push(body);
        }
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orderly_consumers_keep_each_queue_in_order_and_never_share_one() {
    let _one = e2e::exclusive().await;
    let topic = "E2eOrderly";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let labels: Vec<String> = (1..=3).map(|i| format!("{topic}-c{i}")).collect();
    let members: Vec<&str> = labels.iter().map(String::as_str).collect();
    let all = queue_set(topic);
    // 20 ms per message, so that the third member's arrival meets batches in the listeners.
    let extra = ["--orderly", "--consume-time", "20ms"];
    let mut consumers: Vec<ConsumerProcess> = labels[..2]
        .iter()
        .map(|l| ConsumerProcess::spawn(&cluster, &log, l, topic, topic, &extra))
        .collect();
    log.wait_for_partition(topic, &members[..2], &all, PARTITION_WITHIN)
        .await;
    let producer = Producer::new(&cluster, topic);
    let mut sent = send_per_queue(&producer, 0, 10).await;
    log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    // The group grows while half of the second batch is sent (the hand-offs meet batches in
    // the listeners), and the rest goes to the three members.
    consumers.push(ConsumerProcess::spawn(
        &cluster, &log, &labels[2], topic, topic, &extra,
    ));
    sent.extend(send_per_queue(&producer, 10, 5).await);
    log.wait_for_partition(topic, &members, &all, PARTITION_WITHIN)
        .await;
    sent.extend(send_per_queue(&producer, 15, 5).await);
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    eprintln!(
        "e2e orderly: {} sent, none lost; distinct messages per consumer: {:?}",
        sent.len(),
        delivery.unique_per_client
    );

    // Per consumer, each queue's messages in order (the body's number is its offset: the topic
    // is new), and no message of a queue consumed by two owners: an overlap would consume the
    // same offsets twice.
    let mut per_consumer_queue: BTreeMap<(String, Queue), Vec<i64>> = BTreeMap::new();
    let mut owners: BTreeMap<(Queue, i64), Vec<String>> = BTreeMap::new();
    for (client, _, m) in log.messages(topic) {
        let n: i64 = m
            .body
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("body {}", m.body));
        assert_eq!(
            n, m.offset,
            "{} at offset {} of {}",
            m.body, m.offset, m.queue
        );
        per_consumer_queue
            .entry((client.clone(), m.queue.clone()))
            .or_default()
            .push(m.offset);
        owners.entry((m.queue, m.offset)).or_default().push(client);
    }
    for ((client, queue), offsets) in &per_consumer_queue {
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "{client} consumed {queue} out of order: {offsets:?}"
        );
    }
    let twice: Vec<_> = owners.iter().filter(|(_, c)| c.len() > 1).collect();
    assert!(twice.is_empty(), "consumed by two owners: {twice:?}");
    assert!(
        delivery
            .unique_per_client
            .get(members[2])
            .copied()
            .unwrap_or(0)
            > 0,
        "the third member consumed nothing: {:?}",
        delivery.unique_per_client
    );
    for consumer in &mut consumers {
        consumer.assert_running();
    }
    log.assert_no_garbage();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_delivery_comes_again_through_the_retry_topic() {
    let _one = e2e::exclusive().await;
    let topic = "E2eRetry";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let label = format!("{topic}-c1");
    // The first delivery of every 5th message fails; the broker chooses the delay (10 s).
    let mut consumer =
        ConsumerProcess::spawn(&cluster, &log, &label, topic, topic, &["--fail-every", "5"]);
    log.wait_for_partition(topic, &[&label], &queue_set(topic), PARTITION_WITHIN)
        .await;
    let sent = Producer::new(&cluster, topic).send(topic, 50).await;
    let delivery = log.wait_for_all(topic, &sent, CONSUMED_WITHIN).await;
    let mut first = 0;
    let mut again = 0;
    for (body, consumptions) in &delivery.by_body {
        match consumptions.as_slice() {
            [(_, 0)] => first += 1,
            [(_, 1)] => again += 1,
            other => panic!("{body} consumed as {other:?}"),
        }
    }
    eprintln!("e2e retry: {first} consumed at the first delivery, {again} at the second");
    assert_eq!(
        (first, again),
        (40, 10),
        "every 5th first delivery fails and comes back once"
    );
    consumer.assert_running();
    log.assert_no_garbage();
}

/// The bodies of the messages in `%DLQ%{group}` (one queue on each broker), once `expected`
/// are all there; fails after `within` with what is missing.
async fn dead_letters(
    cluster: &rebalance_rocketmq::testkit::TestCluster,
    group: &str,
    expected: &[String],
    within: Duration,
) -> BTreeMap<String, i32> {
    in_topic(cluster, &format!("%DLQ%{group}"), expected, within).await
}

/// How many messages went through `%RETRY%{group}` (its queue on each broker), by body.
async fn through_retry(
    cluster: &rebalance_rocketmq::testkit::TestCluster,
    group: &str,
) -> BTreeMap<String, usize> {
    let brokers = BrokerClient::new(
        NameServerClient::from_addresses(&cluster.namesrv_addr()).expect("the name server"),
    );
    let topic = format!("%RETRY%{group}");
    let mut counts = BTreeMap::new();
    for broker in e2e::BROKERS {
        let queue = MessageQueue::new(topic.as_str(), broker, 0);
        let mut offset = 0;
        loop {
            let answer = brokers
                .pull(
                    &PullRequest::new(
                        "e2e-retry-reader",
                        queue.clone(),
                        offset,
                        TagExpression::all(),
                    )
                    .with_suspend(Duration::ZERO),
                )
                .await;
            // Every other failure fails the test: read as "nothing went through the retry
            // topic", it would let a test asserting exactly that pass without reading anything
            // (found by a test audit).
            let (messages, next_offset) = match answer {
                Ok(PullResult::Found {
                    messages,
                    next_offset,
                    ..
                }) => (messages, next_offset),
                Ok(_) => break,
                // Nothing was ever sent back through this broker: no retry topic there.
                Err(PullError::Remote(RemoteError::Refused { code: 17, .. })) => break,
                Err(e) => panic!("reading {queue:?} from offset {offset}: {e:?}"),
            };
            for m in messages {
                *counts
                    .entry(String::from_utf8_lossy(m.body()).into_owned())
                    .or_default() += 1;
            }
            offset = next_offset;
        }
    }
    counts
}

/// The bodies (and reconsume counts) of the messages in `topic` (one queue on each broker),
/// once `expected` are all there; fails after `within` with what is missing.
async fn in_topic(
    cluster: &rebalance_rocketmq::testkit::TestCluster,
    topic: &str,
    expected: &[String],
    within: Duration,
) -> BTreeMap<String, i32> {
    let brokers = BrokerClient::new(
        NameServerClient::from_addresses(&cluster.namesrv_addr()).expect("the name server"),
    );
    let mut offsets: BTreeMap<&str, i64> = e2e::BROKERS.iter().map(|b| (*b, 0)).collect();
    let mut found: BTreeMap<String, i32> = BTreeMap::new();
    let mut errors = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        for broker in e2e::BROKERS {
            let queue = MessageQueue::new(topic, broker, 0);
            let offset = offsets[broker];
            let request = PullRequest::new("e2e-dlq-reader", queue, offset, TagExpression::all())
                .with_suspend(Duration::from_millis(200));
            match brokers.pull(&request).await {
                Ok(PullResult::Found {
                    messages,
                    next_offset,
                    ..
                }) => {
                    for m in messages {
                        let body = String::from_utf8_lossy(m.body()).into_owned();
                        found.insert(body, m.reconsume_times());
                    }
                    offsets.insert(broker, next_offset);
                }
                Ok(PullResult::NoNewMessage { next_offset })
                | Ok(PullResult::OffsetMoved { next_offset }) => {
                    offsets.insert(broker, next_offset);
                }
                Ok(other) => panic!("pulling {topic} from {broker}: {other:?}"),
                // The dead-letter topic is made by the first message sent there, and routed a
                // moment later; until then it has no route.
                Err(e) => {
                    errors.insert(e.to_string());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        if expected.iter().all(|b| found.contains_key(b)) {
            return found;
        }
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|b| !found.contains_key(*b))
        .collect();
    panic!(
        "{} messages never reached {topic} within {within:?}: {missing:?}; pull errors seen: \
         {errors:?}",
        missing.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_always_fails_ends_in_the_dead_letters() {
    let _one = e2e::exclusive().await;
    let topic = "E2eDead";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let label = format!("{topic}-c1");
    // Two redeliveries, 1 s apart (delay level 1), then the dead letters.
    let mut consumer = ConsumerProcess::spawn(
        &cluster,
        &log,
        &label,
        topic,
        topic,
        &[
            "--fail-always",
            "--max-reconsume-times",
            "2",
            "--delay-level",
            "1",
        ],
    );
    log.wait_for_partition(topic, &[&label], &queue_set(topic), PARTITION_WITHIN)
        .await;
    let sent = Producer::new(&cluster, topic).send(topic, 10).await;
    let dead = dead_letters(&cluster, topic, &sent, CONSUMED_WITHIN).await;
    eprintln!(
        "e2e dead letters: {} of {} sent, reconsume times {dead:?}",
        dead.len(),
        sent.len()
    );
    assert_eq!(
        dead.keys().cloned().collect::<BTreeSet<_>>(),
        sent.iter().cloned().collect::<BTreeSet<_>>(),
        "exactly the messages sent are dead letters"
    );
    // Delivered three times (the first, then two redeliveries), all failed: the broker counts
    // the third failure too when it moves a message to the dead letters.
    assert!(
        dead.values().all(|times| *times == 3),
        "reconsume times in the dead letters: {dead:?}"
    );
    assert!(
        log.messages(topic).is_empty(),
        "a message was consumed although every delivery fails"
    );
    let retried = through_retry(&cluster, topic).await;
    assert!(
        sent.iter().all(|body| retried.get(body) == Some(&2)),
        "each message goes through the retry topic twice: {retried:?}"
    );
    consumer.assert_running();
    log.assert_no_garbage();
}

/// An ordered message that always fails is suspended and consumed again in place (keeping its
/// queue's order) until `max_reconsume_times`, then goes straight to `%DLQ%{group}`: never
/// through `%RETRY%{group}`, where it would come back after its successors. The broker
/// decides with the count it stored (0), so a plain send-back would have retried it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_message_that_always_fails_goes_straight_to_the_dead_letters() {
    let _one = e2e::exclusive().await;
    let topic = "E2eOrderedDead";
    let cluster = e2e::two_broker_cluster(&[topic]).await;
    let log = Log::default();
    let label = format!("{topic}-c1");
    let mut consumer = ConsumerProcess::spawn(
        &cluster,
        &log,
        &label,
        topic,
        topic,
        &["--orderly", "--fail-always", "--max-reconsume-times", "2"],
    );
    log.wait_for_partition(topic, &[&label], &queue_set(topic), PARTITION_WITHIN)
        .await;
    let sent = Producer::new(&cluster, topic).send(topic, 10).await;
    let dead = dead_letters(&cluster, topic, &sent, CONSUMED_WITHIN).await;
    eprintln!(
        "e2e ordered dead letters: {} of {} sent, reconsume times {dead:?}",
        dead.len(),
        sent.len()
    );
    assert_eq!(
        dead.keys().cloned().collect::<BTreeSet<_>>(),
        sent.iter().cloned().collect::<BTreeSet<_>>(),
        "exactly the messages sent are dead letters"
    );
    let retried = through_retry(&cluster, topic).await;
    assert!(retried.is_empty(), "through the retry topic: {retried:?}");
    assert!(
        log.messages(topic).is_empty(),
        "a message was consumed although every delivery fails"
    );
    consumer.assert_running();
    log.assert_no_garbage();
}
