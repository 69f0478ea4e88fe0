//! `AllocateMessageQueueConsistentHash`: a hash ring of virtual nodes.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use md5::{Digest, Md5};

use super::plan::{Plan, distinct_members};
use super::{AllocateError, AllocateStrategy, validate, validate_group};
use crate::{ClientId, MessageQueue};

/// The hash that places virtual nodes and queues on the ring.
pub trait HashFunction: Send + Sync + fmt::Debug {
    /// The ring position of `key`.
    fn hash(&self, key: &str) -> u64;
}

/// The Java client's default: the first four bytes of the MD5 of the UTF-8 key, as a big-endian
/// unsigned 32-bit number.
///
/// ```
/// use rebalance_core::strategy::{HashFunction, Md5Hash};
/// // MD5("") = d41d8cd9...
/// assert_eq!(Md5Hash.hash(""), 0xd41d8cd9);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Md5Hash;

impl HashFunction for Md5Hash {
    fn hash(&self, key: &str) -> u64 {
        let d = Md5::digest(key.as_bytes());
        u64::from(u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
    }
}

/// Consistent hashing with `virtual_node_count` points per member (default 10).
///
/// A queue belongs to the first ring point at or after its hash (wrapping around). Points are
/// the hashes of `"<client id>-<n>"`; queues hash their Java display string
/// (`MessageQueue [topic=…, brokerName=…, queueId=…]`). When one member leaves only its queues
/// move, but shares are uneven. Collisions and duplicate ids follow the Java client exactly
/// (last writer wins; a repeated id gets a second batch of points).
#[derive(Debug, Clone)]
pub struct ConsistentHash {
    virtual_nodes: usize,
    hash: Arc<dyn HashFunction>,
}

impl ConsistentHash {
    /// The Java client's default number of virtual nodes per member.
    pub const DEFAULT_VIRTUAL_NODES: i64 = 10;

    /// A ring with `virtual_node_count` points per member and the MD5 hash. Zero is allowed (the
    /// ring is empty and nobody gets anything); a negative count is an error, as in Java.
    pub fn new(virtual_node_count: i64) -> Result<Self, AllocateError> {
        let virtual_nodes = usize::try_from(virtual_node_count)
            .map_err(|_| AllocateError::IllegalVirtualNodeCount(virtual_node_count))?;
        Ok(Self {
            virtual_nodes,
            hash: Arc::new(Md5Hash),
        })
    }

    /// The same strategy with another hash function.
    pub fn with_hash(self, hash: impl HashFunction + 'static) -> Self {
        Self {
            hash: Arc::new(hash),
            ..self
        }
    }

    /// The number of virtual nodes per member.
    pub fn virtual_nodes(&self) -> usize {
        self.virtual_nodes
    }

    fn ring<'c>(&self, cid_all: &'c [ClientId]) -> Ring<'c> {
        Ring::build(cid_all, self.virtual_nodes, &*self.hash)
    }

    /// The ring node (an index into the ring's node list) owning each queue, in `mq_all` order.
    fn owners<'q>(
        &'q self,
        ring: &'q Ring<'_>,
        mq_all: &'q [MessageQueue],
    ) -> impl Iterator<Item = Option<u32>> + 'q {
        let mut key = String::with_capacity(96);
        mq_all.iter().map(move |mq| {
            key.clear();
            // Writing to a String cannot fail.
            let _ = write!(key, "{mq}");
            ring.owner(self.hash.hash(&key))
        })
    }
}

impl Default for ConsistentHash {
    fn default() -> Self {
        Self {
            virtual_nodes: Self::DEFAULT_VIRTUAL_NODES as usize,
            hash: Arc::new(Md5Hash),
        }
    }
}

/// The ring: points sorted by hash, each naming a node (a distinct client id).
struct Ring<'c> {
    points: Vec<(u64, u32)>,
    nodes: Vec<&'c ClientId>,
}

