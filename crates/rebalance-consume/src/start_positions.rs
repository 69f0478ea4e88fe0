//! Start positions resolved before the queues are announced: once `queues_added` returned (and
//! so once [`ready`](rebalance_runtime::ConsumerHandle::ready) did), a queue without a stored offset starts
//! at an offset fixed then, so a message sent afterwards is consumed even from the last offset.
//! The Java client does the same in its rebalance (`computePullFromWhere`) before it dispatches
//! the first pull.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::future::join_all;
use rebalance_core::MessageQueue;
use tokio::time::{Instant, sleep};

use super::MessageSource;
use super::shared::Shared;
use rebalance_runtime::{QueueLease, ReadMode, RemoteError, StartPosition};

/// A start position's lookup at the source.
pub(super) type LookupFuture<'a> =
    Pin<Box<dyn Future<Output = Result<i64, RemoteError>> + Send + 'a>>;

/// Where a start position is: known, or to be asked of the source.
pub(super) enum Lookup<'a> {
    /// An offset: nothing to ask.
    Known(i64),
    /// The lookup to make, with its name for the logs.
    Ask(&'static str, LookupFuture<'a>),
}

/// What resolves `start` for `queue` at `source`; the lookup is contained (a panic of the
/// source is a failed lookup, never a dead pull loop or callback).
pub(super) fn lookup<'a>(
    source: &'a dyn MessageSource,
    queue: &'a MessageQueue,
    start: StartPosition,
) -> Lookup<'a> {
    let (kind, call): (_, LookupFuture<'a>) = match start {
        StartPosition::Offset(offset) => return Lookup::Known(offset),
        StartPosition::Latest => ("max offset", Box::pin(source.max_offset(queue))),
        StartPosition::Earliest => ("min offset", Box::pin(source.min_offset(queue))),
        StartPosition::Timestamp(t) => ("offset at time", Box::pin(source.offset_at(queue, t))),
    };
    Lookup::Ask(kind, Box::pin(super::calls::lookup(kind, call)))
}

/// Commits `offset` on `lease` as the consume mode commits: exactly when orderly (the offset
/// may go back), else never backwards.
pub(super) fn commit(shared: &Shared, lease: &QueueLease, offset: i64) {
    if shared.orderly() {
        lease.commit_exact(offset);
    } else {
        lease.commit(offset);
    }
}

/// How long `queues_added` spends on the lookups at most (less when the consumer's
/// `callback_timeout` is short: see [`resolve_within`]); a queue still unresolved then is
/// resolved by its pull loop, which retries every 3 s.
pub(crate) const RESOLVE_WITHIN: Duration = Duration::from_secs(3);

/// How long `queues_added` spends on the lookups with `callback_timeout`: [`RESOLVE_WITHIN`],
/// or half the callback's time when that is shorter, so that the callback still starts the
/// pull loops of every queue in time (found by review: with a `callback_timeout` under 3 s,
/// one lookup that did not answer made every `queues_added` of the topic time out, and no
/// loop started, healthy queues included).
pub(crate) fn resolve_within(callback_timeout: Duration) -> Duration {
    RESOLVE_WITHIN.min(callback_timeout / 2)
}

/// How soon a failed lookup is tried again within [`RESOLVE_WITHIN`].
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// Resolves, at the source and all at once, the start positions of the leases that have no
/// offset yet (no stored offset, nothing committed), and commits each answer on its lease, where
/// its pull loop finds it.
pub(crate) async fn resolve(shared: &Shared, leases: &[QueueLease]) {
    let deadline = Instant::now() + shared.resolve_within;
    let lookups = leases
        .iter()
        .filter(|lease| lease.committed().is_none())
        .filter(|lease| !matches!(lease.start_position(), StartPosition::Offset(_)))
        // A popped queue starts where the brokers' pop offset is.
        .filter(|lease| lease.read_mode() == ReadMode::Pull)
        .filter(|lease| !lease.is_cancelled())
        .map(|lease| resolve_one(shared, lease, deadline));
    join_all(lookups).await;
}

async fn resolve_one(shared: &Shared, lease: &QueueLease, deadline: Instant) {
    let queue = lease.queue();
    loop {
        let Lookup::Ask(_, lookup) = lookup(&*shared.source, queue, lease.start_position()) else {
            return;
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
                commit(shared, lease, offset);
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
