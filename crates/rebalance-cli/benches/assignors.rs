//! Group assignors on the Kafka reference workload (see `rebalance_cli::workload`): range and
//! round robin's first assignment, and the sticky assignors' re-assignment after
//! `consumer-{M/2}` left, at 100 x 1,000 x 1,000 and 1,000 x 1,000 x 2,000 (topics x
//! partitions x members). `rebalance bench --assignor` measures the same cases.
//!
//! `cargo bench -p rebalance-cli --bench assignors`

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rebalance_cli::bench::{AssignorCase, Scenario, assignor::timed_group};
use rebalance_cli::workload::DEFAULT_TOPIC_SEED;
use rebalance_core::assignor::AssignorRegistry;
use rebalance_core::strategy::Params;

/// (topics, partitions per topic, members)
const SIZES: [(usize, u32, usize); 2] = [(100, 1_000, 1_000), (1_000, 1_000, 2_000)];

fn assignors(c: &mut Criterion) {
    let registry = AssignorRegistry::default();
    for (topics, partitions, members) in SIZES {
        let mut group = c.benchmark_group(format!("assignor/{topics}x{partitions}x{members}"));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        for (assignor, scenario) in [
            ("range", Scenario::Initial),
            ("roundrobin", Scenario::Initial),
            ("sticky", Scenario::MemberLeft),
            ("cooperative_sticky", Scenario::MemberLeft),
        ] {
            let case = AssignorCase {
                assignor: assignor.into(),
                topics,
                partitions,
                members,
                scenario,
                seed: DEFAULT_TOPIC_SEED,
                runs: None,
            };
            let subscription = timed_group(&case, &registry).expect("group");
            let built = registry.build(assignor, &Params::new()).expect("assignor");
            group.bench_function(BenchmarkId::new(scenario.as_str(), assignor), |b| {
                b.iter(|| black_box(built.assign(&subscription).expect("assign")))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, assignors);
criterion_main!(benches);
