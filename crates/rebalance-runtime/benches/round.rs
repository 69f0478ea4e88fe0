//! The cost of one rebalance round at 10,000 queues: the table diff and the callbacks, on the
//! in-memory cluster (no network), measured from the round reports.
//!
//! `cargo bench -p rebalance-runtime --bench round`

mod common;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

const BROKERS: usize = 100;
const PER_BROKER: i32 = 100;

fn rounds(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("round_10k_queues");
    group.sample_size(20);

    // A lone consumer's first round: 10,000 queues added (offsets read, leases made, callback).
    group.bench_function("add_all", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let cluster = common::cluster(BROKERS, PER_BROKER);
                    let a = common::start(&cluster, 0).await;
                    let report = a.rounds().borrow().clone();
                    assert_eq!(report.topics[0].added.len(), 10_000);
                    total += report.duration;
                    a.abort();
                }
                total
            })
        })
    });

    // A second member registers: the first member's round releases 5,000 queues (callback,
    // offset bookkeeping) and keeps 5,000. The member is only a registration at the directory,
    // so that its own consumer's start-up does not run on this thread during the measured round.
    group.bench_function("release_half", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let cluster = common::cluster(BROKERS, PER_BROKER);
                    let a = common::start(&cluster, 0).await;
                    let mut rounds = a.rounds();
                    let first = rounds.borrow_and_update().round;
                    common::register(&cluster, 1).await;
                    let report = rounds
                        .wait_for(|r| r.round > first)
                        .await
                        .expect("round")
                        .clone();
                    assert_eq!(report.topics[0].removed.len(), 5_000);
                    total += report.duration;
                    a.abort();
                }
                total
            })
        })
    });

    // A round with nothing to change (the periodic case): directory call, allocation, diff.
    group.bench_function("steady", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let cluster = common::cluster(BROKERS, PER_BROKER);
                let a = common::start(&cluster, 0).await;
                let mut rounds = a.rounds();
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let before = rounds.borrow_and_update().round;
                    a.rebalance_now();
                    let report = rounds
                        .wait_for(|r| r.round > before)
                        .await
                        .expect("round")
                        .clone();
                    total += report.duration;
                }
                a.abort();
                total
            })
        })
    });
    group.finish();
}

criterion_group!(benches, rounds);
criterion_main!(benches);
