//! `AllocateMessageQueueConsistentHash`: a hash ring of virtual nodes.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use md5::{Digest, Md5};

use super::memo::Memo;
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
///
/// The value remembers the queue hashes of the last few queue lists and the rings of the last
/// few member lists (keyed by the exact lists), so a round whose inputs did not change hashes
/// nothing. It is `Send + Sync` and meant to be shared; the hash function must be a pure
/// function of its key.
#[derive(Debug)]
pub struct ConsistentHash {
    virtual_nodes: usize,
    hash: Arc<dyn HashFunction>,
    queue_hashes: Memo<[MessageQueue], Vec<u64>>,
    rings: Memo<[ClientId], Ring>,
}

/// How many queue lists and member lists a strategy value remembers (a machine-room wrapper
/// calls its inner strategy once per room).
const MEMO_ENTRIES: usize = 8;

impl ConsistentHash {
    /// The Java client's default number of virtual nodes per member.
    pub const DEFAULT_VIRTUAL_NODES: i64 = 10;

    fn with_parts(virtual_nodes: usize, hash: Arc<dyn HashFunction>) -> Self {
        Self {
            virtual_nodes,
            hash,
            queue_hashes: Memo::new(MEMO_ENTRIES),
            rings: Memo::new(MEMO_ENTRIES),
        }
    }

    /// The most virtual nodes per member [`new`](Self::new) accepts (Java accepts any `int`, and
    /// runs out of memory long before its maximum).
    pub const MAX_VIRTUAL_NODES: i64 = 65_536;

    /// The most points a ring may hold (distinct members × virtual nodes): a larger one is
    /// refused with [`AllocateError::RingTooLarge`] before it is built (the Java client builds
    /// it, in gigabytes and minutes of MD5, and again at every change of the members).
    pub const MAX_RING_POINTS: usize = 20_000_000;

    /// A ring with `virtual_node_count` points per member and the MD5 hash. Zero is allowed, as
    /// in Java (the ring is empty and nobody gets anything; building by name for a runtime,
    /// [`StrategyRegistry::build_for_runtime`](super::StrategyRegistry::build_for_runtime),
    /// refuses it); a negative count is an error, as in Java ([`AllocateError::IllegalVirtualNodeCount`]),
    /// and one above [`MAX_VIRTUAL_NODES`](Self::MAX_VIRTUAL_NODES) is this library's
    /// ([`AllocateError::TooManyVirtualNodes`]; Java accepts it).
    pub fn new(virtual_node_count: i64) -> Result<Self, AllocateError> {
        let virtual_nodes = usize::try_from(virtual_node_count)
            .map_err(|_| AllocateError::IllegalVirtualNodeCount(virtual_node_count))?;
        if virtual_node_count > Self::MAX_VIRTUAL_NODES {
            return Err(AllocateError::TooManyVirtualNodes(virtual_node_count));
        }
        Ok(Self::with_parts(virtual_nodes, Arc::new(Md5Hash)))
    }

    /// Refuses a ring of `cid_all` over [`MAX_RING_POINTS`](Self::MAX_RING_POINTS) before it
    /// is built (the members come from a server). An id listed twice counts twice: Java's ring
    /// adds its points again, numbered on.
    fn check_ring(&self, cid_all: &[ClientId]) -> Result<(), AllocateError> {
        let members = cid_all.len();
        match members.checked_mul(self.virtual_nodes) {
            Some(points) if points <= Self::MAX_RING_POINTS => Ok(()),
            _ => Err(AllocateError::RingTooLarge {
                members,
                virtual_nodes: self.virtual_nodes,
                max: Self::MAX_RING_POINTS,
            }),
        }
    }

    /// The same strategy with another hash function (and nothing remembered).
    pub fn with_hash(self, hash: impl HashFunction + 'static) -> Self {
        Self::with_parts(self.virtual_nodes, Arc::new(hash))
    }

    /// The number of virtual nodes per member.
    pub fn virtual_nodes(&self) -> usize {
        self.virtual_nodes
    }

    fn ring(&self, cid_all: &[ClientId]) -> Arc<Ring> {
        self.rings.get_or_insert_with(
            |key| key == cid_all,
            || {
                let ring = Ring::build(cid_all, self.virtual_nodes, &*self.hash);
                (cid_all.into(), ring)
            },
        )
    }

