//! Group assignors on the Kafka reference workload (see `rebalance_cli::workload`): range and
//! round robin's first assignment, and the sticky assignors' re-assignment after
//! `consumer-{M/2}` left, at 100 x 1,000 x 1,000 and 1,000 x 1,000 x 2,000 (topics x
//! partitions x members). `rebalance bench --assignor` measures the same cases.
//!
//! Also the sticky assignors on a group scaling out whose subscriptions differ (their general
//! path): 100 members own 5 topics of 2,000 partitions, 900 join, one of them also reading a
//! topic of one partition.
//!
//! `cargo bench -p rebalance-cli --bench assignors`

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rebalance_cli::bench::{AssignorCase, Scenario, assignor::timed_group};
use rebalance_cli::workload::DEFAULT_TOPIC_SEED;
use rebalance_core::assignor::{AssignorRegistry, GroupSubscription, MemberSubscription};
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

/// `owners` members own `topics` topics of `partitions` partitions round robin at generation 3;
/// `joiners` more own nothing; the last joiner also reads topic `extra` (1 partition).
fn scale_out(owners: usize, joiners: usize, topics: usize, partitions: u32) -> GroupSubscription {
    let names: Vec<String> = (0..topics).map(|t| format!("t{t}")).collect();
    let all: Vec<(&str, i32)> = names
        .iter()
        .flat_map(|t| (0..partitions as i32).map(move |p| (t.as_str(), p)))
        .collect();
    let mut group = GroupSubscription::new().with_topic("extra", 1);
    for t in &names {
        group = group.with_topic(t.as_str(), partitions);
    }
    for i in 0..owners + joiners {
        let mut reads = names.clone();
        if i == owners + joiners - 1 {
            reads.push("extra".into());
        }
        let mut member = MemberSubscription::new(format!("m{i:05}"), reads);
        if i < owners {
            let mine = all.iter().skip(i).step_by(owners).copied();
            member = member.with_owned(mine).with_generation(3);
        }
        group = group.with_member(member);
    }
    group
}

fn sticky_scale_out(c: &mut Criterion) {
    let registry = AssignorRegistry::default();
    let subscription = scale_out(100, 900, 5, 2_000);
    let mut group = c.benchmark_group("assignor/scale_out_100+900_5x2000");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for assignor in ["sticky", "cooperative_sticky"] {
        let built = registry.build(assignor, &Params::new()).expect("assignor");
        group.bench_function(assignor, |b| {
            b.iter(|| black_box(built.assign(&subscription).expect("assign")))
        });
    }
    group.finish();
}

criterion_group!(benches, assignors, sticky_scale_out);
criterion_main!(benches);
