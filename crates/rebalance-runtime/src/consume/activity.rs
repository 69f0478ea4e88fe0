//! When a pull loop last pulled (or checked whether it may), for the restart of loops that
//! stopped pulling; and the once-per-kind logging of its errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// When a loop was last active, as milliseconds since it was made.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Records activity now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long the loop has been idle.
    pub(crate) fn idle(&self) -> Duration {
        let last = self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Instant::now().saturating_duration_since(last)
    }
}

/// Logs a loop's failures once per kind: a warning when a new kind of failure appears, debug
/// events while it repeats, and an info event when the loop recovers.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    current: Option<&'static str>,
    repeats: u64,
}

impl ErrorLog {
    /// Records a failure of `kind`; `message` describes it.
    pub(crate) fn failed(
        &mut self,
        queue: &rebalance_core::MessageQueue,
        kind: &'static str,
        message: &dyn std::fmt::Display,
        retry_in: Duration,
    ) {
        if self.current == Some(kind) {
            self.repeats += 1;
            tracing::debug!(queue = ?queue, kind, error = %message, ?retry_in, "failed again");
        } else {
            tracing::warn!(queue = ?queue, kind, error = %message, ?retry_in, "failed; retrying (repeats of this failure are logged at debug level)");
            self.current = Some(kind);
            self.repeats = 0;
        }
    }

    /// Records a success: says so when it ends a run of failures.
    pub(crate) fn recovered(&mut self, queue: &rebalance_core::MessageQueue) {
        if let Some(kind) = self.current.take() {
            tracing::info!(queue = ?queue, kind, repeats = self.repeats, "recovered");
        }
    }
}
