//! Memory held per queue by a consumer (ProcessQueue table entry, lease, cancellation token,
//! assignment snapshot), measured with a counting allocator.
//!
//! `cargo bench -p rebalance-runtime --bench table_memory`

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for (brokers, per_broker) in [(10, 100), (100, 100), (100, 1000)] {
        let queues = brokers * per_broker as usize;
        let cluster = common::cluster(brokers, per_broker);
        runtime.block_on(async {
            // The listener sees nothing of the queues (it keeps no lease), so what remains is
            // the runtime's own state plus the cluster's, which is measured separately.
            let idle = common::start(&cluster, 1).await;
            idle.shutdown().await;
            let before = LIVE.load(Ordering::Relaxed);
            let a = common::start(&cluster, 0).await;
            tokio::task::yield_now().await;
            let after = LIVE.load(Ordering::Relaxed);
            assert_eq!(a.assignment().len(), queues);
            let per_queue = (after - before) as f64 / queues as f64;
            println!("{queues:>7} queues held: {per_queue:.0} bytes per queue (table, leases, tokens, assignment snapshot)");
            a.abort();
        });
    }
}
