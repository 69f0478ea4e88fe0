//! The producer on the in-memory cluster, on the paused clock: first selections fetch routes at
//! once, routes are polled, bad routes and faults give typed errors, retries and fault avoidance
//! steer sends away from bad brokers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_core::route::perm;
use rebalance_core::{MessageQueue, PublishError, TopicRoute};
use rebalance_runtime::memory::{ClusterCall, ClusterClient, InMemoryCluster, route_of};
use rebalance_runtime::producer::ProducerHandle;
use rebalance_runtime::producer::{
    Producer, ProducerError, SelectByHash, SelectByMachineRoom, SelectError,
};
use rebalance_runtime::routes::TopicState;
use rebalance_runtime::{NameServer, RemoteError, RouteError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Counts the route requests that reach the name server; with `panic_from`, it has a bug: it
/// panics from that request on (counting from 0).
struct Counting {
    inner: ClusterClient,
    calls: AtomicUsize,
    panic_from: usize,
}

#[async_trait]
impl NameServer for Counting {
    async fn topic_route(&self, topic: &str) -> Result<TopicRoute, RouteError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) >= self.panic_from {
            panic!("injected name server panic");
        }
        self.inner.topic_route(topic).await
    }
}

fn counting(cluster: &InMemoryCluster) -> Arc<Counting> {
    panics_from(cluster, usize::MAX)
}

fn panics_from(cluster: &InMemoryCluster, panic_from: usize) -> Arc<Counting> {
    Arc::new(Counting {
        inner: cluster.client("producer"),
        calls: AtomicUsize::new(0),
        panic_from,
    })
}

async fn producer(cluster: &InMemoryCluster, avoid: bool) -> ProducerHandle {
    Producer::builder("P")
        .name_server(Arc::new(cluster.client("producer")))
        .latency_fault_avoidance(avoid)
        .start()
        .await
        .unwrap()
}

fn names(brokers: &[&str]) -> Vec<String> {
    brokers.iter().map(|b| b.to_string()).collect()
}

/// A route of broker `a` with 4 queues that are readable only: no publish queue.
fn read_only_route() -> TopicRoute {
    let mut route = route_of(&names(&["a"]), 4);
    route.queue_datas[0].perm = perm::READ;
    route
}

