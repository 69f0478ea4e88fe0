//! Calling the application's code (listener callbacks, strategies, assignors) so that its
//! failures stay contained: an error, a panic or a hung callback becomes a log event and a
//! reported failure of that call, never a failure of the calling task.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::assignment::{
    AllocationFailure, CallbackFailureKind, ListenerCallback, ListenerCallbackError,
};
use crate::listener::ListenerError;

/// Callbacks slower than this are reported.
const SLOW: Duration = Duration::from_secs(1);

/// Awaits a listener callback; an error, a panic, or not returning within `timeout`
/// (`callback_timeout`: the callback's future is then dropped, cancelling it at its current
/// `.await`) becomes a [`ListenerCallbackError`] and a log event, never a failure of the calling task.
pub(crate) async fn contained<F>(
    callback: ListenerCallback,
    topic: &str,
    timeout: Duration,
    future: F,
) -> Result<(), ListenerCallbackError>
where
    F: Future<Output = Result<(), ListenerError>>,
{
    let started = Instant::now();
    let failed = |failure| ListenerCallbackError {
        callback,
        topic: topic.to_string(),
        failure,
    };
    let Ok(outcome) = tokio::time::timeout(timeout, AssertUnwindSafe(future).catch_unwind()).await
    else {
        tracing::error!(
            %callback,
            topic,
            ?timeout,
            "listener callback did not return within callback_timeout; cancelled it, the round goes on as if it had returned"
        );
        return Err(failed(CallbackFailureKind::TimedOut(timeout)));
    };
    let elapsed = started.elapsed();
    if elapsed >= SLOW {
        tracing::warn!(
            %callback,
            topic,
            ?elapsed,
            "listener callback was slow; the round waited for it"
        );
    }
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            let message = with_sources(&*e);
            tracing::warn!(%callback, topic, error = %message, "listener callback failed");
            Err(failed(CallbackFailureKind::Returned(message)))
        }
        Err(panic) => {
            let message = panic_message(&*panic);
            tracing::error!(%callback, topic, panic = %message, "listener callback panicked");
            Err(failed(CallbackFailureKind::Panicked(message)))
        }
    }
}

/// An error's message followed by those of its sources, `: `-separated (a source whose message
/// its error already ends with is not repeated).
pub(crate) fn with_sources(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Runs `future`, catching a panic as its message: for calling code you do not own (a listener,
/// a message source) so that its panic becomes an error of that call, never of the calling
/// task. The panic still goes through the process's panic hook, and with `panic = "abort"`
/// nothing can be caught.
pub async fn caught<T>(future: impl Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|panic| panic_message(&*panic))
}

/// The message of a caught panic (its `&str` or `String` payload).
pub fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Calls a user-provided strategy or assignor (`what` names it in logs); a panic becomes an
/// error for this call (logged), as does the call's own error.
///
/// The panic still goes through the process's panic hook (by default a message on stderr), and
/// with `panic = "abort"` nothing can be caught.
pub(crate) fn allocation_contained<T, E: Into<AllocationFailure>>(
    what: &str,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, AllocationFailure> {
    match std::panic::catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.into()),
        Err(panic) => {
            let message = panic_message(&*panic);
            tracing::error!(allocation = what, panic = %message, "the allocation panicked; treating it as a failure of this round");
            Err(AllocationFailure::Panicked {
                name: what.to_string(),
                message,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use rebalance_core::AllocateError;
    use rebalance_core::assignor::AssignError;

    use super::*;

    const LONG: Duration = Duration::from_secs(10);

    #[derive(Debug, thiserror::Error)]
    #[error("could not store the offset")]
    struct Outer(#[source] std::io::Error);

    #[tokio::test]
    async fn errors_and_panics_are_contained() {
        let added = ListenerCallback::QueuesAdded;
        assert_eq!(contained(added, "T", LONG, async { Ok(()) }).await, Ok(()));
        let err = contained(added, "T", LONG, async { Err("boom".into()) })
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ListenerCallbackError {
                callback: added,
                topic: "T".into(),
                failure: CallbackFailureKind::Returned("boom".into()),
            }
        );
        assert_eq!(err.to_string(), "queues_added(T) failed: boom");
        let err = contained(ListenerCallback::QueuesRemoved, "U", LONG, async {
            panic!("kaboom")
        })
        .await
        .unwrap_err();
        assert_eq!(err.failure, CallbackFailureKind::Panicked("kaboom".into()));
        assert_eq!(err.to_string(), "queues_removed(U) panicked: kaboom");
    }

    #[tokio::test]
    async fn a_returned_error_keeps_its_sources() {
        let err = contained(ListenerCallback::QueuesRemoved, "T", LONG, async {
            Err(Outer(std::io::Error::other("disk full")).into())
        })
        .await
        .unwrap_err();
        assert_eq!(
            err.failure,
            CallbackFailureKind::Returned("could not store the offset: disk full".into())
        );
    }

    #[test]
    fn a_source_already_in_the_message_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("could not store the offset: {0}")]
        struct Says(#[source] std::io::Error);
        let e = Says(std::io::Error::other("disk full"));
        assert_eq!(with_sources(&e), "could not store the offset: disk full");
    }

    #[test]
    fn allocation_panics_and_errors_become_errors() {
        assert_eq!(
            allocation_contained("s", || Ok::<_, AllocateError>(3)),
            Ok(3)
        );
        let refused = AllocateError::EmptyConsumers;
        assert_eq!(
            allocation_contained("s", || Err::<u8, _>(refused.clone())),
            Err(AllocationFailure::Strategy(refused))
        );
        let err =
            allocation_contained::<u8, AssignError>("mine", || panic!("bad {}", 42)).unwrap_err();
        assert_eq!(
            err,
            AllocationFailure::Panicked {
                name: "mine".into(),
                message: "bad 42".into()
            }
        );
        assert_eq!(err.to_string(), "mine panicked: bad 42");
    }

    struct SetOnDrop(Arc<AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_callback_is_dropped_after_the_timeout() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = SetOnDrop(dropped.clone());
        let hangs = async move {
            let _guard = guard;
            std::future::pending::<Result<(), ListenerError>>().await
        };
        let started = Instant::now();
        let err = contained(ListenerCallback::QueuesAdded, "T", LONG, hangs)
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), LONG);
        assert_eq!(err.failure, CallbackFailureKind::TimedOut(LONG));
        assert_eq!(
            err.to_string(),
            "queues_added(T) failed: did not return within 10s (callback_timeout); it was cancelled"
        );
        assert!(
            dropped.load(Ordering::SeqCst),
            "the callback's future is dropped"
        );
        // Quick callbacks pass through untouched.
        assert_eq!(
            contained(ListenerCallback::QueuesRemoved, "T", LONG, async { Ok(()) }).await,
            Ok(())
        );
        assert_eq!(started.elapsed(), LONG);
    }
}
