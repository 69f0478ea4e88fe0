//! An in-memory cluster (name server, group directory, offset store, locker) for tests,
//! examples and simulations: many clients in one process, on tokio's clock, with faults on
//! demand.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use rebalance_runtime::memory::{InMemoryCluster, ClusterCall};
//! use rebalance_runtime::{GroupDirectory, NameServer};
//!
//! let cluster = InMemoryCluster::new();
//! cluster.create_topic("Orders", 2, 4); // 2 brokers of 4 queues
//! let client = cluster.client("10.0.0.1@1");
//! assert_eq!(client.topic_route("Orders").await.unwrap().subscribable_queues("Orders").len(), 8);
//!
//! cluster.fail_next(ClusterCall::Route, 1);
//! assert!(client.topic_route("Orders").await.is_err());
//! assert!(client.topic_route("Orders").await.is_ok());
//! # }
//! ```
//!
//! # Where it differs from a real cluster
//! It is kinder than production in ways a test should know about:
//! - a topic's member list holds only the members that subscribe to it, unless
//!   [`ClusterConfig::members_per_topic`] is `false` (a broker lists the whole group);
//! - departures are pushed to the group, unless [`ClusterConfig::notify_departures`] is `false`
//!   (a broker does not always push them, so the runtime must not depend on it);
//! - the group's retry topic exists only once a test creates it or a message is sent back (a
//!   broker creates it, with one queue, at the group's first heartbeat);
//! - messages (the consume crate's half of the cluster, `rebalance_consume::memory`: its
//!   `ClusterMessages` trait gives the cluster `send`, and the cluster is its `MessageSource`)
//!   are stored in one log per queue with ids, timestamps from tokio's clock
//!   ([`CLUSTER_EPOCH_MS`] plus the time elapsed) and dense offsets, and are never lost;
//! - one directory and one lock table serve every broker, locks and offsets are accepted for
//!   any queue (routed or not), and a call fails or succeeds as a whole (a batch of offset
//!   reads or writes, entry by entry, as the calls one by one would);
//! - an answer is never late beyond what [`delay_next`](InMemoryCluster::delay_next) asks, and
//!   never lost unless [`lose_next_replies`](InMemoryCluster::lose_next_replies) says so.
//!
//! It is stricter in one way: a client id registered in a group by a live client (one made by
//! another [`InMemoryCluster::client`] call) is refused with
//! [`RemoteError::ClientIdInUse`], which `start()` reports, instead of letting two consumers
//! with one id take the same queues (a RocketMQ broker accepts both).

mod assignment;
mod extension;
mod faults;

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use rebalance_core::route::perm;
use rebalance_core::{BrokerData, ClientId, MessageQueue, QueueData, TopicRoute};
use tokio::sync::watch;
use tokio::time::Instant;

pub use self::assignment::SERVER_STRATEGIES;
pub use self::extension::{Admission, CLUSTER_EPOCH_MS};
pub use self::faults::ClusterCall;
use self::faults::{Fault, Faults, injected};
use crate::directory::Registration;
use crate::{
    GroupDirectory, LockOutcome, NameServer, OffsetStore, QueueLocker, RemoteError, RouteError,
    RouteShare,
};

/// Timings of the in-memory cluster, with RocketMQ's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterConfig {
    /// A member whose last heartbeat is older than this is removed (120 s).
    pub heartbeat_expiry: Duration,
    /// A lock not renewed for this long expires (60 s).
    pub lock_expiry: Duration,
    /// Whether departures (unregister, expiry) are pushed to the group like joins are (`true`,
    /// the default). A Java broker pushes when a client unregisters or its connection closes,
    /// not always when a silent client expires; the Rust broker used in the real-server tests
    /// never does. With `false`, a test sees departures only through the periodic rounds, as
    /// the runtime must cope with.
    pub notify_departures: bool,
    /// Whether a topic's member list holds only the members that subscribe to it (`true`, the
    /// default), or every member of the group (`false`), as a real RocketMQ broker answers.
    /// With `false`, a test shows what production does to a group whose members subscribe to
    /// different topics: queues go to members that do not consume them.
    pub members_per_topic: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            heartbeat_expiry: Duration::from_secs(120),
            lock_expiry: Duration::from_secs(60),
            notify_departures: true,
            members_per_topic: true,
        }
    }
}

