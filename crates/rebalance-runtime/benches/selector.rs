//! The cost of choosing a queue for one message: the producer handle's `try_select` (route
//! table lookup, the topic's counter, round robin) with and without latency fault avoidance,
//! a retry that skips the failed broker, and keyed selection, at 8 and 1024 publish queues.
//!
//! `cargo bench -p rebalance-runtime --bench selector`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rebalance_runtime::memory::{InMemoryCluster, route_of};
use rebalance_runtime::producer::ProducerHandle;
use rebalance_runtime::producer::{Producer, QueueSelector, RoundRobin, SelectByHash};

/// (publish queues, brokers)
const SIZES: [(i32, usize); 2] = [(8, 2), (1024, 8)];

fn producer(
    runtime: &tokio::runtime::Runtime,
    queues: i32,
    brokers: usize,
    avoid: bool,
) -> ProducerHandle {
    let names: Vec<String> = (0..brokers).map(|b| format!("broker-{b}")).collect();
    let cluster = InMemoryCluster::new();
    cluster.set_route("T", route_of(&names, queues / brokers as i32));
    runtime.block_on(async {
        Producer::builder("bench")
            .name_server(Arc::new(cluster.client("bench")))
            .topic("T")
            .latency_fault_avoidance(avoid)
            .start()
            .await
            .expect("producer")
    })
}

fn selection(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("select");
    for (queues, brokers) in SIZES {
        let plain = producer(&runtime, queues, brokers, false);
        group.bench_with_input(BenchmarkId::new("round_robin", queues), &plain, |b, p| {
            b.iter(|| black_box(p.try_select(black_box("T"), None)))
        });
        group.bench_with_input(
            BenchmarkId::new("retry_skips_failed", queues),
            &plain,
            |b, p| b.iter(|| black_box(p.try_select(black_box("T"), Some("broker-0")))),
        );

        // Avoidance on, nothing avoided: one atomic load more.
        let avoiding = producer(&runtime, queues, brokers, true);
        avoiding.report("broker-0", Duration::from_millis(5), true);
        group.bench_with_input(
            BenchmarkId::new("avoidance_none_avoided", queues),
            &avoiding,
            |b, p| b.iter(|| black_box(p.try_select(black_box("T"), None))),
        );
        // One broker avoided: a lookup per broker met, its queues skipped.
        let one_slow = producer(&runtime, queues, brokers, true);
        one_slow.report("broker-1", Duration::from_secs(2), true);
        group.bench_with_input(
            BenchmarkId::new("avoidance_one_avoided", queues),
            &one_slow,
            |b, p| b.iter(|| black_box(p.try_select(black_box("T"), None))),
        );
        // Every broker avoided: a full scan, then the least bad broker.
        let all_slow = producer(&runtime, queues, brokers, true);
        for b in 0..brokers {
            all_slow.report(
                &format!("broker-{b}"),
                Duration::from_millis(600 + b as u64),
                true,
            );
        }
        group.bench_with_input(
            BenchmarkId::new("avoidance_all_avoided", queues),
            &all_slow,
            |b, p| b.iter(|| black_box(p.try_select(black_box("T"), None))),
        );

        // The selector alone, without the handle's lookups.
        let info = plain.publish_info("T").expect("publish info");
        let rr = RoundRobin::default();
        group.bench_with_input(
            BenchmarkId::new("round_robin_bare", queues),
            &info,
            |b, info| b.iter(|| black_box(rr.select(info, None, None))),
        );
        group.bench_with_input(
            BenchmarkId::new("by_key_hash_bare", queues),
            &info,
            |b, info| {
                b.iter(|| black_box(SelectByHash.select(info.queues(), black_box("order-4711"))))
            },
        );
    }
    group.finish();
}

criterion_group!(benches, selection);
criterion_main!(benches);
