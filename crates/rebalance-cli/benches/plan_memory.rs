//! Memory a whole-group plan needs beyond its input, at 1,000,000 queues and 2,000 consumers,
//! measured with a counting allocator: the peak while planning (working memory, remembered
//! hashes and rings, the plan) and what stays allocated while the plan is alive. The target is
//! at most 200 bytes per queue; the run fails when a strategy needs more.
//!
//! `cargo bench -p rebalance-cli --bench plan_memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use rebalance_cli::bench::strategy::with_reference_params;
use rebalance_cli::workload;
use rebalance_core::strategy::build_strategy;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grow(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grow(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const QUEUES: usize = 1_000_000;
const CONSUMERS: usize = 2_000;
const LIMIT_PER_QUEUE: f64 = 200.0;

fn main() {
    let mq_all = workload::queues(QUEUES);
    let cid_all = workload::client_ids(CONSUMERS);
    let cases = workload::reference_strategies();
    println!("{QUEUES} queues, {CONSUMERS} consumers: bytes per queue beyond the input");
    let mut over = Vec::new();
    for (label, name, params) in cases {
        let params = with_reference_params(name, params, &mq_all, CONSUMERS);
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let strategy = build_strategy(name, &params).expect("strategy");
        let plan = strategy.plan("bench", &mq_all, &cid_all).expect("plan");
        let held = LIVE.load(Ordering::Relaxed) - before;
        let peak = PEAK.load(Ordering::Relaxed) - before;
        let assigned = plan.assigned_count();
        drop(plan);
        drop(strategy);
        let per_queue = |bytes: isize| bytes as f64 / QUEUES as f64;
        println!(
            "{label:<36} peak {:>6.1}   held with the plan {:>6.1}   ({assigned} queues assigned)",
            per_queue(peak),
            per_queue(held)
        );
        if per_queue(peak) > LIMIT_PER_QUEUE {
            over.push(label);
        }
    }
    assert!(
        over.is_empty(),
        "more than {LIMIT_PER_QUEUE} bytes per queue: {over:?}"
    );
}