#[tokio::test(start_paused = true)]
async fn the_first_selection_fetches_the_route_at_once_and_then_it_is_polled() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let ns = counting(&cluster);
    let producer = Producer::builder("P")
        .name_server(ns.clone())
        .round_robin_start(0)
        .start()
        .await
        .unwrap();
    assert_eq!(
        ns.calls.load(Ordering::SeqCst),
        0,
        "no topic registered yet"
    );
    assert_eq!(
        producer.try_select("T", None),
        Err(SelectError::RouteUnknown("T".into()))
    );

    let start = Instant::now();
    let q = producer.select("T", None).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "fetched at once, no timer waited"
    );
    assert_eq!(q, MessageQueue::new("T", "broker-0", 0));
    assert_eq!(ns.calls.load(Ordering::SeqCst), 1);
    // Known now: selections do not ask the name server.
    for _ in 0..10 {
        producer.try_select("T", None).unwrap();
    }
    assert_eq!(ns.calls.load(Ordering::SeqCst), 1);

    // A new broker shows up at the next poll, 30 s later.
    cluster.create_topic("T", 3, 2);
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(producer.publish_info("T").unwrap().broker_count(), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ns.calls.load(Ordering::SeqCst), 2);
    let info = producer.publish_info("T").unwrap();
    assert_eq!(
        info.broker_names().collect::<Vec<_>>(),
        ["broker-0", "broker-1", "broker-2"]
    );
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_first_selections_share_one_fetch() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 8);
    let ns = counting(&cluster);
    let producer = Producer::builder("P")
        .name_server(ns.clone())
        .start()
        .await
        .unwrap();
    cluster.delay_next(ClusterCall::Route, 1, Duration::from_millis(200));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let p = producer.clone();
            tokio::spawn(async move { p.select("T", None).await })
        })
        .collect();
    let mut picked = Vec::new();
    for t in tasks {
        picked.push(t.await.unwrap().unwrap());
    }
    picked.sort();
    picked.dedup();
    assert_eq!(picked.len(), 8, "one cycle of the round robin");
    assert_eq!(
        ns.calls.load(Ordering::SeqCst),
        1,
        "one route request for all"
    );
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn registered_topics_are_fetched_at_start() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("A", 1, 2);
    cluster.create_topic("B", 1, 2);
    let producer = Producer::builder("P")
        .name_server(Arc::new(cluster.client("p")))
        .topic("A")
        .topic("B")
        .start()
        .await
        .unwrap();
    assert!(producer.try_select("A", None).is_ok());
    assert!(producer.try_select("B", None).is_ok());
    let table = producer.routes().borrow().clone();
    let mut topics: Vec<&str> = table.topics().collect();
    topics.sort();
    assert_eq!(topics, ["A", "B"]);
    // The consumer's view is there too: subscribable queues next to the publish queues.
    assert_eq!(table.queues("A").map(|q| q.len()), Some(2));
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn name_server_answers_and_failures_are_typed_errors() {
    let cluster = InMemoryCluster::new();
    let producer = Producer::builder("P")
        .name_server(Arc::new(cluster.client("p")))
        .route_timeout(Duration::from_secs(3))
        .start()
        .await
        .unwrap();
    assert_eq!(
        producer.select("Nope", None).await,
        Err(SelectError::TopicNotFound("Nope".into()))
    );
    // Created meanwhile: the next selection asks again and succeeds.
    cluster.create_topic("Nope", 1, 1);
    assert!(producer.select("Nope", None).await.is_ok());

    cluster.create_topic("Down", 1, 1);
    cluster.set_name_server_down(true);
    match producer.select("Down", None).await {
        Err(SelectError::NameServer { topic, error }) => {
            assert_eq!(topic, "Down");
            assert!(matches!(error, RemoteError::Unreachable(_)));
        }
        other => panic!("{other:?}"),
    }
    cluster.set_name_server_down(false);

    cluster.create_topic("Slow", 1, 1);
    cluster.delay_next(ClusterCall::Route, 1, Duration::from_secs(10));
    let start = Instant::now();
    assert_eq!(
        producer.select("Slow", None).await,
        Err(SelectError::RouteTimeout {
            topic: "Slow".into(),
            after: Duration::from_secs(3)
        })
    );
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    // The answer arrives later anyway, and then the topic is known.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(producer.try_select("Slow", None).is_ok());

    cluster.create_topic("Garbled", 1, 1);
    cluster.garble_next_routes("Garbled", 1);
    assert!(matches!(
        producer.select("Garbled", None).await,
        Err(SelectError::NameServer {
            error: RemoteError::BadResponse(_),
            ..
        })
    ));
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn routes_without_publish_queues_are_typed_errors() {
    let cluster = InMemoryCluster::new();
    cluster.set_route("ReadOnly", read_only_route());
    let mut slaves = route_of(&names(&["a"]), 4);
    slaves.broker_datas[0].broker_addrs = [(1, "s:1".to_string())].into();
    cluster.set_route("Slaves", slaves);
    let mut bad_conf = route_of(&names(&["a"]), 4);
    bad_conf.order_topic_conf = Some("a;4".into());
    cluster.set_route("BadConf", bad_conf);

    let producer = producer(&cluster, true).await;
    let no_queue = |topic: &str, error| SelectError::NoPublishQueue {
        topic: topic.into(),
        error,
    };
    assert_eq!(
        producer.select("ReadOnly", None).await,
        Err(no_queue("ReadOnly", PublishError::NoWritableQueue))
    );
    assert_eq!(
        producer.select("Slaves", None).await,
        Err(no_queue(
            "Slaves",
            PublishError::NoMaster {
                brokers: vec!["a".into()]
            }
        ))
    );
    assert!(matches!(
        producer.select_by("BadConf", &SelectByHash, "k").await,
        Err(SelectError::NoPublishQueue {
            error: PublishError::MalformedOrderConf { .. },
            ..
        })
    ));
    // Consumers may still read the read-only topic: the table says why producers cannot send.
    match producer.routes().borrow().topic("ReadOnly") {
        TopicState::Known {
            queues, publish, ..
        } => {
            assert_eq!(queues.len(), 4);
            assert_eq!(publish, &Err(PublishError::NoWritableQueue));
        }
        other => panic!("{other:?}"),
    }
    // The route is fixed: the next poll makes the topic usable.
    cluster.create_topic("ReadOnly", 1, 4);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert!(producer.select("ReadOnly", None).await.is_ok());
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_topic_without_publish_queues_is_asked_again_at_most_once_a_second() {
    let cluster = InMemoryCluster::new();
    cluster.set_route("T", read_only_route());
    let ns = counting(&cluster);
    let producer = Producer::builder("P")
        .name_server(ns.clone())
        .start()
        .await
        .unwrap();
    let read_only = Err(SelectError::NoPublishQueue {
        topic: "T".into(),
        error: PublishError::NoWritableQueue,
    });
    assert_eq!(producer.select("T", None).await, read_only);
    assert_eq!(ns.calls.load(Ordering::SeqCst), 1);
    // The broker becomes writable (the same broker: one leaving the route would be polled
    // again every second for a while): within the second, selections are answered from memory.
    cluster.set_route("T", route_of(&names(&["a"]), 4));
    tokio::time::sleep(Duration::from_millis(900)).await;
    for _ in 0..100 {
        assert_eq!(producer.select_by("T", &SelectByHash, "k").await, read_only);
    }
    assert_eq!(ns.calls.load(Ordering::SeqCst), 1, "no poll per selection");
    // A second after the last poll, the next selection asks again, and sends resume long
    // before the 30 s poll.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(producer.select("T", None).await.is_ok());
    assert_eq!(ns.calls.load(Ordering::SeqCst), 2);
    // A usable topic is not asked again on selection.
    for _ in 0..100 {
        producer.select("T", None).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    producer.select("T", None).await.unwrap();
    assert_eq!(ns.calls.load(Ordering::SeqCst), 2);
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_topic_is_kept_for_a_while_then_gone() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let producer = Producer::builder("P")
        .name_server(Arc::new(cluster.client("p")))
        .topic("T")
        .start()
        .await
        .unwrap();
    cluster.delete_topic("T");
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert!(
        producer.select("T", None).await.is_ok(),
        "last good route kept"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        producer.select("T", None).await,
        Err(SelectError::TopicGone("T".into()))
    );
    cluster.create_topic("T", 1, 2);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        producer.select("T", None).await.is_ok(),
        "back at the first selection a second after the last poll, not at the next poll"
    );
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn retries_skip_the_failed_broker_and_avoidance_steers_around_slow_ones() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 3, 2);
    let producer = producer(&cluster, true).await;

    // broker-1 answers in 2 s: avoided for 120 s after one send.
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..60 {
        let q = producer.select("T", None).await.unwrap();
        let latency = if &*q.broker_name == "broker-1" {
            Duration::from_secs(2)
        } else {
            Duration::from_millis(5)
        };
        producer.report(&q.broker_name, latency, true);
        *sent.entry(q.broker_name.to_string()).or_default() += 1;
    }
    assert_eq!(sent.get("broker-1"), Some(&1), "{sent:?}");
    // The others share the rest equally (to one message, as 59 is odd).
    assert!(sent["broker-0"].abs_diff(sent["broker-2"]) <= 1, "{sent:?}");
    assert_eq!(
        producer.faults().avoided(Instant::now()),
        [("broker-1".to_string(), Duration::from_secs(120))]
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(producer.faults().avoided(Instant::now()).is_empty());
    let back = (0..6)
        .filter_map(|_| producer.try_select("T", None).ok())
        .filter(|q| &*q.broker_name == "broker-1")
        .count();
    assert_eq!(back, 2, "broker-1 is back in turn after 120 s");

    // A failed send: the retry goes to another broker, and the failed one is avoided for 600 s.
    let first = producer.select("T", None).await.unwrap();
    producer.report(&first.broker_name, Duration::from_millis(3), false);
    for _ in 0..20 {
        let retry = producer
            .select("T", Some(&first.broker_name))
            .await
            .unwrap();
        assert_ne!(retry.broker_name, first.broker_name);
        let again = producer.select("T", None).await.unwrap();
        assert_ne!(again.broker_name, first.broker_name);
    }
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_producer_says_its_group_and_whether_it_avoids_faults() {
    let cluster = InMemoryCluster::new();
    for avoid in [true, false] {
        let builder = Producer::builder("P")
            .name_server(Arc::new(cluster.client("producer")))
            .topic("T")
            .latency_fault_avoidance(avoid);
        let described = format!("{builder:?}");
        for part in ["\"P\"", "\"T\"", &format!("fault_avoidance: {avoid}")] {
            assert!(described.contains(part), "{part} not in {described}");
        }
        let producer = builder.start().await.unwrap();
        assert_eq!(producer.group(), "P");
        assert_eq!(producer.fault_avoidance(), avoid);
        let described = format!("{producer:?}");
        for part in ["\"P\"", &format!("fault_avoidance: {avoid}")] {
            assert!(described.contains(part), "{part} not in {described}");
        }
        producer.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn without_avoidance_reports_change_nothing() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 1);
    let producer = producer(&cluster, false).await;
    assert!(!producer.fault_avoidance());
    producer.register("T").await.unwrap();
    producer.report("broker-0", Duration::from_secs(20), false);
    assert!(!producer.faults().any_avoided());
    let picks: Vec<MessageQueue> = (0..4)
        .map(|_| producer.try_select("T", None).unwrap())
        .collect();
    assert_eq!(picks[0], picks[2]);
    assert_ne!(picks[0], picks[1]);
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn keyed_selection_keeps_a_key_on_its_queue_across_polls() {
    let cluster = InMemoryCluster::new();
    let brokers = names(&["room0@a", "room1@b"]);
    cluster.set_route("T", route_of(&brokers, 4));
    let producer = producer(&cluster, true).await;
    let before = producer
        .select_by("T", &SelectByHash, "order-7")
        .await
        .unwrap();
    // Other brokers avoided and other traffic: a key still goes to its queue.
    producer.report(&before.broker_name, Duration::from_secs(5), true);
    for _ in 0..5 {
        producer.select("T", None).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(95)).await;
    assert_eq!(
        producer
            .select_by("T", &SelectByHash, "order-7")
            .await
            .unwrap(),
        before
    );
    let near = SelectByMachineRoom::new("room1");
    for key in ["a", "b", "c", "d"] {
        let q = producer.select_by("T", &near, key).await.unwrap();
        assert_eq!(&*q.broker_name, "room1@b");
    }
    struct Refuse;
    impl rebalance_runtime::producer::QueueSelector for Refuse {
        fn select(&self, queues: &[MessageQueue], _key: &str) -> Option<usize> {
            Some(queues.len())
        }
    }
    assert_eq!(
        producer.select_by("T", &Refuse, "k").await,
        Err(SelectError::SelectorRefused {
            topic: "T".into(),
            queues: 8
        })
    );
    producer.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_by_token_or_call_stops_selections() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 1);
    let parent = CancellationToken::new();
    let producer = Producer::builder("P")
        .name_server(Arc::new(cluster.client("p")))
        .topic("T")
        .shutdown_on(parent.clone())
        .start()
        .await
        .unwrap();
    assert!(producer.try_select("T", None).is_ok());
    parent.cancel();
    producer.shutdown().await;
    assert_eq!(producer.try_select("T", None), Err(SelectError::ShutDown));
    assert_eq!(producer.select("U", None).await, Err(SelectError::ShutDown));

    assert!(matches!(
        Producer::builder("")
            .name_server(Arc::new(cluster.client("p")))
            .start()
            .await,
        Err(ProducerError::EmptyGroup)
    ));
    assert!(matches!(
        Producer::builder("P").start().await,
        Err(ProducerError::Missing(_))
    ));
}

#[test]
fn starting_outside_a_runtime_is_an_error() {
    let cluster = InMemoryCluster::new();
    let start = Producer::builder("P")
        .name_server(Arc::new(cluster.client("p")))
        .start();
    // Polled by a plain executor without a tokio context: the check comes first.
    let result = futures_lite_block_on(start);
    assert!(matches!(result, Err(ProducerError::NoRuntime)));
}

/// Polls a future to completion on this thread without a tokio runtime.
fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn zero_or_absurd_intervals_are_refused_at_start() {
    use rebalance_runtime::config::IntervalsError;
    use rebalance_runtime::producer::ProducerError;
    let cluster = InMemoryCluster::new();
    let base = || Producer::builder("P").name_server(Arc::new(cluster.client("producer")));
    let err = base()
        .poll_interval(Duration::ZERO)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ProducerError::Interval(IntervalsError::Zero("poll_interval"))
    ));
    assert!(err.to_string().contains("poll_interval"), "{err}");
    let err = base()
        .topic_gone_after(Duration::MAX)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ProducerError::Interval(IntervalsError::TooLong {
            field: "topic_gone_after",
            ..
        })
    ));
    assert!(base().start().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn producers_do_not_all_start_their_round_robin_on_the_same_queue() {
    // The Java producer starts each topic's round robin at a random position
    // (`ThreadLocalIndex`), so a fleet of producers (or short-lived ones sending a few messages
    // each) spreads over the queues. Starting every producer at queue 0 sends every producer's
    // first message to broker-0's queue 0.
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 4, 4);
    let mut first = std::collections::BTreeSet::new();
    for _ in 0..16 {
        let producer = producer(&cluster, false).await;
        first.insert(producer.select("T", None).await.unwrap());
        producer.shutdown().await;
    }
    // With random starts, 16 producers all on one of 16 queues has probability 16^-15.
    assert!(first.len() > 1, "every producer started on {first:?}");
}

