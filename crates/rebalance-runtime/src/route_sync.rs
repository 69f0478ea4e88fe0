//! The RouteSync task: polls the name server and publishes each topic's queue set (what
//! consumers subscribe to) and publish queues (what producers send to).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rebalance_core::{PublishError, PublishInfo, TopicRoute};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::route_share::RouteShare;
use crate::routes::{Known, RouteTable, TopicState};
use crate::subscription::is_retry_topic;
use crate::wake::{Trigger, WakeReasons};
use crate::{NameServer, RemoteError, RouteError};

impl TopicRecord {
    /// How often the topic is polled again since a broker left its route (see
    /// [`FAST_REPOLL_FOR`]); `None` when none is missing, or for too long.
    fn fast_repoll_every(&self) -> Option<Duration> {
        let missing_for = self.missing_since?.elapsed();
        if missing_for >= FAST_REPOLL_FOR {
            None
        } else if missing_for < FAST_REPOLL_FIRST {
            Some(FAST_REPOLL_EVERY)
        } else {
            Some(FAST_REPOLL_LATER)
        }
    }

    /// Whether a producer's fetch is answered from memory: the route is known and has publish
    /// queues (the periodic poll keeps it fresh), or the topic has no publish queue or is gone
    /// and was polled less than [`REFETCH_UNUSABLE_AFTER`] ago. A topic whose route was never
    /// known is polled on every fetch.
    fn answered_from_memory(&self) -> bool {
        let usable = !self.gone && self.known.as_ref().is_some_and(|k| k.publish.is_ok());
        let unusable = self.gone || self.known.is_some();
        let recent = self
            .polled_at
            .is_some_and(|at| at.elapsed() < REFETCH_UNUSABLE_AFTER);
        usable || (unusable && recent)
    }
}

/// How long a producer's fetch of a topic it cannot send to (no publish queue, or gone) is
/// answered from the last poll before the name server is asked again.
const REFETCH_UNUSABLE_AFTER: Duration = Duration::from_secs(1);

/// Per-topic memory of RouteSync.
#[derive(Debug, Default)]
struct TopicRecord {
    known: Option<Known>,
    not_found_since: Option<Instant>,
    gone: bool,
    /// When the name server last answered (or failed) a poll of the topic.
    polled_at: Option<Instant>,
    /// Why the last poll did not give a good route (cleared by a good one).
    last_error: Option<RouteError>,
    /// When a warning last said that the topic, never found, does not exist.
    missing_warned_at: Option<Instant>,
    /// Brokers the route named and no longer names (killed, restarting, cut off from the name
    /// server), and since when one has been missing: polled again soon (see
    /// [`RouteSync::fast_repoll_at`]), so that their queues come back within seconds of the
    /// broker's return, not at the next periodic poll.
    missing_brokers: BTreeSet<String>,
    missing_since: Option<Instant>,
}

/// How long after a broker left a topic's route it is polled again sooner than every
/// `poll_name_server`: every [`FAST_REPOLL_EVERY`] for the first [`FAST_REPOLL_FIRST`], then
/// every [`FAST_REPOLL_LATER`] until [`FAST_REPOLL_FOR`]. A restarted broker registers with the
/// name server within a second of its start; a Java client sees it at its next 30 s poll.
const FAST_REPOLL_FOR: Duration = Duration::from_secs(120);
const FAST_REPOLL_FIRST: Duration = Duration::from_secs(30);
const FAST_REPOLL_EVERY: Duration = Duration::from_secs(1);
const FAST_REPOLL_LATER: Duration = Duration::from_secs(5);

/// How often a topic that was never found is warned about (a misspelled subscription is
/// otherwise silent: its rounds only say "route unknown").
const MISSING_TOPIC_WARN_EVERY: Duration = Duration::from_secs(300);

/// A producer's request: poll `topic` now (registering it) and answer once it was polled.
#[derive(Debug)]
pub(crate) struct Fetch {
    pub(crate) topic: String,
    /// `None` when the topic's route is known (or the topic is gone: see the table), else why not.
    pub(crate) reply: oneshot::Sender<Option<RouteError>>,
}

