//! A guard on the consume path's cost, counted rather than timed: the allocations and the bytes
//! allocated per message while a push consumer consumes on the in-memory cluster (pull →
//! buffer → listener → commit, with the default options), against the committed baseline
//! `cost_guard.baseline`. Counts do not depend on the machine or its load: the run is on one
//! thread, on paused time, so it does the same work every time.
//!
//! It fails when a count rises more than 10 % above the baseline (the consume layer once lost
//! a third of its speed to labels built per message, unnoticed for days), and says so when one
//! falls 10 % below it, so that the baseline follows improvements. To change the baseline on
//! purpose, run `UPDATE_COST_BASELINE=1 cargo test -p rebalance-consume --test cost_guard` and
//! commit the file with the change that explains it (see BENCHMARKS.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rebalance_consume::memory::{ClusterMessages, OutgoingMessage};
use rebalance_consume::{
    ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer,
};
use rebalance_core::MessageQueue;
use rebalance_runtime::config::ConsumeFrom;
use rebalance_runtime::memory::InMemoryCluster;
use tokio::sync::Notify;

thread_local! {
    /// Allocations and bytes allocated by this thread.
    static ALLOCATED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Counts each thread's allocations.
struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged; the counting touches a
// const-initialized thread-local cell only (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count(bytes: usize) {
    let _ = ALLOCATED.try_with(|cell| {
        let (n, b) = cell.get();
        cell.set((n + 1, b + bytes as u64));
    });
}

fn allocated() -> (u64, u64) {
    ALLOCATED.with(Cell::get)
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const QUEUES: i32 = 4;
const PER_QUEUE: u64 = 2_500;
/// The window measured: from this many messages consumed...
const FROM: u64 = 2_000;
/// ... to this many.
const TO: u64 = 8_000;

/// Notes the thread's allocations when the `FROM`-th and the `TO`-th messages are consumed.
struct Meter {
    count: AtomicU64,
    marks: std::sync::Mutex<Vec<(u64, u64)>>,
    done: Notify,
}

#[async_trait]
impl ConcurrentListener for Meter {
    async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
        let n = messages.len() as u64;
        let before = self.count.fetch_add(n, Ordering::Relaxed);
        let after = before + n;
        for mark in [FROM, TO] {
            if before < mark && after >= mark {
                let now = allocated();
                self.marks.lock().unwrap().push(now);
                if mark == TO {
                    self.done.notify_one();
                }
            }
        }
        ConsumeResult::Success
    }
}

/// Allocations and bytes per message consumed between the `FROM`-th and the `TO`-th message.
fn measure() -> (f64, f64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, QUEUES);
        for id in 0..QUEUES {
            let queue = MessageQueue::new("T", "broker-0", id);
            for _ in 0..PER_QUEUE {
                cluster
                    .send_to(&queue, OutgoingMessage::new(&b"0123456789abcdef"[..]))
                    .unwrap();
            }
        }
        let meter = Arc::new(Meter {
            count: AtomicU64::new(0),
            marks: std::sync::Mutex::new(Vec::new()),
            done: Notify::new(),
        });
        let consumer = PushConsumer::builder("G")
            .cluster(cluster.client("10.0.0.1@1"))
            .configure(|m| {
                m.consume_from(ConsumeFrom::FirstOffset)
                    .consume_retry_topic(false)
            })
            .subscribe("T")
            .concurrently(meter.clone())
            .start()
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(600), meter.done.notified())
            .await
            .expect("consumed");
        consumer.shutdown().await;
        let marks = meter.marks.lock().unwrap().clone();
        let [(n0, b0), (n1, b1)] = marks[..] else {
            panic!("marks {marks:?}");
        };
        let messages = (TO - FROM) as f64;
        ((n1 - n0) as f64 / messages, (b1 - b0) as f64 / messages)
    })
}

const BASELINE: &str = include_str!("cost_guard.baseline");

/// `allocations_per_message` and `bytes_per_message` from the baseline file.
fn baseline() -> (f64, f64) {
    let value = |name: &str| -> f64 {
        BASELINE
            .lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == name)
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("cost_guard.baseline has no `{name} = <number>`"))
    };
    (value("allocations_per_message"), value("bytes_per_message"))
}

#[test]
fn the_consume_path_allocates_no_more_than_its_baseline() {
    let (allocations, bytes) = measure();
    eprintln!("consume path: {allocations:.2} allocations, {bytes:.1} bytes per message");
    if std::env::var_os("UPDATE_COST_BASELINE").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cost_guard.baseline");
        let text = format!(
            "# The consume path's cost per message (tests/cost_guard.rs): update it on purpose only,\n\
             # with UPDATE_COST_BASELINE=1 cargo test -p rebalance-consume --test cost_guard\n\
             allocations_per_message = {allocations:.2}\n\
             bytes_per_message = {bytes:.1}\n"
        );
        std::fs::write(path, text).unwrap();
        return;
    }
    let (base_allocations, base_bytes) = baseline();
    for (what, now, base) in [
        ("allocations", allocations, base_allocations),
        ("bytes", bytes, base_bytes),
    ] {
        assert!(
            now <= base * 1.10,
            "the consume path now costs {now:.2} {what} per message, more than 10 % over its \
             baseline of {base:.2}: find what the change added to the per-message path, or, if \
             it is worth it, update the baseline on purpose (see tests/cost_guard.rs)"
        );
        if now < base * 0.90 {
            eprintln!(
                "the consume path costs {now:.2} {what} per message, well under its baseline of \
                 {base:.2}: update the baseline (UPDATE_COST_BASELINE=1) so that it guards the gain"
            );
        }
    }
}
