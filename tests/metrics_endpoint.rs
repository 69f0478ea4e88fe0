//! The `--metrics ADDR` endpoint of the `rocketmq_consumer` example: a scrape returns the
//! runtime's metrics in the Prometheus text format, with the values of a running consumer.
//! (A push consumer on the in-memory cluster stands in for RocketMQ: the metrics are the
//! runtime's either way.)

#[path = "../examples/rocketmq_consumer/metrics_endpoint.rs"]
mod metrics_endpoint;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rebalance::runtime::consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer,
};
use rebalance::runtime::memory::{ClusterMessages, InMemoryCluster, OutgoingMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Count(AtomicUsize);

#[async_trait]
impl ConcurrentListener for Count {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        self.0.fetch_add(messages.len(), Ordering::SeqCst);
        ConsumeResult::Success
    }
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("the endpoint answers and closes")
    .unwrap();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_returns_the_consumers_metrics() {
    let handle = metrics_endpoint::install().unwrap();
    let listener = metrics_endpoint::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(metrics_endpoint::serve(listener, handle));

    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, 2);
    let client = cluster.client("a@1");
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let consumer = PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| c.cluster(client.clone()).consume_retry_topic(false))
        .source(Arc::new(client))
        .concurrently(count.clone())
        .start()
        .await
        .unwrap();
    consumer
        .consumer()
        .wait_for_assignment(|a| a.len() == 2, Duration::from_secs(10))
        .await
        .unwrap();
    for i in 0..3 {
        cluster
            .send("T", OutgoingMessage::new(format!("m{i}")))
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count.0.load(Ordering::SeqCst) < 3 {
        assert!(tokio::time::Instant::now() < deadline, "not consumed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let response = scrape(addr).await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    for line in [
        "# HELP rebalance_rounds_total",
        "# TYPE rebalance_rounds_total counter",
        // The consume layer's metrics are described too.
        "# HELP rebalance_messages_consumed_total",
        "rebalance_queues_owned{group=\"G\",topic=\"T\"} 2",
        "rebalance_messages_consumed_total{group=\"G\",topic=\"T\"} 3",
        "rebalance_buffered_messages{group=\"G\",topic=\"T\"} 0",
    ] {
        assert!(body.lines().any(|l| l.starts_with(line)), "{line}:\n{body}");
    }
    consumer.shutdown().await;
    let after = scrape(addr).await;
    assert!(
        after.contains("rebalance_queues_owned{group=\"G\",topic=\"T\"} 0"),
        "{after}"
    );
    server.abort();
}