/// Polls routes for the subscribed (consumer) and produced (producer) topics; the only writer of
/// the [`RouteTable`].
pub(crate) struct RouteSync {
    name_server: Arc<dyn NameServer>,
    /// Where the data derived from a route comes from when the name server offers to share
    /// it ([`NameServer::route_share`]).
    share: Option<RouteShare>,
    interval: Duration,
    topic_gone_after: Duration,
    /// A consumer's subscriptions: every change polls every topic.
    subscriptions: Option<watch::Receiver<Arc<BTreeSet<String>>>>,
    /// A producer's on-demand fetches: a new topic is registered and polled at once.
    fetches: Option<mpsc::Receiver<Fetch>>,
    /// The topics a producer registered.
    produced: BTreeSet<String>,
    table: watch::Sender<Arc<RouteTable>>,
    trigger: Option<Arc<Trigger>>,
    records: HashMap<String, TopicRecord>,
}

impl RouteSync {
    pub(crate) fn new(
        name_server: Arc<dyn NameServer>,
        interval: Duration,
        topic_gone_after: Duration,
        subscriptions: watch::Receiver<Arc<BTreeSet<String>>>,
        table: watch::Sender<Arc<RouteTable>>,
        trigger: Arc<Trigger>,
    ) -> Self {
        Self {
            share: name_server.route_share(),
            name_server,
            interval,
            topic_gone_after,
            subscriptions: Some(subscriptions),
            fetches: None,
            produced: BTreeSet::new(),
            table,
            trigger: Some(trigger),
            records: HashMap::new(),
        }
    }

    /// A producer's route sync: polls `topics` and every topic a [`Fetch`] names. It stops when
    /// cancelled or when every sender of `fetches` is gone.
    pub(crate) fn for_producer(
        name_server: Arc<dyn NameServer>,
        interval: Duration,
        topic_gone_after: Duration,
        topics: BTreeSet<String>,
        fetches: mpsc::Receiver<Fetch>,
        table: watch::Sender<Arc<RouteTable>>,
    ) -> Self {
        Self {
            share: name_server.route_share(),
            name_server,
            interval,
            topic_gone_after,
            subscriptions: None,
            fetches: Some(fetches),
            produced: topics,
            table,
            trigger: None,
            records: HashMap::new(),
        }
    }

    /// Every topic polled: the subscribed ones and the produced ones.
    fn topics(&mut self, mark_seen: bool) -> BTreeSet<String> {
        let mut topics = match &mut self.subscriptions {
            Some(rx) if mark_seen => (**rx.borrow_and_update()).clone(),
            Some(rx) => (**rx.borrow()).clone(),
            None => BTreeSet::new(),
        };
        topics.extend(self.produced.iter().cloned());
        topics
    }

    /// Polls every topic once (done at start, before the first round).
    pub(crate) async fn poll_all(&mut self) {
        let topics = self.topics(true);
        self.records.retain(|t, _| topics.contains(t));
        let changed = self.poll_many(topics.into_iter().collect(), true).await;
        // With the topics a fetch registered meanwhile.
        let topics = self.topics(false);
        self.publish(&topics, changed);
    }

    /// Polls `topics` one after another (one name server's answers in order, so that an older
    /// view of a broker never lands after a newer one), answering between two lookups the
    /// producers' fetches that came meanwhile when `serve` (found by review: a fetch waited for
    /// the whole poll, and 40 topics at 100 ms each outlasted its 3 s); returns whether any
    /// queue set changed.
    async fn poll_many(&mut self, topics: Vec<String>, serve: bool) -> bool {
        let mut changed = false;
        for topic in topics {
            let result = self.name_server.topic_route(&topic).await;
            changed |= self.apply(&topic, result);
            if serve {
                let waiting = self.fetches.as_mut().and_then(|rx| rx.try_recv().ok());
                if let Some(first) = waiting {
                    Box::pin(self.fetch(first)).await;
                }
            }
        }
        changed
    }

    /// When the topics whose route lost a broker are to be polled again, if any is (see
    /// [`FAST_REPOLL_FOR`]).
    fn fast_repoll_at(&self) -> Option<Instant> {
        self.records
            .values()
            .filter_map(|r| Some(r.polled_at? + r.fast_repoll_every()?))
            .min()
    }

    /// Polls the topics whose route lost a broker (see [`fast_repoll_at`](Self::fast_repoll_at)).
    async fn repoll_missing(&mut self) {
        let due: Vec<String> = self
            .records
            .iter()
            .filter(|(_, r)| r.fast_repoll_every().is_some())
            .map(|(t, _)| t.clone())
            .collect();
        let changed = self.poll_many(due, true).await;
        let topics = self.topics(false);
        self.publish(&topics, changed);
    }

