//! Calls into the application's [`MessageSource`], contained: a panic becomes an error (so it
//! never takes a worker or a pull loop down with it), and a pull that never answers is cut
//! short.

use super::{MessageSource, SendBack};
use crate::RemoteError;
use crate::callbacks::caught;

/// Sends a message back; a panic of the source counts as a failed send-back.
pub(crate) async fn send_back(
    source: &dyn MessageSource,
    request: SendBack<'_>,
) -> Result<(), RemoteError> {
    let offset = request.message.queue_offset();
    caught(source.send_back(request))
        .await
        .unwrap_or_else(|panic| {
            tracing::error!(offset, panic = %panic, "the message source panicked in send_back; counting it as a failed send-back");
            Err(RemoteError::BadResponse(format!(
                "the message source panicked in send_back: {panic}"
            )))
        })
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
