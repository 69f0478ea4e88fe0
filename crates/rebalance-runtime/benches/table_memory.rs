//! Memory held per queue by a consumer (ProcessQueue table entry, lease, cancellation token,
//! assignment snapshot), measured with a counting allocator.
//!
//! `cargo bench -p rebalance-runtime --bench table_memory`

mod common;
mod counting;

use counting::Counting;

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
            let before = counting::live();
            let a = common::start(&cluster, 0).await;
            tokio::task::yield_now().await;
            let after = counting::live();
            assert_eq!(a.assignment().len(), queues);
            let per_queue = (after - before) as f64 / queues as f64;
            println!("{queues:>7} queues held: {per_queue:.0} bytes per queue (table, leases, tokens, assignment snapshot)");
            a.abort();
        });
    }
}