    /// Polls again every `interval`, at once when the subscriptions change, every second or
    /// so for a while the topics whose route lost a broker, and answers fetches. A poll in flight stops with the token: the shutdown (which releases the
    /// queues and unregisters) does not wait for a name server that does not answer.
    pub(crate) async fn run(mut self, token: CancellationToken) {
        let mut ticker = tokio::time::interval_at(Instant::now() + self.interval, self.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let fast = self.fast_repoll_at();
            let finished = tokio::select! {
                biased;
                _ = token.cancelled() => break,
                changed = subscriptions_changed(&mut self.subscriptions) => {
                    if !changed {
                        break;
                    }
                    token.run_until_cancelled(self.poll_all()).await
                }
                fetch = next_fetch(&mut self.fetches) => match fetch {
                    Some(fetch) => token.run_until_cancelled(self.fetch(fetch)).await,
                    None => break,
                },
                _ = ticker.tick() => token.run_until_cancelled(self.poll_all()).await,
                _ = tokio::time::sleep_until(fast.unwrap_or_else(Instant::now)), if fast.is_some() => {
                    token.run_until_cancelled(self.repoll_missing()).await
                }
            };
            if finished.is_none() {
                tracing::debug!("route sync cancelled during a poll");
                break;
            }
        }
        tracing::debug!("route sync stopped");
    }

    /// Registers and polls the topics of `first` and of every fetch already queued behind it,
    /// each topic once, then answers them all. A topic with publish queues is answered from
    /// memory (its periodic poll keeps it fresh); one without, or gone, is polled again at most
    /// every [`REFETCH_UNUSABLE_AFTER`], so that a producer can send as soon as it is fixed.
    async fn fetch(&mut self, first: Fetch) {
        let mut waiting: HashMap<String, Vec<oneshot::Sender<Option<RouteError>>>> = HashMap::new();
        let mut queued = vec![first];
        if let Some(rx) = &mut self.fetches {
            while let Ok(fetch) = rx.try_recv() {
                queued.push(fetch);
            }
        }
        for Fetch { topic, reply } in queued {
            waiting.entry(topic).or_default().push(reply);
        }
        let mut to_poll = Vec::new();
        for topic in waiting.keys() {
            let fresh = self.produced.insert(topic.clone());
            let from_memory = self
                .records
                .get(topic)
                .is_some_and(TopicRecord::answered_from_memory);
            if fresh {
                tracing::info!(topic, "producer registered a topic");
            }
            if !from_memory {
                to_poll.push(topic.clone());
            }
        }
        let polled = !to_poll.is_empty();
        let changed = self.poll_many(to_poll, false).await;
        if polled || !waiting.is_empty() {
            let topics = self.topics(false);
            self.publish(&topics, changed);
        }
        for (topic, replies) in waiting {
            let answer = match self.records.get(&topic) {
                Some(r) if r.known.is_some() || r.gone => None,
                Some(r) => r.last_error.clone(),
                None => None,
            };
            for reply in replies {
                // The requester may have given up (timed out); nothing to do then.
                let _ = reply.send(answer.clone());
            }
        }
    }

