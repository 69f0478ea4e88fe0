//! [`BrokerClient`]: the broker side of a consumer (group membership, offsets, locks).

pub mod assignment;
mod connections;
mod directory;
mod group_view;
mod locks;
mod offsets;
pub(crate) mod offsets_query;
pub mod pop;
mod pop_source;
pub mod pull;
mod registrations;
pub mod send_back;
mod source;
pub(crate) mod wire;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use dashmap::{DashMap, DashSet};

use rebalance_core::{MessageQueue, TopicRoute};
use rebalance_runtime::{RemoteError, RouteError};

use crate::client::RemotingClient;
use crate::command::{RemotingCommand, response_code};
use crate::denial::Op;
use crate::name_server::NameServerClient;
use crate::route::RouteCache;
use connections::ConnectionChecks;
pub use connections::{ConsumerConnection, DuplicateClientId};
pub use group_view::{MemberRunningInfo, QueueProgress};
use registrations::Registrations;

struct Inner {
    name_server: NameServerClient,
    /// Subscription versions and heartbeated brokers of every registration sent.
    registrations: Registrations,
    /// The groups whose member lists were asked for, each told about once.
    member_lists_asked: DashSet<String>,
    /// When each group's connections are checked for duplicate client ids.
    connection_checks: ConnectionChecks,
    /// When each broker was last heartbeated again after answering a pull "subscription not
    /// latest", within the last `RESUBSCRIBE_INTERVAL` (older entries are dropped).
    resubscribed: DashMap<String, tokio::time::Instant>,
    /// The brokers that may have lost the locks they granted (see [`locks::LockLosses`]).
    lock_losses: locks::LockLosses,
}

/// The broker side of a RocketMQ consumer: implements the runtime's
/// [`GroupDirectory`](rebalance_runtime::GroupDirectory) (HEART_BEAT, GET_CONSUMER_LIST_BY_GROUP,
/// UNREGISTER_CLIENT, and NOTIFY_CONSUMER_IDS_CHANGED as membership changes),
/// [`OffsetStore`](rebalance_runtime::OffsetStore) (QUERY/UPDATE_CONSUMER_OFFSET) and
/// [`QueueLocker`](rebalance_runtime::QueueLocker) (LOCK/UNLOCK_BATCH_MQ), and the consume
/// layer's [`MessageSource`](rebalance_consume::MessageSource) (PULL_MESSAGE,
/// CONSUMER_SEND_MSG_BACK and its fallback, GET_MIN_OFFSET, GET_MAX_OFFSET,
/// SEARCH_OFFSET_BY_TIMESTAMP; see [`pull`] and [`send_back`]).
///
/// **RocketMQ 5 consumption**: POP ([`pop`](Self::pop), [`ack`](Self::ack),
/// [`batch_ack`](Self::batch_ack), [`change_invisible_time`](Self::change_invisible_time),
/// [`notification`](Self::notification); see [`pop`](mod@pop)) and server-side assignment
/// ([`query_assignment`](Self::query_assignment),
/// [`set_message_request_mode`](Self::set_message_request_mode); see [`assignment`]).
///
/// Broker addresses come from the routes its [`NameServerClient`] fetched (the runtime polls
/// them); a topic or broker not seen yet is looked up on demand. It shares the name server
/// client's connections, so the broker's notifications arrive on the connection the heartbeats
/// use.
///
/// **One client id per connection**: a broker binds a connection to the first client id that
/// heartbeats on it and refuses another one on the same connection (code 29, "Request body is
/// invalid"). Give every consumer of a process its own [`RemotingClient`] (a
/// [`NameServerClient`] built with [`NameServerClient::from_addresses`] has its own), as
/// separate Java client instances would.
///
/// **Members are listed per group**: the member list of a topic is every client heartbeating
/// the group, so every member of a group must subscribe to the same topics (see the
/// [crate documentation](crate)).
///
/// **Credentials and namespace** come from the [`NameServerClient`] (see
/// [`NameServerClient::builder`]): requests are signed with its credentials, and the names of
/// topics and groups are wrapped in its namespace on the wire and unwrapped in the answers, so
/// the runtime only sees plain names. A refused request (NO_PERMISSION) is a
/// [`RemoteError::Denied`] naming the operation and the resource, logged once per resource.
///
/// **Duplicate client ids**: after a heartbeat, at most once a minute per group, it asks a
/// master for the group's connections (GET_CONSUMER_CONNECTION_LIST) and reports at ERROR a
/// client id connected from two addresses for over two minutes and a half (two consumers
/// sharing one id take the same queues; a shorter one is a reconnection the broker has not
/// noticed yet), naming both; [`duplicate_client_ids_at`](Self::duplicate_client_ids_at) asks on demand.
///
/// The broker only keeps offsets of groups it knows: persist after the first heartbeat
/// ([`register`](rebalance_runtime::GroupDirectory::register)), or the broker refuses with
/// code 26 ("subscription group not exist").
///
/// ```no_run
/// # fn demo() -> Result<(), rebalance_rocketmq::AddressError> {
/// use std::sync::Arc;
/// use rebalance_rocketmq::{BrokerClient, NameServerClient};
/// use rebalance_runtime::{GroupDirectory, NameServer, OffsetStore, QueueLocker};
///
/// let name_server = NameServerClient::from_addresses("127.0.0.1:9876")?;
/// let brokers = BrokerClient::new(name_server.clone());
/// let routes: Arc<dyn NameServer> = Arc::new(name_server);
/// let directory: Arc<dyn GroupDirectory> = Arc::new(brokers.clone());
/// let offsets: Arc<dyn OffsetStore> = Arc::new(brokers.clone());
/// let locker: Arc<dyn QueueLocker> = Arc::new(brokers);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BrokerClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BrokerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerClient")
            .field("name_server", &self.inner.name_server)
            .finish()
    }
}

