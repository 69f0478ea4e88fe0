//! Server-side assignment in the in-memory cluster: [`AssignmentSource`] for [`ClusterClient`],
//! as a Java broker's QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE answer.
//!
//! - The group's read mode of a topic is PULL until set (a retry topic's always is); setting it
//!   on a retry topic is refused (16), as both brokers do.
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
use rebalance_core::{ClientId, MessageQueue};
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
    /// How `group` reads `topic` as set at the brokers, with its POP share (PULL, 0 when never
    /// set).
    pub fn read_mode(&self, group: &str, topic: &str) -> (ReadMode, i32) {
        self.lock()
            .read_modes
            .get(&(group.to_string(), topic.to_string()))
            .copied()
            .unwrap_or((ReadMode::Pull, 0))
    }
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
    let (mode, share) = if is_retry_topic(request.topic) {
        (ReadMode::Pull, 0)
    } else {
        inner
            .read_modes
            .get(&(request.group.to_string(), request.topic.to_string()))
            .copied()
            .unwrap_or((ReadMode::Pull, 0))
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

    /// Stores the group's read mode of a topic; refuses a retry topic (16, as both brokers).
    /// Faults: [`ClusterCall::SetReadMode`].
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
            inner
                .read_modes
                .insert((group.to_string(), topic.to_string()), (mode, pop_share));
        })
        .await
    }
}