#[tokio::test(start_paused = true)]
async fn a_name_server_panicking_in_the_first_poll_fails_start() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let started = Producer::builder("P")
        .name_server(panics_from(&cluster, 0))
        .topic("T")
        .start()
        .await;
    match started {
        Err(ProducerError::TaskPanicked(message)) => {
            assert!(message.contains("injected name server panic"), "{message}")
        }
        other => panic!("expected TaskPanicked, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_route_sync_that_panics_later_stops_the_producer_and_says_why() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let producer = Producer::builder("P")
        .name_server(panics_from(&cluster, 1))
        .topic("T")
        .poll_interval(Duration::from_secs(30))
        .start()
        .await
        .unwrap();
    // The first poll went through: the topic is usable until the route sync dies.
    producer.select("T", None).await.unwrap();
    // The next poll panics. Before, the task died silently: the route table froze and the
    // handle kept answering from it with no sign that nothing would ever refresh it.
    let ended = tokio::time::timeout(Duration::from_secs(60), producer.join())
        .await
        .expect("the producer stops once its route sync has panicked");
    match ended {
        Err(ProducerError::TaskPanicked(message)) => {
            assert!(message.contains("injected name server panic"), "{message}")
        }
        other => panic!("expected TaskPanicked, got {other:?}"),
    }
    match producer.select("T", None).await {
        Err(SelectError::TaskPanicked(message)) => {
            assert!(message.contains("injected name server panic"), "{message}")
        }
        other => panic!("expected SelectError::TaskPanicked, got {other:?}"),
    }
    assert!(producer.token().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_producer_shut_down_joins_cleanly() {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 4);
    let producer = producer(&cluster, false).await;
    producer.shutdown().await;
    assert!(producer.join().await.is_ok());
    assert_eq!(producer.select("T", None).await, Err(SelectError::ShutDown));
}

/// A name server that takes a second to answer each lookup.
struct Slow(ClusterClient);

#[async_trait]
impl NameServer for Slow {
    async fn topic_route(&self, topic: &str) -> Result<TopicRoute, RouteError> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.0.topic_route(topic).await
    }
}

/// A first selection made while the periodic poll runs is answered between two of the poll's
/// lookups, not after the whole poll (found by review: five topics at a second each outlasted
/// the selection's 3 s, and a healthy name server's producer failed its first send of a new
/// topic).
#[tokio::test(start_paused = true)]
async fn a_first_selection_during_a_poll_of_many_topics_is_answered_in_time() {
    let cluster = InMemoryCluster::new();
    let topics: Vec<String> = (0..5).map(|i| format!("T{i}")).collect();
    for topic in topics.iter().chain([&"New".to_string()]) {
        cluster.create_topic(topic, 1, 2);
    }
    let mut builder = Producer::builder("P")
        .name_server(Arc::new(Slow(cluster.client("producer"))))
        .poll_interval(Duration::from_secs(30));
    for topic in &topics {
        builder = builder.topic(topic.clone());
    }
    let producer = builder.start().await.unwrap();
    let started = Instant::now();
    tokio::time::sleep_until(started + Duration::from_millis(30_100)).await;
    let asked = Instant::now();
    let queue = producer.select("New", None).await.unwrap();
    assert_eq!(&*queue.topic, "New");
    assert!(
        asked.elapsed() <= Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    producer.shutdown().await;
}