    /// Applies the answer of a poll of `topic`; returns whether its queue set (or its
    /// existence) changed.
    fn apply(&mut self, topic: &str, result: Result<TopicRoute, RouteError>) -> bool {
        let result = match result {
            // A name server has no route without queue data (it says "not found" once a
            // topic's last broker left): one like that is treated as not found, with the same
            // grace, rather than taken as a topic with no queue to consume.
            Ok(route) if route.queue_datas.is_empty() => {
                Err(RouteError::TopicNotFound(topic.to_string()))
            }
            other => other,
        };
        let gone_after = self.topic_gone_after;
        let record = self.records.entry(topic.to_string()).or_default();
        record.polled_at = Some(Instant::now());
        match result {
            Ok(route) => {
                record.not_found_since = None;
                if let Err(defect) = route.validate() {
                    tracing::warn!(topic, %defect, "name server sent a route that makes no sense; keeping the last good one");
                    record.last_error = Some(RouteError::NameServer(RemoteError::BadResponse(
                        format!("route of `{topic}` makes no sense: {defect}"),
                    )));
                    return false;
                }
                record.last_error = None;
                let was_gone = std::mem::take(&mut record.gone);
                if !was_gone
                    && record
                        .known
                        .as_ref()
                        .is_some_and(|k| k.route.same_as(&route))
                {
                    return false;
                }
                let present: BTreeSet<&str> = route
                    .broker_datas
                    .iter()
                    .map(|b| b.broker_name.as_str())
                    .collect();
                if let Some(old) = &record.known {
                    let left: Vec<String> = old
                        .route
                        .broker_datas
                        .iter()
                        .map(|b| b.broker_name.clone())
                        .filter(|b| !present.contains(b.as_str()))
                        .collect();
                    if !left.is_empty() {
                        tracing::info!(topic, brokers = ?left, "brokers left the topic's route; polling it again every second for a while, to see them back");
                        // A window of its own for each loss (one after a broker removed
                        // on purpose, whose window ended, too).
                        record.missing_since = Some(Instant::now());
                    }
                    record.missing_brokers.extend(left);
                }
                record
                    .missing_brokers
                    .retain(|b| !present.contains(b.as_str()));
                if record.missing_brokers.is_empty() {
                    record.missing_since = None;
                }
                let new = match &self.share {
                    Some(share) => share.known(topic, route),
                    None => Known::new(topic, route),
                };
                let old = record.known.replace(new.clone());
                let queues_changed =
                    was_gone || old.as_ref().map(|o| &o.queues) != Some(&new.queues);
                tracing::info!(
                    topic,
                    queues = new.queues.len(),
                    queues_changed,
                    "topic route changed"
                );
                if old.as_ref().map(|o| &o.publish) != Some(&new.publish) {
                    log_publish_change(topic, &new.publish);
                }
                queues_changed
            }
            Err(RouteError::TopicNotFound(t)) => {
                record.last_error = Some(RouteError::TopicNotFound(t));
                let now = Instant::now();
                let since = *record.not_found_since.get_or_insert(now);
                if record.known.is_some() && !record.gone && now.duration_since(since) >= gone_after
                {
                    tracing::warn!(topic, after = ?gone_after, "name server keeps saying the topic does not exist; giving it up");
                    record.gone = true;
                    record.known = None;
                    return true;
                }
                if record.known.is_some() && !record.gone {
                    tracing::warn!(
                        topic,
                        "name server says the topic does not exist; keeping the last good route for now"
                    );
                } else if record.known.is_none()
                    && !record.gone
                    && !is_retry_topic(topic)
                    && record
                        .missing_warned_at
                        .is_none_or(|at| now.duration_since(at) >= MISSING_TOPIC_WARN_EVERY)
                {
                    // Retry topics are left out: one exists only once a message was sent back.
                    record.missing_warned_at = Some(now);
                    tracing::warn!(
                        topic,
                        "topic not found on the name server (misspelled, or not created yet): nothing is consumed or sent on it until it appears"
                    );
                } else {
                    tracing::debug!(topic, "topic not found on the name server");
                }
                false
            }
            Err(RouteError::NameServer(e)) => {
                tracing::warn!(topic, error = %e, "name server failed; keeping the last good route");
                record.last_error = Some(RouteError::NameServer(e));
                false
            }
        }
    }

    fn publish(&self, topics: &BTreeSet<String>, queues_changed: bool) {
        let table = RouteTable {
            topics: topics
                .iter()
                .map(|t| {
                    let state = match self.records.get(t) {
                        Some(r) if r.gone => TopicState::Gone,
                        Some(TopicRecord {
                            known: Some(known), ..
                        }) => TopicState::Known {
                            route: known.route.clone(),
                            queues: known.queues.clone(),
                            publish: known.publish.clone(),
                        },
                        Some(r) => TopicState::Unknown(r.last_error.clone()),
                        None => TopicState::Unknown(None),
                    };
                    (t.clone(), state)
                })
                .collect(),
        };
        let changed = self.table.send_if_modified(|current| {
            if **current == table {
                return false;
            }
            *current = Arc::new(table);
            true
        });
        if changed
            && queues_changed
            && let Some(trigger) = &self.trigger
        {
            trigger.wake(WakeReasons::ROUTE_CHANGED);
        }
    }
}

