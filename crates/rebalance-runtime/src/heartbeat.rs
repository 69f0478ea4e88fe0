//! The heartbeat task: keeps this client registered in its group's directory.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::directory::Registration;
use crate::membership::Membership;
use crate::running::ConsumerActivity;
use crate::{GroupDirectory, RemoteError};

/// Sends one heartbeat; an accepted one vouches for the `membership` from when it was sent
/// (see [`Membership::confirmed`]). Failures are logged (the next one retries) and returned.
pub(crate) async fn beat(
    directory: &dyn GroupDirectory,
    registration: &Registration,
    membership: &Membership,
) -> Result<(), RemoteError> {
    let sent = Instant::now();
    let outcome = directory.register(registration).await;
    match &outcome {
        Ok(()) => {
            if membership.confirmed(sent, Instant::now()) {
                tracing::trace!(client = %registration.client_id, "heartbeat sent");
            } else {
                tracing::info!(client = %registration.client_id, "heartbeat accepted after this client's membership had lapsed (or before it was first confirmed)");
            }
        }
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
    activity: Arc<ConsumerActivity>,
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
            .run_until_cancelled(beat(&*directory, &current, &activity.membership))
            .await
            .is_none()
        {
            tracing::debug!("heartbeat cancelled in flight");
            break;
        }
    }
    tracing::debug!("heartbeat stopped");
}
