//! Server-side assignment in the in-memory cluster: [`AssignmentSource`] for [`ClusterClient`],
//! as a Java broker's QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE answer.
//!
//! - The group's read mode of a topic is each broker's own: PULL until set there (a retry
//!   topic's always is). A set reaches the brokers of the topic's route at that moment, as a
//!   client sends it to each (a broker added to the route later has none until it is set
//!   again); setting it on a retry topic is refused (16), as both brokers do. A query is
//!   answered from the mode of the broker it is asked of: the route's first broker by name,
//!   where the RocketMQ transport asks.
//! - PULL: the strategy (`AVG` is `averagely`, `AVG_BY_CIRCLE` is `averagely_by_circle`) over
//!   the route's readable queues and the group's registered clients, both sorted as a client
//!   sorts them (so a client-side member computes the same share from the same view).
//! - POP (`allocate4Pop`): with a share of 0 or less, or of at least the number of clients − 1,
//!   one queue per broker with id `-1` (every queue of that broker); with fewer clients than
//!   queues, the client's own share plus those of the next `share` clients in id order; with
//!   more clients than queues, the one queue at the client's position modulo the number of
//!   queues.
//! - A strategy it does not know, a topic without route or a group without client: no
//!   assignment at all ([`ServerAnswer::Unbalanced`], the Java broker's answer; the Rust
//!   broker 1.0 answers an empty list, a deviation the broker contract records).

use std::collections::BTreeMap;

use async_trait::async_trait;
use rebalance_core::strategy::{AllocateStrategy, Averagely, AveragelyByCircle};
use rebalance_core::{ClientId, MessageQueue, TopicRoute};
use tokio::time::Instant;

use super::{ClusterCall, ClusterClient, InMemoryCluster, Inner, expire};
use crate::RemoteError;
use crate::assignment_source::{
    AssignedQueue, AssignmentRequest, AssignmentSource, ReadMode, ServerAnswer,
};
use crate::subscription::is_retry_topic;

/// The strategies the cluster runs, as the brokers name them.
pub const SERVER_STRATEGIES: [&str; 2] = ["AVG", "AVG_BY_CIRCLE"];

impl InMemoryCluster {
    /// How `group` reads `topic` as the broker that answers its queries (the route's first by
    /// name) has it set, with its POP share (PULL, 0 when never set there).
    pub fn read_mode(&self, group: &str, topic: &str) -> (ReadMode, i32) {
        let inner = self.lock();
        let Some(broker) = inner.routes.get(topic).and_then(|r| first_broker(r, topic)) else {
            return (ReadMode::Pull, 0);
        };
        mode_at(&inner, group, topic, &broker)
    }

    /// How `group` reads `topic` as `broker` has it set (PULL, 0 when never set there).
    pub fn read_mode_at(&self, group: &str, topic: &str, broker: &str) -> (ReadMode, i32) {
        mode_at(&self.lock(), group, topic, broker)
    }
}

/// The brokers of `topic`'s route that serve its queues, sorted.
fn brokers_of(route: &TopicRoute, topic: &str) -> Vec<String> {
    let mut brokers: Vec<String> = route
        .subscribable_queues(topic)
        .iter()
        .map(|q| q.broker_name.to_string())
        .collect();
    brokers.sort();
    brokers.dedup();
    brokers
}

/// The broker a query of `topic` is asked of: the route's first by name.
fn first_broker(route: &TopicRoute, topic: &str) -> Option<String> {
    brokers_of(route, topic).into_iter().next()
}

fn mode_at(inner: &Inner, group: &str, topic: &str, broker: &str) -> (ReadMode, i32) {
    if is_retry_topic(topic) {
        return (ReadMode::Pull, 0);
    }
    inner
        .read_modes
        .get(&(group.to_string(), topic.to_string(), broker.to_string()))
        .copied()
        .unwrap_or((ReadMode::Pull, 0))
}

