//! Start positions resolved before the queues are announced: once `queues_added` returned (and
//! so once [`ready`](crate::ConsumerHandle::ready) did), a queue without a stored offset starts
//! at an offset fixed then, so a message sent afterwards is consumed even from the last offset.
//! The Java client does the same in its rebalance (`computePullFromWhere`) before it dispatches
//! the first pull.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::{Instant, sleep};

use super::shared::Shared;
use crate::{QueueLease, StartPosition};

/// How long `queues_added` spends on the lookups at most; a queue still unresolved then is
/// resolved by its pull loop, which retries every 3 s.
pub(crate) const RESOLVE_WITHIN: Duration = Duration::from_secs(3);

/// How soon a failed lookup is tried again within [`RESOLVE_WITHIN`].
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// Resolves, at the source and all at once, the start positions of the leases that have no
/// offset yet (no stored offset, nothing committed), and commits each answer on its lease, where
/// its pull loop finds it.
pub(crate) async fn resolve(shared: &Shared, leases: &[QueueLease]) {
    let deadline = Instant::now() + RESOLVE_WITHIN;
    let lookups = leases
        .iter()
        .filter(|lease| lease.committed().is_none())
        .filter(|lease| !matches!(lease.start_position(), StartPosition::Offset(_)))
        .filter(|lease| !lease.is_cancelled())
        .map(|lease| resolve_one(shared, lease, deadline));
    join_all(lookups).await;
}

async fn resolve_one(shared: &Shared, lease: &QueueLease, deadline: Instant) {
    let queue = lease.queue();
    let source = &shared.source;
    loop {
        let lookup = async {
            match lease.start_position() {
                StartPosition::Offset(offset) => Ok(offset),
                StartPosition::Latest => source.max_offset(queue).await,
                StartPosition::Earliest => source.min_offset(queue).await,
                StartPosition::Timestamp(t) => source.offset_at(queue, t).await,
            }
        };
        // A lookup that does not answer in time, or a lease cancelled meanwhile, is left to
        // the pull loop.
        let lookup = tokio::select! {
            biased;
            _ = lease.cancelled() => return,
            answer = tokio::time::timeout_at(deadline, lookup) => match answer {
                Ok(answer) => answer,
                Err(_) => {
                    tracing::warn!(queue = ?queue, "the start position lookup did not answer in time; the pull loop keeps trying");
                    return;
                }
            },
        };
        match lookup {
            Ok(offset) => {
                let offset = offset.max(0);
                tracing::debug!(queue = ?queue, start = ?lease.start_position(), offset, "resolved the start position before announcing the queue");
                if shared.orderly() {
                    lease.commit_exact(offset);
                } else {
                    lease.commit(offset);
                }
                return;
            }
            Err(e) if Instant::now() + RETRY_AFTER < deadline && !lease.is_cancelled() => {
                tracing::debug!(queue = ?queue, error = %e, "start position lookup failed; trying again");
                sleep(RETRY_AFTER).await;
            }
            Err(e) => {
                tracing::warn!(queue = ?queue, error = %e, "could not resolve the start position before announcing the queue; its pull loop keeps trying");
                return;
            }
        }
    }
}
