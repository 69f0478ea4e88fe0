//! When a pull loop last pulled (or checked whether it may), whether it is consuming, and the
//! watcher's request that it retire, for the restart of loops that stopped pulling; and the
//! once-per-kind logging of its errors, with the back-off and once-per-resource logging of
//! denials.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rebalance_core::MessageQueue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{MAX_DENIED_DELAY, PULL_ERROR_DELAY};
use rebalance_runtime::RemoteError;

/// When a loop was last active, as milliseconds since it was made; whether a batch of it is in
/// the listener (it is not stalled then); and whether it is asked to retire.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    last_ms: AtomicU64,
    busy: AtomicBool,
    /// Whether the loop waits for a pull's answer (which `calls::pull` bounds).
    pulling: AtomicBool,
    retire: CancellationToken,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            pulling: AtomicBool::new(false),
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

    /// Records whether the loop waits for a pull's answer; the answer counts as activity.
    pub(crate) fn set_pulling(&self, pulling: bool) {
        if self.pulling.swap(pulling, Ordering::Relaxed) && !pulling {
            self.touch();
        }
    }

    /// Whether the loop waits for a pull's answer.
    pub(crate) fn is_pulling(&self) -> bool {
        self.pulling.load(Ordering::Relaxed)
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

/// How many denied resources a consumer remembers; beyond that, further ones are logged at
/// ERROR every time (no bookkeeping grows without bound, whatever the source answers).
const MAX_REMEMBERED_DENIALS: usize = 4096;

/// The resources ([`RemoteError::Denied`]'s `resource`) that a consumer's pull loops were
/// denied, shared by its loops: each is logged at ERROR once however many queues are denied it,
/// at debug while it stays denied, and at info when it is served again. Never held across an
/// `.await`.
#[derive(Debug, Default)]
pub(crate) struct DenialLog {
    denied: Mutex<HashSet<Arc<str>>>,
}

impl DenialLog {
    /// Records that `queue`'s loop was denied `resource` by `error` (retried in `retry_in`);
    /// returns the shared name of the resource, to say when it is served again.
    fn denied(
        &self,
        queue: &MessageQueue,
        resource: &str,
        error: &RemoteError,
        retry_in: Duration,
    ) -> Arc<str> {
        let (first, resource) = {
            let mut denied = self.denied.lock().unwrap_or_else(PoisonError::into_inner);
            match denied.get(resource) {
                Some(known) => (false, known.clone()),
                None => {
                    let known: Arc<str> = Arc::from(resource);
                    if denied.len() < MAX_REMEMBERED_DENIALS {
                        denied.insert(known.clone());
                    }
                    (true, known)
                }
            }
        };
        let operation = match error {
            RemoteError::Denied { operation, .. } => *operation,
            _ => "",
        };
        if first {
            tracing::error!(queue = ?queue, operation, resource = %resource, error = %error, ?retry_in, backs_off_up_to = ?MAX_DENIED_DELAY, "denied: every queue denied this backs off until it is served again (logged once per resource; repeats at debug level)");
        } else {
            tracing::debug!(queue = ?queue, operation, resource = %resource, error = %error, ?retry_in, "denied again");
        }
        resource
    }

    /// Records that `resource`, denied before, was served: says so once.
    fn served(&self, queue: &MessageQueue, resource: &str) {
        let was_denied = self
            .denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(resource);
        if was_denied {
            tracing::info!(queue = ?queue, resource, "served again after a denial");
        }
    }

    /// How many resources are remembered as denied.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Logs a loop's failures once per kind: a warning when a new kind of failure appears, debug
/// events while it repeats, and an info event when the loop recovers. A denial
/// ([`RemoteError::Denied`]) is logged through the consumer's [`DenialLog`] instead, once per
/// resource, and backs off (see [`denied`](Self::denied)).
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    current: Option<&'static str>,
    repeats: u64,
    /// The resource the current run of denials is about.
    denied: Option<Arc<str>>,
}

impl ErrorLog {
    /// Records a failure of `kind` with `error`: a denial backs off ([`denied`](Self::denied)),
    /// anything else is retried after `retry_in`. Returns how long to wait.
    pub(crate) fn remote(
        &mut self,
        denials: &DenialLog,
        queue: &MessageQueue,
        kind: &'static str,
        error: &RemoteError,
        retry_in: Duration,
    ) -> Duration {
        match error {
            RemoteError::Denied { resource, .. } => {
                self.denied(denials, queue, kind, resource, error)
            }
            _ => {
                self.failed(queue, kind, error, retry_in);
                retry_in
            }
        }
    }

    /// Records a denial of `resource` by `error` while doing `kind`: logged once per resource
    /// through `denials` (never once per queue), and the loop backs off: returns
    /// [`PULL_ERROR_DELAY`] after the first denial of a run, doubled after each further one,
    /// up to [`MAX_DENIED_DELAY`]. A success or another failure ends the run.
    fn denied(
        &mut self,
        denials: &DenialLog,
        queue: &MessageQueue,
        kind: &'static str,
        resource: &str,
        error: &RemoteError,
    ) -> Duration {
        let again = self.current == Some(kind) && self.denied.as_deref() == Some(resource);
        if again {
            self.repeats = self.repeats.saturating_add(1);
        } else {
            self.current = Some(kind);
            self.repeats = 0;
        }
        let retry_in = denied_delay(self.repeats);
        self.denied = Some(denials.denied(queue, resource, error, retry_in));
        retry_in
    }

    /// Records a failure of `kind`; `message` describes it.
    pub(crate) fn failed(
        &mut self,
        queue: &MessageQueue,
        kind: &'static str,
        message: &dyn std::fmt::Display,
        retry_in: Duration,
    ) {
        if self.current == Some(kind) && self.denied.is_none() {
            self.repeats += 1;
            tracing::debug!(queue = ?queue, kind, error = %message, ?retry_in, "failed again");
        } else {
            tracing::warn!(queue = ?queue, kind, error = %message, ?retry_in, "failed; retrying (repeats of this failure are logged at debug level)");
            self.current = Some(kind);
            self.repeats = 0;
            self.denied = None;
        }
    }

    /// Records a success: says so when it ends a run of failures (once per resource, through
    /// `denials`, when it ends a run of denials).
    pub(crate) fn recovered(&mut self, denials: &DenialLog, queue: &MessageQueue) {
        let Some(kind) = self.current.take() else {
            return;
        };
        match self.denied.take() {
            Some(resource) => {
                tracing::debug!(queue = ?queue, kind, repeats = self.repeats, resource = %resource, "recovered from a denial");
                denials.served(queue, &resource);
            }
            None => tracing::info!(queue = ?queue, kind, repeats = self.repeats, "recovered"),
        }
    }
}

/// How long a loop waits after the `repeats + 1`-th denial in a row: [`PULL_ERROR_DELAY`]
/// doubled `repeats` times, at most [`MAX_DENIED_DELAY`].
fn denied_delay(repeats: u64) -> Duration {
    let doublings = u32::try_from(repeats).unwrap_or(u32::MAX).min(16);
    PULL_ERROR_DELAY
        .saturating_mul(1u32 << doublings)
        .min(MAX_DENIED_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_back_off_from_3_s_doubling_to_60_s() {
        let secs: Vec<u64> = (0..8).map(|n| denied_delay(n).as_secs()).collect();
        assert_eq!(secs, [3, 6, 12, 24, 48, 60, 60, 60]);
        assert_eq!(denied_delay(u64::MAX), MAX_DENIED_DELAY);
    }

    /// Many queues denied one resource share one record (one ERROR); a queue that recovers
    /// forgets it; another failure is not a denial and ends the back-off.
    #[test]
    fn a_denial_is_recorded_once_per_resource_and_each_queue_backs_off() {
        let denials = DenialLog::default();
        let denial = |resource: &str| RemoteError::Denied {
            server: "b".into(),
            operation: "pull",
            resource: resource.into(),
            code: 16,
            remark: String::new(),
        };
        let queues: Vec<MessageQueue> =
            (0..100).map(|id| MessageQueue::new("T", "b", id)).collect();
        let mut logs: Vec<ErrorLog> = queues.iter().map(|_| ErrorLog::default()).collect();
        for round in 0..3u32 {
            for (queue, log) in queues.iter().zip(&mut logs) {
                let wait = log.remote(&denials, queue, "pull", &denial("T"), PULL_ERROR_DELAY);
                assert_eq!(wait, PULL_ERROR_DELAY * 2u32.pow(round));
            }
        }
        assert_eq!(denials.len(), 1);
        let other = MessageQueue::new("U", "b", 0);
        let mut log = ErrorLog::default();
        log.remote(&denials, &other, "pull", &denial("U"), PULL_ERROR_DELAY);
        assert_eq!(denials.len(), 2);

        logs[0].recovered(&denials, &queues[0]);
        assert_eq!(denials.len(), 1, "T served again");
        let down = RemoteError::Unreachable("down".into());
        assert_eq!(
            log.remote(&denials, &other, "pull", &down, PULL_ERROR_DELAY),
            PULL_ERROR_DELAY
        );
        assert_eq!(
            log.remote(&denials, &other, "pull", &denial("U"), PULL_ERROR_DELAY),
            PULL_ERROR_DELAY,
            "a new run of denials"
        );
    }

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
