//! Per-topic strategies on the Java reference workload (see `rebalance_cli::workload`): the
//! whole group's plan and one `allocate` for the consumer at position N/2, at 16,384 x 512 and
//! 100,000 x 2,000; for the strategies that remember hashes and rings, also the first plan of a
//! fresh strategy value. `rebalance bench` measures the same cases from the command line.
//!
//! `cargo bench -p rebalance-cli --bench strategies`

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use rebalance_cli::bench::strategy::with_reference_params;
use rebalance_cli::workload;
use rebalance_core::strategy::{StrategyRef, build_strategy};

const SIZES: [(usize, usize); 2] = [(16_384, 512), (100_000, 2_000)];

fn strategies(c: &mut Criterion) {
    for (queues, consumers) in SIZES {
        let mq_all = workload::queues(queues);
        let cid_all = workload::client_ids(consumers);
        let current = &cid_all[consumers / 2];
        let mut group = c.benchmark_group(format!("strategy/{queues}x{consumers}"));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for (label, name, params) in workload::reference_strategies() {
            let params = with_reference_params(name, params, &mq_all, consumers);
            let build = || -> StrategyRef { build_strategy(name, &params).expect("strategy") };
            let strategy = build();
            group.bench_function(BenchmarkId::new("plan", label), |b| {
                b.iter(|| black_box(strategy.plan("bench", &mq_all, &cid_all).expect("plan")))
            });
            group.bench_function(BenchmarkId::new("allocate", label), |b| {
                b.iter(|| {
                    black_box(
                        strategy
                            .allocate_shared("bench", current, &mq_all, &cid_all)
                            .expect("allocate"),
                    )
                })
            });
            if ["consistent_hash", "balanced_sticky"].contains(&label) {
                group.bench_function(BenchmarkId::new("first_plan", label), |b| {
                    b.iter_batched(
                        build,
                        |fresh| {
                            black_box(
                                fresh
                                    .plan("bench", &mq_all, &cid_all)
                                    .expect("plan")
                                    .assigned_count(),
                            )
                        },
                        BatchSize::PerIteration,
                    )
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, strategies);
criterion_main!(benches);
