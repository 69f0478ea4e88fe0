//! When a pull loop last pulled (or checked whether it may), whether it is consuming, and the
//! watcher's request that it retire, for the restart of loops that stopped pulling; and the
//! once-per-kind logging of its errors.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// When a loop was last active, as milliseconds since it was made; whether a batch of it is in
/// the listener (it is not stalled then); and whether it is asked to retire.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    last_ms: AtomicU64,
    busy: AtomicBool,
    retire: CancellationToken,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            retire: CancellationToken::new(),
        }
    }

    /// Records activity now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Records whether a batch of the loop is in the listener; the end of one counts as
    /// activity.
    pub(crate) fn set_busy(&self, busy: bool) {
        if self.busy.swap(busy, Ordering::Relaxed) && !busy {
            self.touch();
        }
    }

    /// How long the loop has been idle: zero while a batch of it is in the listener.
    pub(crate) fn idle(&self) -> Duration {
        if self.busy.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        let last = self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Instant::now().saturating_duration_since(last)
    }

    /// Asks the loop to retire: stop pulling, let its batches finish and commit them, and
    /// return (its task then starts a fresh loop).
    pub(crate) fn retire(&self) {
        self.retire.cancel();
    }

    /// Whether the loop was asked to retire.
    pub(crate) fn is_retired(&self) -> bool {
        self.retire.is_cancelled()
    }

    /// Completes when the loop is asked to retire.
    pub(crate) async fn retired(&self) {
        self.retire.cancelled().await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_loop_is_not_idle_while_consuming() {
        let activity = Activity::new();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(activity.idle(), Duration::from_secs(10));
        activity.set_busy(true);
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert_eq!(activity.idle(), Duration::ZERO);
        activity.set_busy(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(activity.idle(), Duration::from_secs(1));
    }
}
