//! The consume layer alone: a push consumer on the in-memory cluster with a no-op listener,
//! pull → buffer → consume → commit, in messages per second, and the stream consumer doing the
//! same (each message yielded and acknowledged); and the bytes the layer keeps per buffered
//! message beyond the message itself, measured with a counting allocator.
//!
//! `cargo bench -p rebalance-consume --bench consume`
//!
//! `CONSUME_BENCH_THREADS=N cargo bench -p rebalance-consume --bench consume` runs the push
//! consumer's pass on a multi-threaded runtime of `N` worker threads instead, seven times, and
//! prints each run's CPU time per message over every thread of the process (and its wall time):
//! what the threads' traffic between them costs, which a one-thread run cannot show.

mod counting;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{Criterion, Throughput};
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeOptions, ConsumeResult, Message, MessageSource,
    PullError, PullRequest, PullResult, PushConsumer, PushConsumerHandle, SendBack, StreamConsumer,
};
use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::config::ConsumeFrom;
use rebalance_runtime::memory::{ClusterClient, InMemoryCluster};
use tokio::sync::Notify;

/// A source that counts the messages it delivered.
struct CountingSource {
    inner: ClusterClient,
    delivered: AtomicU64,
}

#[async_trait]
impl MessageSource for CountingSource {
    async fn pull(&self, request: &PullRequest) -> Result<PullResult, PullError> {
        let result = self.inner.pull(request).await;
        if let Ok(PullResult::Found { messages, .. }) = &result {
            self.delivered
                .fetch_add(messages.len() as u64, Ordering::Relaxed);
        }
        result
    }
    async fn send_back(&self, request: SendBack<'_>) -> Result<(), RemoteError> {
        self.inner.send_back(request).await
    }
    async fn min_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        self.inner.min_offset(queue).await
    }
    async fn max_offset(&self, queue: &MessageQueue) -> Result<i64, RemoteError> {
        self.inner.max_offset(queue).await
    }
    async fn offset_at(&self, queue: &MessageQueue, at: i64) -> Result<i64, RemoteError> {
        self.inner.offset_at(queue, at).await
    }
}

/// On-CPU time of the calling thread (`/proc/thread-self/schedstat`, ns): the machine is
/// shared, so wall time says more about the neighbours than about the code.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = stat
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

use counting::Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Counts messages; wakes the bench when `target` is reached. With `block`, the first call
/// never returns (so that everything pulled after it stays buffered).
struct NoOp {
    first: std::sync::OnceLock<Instant>,
    count: AtomicU64,
    target: u64,
    done: Notify,
    block: bool,
}

#[async_trait]
impl ConcurrentListener for NoOp {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        if self.block {
            std::future::pending::<()>().await;
        }
        self.first.get_or_init(Instant::now);
        let n = messages.len() as u64;
        if self.count.fetch_add(n, Ordering::Relaxed) + n == self.target {
            self.done.notify_one();
        }
        ConsumeResult::Success
    }
}

fn cluster(queues: i32, per_queue: usize) -> InMemoryCluster {
    let cluster = InMemoryCluster::new();
    cluster.create_topic("T", 1, queues);
    for id in 0..queues {
        let queue = MessageQueue::new("T", "broker-0", id);
        for _ in 0..per_queue {
            cluster
                .send_to(&queue, OutgoingMessage::new(&b"0123456789abcdef"[..]))
                .expect("send");
        }
    }
    cluster
}

async fn start(
    cluster: &InMemoryCluster,
    listener: Arc<NoOp>,
    options: ConsumeOptions,
    source: Arc<CountingSource>,
) -> PushConsumerHandle {
    let client = cluster.client("10.0.0.1@1");
    PushConsumer::builder("G")
        .subscribe("T")
        .configure(|c| {
            c.cluster(client.clone())
                .consume_from(ConsumeFrom::FirstOffset)
                .consume_retry_topic(false)
        })
        .options(options)
        .source(source)
        .concurrently(listener)
        .start()
        .await
        .expect("start")
}

fn counting(cluster: &InMemoryCluster) -> Arc<CountingSource> {
    Arc::new(CountingSource {
        inner: cluster.client("10.0.0.1@1"),
        delivered: AtomicU64::new(0),
    })
}

/// The CPU time (of the one thread running everything) to consume every message of a fresh
/// cluster, from the consumer's start to the last message consumed.
fn consume_all(runtime: &tokio::runtime::Runtime, queues: i32, per_queue: usize) -> Duration {
    let cluster = cluster(queues, per_queue);
    let total = queues as u64 * per_queue as u64;
    runtime.block_on(async {
        let listener = Arc::new(NoOp {
            first: std::sync::OnceLock::new(),
            count: AtomicU64::new(0),
            target: total,
            done: Notify::new(),
            block: false,
        });
        let started = Instant::now();
        let cpu = thread_cpu();
        let all_cpu = process_cpu();
        let consumer = start(
            &cluster,
            listener.clone(),
            ConsumeOptions::default(),
            counting(&cluster),
        )
        .await;
        listener.done.notified().await;
        let cpu = thread_cpu() - cpu;
        if std::env::var_os("CONSUME_BENCH_THREADS").is_some() {
            let all_cpu = process_cpu() - all_cpu;
            println!(
                "{:.0} ns CPU a message (every thread), {:.0} ns wall",
                all_cpu.as_nanos() as f64 / total as f64,
                started.elapsed().as_nanos() as f64 / total as f64
            );
        }
        if std::env::var_os("CONSUME_BENCH_PHASES").is_some() {
            let first = listener.first.get().map(|f| *f - started);
            let wall = started.elapsed();
            eprintln!("first message after {first:?}, all after {wall:?} ({cpu:?} on CPU)");
        }
        consumer.shutdown().await;
        cpu
    })
}

