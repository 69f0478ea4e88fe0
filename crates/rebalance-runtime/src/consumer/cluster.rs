//! [`ClusterServices`]: one value for every outside-world trait, for [`ConsumerBuilder::cluster`](super::ConsumerBuilder::cluster).
//!
//! [`ConsumerBuilder::cluster`](super::ConsumerBuilder::cluster): super::ConsumerBuilder::cluster

use crate::{GroupDirectory, NameServer, OffsetStore, QueueLocker};

/// Something that implements every outside-world trait (the in-memory cluster's client, or a
/// transport's client), to configure them all at once with [`ConsumerBuilder::cluster`](super::ConsumerBuilder::cluster).
pub trait ClusterServices: NameServer + GroupDirectory + OffsetStore + QueueLocker {}
impl<T: NameServer + GroupDirectory + OffsetStore + QueueLocker> ClusterServices for T {}