#[derive(Debug)]
struct Member {
    topics: BTreeSet<String>,
    last_seen: Instant,
    /// Which [`ClusterClient`] registered it.
    instance: u64,
}

#[derive(Debug)]
struct Group {
    /// In the Java order of the ids, so that a member list comes out sorted, as the runtime
    /// sorts it (a broker's comes in any order; sorting a sorted list is quick, which a
    /// simulation of thousands of clients notices).
    members: BTreeMap<ClientId, Member>,
    /// One channel per listener, notified in subscription order: a single shared watch would
    /// wake its receivers in a random order, and simulations must be reproducible.
    listeners: Vec<watch::Sender<u64>>,
    changes: u64,
}

impl Group {
    fn new() -> Self {
        Self {
            members: BTreeMap::new(),
            listeners: Vec::new(),
            changes: 0,
        }
    }

    fn notify(&mut self) {
        self.changes += 1;
        let changes = self.changes;
        self.listeners.retain(|tx| tx.send(changes).is_ok());
    }

    fn subscribe(&mut self) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(self.changes);
        self.listeners.push(tx);
        rx
    }
}

#[derive(Debug)]
struct Lock {
    owner: ClientId,
    until: Instant,
}

impl Inner {
    /// Whether `group` holds a lock that has not expired (a broker takes such a group for an
    /// orderly one).
    fn holds_locks(&self, group: &str, now: Instant) -> bool {
        self.locks
            .iter()
            .any(|((g, _), lock)| g == group && lock.until > now)
    }
}

#[derive(Debug, Default)]
struct Inner {
    routes: HashMap<String, TopicRoute>,
    groups: HashMap<String, Group>,
    locks: HashMap<(String, MessageQueue), Lock>,
    faults: Faults,
    partitioned: HashSet<ClientId>,
    /// The calls denied to every client ([`InMemoryCluster::set_denied`]).
    denied: HashSet<ClusterCall>,
    name_server_down: bool,
    /// Brokers that do not answer lock and unlock requests.
    lock_brokers_down: HashSet<String>,
    /// Per client id watching for lock losses ([`QueueLocker::lock_losses`]): the losses it
    /// was told of, and the brokers restarted while it was partitioned (told when reconnected).
    lock_losses: HashMap<ClientId, (watch::Sender<crate::LockLosses>, BTreeSet<String>)>,
    /// The instance number of the last client made.
    clients_made: u64,
    /// Each broker's read mode of a group's topic, by (group, topic, broker), with its POP
    /// share (server-side assignment).
    read_modes: HashMap<(String, String, String), (crate::ReadMode, i32)>,
}

#[derive(Debug)]
struct State {
    config: ClusterConfig,
    inner: Mutex<Inner>,
    offsets: DashMap<(Arc<str>, MessageQueue), i64>,
    /// One value of each type kept for the cluster by what is built on it (the consume
    /// layer's message store: [`InMemoryCluster::extension`]).
    extensions: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// When the cluster was created, on tokio's clock.
    start: Instant,
    /// The route data every client of the cluster shares (one process, many clients).
    routes_derived: RouteShare,
}

/// The cluster. Cheap to clone; every clone is the same cluster.
#[derive(Debug, Clone)]
pub struct InMemoryCluster {
    state: Arc<State>,
}

impl Default for InMemoryCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryCluster {
    /// A cluster with RocketMQ's default timings.
    pub fn new() -> Self {
        Self::with_config(ClusterConfig::default())
    }

    /// A cluster with other timings.
    pub fn with_config(config: ClusterConfig) -> Self {
        Self {
            state: Arc::new(State {
                config,
                inner: Mutex::new(Inner::default()),
                offsets: DashMap::new(),
                extensions: Mutex::new(HashMap::new()),
                start: Instant::now(),
                routes_derived: RouteShare::new(),
            }),
        }
    }

