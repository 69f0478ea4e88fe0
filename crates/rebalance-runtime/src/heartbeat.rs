//! The heartbeat task: keeps this client registered in its group's directory.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::directory::Registration;
use crate::{GroupDirectory, RemoteError};

/// Sends one heartbeat; failures are logged (the next one retries) and returned.
pub(crate) async fn beat(
    directory: &dyn GroupDirectory,
    registration: &Registration,
) -> Result<(), RemoteError> {
    let outcome = directory.register(registration).await;
    match &outcome {
        Ok(()) => tracing::trace!(client = %registration.client_id, "heartbeat sent"),
        Err(e) => tracing::warn!(client = %registration.client_id, error = %e, "heartbeat failed"),
    }
    outcome
}

/// Beats every `interval`, at once when the registration (the subscriptions) changes, and at
/// once when the rebalance asks (`now`): when the directory failed or does not list this client,
/// for example after a broker restart, which only learns a client's new connection from its
/// next heartbeat.
pub(crate) async fn run(
    directory: Arc<dyn GroupDirectory>,
    mut registration: watch::Receiver<Arc<Registration>>,
    interval: Duration,
    now: Arc<Notify>,
    token: CancellationToken,
) {
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let current = tokio::select! {
            biased;
            _ = token.cancelled() => break,
            changed = registration.changed() => {
                if changed.is_err() {
                    break;
                }
                registration.borrow_and_update().clone()
            }
            _ = ticker.tick() => registration.borrow().clone(),
            _ = now.notified() => {
                tracing::debug!("heartbeat asked for by the rebalance");
                registration.borrow().clone()
            }
        };
        // A heartbeat in flight stops with the token: the shutdown (which unregisters) does not
        // wait for a directory that does not answer.
        if token
            .run_until_cancelled(beat(&*directory, &current))
            .await
            .is_none()
        {
            tracing::debug!("heartbeat cancelled in flight");
            break;
        }
    }
    tracing::debug!("heartbeat stopped");
}
