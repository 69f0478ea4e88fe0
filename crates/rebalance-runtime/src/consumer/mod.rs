//! [`Consumer`]: build, start, observe and stop a member of a consumer group.
//!
//! - `builder`: the configuration ([`ConsumerBuilder`]);
//! - `checks`: what [`ConsumerBuilder::start`] refuses;
//! - `start`: [`ConsumerBuilder::start`], which makes first contact and spawns the tasks;
//! - `handle`: the running consumer ([`ConsumerHandle`], [`WeakConsumerHandle`]);
//! - `errors`: [`ConsumerError`];
//! - `cluster`: [`ClusterServices`], one value for every outside-world trait;
//! - `identity`: which client id a consumer registers ([`default_client_id`]).

mod builder;
mod checks;
mod cluster;
mod errors;
mod handle;
mod identity;
mod start;

pub use builder::{Consumer, ConsumerBuilder};
pub use cluster::ClusterServices;
pub use errors::ConsumerError;
pub use handle::{ConsumerHandle, WeakConsumerHandle};
pub use identity::default_client_id;