/// Completes when a consumer's subscriptions change (`true`) or their sender is gone (`false`);
/// never without subscriptions.
async fn subscriptions_changed(rx: &mut Option<watch::Receiver<Arc<BTreeSet<String>>>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The next producer fetch (`None` when every sender is gone); never without a producer.
async fn next_fetch(rx: &mut Option<mpsc::Receiver<Fetch>>) -> Option<Fetch> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn log_publish_change(topic: &str, publish: &Result<Arc<PublishInfo>, PublishError>) {
    match publish {
        Ok(info) => tracing::info!(
            topic,
            queues = info.len(),
            brokers = ?info.broker_names().collect::<Vec<_>>(),
            ordered = info.is_ordered(),
            "publish info changed"
        ),
        Err(error) => {
            tracing::warn!(topic, %error, "publish info changed: producers cannot send to this topic")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::InMemoryCluster;

    /// A consumer's route sync of `topics` on `cluster` (polls every 30 s), its table and trigger.
    fn consumer_sync(
        cluster: &InMemoryCluster,
        topics: &[&str],
    ) -> (RouteSync, watch::Receiver<Arc<RouteTable>>, Arc<Trigger>) {
        let topics: BTreeSet<String> = topics.iter().map(|t| t.to_string()).collect();
        let (_, subscriptions) = watch::channel(Arc::new(topics));
        let (table, table_rx) = watch::channel(Arc::default());
        let trigger = Arc::new(Trigger::new());
        let sync = RouteSync::new(
            Arc::new(cluster.client("c")),
            Duration::from_secs(30),
            Duration::from_secs(60),
            subscriptions,
            table,
            trigger.clone(),
        );
        (sync, table_rx, trigger)
    }

    #[tokio::test(start_paused = true)]
    async fn a_route_change_that_keeps_the_queues_wakes_no_round() {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 1, 4);
        let (mut sync, table, trigger) = consumer_sync(&cluster, &["T"]);
        sync.poll_all().await;
        assert!(trigger.take().contains(WakeReasons::ROUTE_CHANGED));
        // Writes stop: producers must see it, the consumers' queue set is the same.
        let mut route = cluster.route("T").unwrap();
        route.queue_datas[0].perm = rebalance_core::route::perm::READ;
        cluster.set_route("T", route);
        sync.poll_all().await;
        assert!(
            table.borrow().publish_info("T").is_none(),
            "the table changed"
        );
        assert!(
            trigger.take().is_empty(),
            "no round for an unchanged queue set"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_topic_never_found_is_warned_about_every_five_minutes_but_a_retry_topic_is_not() {
        let cluster = InMemoryCluster::new();
        let (mut sync, _table, _trigger) = consumer_sync(&cluster, &["Typo", "%RETRY%G"]);
        let warned = |sync: &RouteSync, topic: &str| sync.records[topic].missing_warned_at;
        let start = Instant::now();
        sync.poll_all().await;
        assert_eq!(warned(&sync, "Typo"), Some(start));
        assert_eq!(warned(&sync, "%RETRY%G"), None);
        tokio::time::advance(MISSING_TOPIC_WARN_EVERY - Duration::from_secs(1)).await;
        sync.poll_all().await;
        assert_eq!(warned(&sync, "Typo"), Some(start), "not again so soon");
        tokio::time::advance(Duration::from_secs(1)).await;
        sync.poll_all().await;
        assert_eq!(warned(&sync, "Typo"), Some(Instant::now()));
        // Once the topic exists, a later "not found" is about a known topic, not a missing one.
        cluster.create_topic("Typo", 1, 1);
        sync.poll_all().await;
        assert!(sync.records["Typo"].known.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_route_in_another_order_changes_nothing() {
        let cluster = InMemoryCluster::new();
        cluster.create_topic("T", 2, 4);
        let (mut sync, mut table, trigger) = consumer_sync(&cluster, &["T"]);
        sync.poll_all().await;
        table.borrow_and_update();
        trigger.take();
        // Name servers list brokers in no fixed order.
        let mut route = cluster.route("T").unwrap();
        route.queue_datas.reverse();
        route.broker_datas.reverse();
        cluster.set_route("T", route);
        sync.poll_all().await;
        assert!(!table.has_changed().unwrap(), "table republished");
        assert!(trigger.take().is_empty());
    }
}
