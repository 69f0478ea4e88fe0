//! The async rebalance runtime: what a consumer application embeds.
//!
//! Everything outside the process is a trait ([`NameServer`], [`GroupDirectory`],
//! [`OffsetStore`], [`QueueLocker`], [`QueueListener`]); transports implement them.
#![warn(missing_docs)]

pub mod config;
pub mod directory;
mod error;
pub mod listener;
pub mod locker;
pub mod name_server;
pub mod offset_store;

pub use config::{ConsumeFrom, ConsumeOrder, Intervals, MessageModel};
pub use directory::{GroupDirectory, Registration};
pub use error::{RemoteError, RouteError};
pub use listener::{
    ListenerError, QueueLease, QueueListener, RemovalReason, RemovedQueue, StartPosition,
};
pub use locker::QueueLocker;
pub use name_server::NameServer;
pub use offset_store::OffsetStore;