impl BrokerClient {
    /// A broker client finding brokers through `name_server` and sharing its connections.
    ///
    /// A broker reconnected to is sent the last heartbeat of every registration it had at once:
    /// a broker drops the consumers that heartbeated on a connection when it closes, and would
    /// otherwise leave this client out of the member lists until the next heartbeat (up to
    /// 30 s), while the other members took its queues.
    pub fn new(name_server: NameServerClient) -> Self {
        let client = Self {
            inner: Arc::new(Inner {
                name_server,
                registrations: Registrations::default(),
                member_lists_asked: DashSet::new(),
                connection_checks: ConnectionChecks::default(),
                resubscribed: DashMap::new(),
                lock_losses: locks::LockLosses::default(),
            }),
        };
        let weak = Arc::downgrade(&client.inner);
        let owner = weak.clone();
        // Only while this client lives: a name server client outlives the broker clients made
        // over it, and would otherwise keep one dead hook for each.
        let live = move || owner.strong_count() > 0;
        let live_too = live.clone();
        let live_moves = live.clone();
        let lost = weak.clone();
        let moved = weak.clone();
        client.remoting().on_reconnect_while(live, move |addr| {
            let Some(inner) = weak.upgrade() else { return };
            // The connection was lost before: the broker may have restarted meanwhile.
            inner
                .lock_losses
                .connection_lost(addr, inner.name_server.routes());
            let client = BrokerClient { inner };
            let addr = addr.to_string();
            tokio::spawn(async move { client.heartbeat_again(&addr).await });
        });
        // A broker whose connection was lost may have restarted and lost its lock table.
        client
            .remoting()
            .on_disconnect_while(live_too, move |addr| {
                let Some(inner) = lost.upgrade() else { return };
                inner
                    .lock_losses
                    .connection_lost(addr, inner.name_server.routes());
            });
        // A master that moved granted its locks at its old address.
        client
            .inner
            .name_server
            .routes()
            .on_master_moved_while(live_moves, move |names| {
                if let Some(inner) = moved.upgrade() {
                    inner.lock_losses.masters_moved(names);
                }
            });
        client
    }