    /// The hash of every queue, in `mq_all` order.
    fn queue_hashes(&self, mq_all: &[MessageQueue]) -> Arc<Vec<u64>> {
        self.queue_hashes.get_or_insert_with(
            |key| key == mq_all,
            || {
                let mut key = String::with_capacity(96);
                let hashes = mq_all
                    .iter()
                    .map(|mq| {
                        key.clear();
                        // Writing to a String cannot fail.
                        let _ = write!(key, "{mq}");
                        self.hash.hash(&key)
                    })
                    .collect();
                (mq_all.into(), hashes)
            },
        )
    }
}

impl ConsistentHash {
    /// The one rule, for `allocate` and `plan` alike: every queue belongs to the node of the
    /// first ring point at or after its hash. The ring, and each node's `mq_all` positions in
    /// input order.
    fn by_node(&self, mq_all: &[MessageQueue], cid_all: &[ClientId]) -> (Arc<Ring>, Vec<Vec<u32>>) {
        let ring = self.ring(cid_all);
        let hashes = self.queue_hashes(mq_all);
        let mut by_node: Vec<Vec<u32>> = vec![Vec::new(); ring.first_position.len()];
        for (p, &h) in hashes.iter().enumerate() {
            if let Some(node) = ring.owner(h) {
                by_node[node as usize].push(p as u32);
            }
        }
        (ring, by_node)
    }
}

impl Default for ConsistentHash {
    fn default() -> Self {
        Self::with_parts(Self::DEFAULT_VIRTUAL_NODES as usize, Arc::new(Md5Hash))
    }
}

impl Clone for ConsistentHash {
    /// The same parameters and hash function, with nothing remembered yet.
    fn clone(&self) -> Self {
        Self::with_parts(self.virtual_nodes, self.hash.clone())
    }
}

/// The ring: points sorted by hash, each naming a node (a distinct client id, numbered in the
/// order ids first appear in the member list).
#[derive(Debug)]
struct Ring {
    points: Vec<(u64, u32)>,
    /// The position in the member list of each node's first occurrence.
    first_position: Vec<u32>,
}

