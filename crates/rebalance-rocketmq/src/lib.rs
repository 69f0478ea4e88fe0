//! RocketMQ remoting transport for the rebalance runtime: a consumer embeds the runtime, points
//! it at a RocketMQ name server, and joins a real consumer group next to Java consumers.
//!
//! **Where to start**: [`RocketMq`], a cluster in one value (its name servers and brokers,
//! implementing every trait the rebalance and the consume layer need), given to a consumer's
//! `cluster(..)`: `PushConsumer::builder(group).cluster(RocketMq::connect(addresses)?)`.
//! [`RocketMq::builder`] adds credentials ([`Credentials`]), a [`Namespace`], TLS (feature
//! `tls`) and address overrides. Nothing connects until the first call, and every address is
//! checked when the value is built:
//!
//! ```
//! use rebalance_rocketmq::{AddressError, Credentials, Namespace, RocketMq};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = RocketMq::builder("10.0.0.1:9876;10.0.0.2:9876")
//!     .credentials(Credentials::new("my-access-key", "my-secret-key")?)
//!     .namespace(Namespace::new("MQ_INST_1")?)
//!     .build()?;
//! # let _ = cluster;
//! assert!(matches!(RocketMq::connect("10.0.0.1"), Err(AddressError::Malformed(_))));
//! // Topics and groups are namespaced on the way to the servers, plain everywhere else.
//! assert_eq!(Namespace::new("MQ_INST_1")?.wrap("Orders"), "MQ_INST_1%Orders");
//! # Ok(()) }
//! ```
//!
//! A push consumer on it (`rebalance_consume::PushConsumer`, also `rebalance::consume::PushConsumer`
//! through the facade):
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use async_trait::async_trait;
//! use rebalance_consume::{ConcurrentContext, ConcurrentListener, ConsumeResult, Message, PushConsumer};
//! use rebalance_rocketmq::RocketMq;
//!
//! struct Print;
//!
//! #[async_trait]
//! impl ConcurrentListener for Print {
//!     async fn consume(&self, messages: &[Message], _: &mut ConcurrentContext) -> ConsumeResult {
//!         for m in messages {
//!             println!("{} {}: {}", m.topic(), m.msg_id(), String::from_utf8_lossy(m.body()));
//!         }
//!         ConsumeResult::Success
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let consumer = PushConsumer::builder("G")
//!     .cluster(RocketMq::connect("127.0.0.1:9876")?)
//!     .subscribe("T")
//!     .concurrently(Arc::new(Print))
//!     .start()
//!     .await?;
//! consumer.ready(Duration::from_secs(60)).await?; // else an error saying per topic why not
//! # Ok(()) }
//! ```
//!
//! The parts:
//!
//! - [`RemotingCodec`]: the remoting frame as a tokio-util codec, with a frame size limit.
//! - [`Connection`]: one socket, requests multiplexed by `opaque`, server requests handled.
//! - [`RemotingClient`]: connections shared per address, re-established with backoff; an
//!   [`AddressMap`] dials brokers that advertise addresses this client cannot reach (NAT, port
//!   forwarding, a sidecar) where it can.
//! - [`NameServerClient`]: the runtime's [`NameServer`](rebalance_runtime::NameServer), over a
//!   `host:port;host:port` list with failover.
//! - [`BrokerClient`]: the runtime's [`GroupDirectory`](rebalance_runtime::GroupDirectory),
//!   [`OffsetStore`](rebalance_runtime::OffsetStore) and
//!   [`QueueLocker`](rebalance_runtime::QueueLocker) at the brokers, and the consume layer's
//!   [`MessageSource`](rebalance_consume::MessageSource): PULL_MESSAGE with long
//!   polling ([`broker::pull`]), CONSUMER_SEND_MSG_BACK with its fallback to the retry topic
//!   ([`broker::send_back`]), and the queues' min, max and by-time offsets. RocketMQ 5
//!   consumption: POP, acknowledgements and invisible time ([`broker::pop`]), server-side
//!   assignment ([`broker::assignment`]).
//! - [`message`]: the stored-message records of a pull's answer, decoded (compressed bodies,
//!   properties, message ids) without panicking on any input.
//! - [`ServerQuestions`]: the brokers' requests to the client (membership changes, running
//!   info, consumer status, offset resets), answered from the consumers this process runs.
//! - [`FileOffsetStore`]: a broadcasting consumer's offsets in a local file, in the Java
//!   client's layout and format, written atomically ([`offset_file`]).
//! - [`Admin`]: topic creation and max offsets, for tests and tools.
//! - [`MessageSender`]: SEND_MESSAGE to the queue a producer chose.
//! - `tls` (feature `tls`): TLS on every connection, with a private CA, a server-name
//!   override and client certificates.
//! - `testkit` (feature `testkit`): real name servers and brokers on loopback for tests, and a
//!   fault-injection proxy to put between one client and a server.
//!
//! **Subscriptions in the heartbeat**: every subscription is sent as the Java client sends it:
//! `subString` the tag expression (`*` for every tag), `tagsSet` its tags and `codeSet` their
//! Java `String.hashCode()` values, `expressionType` `TAG` (see
//! [`rebalance_runtime::subscription`]). A clustering consumer's subscriptions include its
//! group's retry topic `%RETRY%{group}` unless opted out
//! ([`ConsumerBuilder::consume_retry_topic`](rebalance_runtime::ConsumerBuilder::consume_retry_topic));
//! the broker creates that topic when it handles the group's first heartbeat and routes it
//! right after, and the runtime shares its queues once the route appears.
//!
//! **Every member of a group must subscribe to the same topics.** RocketMQ brokers list a
//! group's members per group, not per topic (GET_CONSUMER_LIST_BY_GROUP names only the group),
//! so [`BrokerClient`]'s `consumer_ids(group, topic)` is every client heartbeating the group: a
//! member that does not subscribe to `topic` is still given a share of its queues, which then
//! nobody consumes. The Java client has the same constraint. Roll out a subscription change to
//! a whole group (or give the new subscription a group of its own); the broker client logs a
//! reminder of this (at info) the first time it lists a group's members.
//!
//! Wiring a name server address into the runtime's traits:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rebalance_rocketmq::{BrokerClient, NameServerClient};
//! use rebalance_runtime::{GroupDirectory, NameServer};
//!
//! let name_server = NameServerClient::from_addresses("127.0.0.1:9876")?;
//! let brokers = BrokerClient::new(name_server.clone());
//! let route = name_server.topic_route("TopicTest").await?;
//! let members = brokers.consumer_ids("my-group", "TopicTest").await?;
//! println!("{} queues, {} members", route.subscribable_queues("TopicTest").len(), members.len());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod acl;
pub mod address_map;
pub mod admin;
pub mod broker;
pub mod client;
mod cluster;
pub mod codec;
pub mod command;
pub mod connection;
mod denial;
mod error;
pub mod message;
pub mod name_server;
pub mod namespace;
mod notify;
pub mod offset_file;
pub mod producer;
pub mod questions;
mod queue_keys;
pub mod route;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(feature = "tls")]
pub mod tls;

pub use acl::{Credentials, CredentialsError};
pub use address_map::AddressMap;
pub use admin::{Admin, TopicConfig};
pub use broker::{
    BrokerClient, ConsumerConnection, DuplicateClientId, MemberRunningInfo, QueueProgress,
};
pub use client::{ClientConfig, RemotingClient};
pub use cluster::{RocketMq, RocketMqBuilder};
pub use codec::{CodecError, RemotingCodec};
pub use command::{RemotingCommand, request_code, response_code};
pub use connection::{Connection, ConnectionConfig, ServerRequestHandler};
pub use error::{AddressError, TransportError};
pub use name_server::{NameServerClient, NameServerClientBuilder};
pub use namespace::{Namespace, NamespaceError};
pub use notify::MembershipNotifier;
pub use offset_file::{FileOffsetStore, OffsetFileError};
pub use producer::{InvalidMessage, Message, MessageSender, SendError, SendResult, SendStatus};
pub use questions::ServerQuestions;
pub use route::RouteCache;