/// The bytes held while `count` messages of one queue are buffered (the listener holds the
/// first one forever).
fn buffered(runtime: &tokio::runtime::Runtime, count: usize) -> isize {
    let cluster = cluster(1, count);
    runtime.block_on(async {
        let listener = Arc::new(NoOp {
            first: std::sync::OnceLock::new(),
            count: AtomicU64::new(0),
            target: u64::MAX,
            done: Notify::new(),
            block: true,
        });
        let mut options = ConsumeOptions::default();
        options.consume_concurrency = 1;
        options.queue_max_messages = count * 2;
        options.max_span = count as i64 * 2;
        let source = counting(&cluster);
        let before = counting::live();
        let consumer = start(&cluster, listener, options, source.clone()).await;
        while source.delivered.load(Ordering::Relaxed) < count as u64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Let the loop buffer the last pull.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let held = counting::live() - before;
        consumer.abort();
        drop(consumer);
        // Let the aborted tasks go, so that their memory is not freed during the next run.
        tokio::time::sleep(Duration::from_millis(200)).await;
        held
    })
}

fn overhead(runtime: &tokio::runtime::Runtime) {
    // What one message costs by itself, as a pull copies it out of the cluster's log.
    let (small, large) = (20_000usize, 100_000usize);
    let sample = cluster(1, small);
    let before = counting::live();
    let copies = sample.messages(&MessageQueue::new("T", "broker-0", 0));
    let message = (counting::live() - before) as f64 / copies.len() as f64;
    drop(copies);
    // The slope between two buffer sizes leaves the consumer's fixed costs out.
    let held_small = buffered(runtime, small);
    let held_large = buffered(runtime, large);
    let per_message = (held_large - held_small) as f64 / (large - small) as f64;
    println!(
        "buffered: {per_message:.1} bytes per message, of which the message {message:.1} \
         ({} of them its struct): {:.1} bytes of overhead per buffered message",
        std::mem::size_of::<Message>(),
        per_message - message
    );
}

/// The CPU time (of the one thread running everything) for the stream consumer to yield and
/// acknowledge every message of a fresh cluster, one message at a time, from its start to the
/// last message acknowledged: `consume_all`'s work through the stream.
fn stream_all(runtime: &tokio::runtime::Runtime, queues: i32, per_queue: usize) -> Duration {
    let cluster = cluster(queues, per_queue);
    let total = queues as u64 * per_queue as u64;
    runtime.block_on(async {
        let client = cluster.client("10.0.0.1@1");
        let cpu = thread_cpu();
        let mut stream = StreamConsumer::builder("G")
            .subscribe("T")
            .configure(|c| {
                c.cluster(client.clone())
                    .consume_from(ConsumeFrom::FirstOffset)
                    .consume_retry_topic(false)
            })
            .source(counting(&cluster))
            .start()
            .await
            .expect("start");
        let mut acknowledged = 0;
        while acknowledged < total {
            let Some(message) = stream.next().await else {
                break;
            };
            message.ack();
            acknowledged += 1;
        }
        let cpu = thread_cpu() - cpu;
        stream.handle().shutdown().await;
        cpu
    })
}

/// The on-CPU time of every thread of this process (`/proc/self/task/*/schedstat`, ns).
fn process_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

fn main() {
    if let Some(threads) = std::env::var("CONSUME_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse::<usize>().ok())
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .expect("runtime");
        let (queues, per_queue) = (8, 50_000);
        for _ in 0..7 {
            consume_all(&runtime, queues, per_queue);
        }
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if std::env::var_os("CONSUME_BENCH_PHASES").is_some() {
        consume_all(&runtime, 8, 50_000);
        return;
    }
    overhead(&runtime);
    let mut criterion = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .configure_from_args();
    let (queues, per_queue) = (8, 50_000);
    let mut group = criterion.benchmark_group("consume");
    group.throughput(Throughput::Elements(queues as u64 * per_queue as u64));
    group.bench_function("pull_buffer_consume_commit_8x50000_noop", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| consume_all(&runtime, queues, per_queue))
                .sum()
        });
    });
    group.bench_function("stream_pull_buffer_ack_commit_8x50000", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| stream_all(&runtime, queues, per_queue))
                .sum()
        });
    });
    group.finish();
    criterion.final_summary();
}