    /// The cluster as one client sees it: implements every runtime trait. Clones of it are
    /// the same client; another call makes another client, and while one client is registered
    /// in a group (until it unregisters or expires), another one with the same id is refused
    /// there with [`RemoteError::ClientIdInUse`].
    pub fn client(&self, client_id: impl Into<ClientId>) -> ClusterClient {
        let instance = {
            let mut inner = self.lock();
            inner.clients_made += 1;
            inner.clients_made
        };
        ClusterClient {
            state: self.state.clone(),
            client_id: client_id.into(),
            instance,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.lock()
    }

    /// The route data its clients share ([`NameServer::route_share`]): a route's queue list is
    /// held once for the whole cluster.
    pub fn route_share(&self) -> RouteShare {
        self.state.routes_derived.clone()
    }

    /// Creates (or replaces) `topic` on `brokers` brokers named `broker-0`, `broker-1`, … with
    /// `queues` readable and writable queues each.
    pub fn create_topic(&self, topic: &str, brokers: usize, queues: i32) {
        let names: Vec<String> = (0..brokers).map(|b| format!("broker-{b}")).collect();
        self.set_route(topic, route_of(&names, queues));
    }

    /// Sets the route of `topic` as the name server will answer it.
    pub fn set_route(&self, topic: &str, route: TopicRoute) {
        self.lock().routes.insert(topic.to_string(), route);
    }

    /// The route of `topic`, if it exists.
    pub fn route(&self, topic: &str) -> Option<TopicRoute> {
        self.lock().routes.get(topic).cloned()
    }

    /// Deletes `topic`: the name server answers "not found" from now on.
    pub fn delete_topic(&self, topic: &str) {
        self.lock().routes.remove(topic);
    }

    /// The current members of `group` (after expiring silent ones), sorted the Java way.
    pub fn members(&self, group: &str) -> Vec<ClientId> {
        let mut inner = self.lock();
        let now = Instant::now();
        let config = self.state.config;
        match inner.groups.get_mut(group) {
            Some(g) => {
                expire(g, now, config);
                let mut ids: Vec<ClientId> = g.members.keys().cloned().collect();
                ids.sort();
                ids
            }
            None => Vec::new(),
        }
    }

    /// The stored offset of a queue.
    pub fn offset(&self, group: &str, queue: &MessageQueue) -> Option<i64> {
        self.state
            .offsets
            .get(&(Arc::from(group), queue.clone()))
            .map(|o| *o)
    }

    /// Stores an offset directly (as if another client had).
    pub fn set_offset(&self, group: &str, queue: &MessageQueue, offset: i64) {
        self.state
            .offsets
            .insert((Arc::from(group), queue.clone()), offset);
    }

    /// Who holds the (unexpired) lock of a queue.
    pub fn lock_owner(&self, group: &str, queue: &MessageQueue) -> Option<ClientId> {
        let inner = self.lock();
        let now = Instant::now();
        inner
            .locks
            .get(&(group.to_string(), queue.clone()))
            .filter(|l| l.until > now)
            .map(|l| l.owner.clone())
    }

    /// Makes the next `n` calls of `operation` (from any client) fail as unreachable, without
    /// reaching the cluster. Faults set for one operation apply in the order they were set.
    pub fn fail_next(&self, operation: ClusterCall, n: usize) {
        self.lock().faults.add(operation, n, Fault::Fail);
    }

    /// Delays the answers of the next `n` calls of `operation` by `delay` (on tokio's clock);
    /// the calls are served at once.
    pub fn delay_next(&self, operation: ClusterCall, n: usize, delay: Duration) {
        self.lock().faults.add(operation, n, Fault::Delay(delay));
    }

    /// Serves the next `n` calls of `operation` but loses their answers: the callers see them
    /// fail as unreachable although they took effect (a heartbeat that registered, a lock that
    /// was granted, an offset that was stored), as when a request times out at the client
    /// after the server handled it.
    pub fn lose_next_replies(&self, operation: ClusterCall, n: usize) {
        self.lock().faults.add(operation, n, Fault::LoseReply);
    }

    /// Denies every call of `operation` (from any client) as a server refuses a client's
    /// credentials or permissions, without reaching the cluster: the callers get
    /// [`RemoteError::Denied`] (code 16, NO_PERMISSION) naming the operation and the client,
    /// until the denial is lifted (`denied == false`). Pending faults of `operation` wait
    /// meanwhile.
    pub fn set_denied(&self, operation: ClusterCall, denied: bool) {
        let mut inner = self.lock();
        if denied {
            inner.denied.insert(operation);
        } else {
            inner.denied.remove(&operation);
        }
    }

    /// Makes the next `n` route answers for `topic` garbage (a route that fails validation).
    pub fn garble_next_routes(&self, topic: &str, n: usize) {
        self.lock().faults.garble(topic, n);
    }

    /// Takes the name server down (every route call fails as unreachable) or brings it back.
    pub fn set_name_server_down(&self, down: bool) {
        self.lock().name_server_down = down;
    }

    /// Makes the broker named `broker` stop answering lock and unlock requests (its queues come
    /// back unanswered while the other brokers answer as usual), or brings it back.
    pub fn set_lock_broker_down(&self, broker: &str, down: bool) {
        let mut inner = self.lock();
        if down {
            inner.lock_brokers_down.insert(broker.to_string());
        } else {
            inner.lock_brokers_down.remove(broker);
        }
    }

    /// Cuts one client off (every call it makes fails as unreachable, so its heartbeats stop
    /// and it eventually expires) or reconnects it. A client reconnected learns of the brokers
    /// restarted while it was cut off ([`restart_broker`](Self::restart_broker)).
    pub fn partition(&self, client: &ClientId, cut: bool) {
        let mut inner = self.lock();
        if cut {
            inner.partitioned.insert(client.clone());
        } else {
            inner.partitioned.remove(client);
            if let Some((losses, missed)) = inner.lock_losses.get_mut(client) {
                let missed = std::mem::take(missed);
                if !missed.is_empty() {
                    losses.send_modify(|l| missed.into_iter().for_each(|b| l.record(b)));
                }
            }
        }
    }

    /// Restarts the broker named `broker`: it forgets every lock it granted (as a real broker
    /// does: its lock table lives in memory), so the first client to ask is granted them, and
    /// every client's [`QueueLocker::lock_losses`] reports it (as their connections to the
    /// broker would close), except a partitioned client's, which learns of it when reconnected.
    /// The member lists and offsets stay (one directory and one offset store serve every broker
    /// here; the clients heartbeat again within their heartbeat interval anyway).
    pub fn restart_broker(&self, broker: &str) {
        let mut inner = self.lock();
        let before = inner.locks.len();
        inner.locks.retain(|(_, q), _| &*q.broker_name != broker);
        let dropped = before - inner.locks.len();
        let Inner {
            lock_losses,
            partitioned,
            ..
        } = &mut *inner;
        for (client, (losses, missed)) in lock_losses.iter_mut() {
            if partitioned.contains(client) {
                missed.insert(broker.to_string());
            } else {
                losses.send_modify(|l| l.record(broker));
            }
        }
        drop(inner);
        tracing::info!(
            broker,
            dropped_locks = dropped,
            "in-memory broker restarted"
        );
    }
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock can only come from a bug in this module; keep serving.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A route with `queues` queues on each named broker (perm read + write, master at id 0).
pub fn route_of(brokers: &[String], queues: i32) -> TopicRoute {
    TopicRoute {
        queue_datas: brokers
            .iter()
            .map(|b| QueueData {
                broker_name: b.clone(),
                read_queue_nums: queues,
                write_queue_nums: queues,
                perm: perm::READ | perm::WRITE,
                topic_sys_flag: 0,
            })
            .collect(),
        broker_datas: brokers
            .iter()
            .enumerate()
            .map(|(i, b)| BrokerData {
                cluster: "InMemoryCluster".into(),
                broker_name: b.clone(),
                broker_addrs: [(0, format!("memory:{}", 10911 + i))].into(),
            })
            .collect(),
        order_topic_conf: None,
    }
}

/// Removes members silent for longer than the expiry; notifies when configured to.
fn expire(group: &mut Group, now: Instant, config: ClusterConfig) {
    let before = group.members.len();
    group.members.retain(|id, m| {
        let alive = now.duration_since(m.last_seen) < config.heartbeat_expiry;
        if !alive {
            tracing::info!(client = %id, "in-memory directory expired a silent member");
        }
        alive
    });
    if group.members.len() != before && config.notify_departures {
        group.notify();
    }
}

/// One client's connection to the [`InMemoryCluster`].
#[derive(Debug, Clone)]
pub struct ClusterClient {
    state: Arc<State>,
    client_id: ClientId,
    /// Tells clients made with the same id apart.
    instance: u64,
}

impl ClusterClient {
    /// The client this connection belongs to.
    pub fn client_id(&self) -> &ClientId {
        &self.client_id
    }

    /// Serves one call of `operation`: a partitioned client or an injected failure gets an
    /// error without reaching the cluster; otherwise `serve` runs at once on the cluster's state,
    /// an injected delay holds back only the answer (a slow network, not a slow server), and a
    /// lost answer turns it into an error.
    async fn call<T>(
        &self,
        operation: ClusterCall,
        serve: impl FnOnce(&mut Inner) -> T,
    ) -> Result<T, RemoteError> {
        let (delay, answer) = {
            let mut inner = self.state.lock();
            self.reachable(&inner, operation)?;
            if operation == ClusterCall::Route && inner.name_server_down {
                return Err(RemoteError::Unreachable("name server is down".into()));
            }
            match inner.faults.take(operation) {
                None => (None, Some(serve(&mut inner))),
                Some(Fault::Fail) => (None, None),
                Some(Fault::Delay(delay)) => (Some(delay), Some(serve(&mut inner))),
                Some(Fault::LoseReply) => {
                    serve(&mut inner);
                    (None, None)
                }
            }
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        answer.ok_or_else(|| injected(operation))
    }

    /// Admits `count` calls of `operation` made as one (a batch), under one lock: an error for
    /// all of them when this client is partitioned or denied, else each call's own injected
    /// fault, in order, as if they were made one by one.
    fn admit_many(
        &self,
        operation: ClusterCall,
        count: usize,
    ) -> Result<Vec<Option<Fault>>, RemoteError> {
        let mut inner = self.state.lock();
        self.reachable(&inner, operation)?;
        Ok((0..count).map(|_| inner.faults.take(operation)).collect())
    }

    /// Whether this client may make `operation` now: not partitioned from the cluster
    /// ([`InMemoryCluster::partition`]), not denied it ([`InMemoryCluster::set_denied`]).
    fn reachable(&self, inner: &Inner, operation: ClusterCall) -> Result<(), RemoteError> {
        if inner.partitioned.contains(&self.client_id) {
            return Err(RemoteError::Unreachable(format!(
                "{} is partitioned from the cluster",
                self.client_id
            )));
        }
        self.check_denied(inner, operation)
    }

    /// The denial of `operation` to this client, if [`InMemoryCluster::set_denied`] set one.
    fn check_denied(&self, inner: &Inner, operation: ClusterCall) -> Result<(), RemoteError> {
        if !inner.denied.contains(&operation) {
            return Ok(());
        }
        Err(RemoteError::Denied {
            server: "the in-memory cluster".into(),
            operation: operation.operation(),
            resource: format!("client `{}`", self.client_id),
            code: 16,
            remark: "denied by InMemoryCluster::set_denied".into(),
        })
    }
}

#[async_trait]
impl NameServer for ClusterClient {
    async fn topic_route(&self, topic: &str) -> Result<TopicRoute, RouteError> {
        let answer = self
            .call(ClusterCall::Route, |inner| {
                let garbled = inner.faults.take_garbled(topic);
                inner
                    .routes
                    .get(topic)
                    .cloned()
                    .map(|route| if garbled { garble(route) } else { route })
            })
            .await?;
        answer.ok_or_else(|| RouteError::TopicNotFound(topic.to_string()))
    }

    /// One share for every client of the cluster: its many clients live in one process, and a
    /// route's queue list is held once, not once per client.
    fn route_share(&self) -> Option<RouteShare> {
        Some(self.state.routes_derived.clone())
    }
}

/// A route that fails validation: queue data without broker data and a negative count.
fn garble(mut route: TopicRoute) -> TopicRoute {
    route.broker_datas.clear();
    if let Some(q) = route.queue_datas.first_mut() {
        q.read_queue_nums = -1;
    }
    route
}

#[async_trait]
impl GroupDirectory for ClusterClient {
    fn bound_client_id(&self) -> Option<ClientId> {
        Some(self.client_id.clone())
    }

    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        let now = Instant::now();
        let config = self.state.config;
        let instance = self.instance;
        self.call(ClusterCall::Register, |inner| {
            let group = inner.groups.entry(registration.group.clone()).or_insert_with(Group::new);
            expire(group, now, config);
            let topics: BTreeSet<String> = registration.topics().map(String::from).collect();
            let changed = match group.members.get_mut(&registration.client_id) {
                Some(m) if m.instance != instance => {
                    tracing::error!(client = %registration.client_id, group = %registration.group, "in-memory directory: client id already registered by another client; refused");
                    return Err(RemoteError::ClientIdInUse {
                        client_id: registration.client_id.to_string(),
                        group: registration.group.clone(),
                    });
                }
                Some(m) => {
                    m.last_seen = now;
                    let changed = m.topics != topics;
                    m.topics = topics;
                    changed
                }
                None => {
                    group.members.insert(registration.client_id.clone(), Member { topics, last_seen: now, instance });
                    true
                }
            };
            if changed {
                tracing::debug!(client = %registration.client_id, group = %registration.group, "in-memory directory: membership changed");
                group.notify();
            }
            Ok(())
        })
        .await?
    }

    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        let config = self.state.config;
        let instance = self.instance;
        self.call(ClusterCall::Unregister, |inner| {
            if let Some(group) = inner.groups.get_mut(&registration.group) {
                // Only this client's own registration: not another live one's with the same id.
                let own = group
                    .members
                    .get(&registration.client_id)
                    .is_some_and(|m| m.instance == instance);
                if own {
                    group.members.remove(&registration.client_id);
                    if config.notify_departures {
                        group.notify();
                    }
                }
            }
        })
        .await
    }

    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        let now = Instant::now();
        let config = self.state.config;
        self.call(ClusterCall::ConsumerIds, |inner| {
            let Some(group) = inner.groups.get_mut(group) else {
                return Vec::new();
            };
            expire(group, now, config);
            group
                .members
                .iter()
                .filter(|(_, m)| !config.members_per_topic || m.topics.contains(topic))
                .map(|(id, _)| id.clone())
                .collect()
        })
        .await
    }

    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        let mut inner = self.state.lock();
        let group = inner
            .groups
            .entry(group.to_string())
            .or_insert_with(Group::new);
        Some(group.subscribe())
    }
}

