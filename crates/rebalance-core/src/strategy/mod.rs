//! Per-topic allocation strategies: "which of this topic's queues are mine?"
//!
//! Every RocketMQ strategy gives exactly the Java client's answer (same queues, same order, same
//! errors) for the same inputs; see `docs/spec/rocketmq-allocation.md`. Each one also computes the
//! whole group's [`Plan`] in one call.

mod averagely;
pub mod balanced_sticky;
mod by_circle;
mod by_config;
mod consistent_hash;
mod designated;
mod error;
mod machine_room;
mod memo;
mod nearby;
mod plan;
mod positional;
mod registry;
mod runtime_checks;

use std::fmt;
use std::sync::Arc;

pub use averagely::Averagely;
pub use balanced_sticky::BalancedSticky;
pub use by_circle::AveragelyByCircle;
pub use by_config::ByConfig;
pub use consistent_hash::{ConsistentHash, HashFunction, Md5Hash};
pub use designated::Designated;
pub use error::AllocateError;
pub use machine_room::ByMachineRoom;
pub use nearby::{MachineRoomNearby, MachineRoomResolver, PrefixResolver};
pub use plan::{Plan, Share};
pub use registry::{
    Params, StrategyConfigError, StrategyFactory, StrategyRef, StrategyRegistry, StrategySpec,
    build_strategy,
};
pub use runtime_checks::UnknownParams;

use crate::{ClientId, MessageQueue};

/// A per-topic allocation strategy (`AllocateMessageQueueStrategy` in the Java client).
///
/// Implementations are pure functions of their inputs: every client of a group calls them with
/// the same sorted `mq_all` and `cid_all` and must reach the same answer.
///
/// Implement [`allocate`](Self::allocate) to plug in a strategy of your own; the provided
/// [`plan`](Self::plan) then calls it once per member, and can be overridden with a one-pass
/// version.
///
/// ```
/// use rebalance_core::{ClientId, MessageQueue, strategy::{AllocateStrategy, Averagely}};
///
/// let queues: Vec<MessageQueue> = (0..11).map(|i| MessageQueue::new("T", "broker-a", i)).collect();
/// let members: Vec<ClientId> = ["c0", "c1", "c2", "c3"].into_iter().map(ClientId::from).collect();
/// let mine = Averagely.allocate("G", &members[3], &queues, &members).unwrap();
/// assert_eq!(mine, queues[9..].to_vec());
/// ```
pub trait AllocateStrategy: Send + Sync + fmt::Debug {
    /// The name this strategy is built by (see [`StrategyRegistry`]).
    fn name(&self) -> &str;

