//! The RouteSync task: polls the name server and publishes each topic's queue set.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rebalance_core::{MessageQueue, TopicRoute};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::wake::{Trigger, WakeReasons};
use crate::{NameServer, RouteError};

/// What the runtime knows of one topic.
#[derive(Debug, Clone, PartialEq)]
pub enum TopicState {
    /// No route has been fetched yet (the name server failed, or never knew the topic).
    Unknown,
    /// The last good route and the queues consumers may subscribe to, sorted the Java way.
    Known {
        /// The route.
        route: Arc<TopicRoute>,
        /// Its subscribable queues.
        queues: Arc<[MessageQueue]>,
    },
    /// The name server has said for `topic_gone_after` that the topic does not exist.
    Gone,
}

/// Every subscribed topic's state, as RouteSync last published it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteTable {
    topics: HashMap<String, TopicState>,
}

impl RouteTable {
    /// The state of `topic` (`Unknown` when it is not polled).
    pub fn topic(&self, topic: &str) -> &TopicState {
        self.topics.get(topic).unwrap_or(&TopicState::Unknown)
    }

    /// The subscribable queues of `topic`, when its route is known.
    pub fn queues(&self, topic: &str) -> Option<&Arc<[MessageQueue]>> {
        match self.topic(topic) {
            TopicState::Known { queues, .. } => Some(queues),
            _ => None,
        }
    }
}

/// Per-topic memory of RouteSync.
#[derive(Debug, Default)]
struct TopicRecord {
    route: Option<TopicRoute>,
    not_found_since: Option<Instant>,
    gone: bool,
}

/// Polls routes for the subscribed topics; the only writer of the [`RouteTable`].
pub(crate) struct RouteSync {
    name_server: Arc<dyn NameServer>,
    interval: Duration,
    topic_gone_after: Duration,
    subscriptions: watch::Receiver<Arc<BTreeSet<String>>>,
    table: watch::Sender<Arc<RouteTable>>,
    trigger: Arc<Trigger>,
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
            name_server,
            interval,
            topic_gone_after,
            subscriptions,
            table,
            trigger,
            records: HashMap::new(),
        }
    }

    /// Polls every subscribed topic once (done at start, before the first round).
    pub(crate) async fn poll_all(&mut self) {
        let topics = self.subscriptions.borrow_and_update().clone();
        self.records.retain(|t, _| topics.contains(t));
        let mut changed = false;
        for topic in topics.iter() {
            changed |= self.poll(topic).await;
        }
        self.publish(&topics, changed);
    }

    /// Polls again every `interval`, and at once when the subscriptions change.
    pub(crate) async fn run(mut self, token: CancellationToken) {
        let mut ticker = tokio::time::interval_at(Instant::now() + self.interval, self.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                changed = self.subscriptions.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.poll_all().await;
                }
                _ = ticker.tick() => self.poll_all().await,
            }
        }
        tracing::debug!("route sync stopped");
    }

    /// Polls one topic; returns whether its queue set (or its existence) changed.
    async fn poll(&mut self, topic: &str) -> bool {
        let result = self.name_server.topic_route(topic).await;
        let gone_after = self.topic_gone_after;
        let record = self.records.entry(topic.to_string()).or_default();
        match result {
            Ok(route) => {
                record.not_found_since = None;
                if let Err(defect) = route.validate() {
                    tracing::warn!(topic, %defect, "name server sent a route that makes no sense; keeping the last good one");
                    return false;
                }
                let was_gone = std::mem::take(&mut record.gone);
                let previous = record.route.replace(route);
                let (old, new) = (previous.as_ref(), record.route.as_ref());
                if old.is_some_and(|o| new.is_some_and(|n| o.same_as(n))) && !was_gone {
                    return false;
                }
                let old_queues = old.map(|r| r.subscribable_queues(topic));
                let new_queues = new.map(|r| r.subscribable_queues(topic));
                let queues_changed = was_gone || old_queues != new_queues;
                tracing::info!(
                    topic,
                    queues = new_queues.as_ref().map_or(0, Vec::len),
                    queues_changed,
                    "topic route changed"
                );
                queues_changed
            }
            Err(RouteError::TopicNotFound(_)) => {
                let now = Instant::now();
                let since = *record.not_found_since.get_or_insert(now);
                if record.route.is_some() && !record.gone && now.duration_since(since) >= gone_after
                {
                    tracing::warn!(topic, after = ?gone_after, "name server keeps saying the topic does not exist; giving it up");
                    record.gone = true;
                    record.route = None;
                    return true;
                }
                if record.route.is_some() && !record.gone {
                    tracing::warn!(
                        topic,
                        "name server says the topic does not exist; keeping the last good route for now"
                    );
                } else {
                    tracing::debug!(topic, "topic not found on the name server");
                }
                false
            }
            Err(RouteError::NameServer(e)) => {
                tracing::warn!(topic, error = %e, "name server failed; keeping the last good route");
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
                            route: Some(route), ..
                        }) => TopicState::Known {
                            queues: route.subscribable_queues(t).into(),
                            route: Arc::new(route.clone()),
                        },
                        _ => TopicState::Unknown,
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
        if changed && queues_changed {
            self.trigger.wake(WakeReasons::ROUTE_CHANGED);
        }
    }
}
