//! Calls into the application's [`MessageSource`], contained: a panic becomes an error (so it
//! never takes a worker or a pull loop down with it), and a pull that never answers is cut
//! short.

use std::future::Future;
use std::time::Duration;

use super::{MessageSource, PullError, PullRequest, PullResult, SendBack};
use rebalance_runtime::RemoteError;
use rebalance_runtime::containment::caught;

/// How much longer than its long-polling suspension a pull may take before it counts as an
/// error (the Java client's 30 s RPC timeout with its default 15 s suspension), and one second
/// more: a transport's own timeout of a held pull (the RocketMQ one's 15 s margin) comes first,
/// and with it its check of the connection's silence, which a pull dropped here would skip.
pub(crate) const PULL_GRACE: Duration = Duration::from_secs(16);

/// Pulls, for at most the request's suspension + [`PULL_GRACE`]; a pull that takes longer, a
/// panic of the source, or an answer with an impossible offset ([`checked`]) is an error (the
/// loop pulls again after the error delay).
pub(crate) async fn pull(
    source: &dyn MessageSource,
    request: &PullRequest,
) -> Result<PullResult, PullError> {
    let after = request.suspend.saturating_add(PULL_GRACE);
    match tokio::time::timeout(after, caught(source.pull(request))).await {
        Ok(Ok(answer)) => answer.and_then(|result| checked(request, result)),
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

/// The largest offset a pull may name: one more must still be an offset.
const MAX_OFFSET: i64 = i64::MAX - 1;

/// `result` if its offsets can be: every offset from 0 to [`MAX_OFFSET`]. Whatever the source
/// (a broker's answer is decoded from the network), the consume layer then never adds one to
/// an offset that has no successor (a message at `i64::MAX` would wrap the next offset around
/// and make every later message look pulled already). Messages below the requested offset or
/// out of order are not impossible: the buffer skips them as duplicates.
pub(crate) fn checked(request: &PullRequest, result: PullResult) -> Result<PullResult, PullError> {
    let in_range = |offset: i64| (0..=MAX_OFFSET).contains(&offset);
    let (next_offset, messages) = match &result {
        PullResult::Found {
            messages,
            next_offset,
            ..
        } => (*next_offset, messages.as_slice()),
        PullResult::NoNewMessage { next_offset } | PullResult::OffsetMoved { next_offset } => {
            (*next_offset, &[][..])
        }
    };
    let bad = messages
        .iter()
        .map(|m| ("a message's offset", m.queue_offset()))
        .chain([("the next offset", next_offset)])
        .find(|(_, offset)| !in_range(*offset));
    if let Some((what, offset)) = bad {
        return Err(PullError::ImpossibleOffset {
            queue: request.queue.clone(),
            offset: request.offset,
            detail: format!("{what} is {offset}, outside 0 to {MAX_OFFSET}"),
        });
    }
    // Out of order: the loop keeps each message past the one before it, so a message behind
    // its predecessor would be dropped and the offset moved past it unconsumed (found by
    // review). A source answers a queue's messages in offset order; one that does not is
    // refused, the pull counted as failed (a message twice in a row is only a duplicate).
    if let Some(pair) = messages
        .windows(2)
        .find(|pair| pair[1].queue_offset() < pair[0].queue_offset())
    {
        return Err(PullError::ImpossibleOffset {
            queue: request.queue.clone(),
            offset: request.offset,
            detail: format!(
                "message {} comes after message {}: the answer is not in offset order",
                pair[1].queue_offset(),
                pair[0].queue_offset()
            ),
        });
    }
    Ok(result)
}

/// Calls an offset lookup of the source (`kind` names it), contained: a panic is an error.
pub(crate) async fn lookup(
    kind: &'static str,
    call: impl Future<Output = Result<i64, RemoteError>>,
) -> Result<i64, RemoteError> {
    caught(call).await.unwrap_or_else(|panic| {
        tracing::error!(kind, panic = %panic, "the message source panicked in an offset lookup; counting it as a failed lookup");
        Err(RemoteError::BadResponse(format!(
            "the message source panicked in {kind}: {panic}"
        )))
    })
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
    use crate::Message;
    use crate::testing::TestSource;

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

    /// An answer whose messages are out of offset order is refused (its message behind its
    /// predecessor would be dropped and skipped); one with a message twice is not.
    #[test]
    fn an_answer_out_of_offset_order_is_impossible() {
        let q = MessageQueue::new("T", "b", 0);
        let request = PullRequest::new(
            "G",
            q.clone(),
            5,
            rebalance_runtime::subscription::TagExpression::all(),
        );
        let found = |offsets: &[i64]| PullResult::Found {
            messages: offsets
                .iter()
                .map(|&o| Message::new(q.clone(), o, "x"))
                .collect(),
            next_offset: 8,
            min_offset: 0,
            max_offset: 8,
        };
        assert!(matches!(
            checked(&request, found(&[5, 7, 6])),
            Err(PullError::ImpossibleOffset { .. })
        ));
        assert!(checked(&request, found(&[5, 6, 6, 7])).is_ok());
        assert!(checked(&request, found(&[5, 6, 7])).is_ok());
    }
}