#[async_trait]
impl OffsetStore for ClusterClient {
    async fn read(&self, group: &str, queue: &MessageQueue) -> Result<Option<i64>, RemoteError> {
        let offsets = &self.state.offsets;
        self.call(ClusterCall::ReadOffset, |_| {
            offsets.get(&(Arc::from(group), queue.clone())).map(|o| *o)
        })
        .await
    }

    /// All of them under one lock, each with its own injected fault as if read one by one (a
    /// delayed answer delays the whole answer).
    async fn read_many(
        &self,
        group: &str,
        queues: &[MessageQueue],
    ) -> Vec<Result<Option<i64>, RemoteError>> {
        let faults = match self.admit_many(ClusterCall::ReadOffset, queues.len()) {
            Ok(faults) => faults,
            Err(error) => return queues.iter().map(|_| Err(error.clone())).collect(),
        };
        let offsets = &self.state.offsets;
        // One copy of the group's name for every key (a key per queue, not a string per key).
        let group: Arc<str> = Arc::from(group);
        let mut delay = None;
        let answers = queues
            .iter()
            .zip(faults)
            .map(|(queue, fault)| match fault {
                Some(Fault::Fail | Fault::LoseReply) => Err(injected(ClusterCall::ReadOffset)),
                fault => {
                    if let Some(Fault::Delay(d)) = fault {
                        delay = delay.max(Some(d));
                    }
                    Ok(offsets.get(&(group.clone(), queue.clone())).map(|o| *o))
                }
            })
            .collect();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        answers
    }

