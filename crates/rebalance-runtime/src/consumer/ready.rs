//! [`ConsumerHandle::ready`]: wait until every subscribed topic had a balanced round, or say
//! why a topic did not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{ConsumerError, ConsumerHandle};
use crate::assignment::{
    ListenerCallback, ListenerCallbackError, ReportKind, RoundReport, TopicReport, Unbalanced,
};
use crate::error::RemoteError;

/// Why a subscribed topic has not had a balanced round.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicNotReady {
    /// No round has reported the topic yet (the first round waits for the group to settle:
    /// [`Intervals::adaptive_settle`](crate::config::Intervals::adaptive_settle), 20 ms for a
    /// member alone in its group and up to 1 s otherwise by default, or [`Intervals::membership_settle`](crate::config::Intervals::membership_settle) when set).
    #[error("no round has reported the topic yet")]
    NoRoundYet,
    /// No route is known and the name server has not answered a poll of the topic yet.
    #[error("no route for the topic: the name server has not answered yet")]
    RouteUnknown,
    /// The name server says the topic does not exist: misspelled, or not created yet.
    #[error("the name server does not know the topic: misspelled, or not created yet")]
    TopicNotFound,
    /// The name server cannot be reached (or fails), and no route for the topic is known.
    #[error("no route for the topic: the name server fails")]
    NameServerUnreachable(#[source] RemoteError),
    /// The directory could not list the group's consumers.
    #[error("the directory (broker) could not list the group's consumers")]
    DirectoryUnreachable(#[source] RemoteError),
    /// The directory does not list this client: its heartbeats do not reach the directory, or
    /// were refused.
    #[error(
        "the directory does not list this client: its heartbeats do not reach the broker or are refused"
    )]
    NotListed,
    /// Some queues of the share could not be locked: another client holds their lock, or the
    /// broker does not answer.
    #[error(
        "{not_locked} queue(s) of the share could not be locked (another client holds their lock, or the broker does not answer)"
    )]
    LocksRefused {
        /// Queues of the share not added.
        not_locked: usize,
    },
    /// A listener callback for the topic failed, panicked or timed out.
    #[error("a listener callback fails: {0}")]
    CallbackFailing(#[source] ListenerCallbackError),
    /// Another reason the round reports.
    #[error("the round is not balanced: {0}")]
    Unbalanced(#[source] Unbalanced),
}

/// The topics that did not become ready in time, each with the reason the last round gave.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct NotReady {
    /// How long [`ConsumerHandle::ready`] waited.
    pub after: Duration,
    /// Each topic not ready, and why.
    pub topics: BTreeMap<String, TopicNotReady>,
}

/// Each topic's reason with its causes (`the name server fails: ... certificate not trusted:
/// ...`): the topics' errors are many, so they cannot be this error's one
/// [`source`](std::error::Error::source), and a user printing it must see why.
impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not ready after {:?}:", self.after)?;
        for (i, (topic, why)) in self.topics.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(f, "{sep}{topic}: {why}")?;
            let mut cause = std::error::Error::source(why);
            while let Some(e) = cause {
                write!(f, ": {e}")?;
                cause = e.source();
            }
        }
        Ok(())
    }
}

/// Why `topic` of `report` is not ready (`None`: it is).
fn not_ready(topic: &TopicReport, report: &RoundReport, locks: bool) -> Option<TopicNotReady> {
    let failed = report.callback_errors.iter().find(|e| {
        e.topic == topic.topic
            && matches!(
                e.callback,
                ListenerCallback::QueuesAdded | ListenerCallback::QueuesRemoved
            )
    });
    if let Some(error) = failed {
        return Some(TopicNotReady::CallbackFailing(error.clone()));
    }
    Some(match topic.unbalanced.clone()? {
        Unbalanced::RouteUnknown => TopicNotReady::RouteUnknown,
        Unbalanced::TopicNotFound => TopicNotReady::TopicNotFound,
        Unbalanced::NameServerFailed(e) => TopicNotReady::NameServerUnreachable(e),
        Unbalanced::DirectoryFailed(e) => TopicNotReady::DirectoryUnreachable(e),
        Unbalanced::NotInConsumerList => TopicNotReady::NotListed,
        Unbalanced::Pending { not_added, .. } if locks && not_added > 0 => {
            TopicNotReady::LocksRefused {
                not_locked: not_added,
            }
        }
        other => TopicNotReady::Unbalanced(other),
    })
}

impl ConsumerHandle {
    /// Waits until every subscribed topic has had a balanced round (with no listener callback
    /// failing for it), and fails otherwise after `timeout` with
    /// [`ConsumerError::NotReady`], which says per topic why not (see [`TopicNotReady`]): a
    /// misspelled topic or an unreachable name server, a directory that does not list this
    /// client, locks refused, a failing callback. Fails with [`ConsumerError::ShutDown`] when
    /// the consumer stops first. The group's retry topic counts once a round reported it.
    pub async fn ready(&self, timeout: Duration) -> Result<(), ConsumerError> {
        // A timeout too long for the clock waits as long as it takes (a far deadline).
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(30 * 365 * 24 * 3600));
        let locks = self.inner.ctx.uses_locks();
        let mut rounds = self.inner.rounds.clone();
        let mut ready: BTreeSet<String> = BTreeSet::new();
        let mut why: BTreeMap<String, TopicNotReady> = BTreeMap::new();
        loop {
            let report: Arc<RoundReport> = Arc::clone(&rounds.borrow_and_update());
            match report.kind {
                ReportKind::Round if report.round > 0 => {
                    for topic in &report.topics {
                        match not_ready(topic, &report, locks) {
                            None => {
                                why.remove(&topic.topic);
                                ready.insert(topic.topic.clone());
                            }
                            Some(reason) => {
                                why.insert(topic.topic.clone(), reason);
                            }
                        }
                    }
                }
                ReportKind::Round => {}
                _ => return Err(ConsumerError::ShutDown),
            }
            let mut expected: BTreeSet<String> =
                self.inner.requested.borrow().keys().cloned().collect();
            if let Some(retry) = &self.inner.ctx.retry_topic
                && (ready.contains(retry) || why.contains_key(retry))
            {
                expected.insert(retry.clone());
            }
            if expected.iter().all(|t| ready.contains(t)) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rounds.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(ConsumerError::ShutDown),
                Err(_) => {
                    let topics = expected
                        .into_iter()
                        .filter(|t| !ready.contains(t))
                        .map(|t| {
                            let reason = why.remove(&t).unwrap_or(TopicNotReady::NoRoundYet);
                            (t, reason)
                        })
                        .collect();
                    return Err(ConsumerError::NotReady(NotReady {
                        after: timeout,
                        topics,
                    }));
                }
            }
        }
    }
}
