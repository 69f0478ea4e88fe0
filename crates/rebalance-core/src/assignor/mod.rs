//! Group assignors (Kafka style): one call decides every member's partitions across all topics.
//!
//! Where a per-topic [`strategy`](crate::strategy) answers "which of this topic's queues are
//! mine?", a [`GroupAssignor`] takes the whole group at once: every member's subscription and,
//! where known, what it owns now ([`GroupSubscription`]), and returns every member's partitions
//! ([`GroupAssignment`]).
//!
//! Built in (see `docs/spec/kafka-assignors.md`):
//! - [`Range`] and [`RoundRobin`]: exactly Kafka's results, including the rack-aware range of
//!   KIP-881 and the static-member ordering.
//! - [`Sticky`] and [`CooperativeSticky`]: Kafka's guarantees (valid, balanced, keeping owned
//!   partitions, newer generation wins a conflicting claim; cooperative holds back a partition
//!   that moves between two live members for one round), computed in near-linear time instead
//!   of copying Kafka's algorithm and its hash-order accidents. See [`sticky`](Sticky) for where
//!   the results deliberately differ from Kafka's.
//! - [`Broadcast`]: every member gets every partition of every topic it subscribes to.
//!
//! ```
//! use rebalance_core::assignor::{build_assignor, GroupSubscription, MemberSubscription};
//!
//! let group = GroupSubscription::new()
//!     .with_topic("t0", 3)
//!     .with_topic("t1", 3)
//!     .with_member(MemberSubscription::new("c0", ["t0", "t1"]))
//!     .with_member(MemberSubscription::new("c1", ["t0", "t1"]));
//! let assignment = build_assignor("range").unwrap().assign(&group).unwrap();
//! let c1: Vec<String> = assignment.get("c1").unwrap().iter().map(|(t, p)| format!("{t}-{p}")).collect();
//! assert_eq!(c1, ["t0-2", "t1-2"]);
//! ```
//!
//! # Leaderless use
//! Kafka runs an assignor on one leader. In a coordinator-free group every member runs it on the
//! same view and takes its own part ([`GroupAssignment::get`]). That works as is for range,
//! round robin and broadcast, which depend only on subscriptions and metadata. The sticky
//! assignors also read every member's owned partitions and generation; a leaderless group gets
//! the same answer everywhere only when its directory shares those, otherwise each member should
//! pass the same (for example empty) owned lists.

mod assignment;
mod broadcast;
mod error;
mod layout;
mod racks;
mod range;
mod registry;
mod round_robin;
pub mod sticky;
mod subscription;
mod topic;

use std::fmt;

pub use assignment::{GroupAssignment, MemberPartitions};
pub use broadcast::Broadcast;
pub use error::AssignError;
pub use layout::MAX_PARTITIONS;
pub use range::Range;
pub use registry::{
    AssignorConfigError, AssignorFactory, AssignorRef, AssignorRegistry, build_assignor,
};
pub use round_robin::RoundRobin;
pub use sticky::{CooperativeSticky, Sticky};
pub use subscription::{GroupSubscription, MemberSubscription};
pub use topic::{Topic, TopicPartition};

/// How members hand partitions over between rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RebalanceProtocol {
    /// Every member gives up everything before the assignment and takes its new share after it.
    Eager,
    /// Members keep what they own; a partition moving between two live members is first revoked
    /// by its owner and assigned one round later.
    Cooperative,
}

/// A group-wide assignor (Kafka's `ConsumerPartitionAssignor`).
///
/// Implementations are pure functions of the [`GroupSubscription`]: every member that calls
/// them with the same input gets the same [`GroupAssignment`]. The trait is object safe, so
/// custom assignors can be registered by name ([`AssignorRegistry`]) and used wherever the
/// built-in ones are.
///
/// ```
/// use rebalance_core::assignor::*;
///
/// /// Gives everything to the member whose id sorts first.
/// #[derive(Debug)]
/// struct FirstTakesAll;
///
/// impl GroupAssignor for FirstTakesAll {
///     fn name(&self) -> &str { "first_takes_all" }
///     fn assign(&self, group: &GroupSubscription) -> Result<GroupAssignment, AssignError> {
///         let first = group.members.iter().map(|m| &m.member_id).min();
///         Ok(GroupAssignment::from_lists(group.members.iter().map(|m| {
///             let all = if Some(&m.member_id) == first {
///                 group.partitions_per_topic.iter()
///                     .flat_map(|(t, n)| (0..*n as i32).map(move |p| TopicPartition::new(t.clone(), p)))
///                     .collect()
///             } else { Vec::new() };
///             (m.member_id.clone(), all)
///         })))
///     }
/// }
///
/// let group = GroupSubscription::new().with_topic("t", 2)
///     .with_member(MemberSubscription::new("b", ["t"]))
///     .with_member(MemberSubscription::new("a", ["t"]));
/// let a = FirstTakesAll.assign(&group).unwrap();
/// assert_eq!(a.get("a").unwrap().len(), 2);
/// ```
pub trait GroupAssignor: Send + Sync + fmt::Debug {
    /// The name this assignor is built by (see [`AssignorRegistry`]).
    fn name(&self) -> &str;

    /// How members must hand partitions over when they follow this assignor's results.
    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    /// Every member's partitions.
    fn assign(&self, group: &GroupSubscription) -> Result<GroupAssignment, AssignError>;
}

#[cfg(test)]
mod test_support;