/// The answer to `request` from the cluster's state (see the module documentation).
fn answer(
    inner: &mut Inner,
    request: &AssignmentRequest<'_>,
    members_per_topic: bool,
) -> ServerAnswer {
    let strategy: &dyn AllocateStrategy = match request.strategy {
        "AVG" => &Averagely,
        "AVG_BY_CIRCLE" => &AveragelyByCircle,
        _ => return ServerAnswer::Unbalanced,
    };
    let Some(route) = inner.routes.get(request.topic) else {
        return ServerAnswer::Unbalanced;
    };
    let queues = route.subscribable_queues(request.topic);
    let ids: Vec<ClientId> = inner
        .groups
        .get(request.group)
        .map(|group| {
            group
                .members
                .iter()
                .filter(|(_, m)| !members_per_topic || m.topics.contains(request.topic))
                .map(|(id, _)| id.clone())
                .collect()
        })
        .unwrap_or_default();
    if ids.is_empty() || queues.is_empty() {
        return ServerAnswer::Unbalanced;
    }
    let (mode, share) = match first_broker(route, request.topic) {
        Some(broker) => mode_at(inner, request.group, request.topic, &broker),
        None => (ReadMode::Pull, 0),
    };
    let own = |id: &ClientId| {
        strategy
            .allocate(request.group, id, &queues, &ids)
            .unwrap_or_default()
    };
    let mine: Vec<MessageQueue> = match mode {
        ReadMode::Pull => own(request.client_id),
        ReadMode::Pop => {
            let clients = ids.len();
            let Some(index) = ids.iter().position(|id| id == request.client_id) else {
                return ServerAnswer::Queues(Vec::new());
            };
            let share = usize::try_from(share).unwrap_or(0);
            if share == 0 || share >= clients - 1 {
                // One entry per broker: every queue of it.
                let brokers: BTreeMap<&str, ()> =
                    queues.iter().map(|q| (&*q.broker_name, ())).collect();
                brokers
                    .into_keys()
                    .map(|broker| MessageQueue::new(request.topic, broker, -1))
                    .collect()
            } else if clients <= queues.len() {
                let mut mine: Vec<MessageQueue> = (0..=share)
                    .flat_map(|k| own(&ids[(index + k) % clients]))
                    .collect();
                mine.sort();
                mine.dedup();
                mine
            } else {
                vec![queues[index % queues.len()].clone()]
            }
        }
    };
    ServerAnswer::Queues(
        mine.into_iter()
            .map(|queue| AssignedQueue::new(queue, mode))
            .collect(),
    )
}

#[async_trait]
impl AssignmentSource for ClusterClient {
    fn strategies(&self) -> Vec<String> {
        SERVER_STRATEGIES.iter().map(|s| s.to_string()).collect()
    }

    /// The answer a Java broker gives (see this module's documentation). Faults:
    /// [`ClusterCall::QueryAssignment`].
    async fn query_assignment(
        &self,
        request: &AssignmentRequest<'_>,
    ) -> Result<ServerAnswer, RemoteError> {
        let now = Instant::now();
        let config = self.state.config;
        self.call(ClusterCall::QueryAssignment, |inner| {
            if let Some(group) = inner.groups.get_mut(request.group) {
                expire(group, now, config);
            }
            answer(inner, request, config.members_per_topic)
        })
        .await
    }

    /// Stores the group's read mode of a topic at each broker of its route; refuses a retry
    /// topic (16, as both brokers). Faults: [`ClusterCall::SetReadMode`].
    async fn set_read_mode(
        &self,
        group: &str,
        topic: &str,
        mode: ReadMode,
        pop_share: i32,
    ) -> Result<(), RemoteError> {
        if is_retry_topic(topic) {
            return Err(RemoteError::Refused {
                code: 16,
                remark: "retry topic is not allowed to set mode".into(),
            });
        }
        self.call(ClusterCall::SetReadMode, |inner| {
            let brokers = inner
                .routes
                .get(topic)
                .map(|r| brokers_of(r, topic))
                .unwrap_or_default();
            for broker in brokers {
                inner.read_modes.insert(
                    (group.to_string(), topic.to_string(), broker),
                    (mode, pop_share),
                );
            }
        })
        .await
    }
}
