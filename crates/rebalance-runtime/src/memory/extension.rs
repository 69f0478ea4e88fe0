//! What is built on the in-memory cluster from outside this crate: the consume layer's message
//! store (`rebalance_consume::memory`) keeps its state in the cluster
//! ([`InMemoryCluster::extension`]), admits its calls as the cluster's own are
//! ([`ClusterClient::admit`]: reachability, denials, injected faults), and reads the state a
//! broker decides with (routes, locks, offsets, the clock).

use std::any::TypeId;
use std::sync::{Arc, PoisonError};

use rebalance_core::route::perm;
use rebalance_core::{BrokerData, MessageQueue, QueueData, TopicRoute};
use tokio::time::Instant;

use super::faults::{Fault, injected};
use super::{ClusterCall, ClusterClient, InMemoryCluster, Inner};
use crate::RemoteError;

/// What the cluster's clock shows at its creation, in ms since the Unix epoch
/// (2026-01-01T00:00:00Z). Timestamps are this plus the time elapsed on tokio's clock, so a
/// simulation on paused time gives the same timestamps on every run.
pub const CLUSTER_EPOCH_MS: i64 = 1_767_225_600_000;

impl InMemoryCluster {
    /// The value of type `T` kept for this cluster, made (with `T::default()`) on first use:
    /// how a layer built on the cluster keeps state of its own in it, shared by every client
    /// and clone of the cluster (the consume layer's message store does).
    pub fn extension<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut extensions = self
            .state
            .extensions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let value = extensions
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        // Keyed by the type's id: the value is a `T`.
        value
            .downcast::<T>()
            .unwrap_or_else(|_| Arc::new(T::default()))
    }

    /// The cluster's clock in ms since the Unix epoch: [`CLUSTER_EPOCH_MS`] plus the time
    /// elapsed on tokio's clock since the cluster was created (what messages' born and store
    /// timestamps show).
    pub fn now_ms(&self) -> i64 {
        let elapsed = Instant::now().saturating_duration_since(self.state.start);
        CLUSTER_EPOCH_MS.saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
    }

    /// Whether `queue` is a readable queue of its topic's route (a broker refuses a pull of
    /// any other, as a topic it does not have).
    pub fn is_readable(&self, queue: &MessageQueue) -> bool {
        self.has_queue(queue, |q| perm::is_readable(q.perm), |q| q.read_queue_nums)
    }

    /// Whether `queue` is a writable queue of its topic's route.
    pub fn is_writable(&self, queue: &MessageQueue) -> bool {
        self.has_queue(
            queue,
            |q| q.perm & perm::WRITE == perm::WRITE,
            |q| q.write_queue_nums,
        )
    }

    /// Whether `queue` is one of its topic's route's queues that `allowed` allows, among the
    /// first `count` of its broker.
    fn has_queue(
        &self,
        queue: &MessageQueue,
        allowed: fn(&QueueData) -> bool,
        count: fn(&QueueData) -> i32,
    ) -> bool {
        self.lock().routes.get(&*queue.topic).is_some_and(|route| {
            route.queue_datas.iter().any(|q| {
                *q.broker_name == *queue.broker_name
                    && allowed(q)
                    && (0..count(q)).contains(&queue.queue_id)
            })
        })
    }

    /// Gives `topic` a queue (id 0, readable and writable) on `broker` if its route has none
    /// there, as a broker makes a group's retry and dead-letter topics when a message is first
    /// sent to them; routed at once, so that a rebalance sees it.
    pub fn ensure_queue(&self, topic: &str, broker: &str) {
        ensure_queue(&mut self.lock(), topic, broker);
    }

    /// Whether `group` holds a queue lock that has not expired: a broker takes such a group for
    /// an orderly one (a message it gets for the group's retry topic is dead-lettered).
    pub fn holds_locks(&self, group: &str) -> bool {
        self.lock().holds_locks(group, Instant::now())
    }
}

impl ClusterClient {
    /// The cluster this client belongs to.
    pub fn cluster(&self) -> InMemoryCluster {
        InMemoryCluster {
            state: self.state.clone(),
        }
    }

    /// Admits one call of `operation` from this client, as the cluster admits its own calls:
    /// refused when the client is partitioned off or denied the call, failed when a fault was
    /// injected for it ([`InMemoryCluster::fail_next`]); otherwise the [`Admission`] applies
    /// what else was injected (a delay, a lost reply) to the answer. For calls served by a
    /// layer built on the cluster (the consume layer's pulls and send-backs).
    pub fn admit(&self, operation: ClusterCall) -> Result<Admission, RemoteError> {
        let mut inner = self.state.lock();
        self.reachable(&inner, operation)?;
        let fault = inner.faults.take(operation);
        if fault == Some(Fault::Fail) {
            return Err(injected(operation));
        }
        Ok(Admission { operation, fault })
    }
}

/// An admitted call ([`ClusterClient::admit`]): what the cluster does to its answer.
#[derive(Debug)]
#[must_use = "an admitted call's answer goes through `answer`, which applies the injected delay or loss"]
pub struct Admission {
    operation: ClusterCall,
    fault: Option<Fault>,
}

impl Admission {
    /// `answer`, after the injected delay if any, or the error of an injected lost reply (the
    /// call took effect, but its caller sees a failure).
    pub async fn answer<T>(self, answer: T) -> Result<T, RemoteError> {
        match self.fault {
            Some(Fault::Delay(delay)) => {
                tokio::time::sleep(delay).await;
                Ok(answer)
            }
            Some(Fault::LoseReply | Fault::Fail) => Err(injected(self.operation)),
            None => Ok(answer),
        }
    }
}

/// Adds a queue of `topic` on `broker` to the routes, if the topic has none there.
fn ensure_queue(inner: &mut Inner, topic: &str, broker: &str) {
    if inner
        .routes
        .get(topic)
        .is_some_and(|r| r.queue_datas.iter().any(|q| q.broker_name == broker))
    {
        return;
    }
    let broker_data = inner
        .routes
        .values()
        .flat_map(|r| r.broker_datas.iter())
        .find(|b| b.broker_name == broker)
        .cloned()
        .unwrap_or_else(|| BrokerData {
            cluster: "InMemoryCluster".into(),
            broker_name: broker.to_string(),
            broker_addrs: [(0, "memory:10911".to_string())].into(),
        });
    let route = inner
        .routes
        .entry(topic.to_string())
        .or_insert_with(|| TopicRoute {
            queue_datas: Vec::new(),
            broker_datas: Vec::new(),
            order_topic_conf: None,
        });
    route.queue_datas.push(QueueData {
        broker_name: broker.to_string(),
        read_queue_nums: 1,
        write_queue_nums: 1,
        perm: perm::READ | perm::WRITE,
        topic_sys_flag: 0,
    });
    if !route.broker_datas.iter().any(|b| b.broker_name == broker) {
        route.broker_datas.push(broker_data);
    }
    tracing::info!(topic, broker, "in-memory cluster created a queue on demand");
}
