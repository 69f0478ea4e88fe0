//! The in-memory cluster's messages (feature `memory`): a log per queue, pulls with long
//! polling, send-backs to the retry and dead-letter topics decided as a broker decides them
//! (with the message it stored), the client's fallback send, retention. The cluster itself
//! (name server, directory, offsets, locks, faults) is the runtime's
//! `rebalance_runtime::memory`; this module keeps its messages in it
//! ([`InMemoryCluster::extension`](rebalance_runtime::memory::InMemoryCluster::extension)) and
//! makes its [`ClusterClient`](rebalance_runtime::memory::ClusterClient) a
//! [`MessageSource`](crate::MessageSource) and a [`PopSource`](crate::PopSource) (POP as a
//! Java broker serves it: invisible time, revive, acknowledgements, changes of invisible time,
//! orderly POP's blocked queues). Bring [`ClusterMessages`] into scope to send and look at
//! messages.
//!
//! Lock order: the message store's lock is never held while calling into the cluster.

mod cluster;
mod log;
mod pop;
mod source;
mod store;

pub use cluster::{
    ClusterMessages, DELAY_LEVELS, DLQ_TOPIC_PREFIX, OutgoingMessage, SendError, SendReceipt,
    delay_of_level, dlq_topic,
};
pub use pop::pop_retry_topic;