    /// The name server client this broker client finds brokers with.
    pub fn name_server(&self) -> &NameServerClient {
        &self.inner.name_server
    }

    /// The connections used (shared with the name server client).
    pub fn remoting(&self) -> &RemotingClient {
        self.inner.name_server.remoting()
    }

    fn routes(&self) -> &RouteCache {
        self.inner.name_server.routes()
    }

    /// The route of `topic`: the cached one, or else a fresh one from the name server.
    async fn route(&self, topic: &str) -> Result<TopicRoute, RemoteError> {
        if let Some(route) = self.routes().topic(topic) {
            return Ok(route);
        }
        self.inner
            .name_server
            .route(topic)
            .await
            .map_err(|e| match e {
                RouteError::TopicNotFound(topic) => RemoteError::Refused {
                    code: response_code::TOPIC_NOT_EXIST,
                    remark: format!("topic `{topic}` not found on the name server"),
                },
                RouteError::NameServer(e) => e,
            })
    }

    /// The address of `queue`'s broker: its master, or with `master_only == false` a slave when
    /// there is no master. Fetches the queue's topic route when the broker is unknown.
    async fn broker_addr(
        &self,
        queue: &MessageQueue,
        master_only: bool,
    ) -> Result<String, RemoteError> {
        let lookup = |routes: &RouteCache| {
            if master_only {
                routes.master_addr(&queue.broker_name)
            } else {
                routes.any_addr(&queue.broker_name)
            }
        };
        if let Some(addr) = lookup(self.routes()) {
            return Ok(addr);
        }
        tracing::debug!(broker = %queue.broker_name, topic = %queue.topic, "broker address unknown, fetching the route");
        self.inner
            .name_server
            .route(&queue.topic)
            .await
            .map_err(|e| {
                RemoteError::Unreachable(format!(
                    "no address for broker `{}`: {e}",
                    queue.broker_name
                ))
            })?;
        lookup(self.routes()).ok_or_else(|| {
            RemoteError::Unreachable(format!(
                "no {} known for broker `{}`",
                if master_only {
                    "master address"
                } else {
                    "address"
                },
                queue.broker_name
            ))
        })
    }

