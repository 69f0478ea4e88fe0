//! Calling the application's code (listener callbacks, strategies, assignors) so that its
//! failures stay contained: an error, a panic or a hung callback becomes a log event and a
//! reported failure of that call, never a failure of the calling task.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use rebalance_core::MessageQueue;
use tokio::time::Instant;

use crate::listener::{ListenerError, QueueLease, QueueListener, RemovedQueue};

/// Callbacks slower than this are reported.
const SLOW: Duration = Duration::from_secs(1);

/// Awaits a listener callback; an error or a panic becomes `Err(description)` and a log event,
/// never a failure of the calling task.
pub(crate) async fn contained<F>(
    callback: &'static str,
    topic: &str,
    future: F,
) -> Result<(), String>
where
    F: Future<Output = Result<(), ListenerError>>,
{
    let started = Instant::now();
    let outcome = AssertUnwindSafe(future).catch_unwind().await;
    let elapsed = started.elapsed();
    if elapsed >= SLOW {
        tracing::warn!(
            callback,
            topic,
            ?elapsed,
            "listener callback was slow; the round waited for it"
        );
    }
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            // A timeout was logged as an error where it happened.
            if !e.is::<CallbackTimedOut>() {
                tracing::warn!(callback, topic, error = %e, "listener callback failed");
            }
            Err(format!("{callback}({topic}) failed: {e}"))
        }
        Err(panic) => {
            let message = panic_message(&*panic);
            tracing::error!(callback, topic, panic = %message, "listener callback panicked");
            Err(format!("{callback}({topic}) panicked: {message}"))
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
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
pub(crate) fn allocation_contained<T, E: fmt::Display>(
    what: &str,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T, String> {
    match std::panic::catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => {
            let message = panic_message(&*panic);
            tracing::error!(allocation = what, panic = %message, "the allocation panicked; treating it as a failure of this round");
            Err(format!("{what} panicked: {message}"))
        }
    }
}

/// A listener callback that did not return within the callback timeout.
#[derive(Debug, thiserror::Error)]
#[error("did not return within {timeout:?} (callback_timeout); it was cancelled")]
pub(crate) struct CallbackTimedOut {
    timeout: Duration,
}

/// The application's listener, with every callback cut short after `timeout`: the callback's
/// future is dropped, an error event is logged, and the call fails with [`CallbackTimedOut`],
/// so the round goes on as if it had returned.
pub(crate) struct TimeLimited {
    inner: Arc<dyn QueueListener>,
    timeout: Duration,
}

impl TimeLimited {
    pub(crate) fn new(inner: Arc<dyn QueueListener>, timeout: Duration) -> Self {
        Self { inner, timeout }
    }

    async fn call<F>(
        &self,
        callback: &'static str,
        topic: &str,
        future: F,
    ) -> Result<(), ListenerError>
    where
        F: Future<Output = Result<(), ListenerError>>,
    {
        match tokio::time::timeout(self.timeout, future).await {
            Ok(result) => result,
            Err(_) => {
                tracing::error!(
                    callback,
                    topic,
                    timeout = ?self.timeout,
                    "listener callback did not return within callback_timeout; cancelled it, the round goes on as if it had returned"
                );
                Err(Box::new(CallbackTimedOut {
                    timeout: self.timeout,
                }))
            }
        }
    }
}

#[async_trait]
impl QueueListener for TimeLimited {
    async fn queues_added(&self, topic: &str, queues: &[QueueLease]) -> Result<(), ListenerError> {
        self.call(
            "queues_added",
            topic,
            self.inner.queues_added(topic, queues),
        )
        .await
    }

    async fn queues_removed(
        &self,
        topic: &str,
        queues: &[RemovedQueue],
    ) -> Result<(), ListenerError> {
        self.call(
            "queues_removed",
            topic,
            self.inner.queues_removed(topic, queues),
        )
        .await
    }

    async fn message_queue_changed(
        &self,
        topic: &str,
        all: &[MessageQueue],
        mine: &[MessageQueue],
    ) -> Result<(), ListenerError> {
        self.call(
            "message_queue_changed",
            topic,
            self.inner.message_queue_changed(topic, all, mine),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn errors_and_panics_are_contained() {
        assert_eq!(contained("cb", "T", async { Ok(()) }).await, Ok(()));
        let err = contained("cb", "T", async { Err("boom".into()) })
            .await
            .unwrap_err();
        assert!(err.contains("boom"));
        let err = contained("cb", "T", async { panic!("kaboom") })
            .await
            .unwrap_err();
        assert!(err.contains("panicked: kaboom"), "{err}");
    }

    #[test]
    fn allocation_panics_and_errors_become_errors() {
        assert_eq!(allocation_contained("s", || Ok::<_, String>(3)), Ok(3));
        assert_eq!(
            allocation_contained("s", || Err::<u8, _>("refused")),
            Err("refused".to_string())
        );
        let err = allocation_contained::<u8, String>("mine", || panic!("bad {}", 42)).unwrap_err();
        assert_eq!(err, "mine panicked: bad 42");
    }

    /// Hangs in every callback until dropped, and records that it was dropped.
    struct Hangs {
        dropped: Arc<AtomicBool>,
    }

    struct SetOnDrop(Arc<AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[async_trait]
    impl QueueListener for Hangs {
        async fn queues_added(&self, _: &str, _: &[QueueLease]) -> Result<(), ListenerError> {
            let _guard = SetOnDrop(self.dropped.clone());
            std::future::pending().await
        }

        async fn queues_removed(&self, _: &str, _: &[RemovedQueue]) -> Result<(), ListenerError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_callback_is_dropped_after_the_timeout() {
        let dropped = Arc::new(AtomicBool::new(false));
        let listener = TimeLimited::new(
            Arc::new(Hangs {
                dropped: dropped.clone(),
            }),
            Duration::from_secs(10),
        );
        let started = Instant::now();
        let err = contained("queues_added", "T", listener.queues_added("T", &[]))
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert!(err.contains("did not return within 10s"), "{err}");
        assert!(
            dropped.load(Ordering::SeqCst),
            "the callback's future is dropped"
        );
        // Quick callbacks pass through untouched.
        assert_eq!(
            contained("queues_removed", "T", listener.queues_removed("T", &[])).await,
            Ok(())
        );
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }
}
