//! The cost of one rebalance round at 10,000 queues: the table diff and the callbacks, on the
//! in-memory cluster (no network), measured from the round reports.
//!
//! `cargo bench -p rebalance-runtime --bench round`
//!
//! What is measured is the round alone: each sample sums the rounds' own
//! `RoundReport::duration` (from the round's start to its report), not the wake-up, the timers
//! or the set-up around it. The consumers run without a settle window and with a
//! `rebalance_min` of a microsecond, so that no measured round follows a sleep: a round run
//! right after the thread slept a second (the default `rebalance_min` between two steady
//! rounds) starts with cold caches on a CPU that may have dropped to a low-power state, and
//! took 4 to 5 times longer on a quiet machine than on a busy one (see BENCHMARKS.md, "Rounds
//! at 10,000 queues"). Steady rounds run back to back on one consumer started once.
//!
//! Instruction counts, which do not depend on the machine or its load: run the bench binary
//! under callgrind with `ROUND_BENCH_COUNT=N` (each case N times, no criterion), counting only
//! inside the rounds:
//!
//! ```sh
//! cargo bench -p rebalance-runtime --bench round --no-run
//! ROUND_BENCH_COUNT=20 valgrind --tool=callgrind --toggle-collect='*Service::round_inner*' \
//!     --callgrind-out-file=/tmp/steady.cg target/release/deps/round-HASH steady
//! ```
//!
//! (one case per run: `add_all`, `release_half` or `steady`; divide the total by N). Without
//! valgrind the same mode prints the rounds' mean duration; `ROUND_BENCH_IDLE_MS=M` sleeps M ms
//! before each steady round, as a running consumer does between two steady rounds.

mod common;

use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use rebalance_runtime::ConsumerHandle;
use rebalance_runtime::assignment::RoundReport;
use rebalance_runtime::config::Intervals;
use rebalance_runtime::memory::InMemoryCluster;

const BROKERS: usize = 100;
const PER_BROKER: i32 = 100;

/// No settle window, and rounds as close together as asked: nothing the bench measures
/// follows a sleep.
fn intervals() -> Intervals {
    Intervals {
        rebalance_min: Duration::from_micros(1),
        adaptive_settle: None,
        ..Intervals::default()
    }
}

/// A lone consumer's first round: 10,000 queues added (offsets read, leases made, callback).
async fn add_all() -> Arc<RoundReport> {
    let cluster = common::cluster(BROKERS, PER_BROKER);
    let a = common::start_with(&cluster, 0, intervals()).await;
    let report = a.rounds().borrow().clone();
    assert_eq!(report.topics[0].added.len(), 10_000);
    a.abort();
    report
}

/// A second member registers: the first member's round releases 5,000 queues (callback,
/// offset bookkeeping) and keeps 5,000. The member is only a registration at the directory,
/// so that its own consumer's start-up does not run on this thread during the measured round.
async fn release_half() -> Arc<RoundReport> {
    let cluster = common::cluster(BROKERS, PER_BROKER);
    let a = common::start_with(&cluster, 0, intervals()).await;
    let mut rounds = a.rounds();
    let first = rounds.borrow_and_update().round;
    common::register(&cluster, 1).await;
    let report = rounds
        .wait_for(|r| r.round > first)
        .await
        .expect("round")
        .clone();
    assert_eq!(report.topics[0].removed.len(), 5_000);
    a.abort();
    report
}

/// A consumer holding 10,000 queues whose rounds have nothing to change (the periodic case).
struct Steady {
    _cluster: InMemoryCluster,
    consumer: ConsumerHandle,
}

impl Steady {
    async fn start() -> Self {
        let cluster = common::cluster(BROKERS, PER_BROKER);
        let consumer = common::start_with(&cluster, 0, intervals()).await;
        let steady = Self {
            _cluster: cluster,
            consumer,
        };
        // The round after the first one remembers the inputs; from then on rounds are steady.
        steady.round().await;
        steady
    }

    /// One more round: the directory call, the inputs compared with the last balanced
    /// round's, the report.
    async fn round(&self) -> Arc<RoundReport> {
        let mut rounds = self.consumer.rounds();
        let before = rounds.borrow_and_update().round;
        self.consumer.rebalance_now();
        let report = rounds
            .wait_for(|r| r.round > before)
            .await
            .expect("round")
            .clone();
        assert!(report.balanced && report.topics.iter().all(|t| t.added.is_empty()));
        report
    }
}

fn rounds(c: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let mut group = c.benchmark_group("round_10k_queues");
    group.sample_size(20);
    group.bench_function("add_all", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += add_all().await.duration;
                }
                total
            })
        })
    });
    group.bench_function("release_half", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += release_half().await.duration;
                }
                total
            })
        })
    });
    let steady = runtime.block_on(Steady::start());
    group.bench_function("steady", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += steady.round().await.duration;
                }
                total
            })
        })
    });
    group.finish();
    steady.consumer.abort();
}

/// `ROUND_BENCH_COUNT=N`: runs the case named by the first argument N times, outside
/// criterion (for callgrind).
/// `ROUND_BENCH_IDLE_MS=M`: the thread sleeps M ms before each steady round, as it does
/// between two steady rounds of a running consumer (`rebalance_wait`, 20 s): what a round
/// costs when it starts cold.
fn count(runtime: &tokio::runtime::Runtime, n: usize, case: &str) {
    let idle = Duration::from_millis(
        std::env::var("ROUND_BENCH_IDLE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0),
    );
    let mut total = Duration::ZERO;
    runtime.block_on(async {
        match case {
            "add_all" => {
                for _ in 0..n {
                    total += add_all().await.duration;
                }
            }
            "release_half" => {
                for _ in 0..n {
                    total += release_half().await.duration;
                }
            }
            "steady" => {
                let steady = Steady::start().await;
                for _ in 0..n {
                    if !idle.is_zero() {
                        tokio::time::sleep(idle).await;
                    }
                    total += steady.round().await.duration;
                }
                steady.consumer.abort();
            }
            other => {
                panic!("ROUND_BENCH_COUNT: unknown case {other:?} (add_all, release_half, steady)")
            }
        }
    });
    eprintln!(
        "{case}: {n} rounds, {:?} per round",
        total / n.max(1) as u32
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Some(n) = std::env::var("ROUND_BENCH_COUNT")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        let case = std::env::args()
            .skip(1)
            .find(|a| !a.starts_with('-'))
            .unwrap_or_else(|| "steady".into());
        count(&runtime, n, &case);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    rounds(&mut c, &runtime);
    c.final_summary();
}