    /// The queues of `mq_all` (in the strategy's order) that `current` should consume.
    ///
    /// `group` only names the group in log events. A `current` that is not in `cid_all` gets an
    /// empty list, as in the Java client.
    fn allocate(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError>;

    /// [`allocate`](Self::allocate)'s answer as a shared, immutable list: what a client calls
    /// every round, since it only reads its share (to diff it against what it holds and to hand
    /// it to the application's callback).
    ///
    /// The provided version wraps [`allocate`](Self::allocate)'s `Vec` (one copy of the share's
    /// handles). Override it when the strategy already holds the answer, as [`ByConfig`] does
    /// with its configured list, to hand it out without copying.
    ///
    /// ```
    /// use rebalance_core::{ClientId, MessageQueue, strategy::{AllocateStrategy, ByConfig}};
    ///
    /// let mine = vec![MessageQueue::new("T", "broker-a", 0)];
    /// let strategy = ByConfig::new(mine.clone());
    /// let me = ClientId::from("c0");
    /// let a = strategy.allocate_shared("G", &me, &[], &[]).unwrap();
    /// let b = strategy.allocate_shared("G", &me, &[], &[]).unwrap();
    /// assert_eq!(*a, *mine);
    /// assert!(std::sync::Arc::ptr_eq(&a, &b)); // the configured list itself, not a copy
    /// ```
    fn allocate_shared(
        &self,
        group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Arc<[MessageQueue]>, AllocateError> {
        self.allocate(group, current, mq_all, cid_all)
            .map(Arc::from)
    }

    /// Every member's share at once. Members whose id is empty are left out; an error that every
    /// member would get is returned as the error of the plan.
    fn plan<'a>(
        &'a self,
        group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        let mut lists = Vec::new();
        for (_, cid) in plan::distinct_members(cid_all, false) {
            match self.allocate(group, cid, mq_all, cid_all) {
                Ok(queues) => lists.push((cid.clone(), queues)),
                Err(AllocateError::EmptyCurrentCid) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Plan::from_lists(mq_all, lists))
    }

    /// Why this strategy would give nobody anything, whatever the queues and members (a
    /// sentence naming the parameter at fault), or `None` (the default) when it may allocate
    /// something.
    ///
    /// This is what a runtime refuses at start: a consumer given such a strategy would start,
    /// report balanced rounds and never consume (the `rebalance-runtime` consumer fails with
    /// [`StrategyConfigError::AllocatesNothing`], see
    /// [`StrategyConfigError::if_allocates_nothing`]; so does
    /// [`StrategyRegistry::build_for_runtime`]). [`allocate`](Self::allocate) and
    /// [`plan`](Self::plan) still answer as the Java client does (nothing). The built-in
    /// answers: [`ConsistentHash`] with 0 virtual nodes, [`ByMachineRoom`] without a room (or
    /// with only rooms holding an '@', which no `room@broker` name has), [`ByConfig`] with an
    /// empty list, and the wrappers ([`MachineRoomNearby`], [`Designated`]) around such a
    /// strategy. Override it when some configuration of your strategy allocates nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rebalance_core::strategy::{AllocateStrategy, Averagely, ConsistentHash, Designated};
    ///
    /// let empty_ring = ConsistentHash::new(0).unwrap();
    /// assert_eq!(
    ///     empty_ring.allocates_nothing().as_deref(),
    ///     Some("`virtual_node_count` is 0, so the hash ring has no points (give it 1 or more; the default is 10)")
    /// );
    /// assert!(Designated::new(Arc::new(empty_ring), ["10.0.0.1"]).allocates_nothing().is_some());
    /// assert_eq!(Averagely.allocates_nothing(), None);
    /// ```
    fn allocates_nothing(&self) -> Option<String> {
        None
    }
}

/// What a wrapper around `inner` answers for [`AllocateStrategy::allocates_nothing`]: its inner
/// strategy's reason, named.
pub(crate) fn inner_allocates_nothing(inner: &dyn AllocateStrategy) -> Option<String> {
    let reason = inner.allocates_nothing()?;
    Some(format!(
        "its inner strategy `{}` allocates nothing: {reason}",
        inner.name()
    ))
}

/// The Java client's validation, shared by every strategy except [`ByConfig`]: the position of
/// the first occurrence of `current` in `cid_all`, or `None` when it is not there.
pub(crate) fn validate(
    current: &ClientId,
    mq_all: &[MessageQueue],
    cid_all: &[ClientId],
) -> Result<Option<usize>, AllocateError> {
    if current.is_empty() {
        return Err(AllocateError::EmptyCurrentCid);
    }
    validate_group(mq_all, cid_all)?;
    let position = cid_all.iter().position(|c| c == current);
    if position.is_none() {
        tracing::debug!(client = %current, "client is not in the consumer list, allocating nothing");
    }
    Ok(position)
}

/// The part of [`validate`] that does not depend on the caller.
pub(crate) fn validate_group(
    mq_all: &[MessageQueue],
    cid_all: &[ClientId],
) -> Result<(), AllocateError> {
    if mq_all.is_empty() {
        return Err(AllocateError::EmptyQueues);
    }
    if cid_all.is_empty() {
        return Err(AllocateError::EmptyConsumers);
    }
    Ok(())
}

#[cfg(test)]
mod agreement_tests;
#[cfg(test)]
pub(crate) mod test_support {
    use crate::{ClientId, MessageQueue};

    pub fn queues(n: i32) -> Vec<MessageQueue> {
        (0..n)
            .map(|i| MessageQueue::new("T", "broker-a", i))
            .collect()
    }

    pub fn clients(names: &[&str]) -> Vec<ClientId> {
        names.iter().copied().map(ClientId::from).collect()
    }

    pub fn ids(queues: &[MessageQueue]) -> Vec<i32> {
        queues.iter().map(|q| q.queue_id).collect()
    }
}
