//! Which consumer's application code the current task runs: a task-local set around its
//! listener callbacks (in its service task) and around the batches processed through
//! [`QueueLease::processing`](crate::QueueLease::processing), so that a shutdown asked for from
//! inside them knows it cannot wait for its own end.

use std::future::Future;

tokio::task_local! {
    /// The consumer (its [`ConsumerActivity::serial`](crate::running::ConsumerActivity)) whose
    /// application code this task runs: its listener callbacks (in its service task) and the
    /// batches processed through [`QueueLease::processing`](crate::QueueLease::processing).
    static CALLBACK_OF: u64;
}

/// Runs `future` as application code called by the consumer numbered `serial`: a shutdown of
/// that consumer asked for from inside it only starts the shutdown (see
/// [`ConsumerHandle::shutdown`](crate::ConsumerHandle::shutdown)).
pub(crate) fn as_callback_of<F: Future>(serial: u64, future: F) -> impl Future<Output = F::Output> {
    CALLBACK_OF.scope(serial, future)
}

/// Whether this task runs application code called by the consumer numbered `serial`.
pub(crate) fn in_callback_of(serial: u64) -> bool {
    CALLBACK_OF.try_with(|of| *of == serial).unwrap_or(false)
}