    /// Stores the offset, for a group the cluster knows (a member registered once): a broker
    /// refuses the offsets of a group it has no subscription configuration for (code 26,
    /// `SUBSCRIPTION_GROUP_NOT_EXIST`), which it makes at the group's first heartbeat.
    async fn persist(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), RemoteError> {
        let offsets = &self.state.offsets;
        self.call(ClusterCall::PersistOffset, |inner| {
            known_group(inner, group)?;
            offsets.insert((Arc::from(group), queue.clone()), offset);
            Ok(())
        })
        .await?
    }

    /// All of them under one lock, each with its own injected fault as if written one by one
    /// (a delayed answer delays the whole answer; a lost reply stores the offset and fails).
    async fn persist_many(
        &self,
        group: &str,
        offsets: &[(MessageQueue, i64)],
    ) -> Vec<Result<(), RemoteError>> {
        let faults = match self.admit_many(ClusterCall::PersistOffset, offsets.len()) {
            Ok(faults) => faults,
            Err(error) => return offsets.iter().map(|_| Err(error.clone())).collect(),
        };
        if let Err(error) = known_group(&self.state.lock(), group) {
            return offsets.iter().map(|_| Err(error.clone())).collect();
        }
        let stored = &self.state.offsets;
        let group: Arc<str> = Arc::from(group);
        let mut delay = None;
        let answers = offsets
            .iter()
            .zip(faults)
            .map(|((queue, offset), fault)| {
                if fault != Some(Fault::Fail) {
                    stored.insert((group.clone(), queue.clone()), *offset);
                }
                match fault {
                    Some(Fault::Fail | Fault::LoseReply) => {
                        Err(injected(ClusterCall::PersistOffset))
                    }
                    Some(Fault::Delay(d)) => {
                        delay = delay.max(Some(d));
                        Ok(())
                    }
                    None => Ok(()),
                }
            })
            .collect();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        answers
    }
}

