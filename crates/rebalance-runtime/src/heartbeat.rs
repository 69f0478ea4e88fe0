//! The heartbeat task: keeps this client registered in its group's directory.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::GroupDirectory;
use crate::directory::Registration;

/// Sends one heartbeat; failures are logged (the next one retries).
pub(crate) async fn beat(directory: &dyn GroupDirectory, registration: &Registration) -> bool {
    match directory.register(registration).await {
        Ok(()) => {
            tracing::trace!(client = %registration.client_id, "heartbeat sent");
            true
        }
        Err(e) => {
            tracing::warn!(client = %registration.client_id, error = %e, "heartbeat failed");
            false
        }
    }
}

/// Beats every `interval`, and at once when the registration (the subscriptions) changes.
pub(crate) async fn run(
    directory: Arc<dyn GroupDirectory>,
    mut registration: watch::Receiver<Arc<Registration>>,
    interval: Duration,
    token: CancellationToken,
) {
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = token.cancelled() => break,
            changed = registration.changed() => {
                if changed.is_err() {
                    break;
                }
                let current = registration.borrow_and_update().clone();
                beat(&*directory, &current).await;
            }
            _ = ticker.tick() => {
                let current = registration.borrow().clone();
                beat(&*directory, &current).await;
            }
        }
    }
    tracing::debug!("heartbeat stopped");
}
