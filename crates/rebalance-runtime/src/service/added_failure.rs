//! What happens when `queues_added` fails: the [`AddedFailurePolicy`].

use tokio::time::Instant;

use super::Service;
use crate::assignment::{ListenerCallback, ListenerCallbackError};
use crate::callbacks::contained;
use crate::config::AddedFailurePolicy;
use crate::lease::QueueLease;

impl Service {
    /// A `queues_added` call for `leases` of `topic` failed, the `failures`-th time for them:
    /// reported, then retried later or the consumer shut down, as the policy says.
    pub(super) fn added_failed(
        &mut self,
        topic: &str,
        leases: Vec<QueueLease>,
        failures: u32,
        error: ListenerCallbackError,
    ) {
        let queues: Vec<_> = leases.iter().map(|l| l.queue().clone()).collect();
        match self.ctx.added_failure {
            AddedFailurePolicy::RetryWithBackoff => {
                let now = Instant::now();
                let at = self.added_retries.failed(topic, leases, failures, now);
                tracing::error!(topic, attempt = failures, queues = ?queues, error = %error, retry_in = ?at.duration_since(now), "queues_added failed; calling it again for these queues later");
            }
            AddedFailurePolicy::ReleaseAndShutdown => {
                tracing::error!(topic, queues = ?queues, error = %error, "queues_added failed; shutting the consumer down so that the group rebalances its queues");
                self.stop_requested = true;
            }
        }
        self.callback_errors.push(error);
    }

    /// Calls `queues_added` again for the queues of the failed calls whose backoff is over
    /// (those still held).
    pub(super) async fn retry_added(&mut self) {
        for retry in self.added_retries.due(Instant::now()) {
            let topic = retry.topic.as_str();
            let attempt = retry.failures + 1;
            tracing::info!(
                topic,
                attempt,
                count = retry.leases.len(),
                "calling queues_added again"
            );
            let listener = self.ctx.listener.clone();
            let result = contained(
                ListenerCallback::QueuesAdded,
                topic,
                self.ctx.intervals.callback_timeout,
                listener.queues_added(topic, &retry.leases),
            )
            .await;
            match result {
                Ok(()) => tracing::info!(topic, attempt, "queues_added succeeded"),
                Err(error) => self.added_failed(topic, retry.leases, attempt, error),
            }
        }
    }
}