impl<'c> Ring<'c> {
    fn build(cid_all: &'c [ClientId], virtual_nodes: usize, hash: &dyn HashFunction) -> Self {
        let mut node_of: HashMap<&str, u32> = HashMap::with_capacity(cid_all.len());
        let mut nodes: Vec<&ClientId> = Vec::with_capacity(cid_all.len());
        let mut points_held: Vec<usize> = Vec::with_capacity(cid_all.len());
        let mut owner: HashMap<u64, u32> = HashMap::with_capacity(cid_all.len() * virtual_nodes);
        let mut key = String::with_capacity(64);
        for cid in cid_all {
            let node = *node_of.entry(cid.as_str()).or_insert_with(|| {
                nodes.push(cid);
                points_held.push(0);
                (nodes.len() - 1) as u32
            });
            // Suffixes continue from the points this id still holds (Java counts them on the ring).
            let first = points_held[node as usize];
            for k in 0..virtual_nodes {
                key.clear();
                let _ = write!(key, "{}-{}", cid, first + k);
                if let Some(previous) = owner.insert(hash.hash(&key), node) {
                    points_held[previous as usize] -= 1;
                }
                points_held[node as usize] += 1;
            }
        }
        let mut points: Vec<(u64, u32)> = owner.into_iter().collect();
        points.sort_unstable_by_key(|&(h, _)| h);
        Self { points, nodes }
    }

    /// The node of the first point at or after `h`, wrapping around.
    fn owner(&self, h: u64) -> Option<u32> {
        let i = self.points.partition_point(|&(p, _)| p < h);
        self.points
            .get(i)
            .or_else(|| self.points.first())
            .map(|&(_, n)| n)
    }

    fn node(&self, cid: &str) -> Option<u32> {
        self.nodes
            .iter()
            .position(|c| c.as_str() == cid)
            .map(|i| i as u32)
    }
}

impl AllocateStrategy for ConsistentHash {
    fn name(&self) -> &str {
        "consistent_hash"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        if validate(current, mq_all, cid_all)?.is_none() {
            return Ok(Vec::new());
        }
        let ring = self.ring(cid_all);
        let Some(me) = ring.node(current) else {
            return Ok(Vec::new());
        };
        Ok(self
            .owners(&ring, mq_all)
            .zip(mq_all)
            .filter(|(owner, _)| *owner == Some(me))
            .map(|(_, mq)| mq.clone())
            .collect())
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        validate_group(mq_all, cid_all)?;
        let ring = self.ring(cid_all);
        let mut by_node: Vec<Vec<u32>> = vec![Vec::new(); ring.nodes.len()];
        for (p, owner) in self.owners(&ring, mq_all).enumerate() {
            if let Some(node) = owner {
                by_node[node as usize].push(p as u32);
            }
        }
        // Ring nodes are the distinct ids in first-occurrence order, like the plan's members.
        let shares = distinct_members(cid_all, false)
            .into_iter()
            .zip(by_node)
            .filter(|((_, cid), _)| !cid.is_empty())
            .map(|((_, cid), share)| (cid.clone(), share))
            .collect();
        Ok(Plan::over_input(mq_all, shares))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::test_support::*;

    #[test]
    fn negative_count_is_rejected_and_zero_assigns_nothing() {
        assert_eq!(
            ConsistentHash::new(-1).err(),
            Some(AllocateError::IllegalVirtualNodeCount(-1))
        );
        let s = ConsistentHash::new(0).unwrap();
        let cids = clients(&["a", "b"]);
        let mqs = queues(4);
        assert!(s.allocate("G", &cids[0], &mqs, &cids).unwrap().is_empty());
        assert_eq!(s.plan("G", &mqs, &cids).unwrap().assigned_count(), 0);
    }

    #[test]
    fn plan_agrees_with_allocate_and_covers_everything() {
        let s = ConsistentHash::default();
        let cids = clients(&["10.0.0.1@1", "10.0.0.2@1", "10.0.0.3@1"]);
        let mqs = queues(40);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        assert_eq!(plan.assigned_count(), 40);
        for cid in &cids {
            assert_eq!(
                plan.share(cid).unwrap().to_vec(),
                s.allocate("G", cid, &mqs, &cids).unwrap()
            );
        }
    }

    #[derive(Debug)]
    struct Constant;
    impl HashFunction for Constant {
        fn hash(&self, _key: &str) -> u64 {
            7
        }
    }

    #[test]
    fn colliding_points_go_to_the_last_writer() {
        // Every point collides: the last member listed owns the single ring point.
        let s = ConsistentHash::default().with_hash(Constant);
        let cids = clients(&["a", "b"]);
        let mqs = queues(3);
        assert!(s.allocate("G", &cids[0], &mqs, &cids).unwrap().is_empty());
        assert_eq!(s.allocate("G", &cids[1], &mqs, &cids).unwrap().len(), 3);
    }
}
