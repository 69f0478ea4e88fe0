//! `AllocateMessageQueueAveragely`: contiguous blocks.

use std::ops::Range;

use super::plan::Plan;
use super::{AllocateError, AllocateStrategy, positional};
use crate::{ClientId, MessageQueue};

/// Contiguous blocks in member order; the first `Q mod N` members get one queue more.
///
/// Q = 11, N = 4 gives sizes 3, 3, 3, 2. With fewer queues than members, member `i < Q` gets
/// queue `i` and the rest get nothing. Duplicate ids all get the block of their first position.
#[derive(Debug, Clone, Copy, Default)]
pub struct Averagely;

/// The block of `mq_all` positions the member at position `i` gets (Java's arithmetic).
pub(crate) fn block(q: usize, n: usize, i: usize) -> Range<usize> {
    let rem = q % n;
    let extra = rem > 0 && i < rem;
    let size = if q <= n {
        1
    } else if extra {
        q / n + 1
    } else {
        q / n
    };
    // Java's start may lie beyond the end (members past Q when Q < N): an empty block.
    let start = (if extra { i * size } else { i * size + rem }).min(q);
    start..(start + size).min(q)
}

impl AllocateStrategy for Averagely {
    fn name(&self) -> &str {
        "averagely"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        positional::allocate(current, mq_all, cid_all, |n, i| block(mq_all.len(), n, i))
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        positional::plan(mq_all, cid_all, |n, i| block(mq_all.len(), n, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::test_support::*;

    #[test]
    fn eleven_over_four() {
        let sizes: Vec<usize> = (0..4).map(|i| block(11, 4, i).len()).collect();
        assert_eq!(sizes, [3, 3, 3, 2]);
        assert_eq!(block(11, 4, 3), 9..11);
    }

    proptest::proptest! {
        /// The documented shape: contiguous blocks in member order that tile the queues, the
        /// first `Q mod N` one longer; with fewer queues than members, one each to the first Q.
        #[test]
        fn blocks_tile_the_queues_longest_first(q in 1usize..200, n in 1usize..60) {
            let blocks: Vec<Range<usize>> = (0..n).map(|i| block(q, n, i)).collect();
            let mut next = 0;
            for (i, b) in blocks.iter().enumerate() {
                proptest::prop_assert_eq!(b.start, next, "block {} of {:?}", i, blocks);
                let expected = if q < n {
                    usize::from(i < q)
                } else {
                    q / n + usize::from(i < q % n)
                };
                proptest::prop_assert_eq!(b.len(), expected, "block {} of {:?}", i, blocks);
                next = b.end;
            }
            proptest::prop_assert_eq!(next, q);
        }
    }

    #[test]
    fn fewer_queues_than_members() {
        assert_eq!(block(3, 5, 2), 2..3);
        assert!(block(3, 5, 3).is_empty());
        assert!(block(3, 5, 4).is_empty());
        assert_eq!(block(2, 3, 2), 2..2);
    }

    #[test]
    fn duplicates_share_the_first_block() {
        let cids = clients(&["a", "b", "a"]);
        let mqs = queues(6);
        let plan = Averagely.plan("G", &mqs, &cids).unwrap();
        assert_eq!(plan.len(), 2);
        assert_eq!(ids(&plan.share("a").unwrap().to_vec()), [0, 1]);
        assert_eq!(ids(&plan.share("b").unwrap().to_vec()), [2, 3]);
        // A client asking for itself gets the block of its first position too (Java's indexOf),
        // not the block of a later copy.
        for cid in &cids {
            assert_eq!(
                Averagely.allocate("G", cid, &mqs, &cids).unwrap(),
                plan.share(cid).unwrap().to_vec(),
                "{cid}"
            );
        }
    }

    #[test]
    fn outsider_gets_nothing_and_errors_come_in_java_order() {
        let cids = clients(&["a"]);
        let mqs = queues(2);
        assert!(
            Averagely
                .allocate("G", &"x".into(), &mqs, &cids)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            Averagely.allocate("G", &"".into(), &[], &[]),
            Err(AllocateError::EmptyCurrentCid)
        );
        assert_eq!(
            Averagely.allocate("G", &"a".into(), &[], &[]),
            Err(AllocateError::EmptyQueues)
        );
        assert_eq!(
            Averagely.allocate("G", &"a".into(), &mqs, &[]),
            Err(AllocateError::EmptyConsumers)
        );
    }
}
