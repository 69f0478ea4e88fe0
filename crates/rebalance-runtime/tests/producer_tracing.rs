//! The producer's tracing events: a broker put on and taken off the avoid list, a topic's
//! publish info changing. Alone in its test binary: a scoped subscriber set on one test thread
//! would miss events whose call sites other test threads registered first.

mod capture;

use capture::Capture;

use std::sync::Arc;
use std::time::Duration;

use rebalance_core::route::perm;
use rebalance_runtime::memory::{InMemoryCluster, route_of};
use rebalance_runtime::producer::Producer;

#[tokio::test(start_paused = true)]
async fn avoid_list_and_publish_info_changes_are_traced() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 2, 2);
    let producer = Producer::builder("P")
        .name_server(Arc::new(cluster.client("producer")))
        .latency_fault_avoidance(true)
        .start()
        .await
        .unwrap();
    producer.select("T", None).await.unwrap();
    let log = capture.take();
    assert!(log.contains("publish info changed"), "{log}");
    assert!(log.contains(r#"brokers=["broker-0", "broker-1"]"#), "{log}");

    producer.report("broker-1", Duration::from_millis(1500), true);
    let log = capture.take();
    assert!(log.contains("broker put on the avoid list"), "{log}");
    assert!(
        log.contains("broker=\"broker-1\"") || log.contains("broker=broker-1"),
        "{log}"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    for _ in 0..4 {
        producer.try_select("T", None).unwrap();
    }
    let log = capture.take();
    assert_eq!(
        log.matches("taken off the avoid list: its time is up")
            .count(),
        1,
        "{log}"
    );

    let mut read_only = route_of(&["broker-0".to_string()], 2);
    read_only.queue_datas[0].perm = perm::READ;
    cluster.set_route("T", read_only);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let log = capture.take();
    assert!(log.contains("producers cannot send to this topic"), "{log}");
    producer.shutdown().await;
}