impl Ring {
    fn build(cid_all: &[ClientId], virtual_nodes: usize, hash: &dyn HashFunction) -> Self {
        let mut node_of: HashMap<&str, u32> = HashMap::with_capacity(cid_all.len());
        let mut first_position: Vec<u32> = Vec::with_capacity(cid_all.len());
        let mut points_held: Vec<usize> = Vec::with_capacity(cid_all.len());
        let mut owner: HashMap<u64, u32> =
            HashMap::with_capacity(cid_all.len().saturating_mul(virtual_nodes).min(1 << 24));
        let mut key = String::with_capacity(64);
        for (position, cid) in cid_all.iter().enumerate() {
            let node = *node_of.entry(cid.as_str()).or_insert_with(|| {
                first_position.push(position as u32);
                points_held.push(0);
                (first_position.len() - 1) as u32
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
        Self {
            points,
            first_position,
        }
    }

    /// The node of the first point at or after `h`, wrapping around.
    fn owner(&self, h: u64) -> Option<u32> {
        let i = self.points.partition_point(|&(p, _)| p < h);
        self.points
            .get(i)
            .or_else(|| self.points.first())
            .map(|&(_, n)| n)
    }

    /// The node of `cid`, given the member list the ring was built from.
    fn node(&self, cid_all: &[ClientId], cid: &str) -> Option<u32> {
        self.first_position
            .iter()
            .position(|&p| cid_all[p as usize].as_str() == cid)
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
        self.check_ring(cid_all)?;
        let (ring, mut by_node) = self.by_node(mq_all, cid_all);
        let Some(me) = ring.node(cid_all, current) else {
            return Ok(Vec::new());
        };
        let mine = std::mem::take(&mut by_node[me as usize]);
        Ok(mine
            .into_iter()
            .map(|p| mq_all[p as usize].clone())
            .collect())
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        validate_group(mq_all, cid_all)?;
        self.check_ring(cid_all)?;
        let (_, by_node) = self.by_node(mq_all, cid_all);
        // Ring nodes are the distinct ids in first-occurrence order, like the plan's members.
        let shares = distinct_members(cid_all, false)
            .into_iter()
            .zip(by_node)
            .filter(|((_, cid), _)| !cid.is_empty())
            .map(|((_, cid), share)| (cid.clone(), share))
            .collect();
        Ok(Plan::over_input(mq_all, shares))
    }

    /// With 0 virtual nodes the ring has no points: nobody gets anything.
    fn allocates_nothing(&self) -> Option<String> {
        (self.virtual_nodes == 0).then(|| {
            "`virtual_node_count` is 0, so the hash ring has no points (give it 1 or more; the \
             default is 10)"
                .to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::test_support::*;

    /// A ring over the limit is refused before it is built, by `plan` and `allocate` alike;
    /// a repeated id counts again, as Java adds its points again (found by review: 100 members
    /// at 65,536 virtual nodes took 4.5 s and 244 MB, and 2,000 would take gigabytes).
    #[test]
    fn a_ring_over_the_limit_is_refused_before_it_is_built() {
        let s = ConsistentHash::new(ConsistentHash::MAX_VIRTUAL_NODES).unwrap();
        let names: Vec<String> = (0..400).map(|i| format!("c{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let cids = clients(&names);
        let mqs = queues(4);
        let expected = AllocateError::RingTooLarge {
            members: 400,
            virtual_nodes: 65_536,
            max: ConsistentHash::MAX_RING_POINTS,
        };
        assert_eq!(s.plan("G", &mqs, &cids).err(), Some(expected.clone()));
        assert_eq!(s.allocate("G", &cids[0], &mqs, &cids).err(), Some(expected));
        let repeated = clients(&["a"; 400]);
        assert!(matches!(
            s.allocate("G", &repeated[0], &mqs, &repeated),
            Err(AllocateError::RingTooLarge { members: 400, .. })
        ));
    }

    #[test]
    fn negative_count_is_rejected_and_zero_assigns_nothing() {
        assert_eq!(
            ConsistentHash::new(-1).err(),
            Some(AllocateError::IllegalVirtualNodeCount(-1))
        );
        assert_eq!(
            ConsistentHash::new(i64::MAX).err(),
            Some(AllocateError::TooManyVirtualNodes(i64::MAX)),
            "a count that cannot be built is refused, not a panic, as this library's limit"
        );
        assert_eq!(
            ConsistentHash::new(ConsistentHash::MAX_VIRTUAL_NODES + 1)
                .unwrap_err()
                .java_name(),
            "RuntimeException",
            "not an argument Java refuses"
        );
        assert!(ConsistentHash::new(ConsistentHash::MAX_VIRTUAL_NODES).is_ok());
        let s = ConsistentHash::new(0).unwrap();
        let cids = clients(&["a", "b"]);
        let mqs = queues(4);
        assert!(s.allocate("G", &cids[0], &mqs, &cids).unwrap().is_empty());
        assert_eq!(s.plan("G", &mqs, &cids).unwrap().assigned_count(), 0);
    }

    #[test]
    fn a_ring_without_points_says_it_allocates_nothing() {
        assert_eq!(
            ConsistentHash::new(0)
                .unwrap()
                .allocates_nothing()
                .as_deref(),
            Some(
                "`virtual_node_count` is 0, so the hash ring has no points (give it 1 or more; \
                 the default is 10)"
            )
        );
        // Whatever the hash function.
        let zero = ConsistentHash::new(0).unwrap().with_hash(Md5Hash);
        assert!(zero.allocates_nothing().is_some());
        assert_eq!(ConsistentHash::new(1).unwrap().allocates_nothing(), None);
        assert_eq!(ConsistentHash::default().allocates_nothing(), None);
    }

    #[test]
    fn md5_points_are_javas() {
        // The first four bytes of MD5, big-endian and unsigned (0x90... has the top bit set).
        assert_eq!(Md5Hash.hash(""), 0xd41d_8cd9);
        assert_eq!(Md5Hash.hash("abc"), 0x9001_5098);
        assert_eq!(ConsistentHash::default().virtual_nodes(), 10);
        assert_eq!(ConsistentHash::new(3).unwrap().virtual_nodes(), 3);
        // Java's answer for one case of the reference vectors (pub-edge-chash10-more-c-than-q).
        let mqs: Vec<MessageQueue> = ["roomA@broker-a", "roomA@broker-b", "roomB@broker-c"]
            .into_iter()
            .map(|b| MessageQueue::new("TopicTest", b, 0))
            .collect();
        let cids = clients(&[
            "roomA@192.168.0.1@10000",
            "roomA@192.168.0.3@10002",
            "roomA@192.168.0.5@10004",
            "roomA@192.168.0.7@10006",
            "roomB@192.168.0.2@10001",
            "roomB@192.168.0.4@10003",
            "roomB@192.168.0.6@10005",
        ]);
        let strategy = ConsistentHash::default();
        let plan = strategy.plan("GID_TEST", &mqs, &cids).unwrap();
        let owners: Vec<(&str, Vec<&str>)> = plan
            .iter()
            .filter(|(_, share)| !share.is_empty())
            .map(|(cid, share)| {
                let brokers = share.iter().map(|q| &*q.broker_name).collect();
                (cid.as_str(), brokers)
            })
            .collect();
        assert_eq!(
            owners,
            [
                ("roomA@192.168.0.1@10000", vec!["roomA@broker-a"]),
                ("roomA@192.168.0.3@10002", vec!["roomB@broker-c"]),
                ("roomB@192.168.0.2@10001", vec!["roomA@broker-b"]),
            ]
        );
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

    #[test]
    fn remembered_hashes_and_rings_give_the_same_answers() {
        let shared = ConsistentHash::default();
        let other_topic: Vec<MessageQueue> = (0..64)
            .map(|i| MessageQueue::new("U", "broker-a", i))
            .collect();
        let groups = [
            clients(&["a", "b", "c"]),
            clients(&["a", "b"]),
            clients(&["a", "a", "", "b"]),
            // Same length as the first list, other ids: its own ring, not the first one's.
            clients(&["x", "y", "z"]),
            clients(&["a", "b", "c"]),
        ];
        // Lists of the same length but other queues get their own hashes too.
        for mqs in [queues(64), other_topic] {
            for cids in &groups {
                let cold = ConsistentHash::default();
                assert_eq!(
                    shared.plan("G", &mqs, cids).unwrap().to_lists(),
                    cold.plan("G", &mqs, cids).unwrap().to_lists()
                );
                for cid in cids.iter().filter(|c| !c.is_empty()) {
                    assert_eq!(
                        shared.allocate("G", cid, &mqs, cids).unwrap(),
                        cold.allocate("G", cid, &mqs, cids).unwrap()
                    );
                }
            }
        }
        let mqs = queues(64);
        // A clone starts empty, and another hash function never reuses MD5 results.
        let constant = shared.clone().with_hash(Constant);
        assert_eq!(
            constant
                .allocate("G", &groups[0][2], &mqs, &groups[0])
                .unwrap()
                .len(),
            64
        );
    }

    #[derive(Debug)]
    struct Constant;
    impl HashFunction for Constant {
        fn hash(&self, _key: &str) -> u64 {
            7
        }
    }

    /// Puts a member's point `"<id>-<k>"` at `k`, and every queue at 1.
    #[derive(Debug)]
    struct Suffix;
    impl HashFunction for Suffix {
        fn hash(&self, key: &str) -> u64 {
            key.rsplit_once('-')
                .and_then(|(_, k)| k.parse().ok())
                .unwrap_or(1)
        }
    }

    #[test]
    fn a_repeated_id_numbers_its_points_after_those_it_still_holds() {
        // Java's addNode numbers a node's new points from the count of its points on the ring.
        // `a` puts points 0 and 1, `b` takes both over, so the second `a` holds none and
        // numbers its points from 0 again: it takes 0 and 1 back and owns the queue at 1.
        // (Counting the points taken over as still held would put them at 2 and 3.)
        let s = ConsistentHash::new(2).unwrap().with_hash(Suffix);
        let cids = clients(&["a", "b", "a"]);
        let mqs = queues(1);
        assert_eq!(s.allocate("G", &cids[0], &mqs, &cids).unwrap(), mqs);
        assert!(s.allocate("G", &cids[1], &mqs, &cids).unwrap().is_empty());
        let plan = s.plan("G", &mqs, &cids).unwrap();
        assert_eq!(plan.share("a").unwrap().to_vec(), mqs);
    }

    /// Puts `a`'s point at 10, `b`'s at 20 and every queue at 10.
    #[derive(Debug)]
    struct OnAPoint;
    impl HashFunction for OnAPoint {
        fn hash(&self, key: &str) -> u64 {
            if key == "b-0" { 20 } else { 10 }
        }
    }

    #[test]
    fn a_queue_on_a_point_belongs_to_that_point() {
        // Java's `ring.tailMap(hash)` includes a point equal to the hash.
        let s = ConsistentHash::new(1).unwrap().with_hash(OnAPoint);
        let cids = clients(&["a", "b"]);
        let mqs = queues(2);
        assert_eq!(s.allocate("G", &cids[0], &mqs, &cids).unwrap(), mqs);
        let plan = s.plan("G", &mqs, &cids).unwrap();
        assert_eq!(plan.share("a").unwrap().to_vec(), mqs);
        assert!(plan.share("b").unwrap().is_empty());
    }

    #[test]
    fn a_clone_keeps_the_node_count_and_the_hash() {
        let s = ConsistentHash::new(2).unwrap().with_hash(Suffix);
        let copy = s.clone();
        assert_eq!(copy.virtual_nodes(), 2);
        let cids = clients(&["a", "b", "a"]);
        let mqs = queues(1);
        assert_eq!(
            copy.plan("G", &mqs, &cids).unwrap().to_lists(),
            s.plan("G", &mqs, &cids).unwrap().to_lists()
        );
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
