//! [`Consumer`]: build, start, observe and stop a member of a consumer group.
//!
//! - `builder`: the configuration ([`ConsumerBuilder`]);
//! - `checks`: what [`ConsumerBuilder::start`] refuses;
//! - `start`: [`ConsumerBuilder::start`], which makes first contact and spawns the tasks;
//! - `handle`: the running consumer ([`ConsumerHandle`], [`WeakConsumerHandle`]);
//! - `ready`: [`ConsumerHandle::ready`] and why a topic is not ready ([`TopicNotReady`]);
//! - `errors`: [`ConsumerError`];
//! - `cluster`: [`ClusterServices`], one value for every outside-world trait;
//! - `identity`: which client id a consumer registers ([`default_client_id`]);
//! - `member`: [`MemberOptions`], how a consumer is a member of its group, for a consume layer to
//!   hand out.

mod builder;
mod checks;
mod cluster;
mod errors;
mod handle;
mod identity;
mod member;
mod ready;
mod start;

pub use builder::{Consumer, ConsumerBuilder};
pub use cluster::ClusterServices;
pub use errors::ConsumerError;
pub use handle::{ConsumerHandle, WeakConsumerHandle};
pub use identity::default_client_id;
pub use member::MemberOptions;
pub use ready::{NotReady, TopicNotReady};