/// `Ok` when `group` is known to the cluster (a member registered once), else the broker's
/// refusal of a group it has no subscription configuration for.
fn known_group(inner: &Inner, group: &str) -> Result<(), RemoteError> {
    if inner.groups.contains_key(group) {
        return Ok(());
    }
    Err(RemoteError::Refused {
        code: 26,
        remark: format!("subscription group not exist, {group}"),
    })
}

#[async_trait]
impl QueueLocker for ClusterClient {
    /// Grants the queues that are free, expired or already the client's; queues of a broker set
    /// down with [`InMemoryCluster::set_lock_broker_down`] are unanswered.
    async fn lock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<LockOutcome, RemoteError> {
        let now = Instant::now();
        let until = now + self.state.config.lock_expiry;
        self.call(ClusterCall::Lock, |inner| {
            let mut outcome = LockOutcome::default();
            for q in queues {
                if inner.lock_brokers_down.contains(&*q.broker_name) {
                    outcome.unanswered.push(q.clone());
                    continue;
                }
                let key = (group.to_string(), q.clone());
                let free = inner
                    .locks
                    .get(&key)
                    .is_none_or(|l| l.owner == *client || l.until <= now);
                if free {
                    inner.locks.insert(
                        key,
                        Lock {
                            owner: client.clone(),
                            until,
                        },
                    );
                    outcome.granted.push(q.clone());
                } else {
                    outcome.refused.push(q.clone());
                }
            }
            outcome
        })
        .await
    }

