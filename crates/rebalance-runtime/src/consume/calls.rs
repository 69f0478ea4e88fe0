//! Calls into the application's [`MessageSource`], contained: a panic becomes an error (so it
//! never takes a worker or a pull loop down with it), and a pull that never answers is cut
//! short.

use std::time::Duration;

use super::{MessageSource, PullError, PullRequest, PullResult, SendBack};
use crate::RemoteError;
use crate::callbacks::caught;

/// How much longer than its long-polling suspension a pull may take before it counts as an
/// error (the Java client's 30 s RPC timeout with its default 15 s suspension).
pub(crate) const PULL_GRACE: Duration = Duration::from_secs(15);

/// Pulls, for at most the request's suspension + [`PULL_GRACE`]; a pull that takes longer, or
/// a panic of the source, is an error (the loop pulls again after the error delay).
pub(crate) async fn pull(
    source: &dyn MessageSource,
    request: &PullRequest,
) -> Result<PullResult, PullError> {
    let after = request.suspend.saturating_add(PULL_GRACE);
    match tokio::time::timeout(after, caught(source.pull(request))).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(panic)) => {
            tracing::error!(queue = ?request.queue, panic = %panic, "the message source panicked in pull; counting it as a pull error");
            Err(PullError::Remote(RemoteError::BadResponse(format!(
                "the message source panicked in pull: {panic}"
            ))))
        }
        Err(_) => Err(PullError::Remote(RemoteError::Timeout {
            service: "the message source (pull)".to_owned(),
            after,
        })),
    }
}

/// Sends a message back; a panic of the source counts as a failed send-back.
pub(crate) async fn send_back(
    source: &dyn MessageSource,
    request: SendBack<'_>,
) -> Result<(), RemoteError> {
    let offset = request.message.queue_offset();
    let (group, topic) = (request.group, request.message.queue().topic.clone());
    let result = caught(source.send_back(request))
        .await
        .unwrap_or_else(|panic| {
            tracing::error!(offset, panic = %panic, "the message source panicked in send_back; counting it as a failed send-back");
            Err(RemoteError::BadResponse(format!(
                "the message source panicked in send_back: {panic}"
            )))
        });
    if result.is_ok() {
        crate::metrics::sent_back(group, &topic, 1);
    }
    result
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rebalance_core::MessageQueue;

    use super::*;
    use crate::consume::Message;
    use crate::consume::testing::TestSource;

    #[tokio::test]
    async fn a_panic_in_send_back_is_a_failed_send_back() {
        let source = Arc::new(TestSource::default());
        source.with(|s| s.panicking_send_backs = 1);
        let message = Message::new(MessageQueue::new("T", "b", 0), 4, "x");
        let first = send_back(&*source, SendBack::new("G", &message)).await;
        assert!(
            matches!(first, Err(RemoteError::BadResponse(_))),
            "{first:?}"
        );
        assert!(
            send_back(&*source, SendBack::new("G", &message))
                .await
                .is_ok()
        );
        assert_eq!(source.with(|s| s.sent_back.len()), 1);
    }
}
