//! Calling the application's listener so that its failures stay contained.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::listener::ListenerError;

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
            tracing::warn!(callback, topic, error = %e, "listener callback failed");
            Err(format!("{callback}({topic}) failed: {e}"))
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            tracing::error!(callback, topic, panic = %message, "listener callback panicked");
            Err(format!("{callback}({topic}) panicked: {message}"))
        }
    }
}

#[cfg(test)]
mod tests {
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
}
