//! [`CommitWaits`]: an explicit commit waits until the queues' loops have taken the
//! acknowledgements made before it. An acknowledgement reaches its lease's committed offset
//! only when its queue's loop takes it, at the loop's next wake, which may come after the
//! acknowledging task's next step (another runtime thread, or later in the same one's queue):
//! without the wait, `ack()` then `commit().await` persisted the offset before the message.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use crate::link::LeaseLink;

/// The commits waiting for the loops, and their wake-up.
#[derive(Debug, Default)]
pub(crate) struct CommitWaits {
    /// How many commits wait: the loops notify only then.
    waiting: AtomicUsize,
    applied: Notify,
}

/// Counts a commit waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        // SeqCst, as the loops' stores of what they applied: of the two, the loop sees this
        // commit waiting or the commit sees what the loop applied.
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CommitWaits {
    /// A loop committed every report it took (`AckReceiver::applied`): wakes the commits
    /// waiting, if any.
    pub(crate) fn applied(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.applied.notify_waiters();
        }
    }

    /// Waits until the loop of each of `links` has committed the reports made before now, its
    /// loop is gone, or its lease is handed off (the hand-off commits and persists itself); at
    /// most `bound`. Returns how many were still behind then.
    pub(crate) fn wait(
        &self,
        links: Vec<Arc<LeaseLink>>,
        bound: Duration,
    ) -> impl Future<Output = usize> + Send + '_ {
        let mut behind: Vec<(Arc<LeaseLink>, u64)> = links
            .into_iter()
            .filter_map(|link| link.reports_made().map(|made| (link, made)))
            .collect();
        async move {
            let _waiting = Waiting::new(&self.waiting);
            let deadline = Instant::now().checked_add(bound);
            loop {
                let notified = self.applied.notified();
                tokio::pin!(notified);
                // Enabled before the check: a loop's notification after it is not lost.
                notified.as_mut().enable();
                behind.retain(|(link, made)| {
                    !link.has_applied(*made)
                        && !link.is_dropped()
                        && !link.lease().is_cancelled()
                        && link.reports_made().is_some()
                });
                if behind.is_empty() {
                    return 0;
                }
                tokio::select! {
                    _ = &mut notified => {}
                    _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                        return behind.len();
                    }
                }
            }
        }
    }
}