    /// Groups `queues` by the master address of their broker. Queues whose broker has no known
    /// master come back apart, with the reason. Each broker (of each topic) is looked up once.
    async fn by_master<'q>(
        &self,
        queues: &'q [MessageQueue],
    ) -> (
        BTreeMap<String, Vec<&'q MessageQueue>>,
        Vec<(&'q MessageQueue, RemoteError)>,
    ) {
        let mut masters: BTreeMap<(&str, &str), Result<String, RemoteError>> = BTreeMap::new();
        let mut grouped: BTreeMap<String, Vec<&MessageQueue>> = BTreeMap::new();
        let mut unknown = Vec::new();
        for queue in queues {
            let key = (&*queue.topic, &*queue.broker_name);
            let master = match masters.get(&key) {
                Some(master) => master.clone(),
                None => {
                    let master = self.broker_addr(queue, true).await;
                    masters.insert(key, master.clone());
                    master
                }
            };
            match master {
                Ok(addr) => grouped.entry(addr).or_default().push(queue),
                Err(e) => unknown.push((queue, e)),
            }
        }
        (grouped, unknown)
    }

    /// `name` (a topic or a group) as the brokers know it: in the namespace, if any.
    fn wire<'a>(&self, name: &'a str) -> Cow<'a, str> {
        self.inner.name_server.wire_name(name)
    }

    /// Sends `request` for `op` to `addr` and returns the response whatever its code, except a
    /// refusal of the credentials or permissions ([`RemoteError::Denied`]).
    async fn call(
        &self,
        addr: &str,
        op: &Op,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, RemoteError> {
        self.remoting().call(addr, op, request).await
    }

    /// Sends `request` for `op` to `addr` and requires a success.
    async fn call_ok(
        &self,
        addr: &str,
        op: &Op,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, RemoteError> {
        let response = self.call(addr, op, request).await?;
        if response.code == response_code::SUCCESS {
            Ok(response)
        } else {
            Err(refused(&response))
        }
    }
}

/// The error for a response with a failure code.
pub(crate) fn refused(response: &RemotingCommand) -> RemoteError {
    RemoteError::Refused {
        code: response.code,
        remark: response.remark_or_empty().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn broker_clients_that_are_gone_leave_no_reconnect_hook_behind() {
        let name_server = NameServerClient::from_addresses("127.0.0.1:1").unwrap();
        name_server.remoting().on_reconnect(|_| {});
        for _ in 0..100 {
            drop(BrokerClient::new(name_server.clone()));
        }
        let kept = BrokerClient::new(name_server.clone());
        assert_eq!(
            name_server.remoting().reconnect_hook_count(),
            2,
            "the application's own hook and the living client's"
        );
        drop(kept);
    }

    /// A broker master whose connection is lost may have restarted and lost its lock table:
    /// the locker reports its name (the names of every broker whose master it is), not a slave's
    /// or another master's.
    #[tokio::test]
    async fn a_lost_connection_to_a_master_reports_its_brokers_lock_losses() {
        use rebalance_core::{BrokerData, QueueData};
        use rebalance_runtime::QueueLocker;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            // Accepts one connection and closes it at once: the broker went down.
            let (socket, _) = listener.accept().await.unwrap();
            drop(socket);
        });
        let name_server = NameServerClient::from_addresses("127.0.0.1:1").unwrap();
        let brokers = BrokerClient::new(name_server.clone());
        let broker = |name: &str, addrs: &[(i64, &str)]| BrokerData {
            cluster: "c".into(),
            broker_name: name.into(),
            broker_addrs: addrs.iter().map(|(id, a)| (*id, a.to_string())).collect(),
        };
        let route = TopicRoute {
            queue_datas: ["a", "b", "c"]
                .map(|name| QueueData {
                    broker_name: name.into(),
                    read_queue_nums: 1,
                    write_queue_nums: 1,
                    perm: 6,
                    topic_sys_flag: 0,
                })
                .to_vec(),
            broker_datas: vec![
                broker("a", &[(0, &addr)]),
                broker("b", &[(0, "127.0.0.1:2"), (1, &addr)]),
                broker("c", &[(0, "127.0.0.1:3")]),
            ],
            order_topic_conf: None,
        };
        name_server.routes().update("T", &route);
        let mut losses = brokers
            .lock_losses()
            .expect("the RocketMQ locker reports losses");
        // Another reader of the same locker (a second consumer on one client), and the
        // `RocketMq` wrapper's (its broker client on the same connections).
        let mut other = brokers.lock_losses().unwrap();
        let rocket_mq = crate::RocketMq::from(name_server.clone());
        let mut wrapped = rocket_mq
            .lock_losses()
            .expect("the RocketMq wrapper passes the losses on");
        let seen = losses.borrow_and_update().clone();
        let conn = name_server.remoting().connection(&addr).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), losses.changed())
            .await
            .expect("told of the loss")
            .unwrap();
        assert!(!conn.is_open());
        let now = losses.borrow_and_update().clone();
        assert_eq!(now.since(&seen), vec!["a".to_string()]);
        assert!(now.since(&now).is_empty());
        // Nothing was taken away from the other reader.
        assert!(other.has_changed().unwrap());
        assert_eq!(
            other.borrow_and_update().since(&seen),
            vec!["a".to_string()]
        );
        assert_eq!(
            wrapped.borrow_and_update().since(&seen),
            vec!["a".to_string()]
        );
    }

    /// A broker whose master moved (a failover, a restart on another port) granted its locks
    /// at the old address: the locker reports its name when the route moves, since the old
    /// connection's loss, later, names no broker once the route moved on (found by review).
    #[tokio::test]
    async fn a_master_that_moved_reports_its_brokers_lock_loss() {
        use rebalance_core::{BrokerData, QueueData};
        use rebalance_runtime::QueueLocker;
        let name_server = NameServerClient::from_addresses("127.0.0.1:1").unwrap();
        let brokers = BrokerClient::new(name_server.clone());
        let route = |brokers: &[(&str, &[(i64, &str)])]| TopicRoute {
            queue_datas: brokers
                .iter()
                .map(|(name, _)| QueueData {
                    broker_name: name.to_string(),
                    read_queue_nums: 1,
                    write_queue_nums: 1,
                    perm: 6,
                    topic_sys_flag: 0,
                })
                .collect(),
            broker_datas: brokers
                .iter()
                .map(|(name, addrs)| BrokerData {
                    cluster: "c".into(),
                    broker_name: name.to_string(),
                    broker_addrs: addrs.iter().map(|(id, a)| (*id, a.to_string())).collect(),
                })
                .collect(),
            order_topic_conf: None,
        };
        let mut losses = brokers.lock_losses().unwrap();
        let seen = losses.borrow_and_update().clone();
        let first: &[(&str, &[(i64, &str)])] =
            &[("a", &[(0, "m:1"), (1, "s:1")]), ("b", &[(0, "m:2")])];
        name_server.routes().update("T", &route(first));
        name_server.routes().update("T", &route(first));
        // A slave that moved, and a broker seen for the first time: nothing lost.
        name_server.routes().update(
            "T",
            &route(&[
                ("a", &[(0, "m:1"), (1, "s:9")]),
                ("b", &[(0, "m:2")]),
                ("c", &[(0, "m:3")]),
            ]),
        );
        assert!(!losses.has_changed().unwrap(), "{:?}", losses.borrow());
        // broker-a's master moved, broker-c's is gone (its slave not promoted yet).
        name_server.routes().update(
            "T",
            &route(&[
                ("a", &[(0, "m:5")]),
                ("b", &[(0, "m:2")]),
                ("c", &[(1, "s:3")]),
            ]),
        );
        assert!(losses.has_changed().unwrap());
        let now = losses.borrow_and_update().clone();
        assert_eq!(now.since(&seen), ["a".to_string(), "c".to_string()]);
        // The promoted slave: no master before it, nothing more lost.
        name_server
            .routes()
            .update("T", &route(&[("c", &[(0, "s:3")])]));
        assert!(!losses.has_changed().unwrap());
        assert_eq!(name_server.routes().master_moved_hook_count(), 1);
        drop(brokers);
        // A broker client gone leaves no hook behind to call.
        name_server
            .routes()
            .update("T", &route(&[("c", &[(0, "m:7")])]));
        assert_eq!(name_server.routes().master_moved_hook_count(), 0);
    }

    /// The runtime learns of membership changes from the brokers' pushes instead of waiting for
    /// its next round.
    #[tokio::test]
    async fn membership_changes_follow_the_pushes_the_connections_receive() {
        use rebalance_runtime::GroupDirectory;
        let name_server = NameServerClient::from_addresses("127.0.0.1:1").unwrap();
        let brokers = BrokerClient::new(name_server.clone());
        let changes = brokers
            .membership_changes("G")
            .expect("the RocketMQ directory is told of changes");
        assert!(name_server.remoting().membership().notify("G"));
        assert!(changes.has_changed().unwrap());
    }

    /// In a namespace the broker pushes the wrapped group name; the runtime watches the plain
    /// one.
    #[tokio::test]
    async fn pushes_for_the_namespaced_group_reach_the_plain_groups_watchers() {
        use rebalance_runtime::GroupDirectory;
        let name_server = NameServerClient::builder("127.0.0.1:1")
            .namespace(crate::Namespace::new("NS").unwrap())
            .build()
            .unwrap();
        let brokers = BrokerClient::new(name_server.clone());
        let changes = brokers.membership_changes("G").unwrap();
        assert!(
            !name_server.remoting().membership().notify("G"),
            "not this group"
        );
        assert!(!changes.has_changed().unwrap());
        assert!(name_server.remoting().membership().notify("NS%G"));
        assert!(changes.has_changed().unwrap());
    }
}