    /// Frees the client's locks on `queues`; fails (after freeing the others) when a queue's
    /// broker is down.
    async fn unlock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<(), RemoteError> {
        self.call(ClusterCall::Unlock, |inner| {
            let mut down = None;
            for q in queues {
                if inner.lock_brokers_down.contains(&*q.broker_name) {
                    down = Some(q.broker_name.clone());
                    continue;
                }
                let key = (group.to_string(), q.clone());
                if inner.locks.get(&key).is_some_and(|l| l.owner == *client) {
                    inner.locks.remove(&key);
                }
            }
            down
        })
        .await?
        .map_or(Ok(()), |broker| {
            Err(RemoteError::Unreachable(format!(
                "{broker} does not answer lock requests"
            )))
        })
    }

    /// Frees `departed`'s locks on `queues` when the group no longer lists it (after expiring
    /// silent members), as a broker checks its own member list; queues of a broker set down
    /// are left alone.
    async fn unlock_departed(
        &self,
        group: &str,
        departed: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<Vec<MessageQueue>, RemoteError> {
        let config = self.state.config;
        self.call(ClusterCall::Unlock, |inner| {
            let now = Instant::now();
            let listed = inner.groups.get_mut(group).is_some_and(|g| {
                expire(g, now, config);
                g.members.contains_key(departed)
            });
            if listed {
                return Vec::new();
            }
            let mut asked = Vec::new();
            for q in queues {
                if inner.lock_brokers_down.contains(&*q.broker_name) {
                    continue;
                }
                let key = (group.to_string(), q.clone());
                if inner.locks.get(&key).is_some_and(|l| l.owner == *departed) {
                    inner.locks.remove(&key);
                }
                asked.push(q.clone());
            }
            asked
        })
        .await
    }

    /// Counts a loss at each broker restarted ([`InMemoryCluster::restart_broker`]) once this
    /// client's id watches; one restarted while it is partitioned when it is reconnected (it
    /// has not seen its connections close yet).
    fn lock_losses(&self) -> Option<watch::Receiver<crate::LockLosses>> {
        let mut inner = self.state.lock();
        let (losses, _) = inner
            .lock_losses
            .entry(self.client_id.clone())
            .or_insert_with(|| {
                (
                    watch::Sender::new(crate::LockLosses::default()),
                    BTreeSet::new(),
                )
            });
        Some(losses.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(n: i32) -> Vec<MessageQueue> {
        (0..n)
            .map(|i| MessageQueue::new("T", "broker-0", i))
            .collect()
    }

    /// The batch forms answer each entry as the single calls would, faults included: each
    /// entry takes its own injected fault, in order; a lost reply stores the offset and fails;
    /// a partition or a denial fails them all.
    #[tokio::test(start_paused = true)]
    async fn batch_offset_calls_take_one_fault_per_entry() {
        let cluster = InMemoryCluster::new();
        let client = cluster.client("c1@1");
        let qs = queues(4);
        let registration = Registration {
            client_id: ClientId::from("c1@1"),
            group: "G".to_owned(),
            message_model: crate::config::MessageModel::Clustering,
            consume_order: crate::config::ConsumeOrder::Concurrent,
            consume_from: crate::config::ConsumeFrom::LastOffset,
            subscriptions: Vec::new(),
        };
        client.register(&registration).await.unwrap();
        cluster.fail_next(ClusterCall::PersistOffset, 1);
        cluster.lose_next_replies(ClusterCall::PersistOffset, 1);
        let entries: Vec<(MessageQueue, i64)> = qs.iter().cloned().zip([10, 11, 12, 13]).collect();
        let persisted = client.persist_many("G", &entries).await;
        assert!(
            persisted[0].is_err() && persisted[1].is_err(),
            "{persisted:?}"
        );
        assert!(
            persisted[2].is_ok() && persisted[3].is_ok(),
            "{persisted:?}"
        );
        // The failed write stored nothing; the lost reply stored its offset.
        let stored: Vec<Option<i64>> = qs.iter().map(|q| cluster.offset("G", q)).collect();
        assert_eq!(stored, [None, Some(11), Some(12), Some(13)]);

        cluster.fail_next(ClusterCall::ReadOffset, 1);
        cluster.delay_next(ClusterCall::ReadOffset, 1, Duration::from_secs(2));
        let started = Instant::now();
        let read = client.read_many("G", &qs).await;
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(2),
            "a delay delays the answer"
        );
        assert!(read[0].is_err(), "{read:?}");
        assert_eq!(read[1..], [Ok(Some(11)), Ok(Some(12)), Ok(Some(13))]);

        cluster.set_denied(ClusterCall::ReadOffset, true);
        let denied = client.read_many("G", &qs).await;
        assert!(
            denied
                .iter()
                .all(|r| matches!(r, Err(RemoteError::Denied { .. }))),
            "{denied:?}"
        );
        cluster.set_denied(ClusterCall::ReadOffset, false);
        cluster.partition(&ClientId::from("c1@1"), true);
        let cut = client.persist_many("G", &entries).await;
        assert!(
            cut.iter()
                .all(|r| matches!(r, Err(RemoteError::Unreachable(_))))
        );
    }
}
