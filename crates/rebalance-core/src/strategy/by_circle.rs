//! `AllocateMessageQueueAveragelyByCircle`: round robin.

use std::iter::StepBy;
use std::ops::Range;

use super::plan::Plan;
use super::{AllocateError, AllocateStrategy, positional};
use crate::{ClientId, MessageQueue};

/// Round robin: the member at position `i` gets queues `i, i + N, i + 2N, …`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AveragelyByCircle;

/// The `mq_all` positions of the member at position `i` of `n`, with `q` queues.
fn share(q: usize, n: usize, i: usize) -> StepBy<Range<usize>> {
    (i..q).step_by(n)
}

impl AllocateStrategy for AveragelyByCircle {
    fn name(&self) -> &str {
        "averagely_by_circle"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &ClientId,
        mq_all: &[MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        positional::allocate(current, mq_all, cid_all, |n, i| share(mq_all.len(), n, i))
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        positional::plan(mq_all, cid_all, |n, i| share(mq_all.len(), n, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::test_support::*;

    #[test]
    fn deals_round_robin() {
        let cids = clients(&["a", "b", "c"]);
        let mqs = queues(7);
        let got = AveragelyByCircle
            .allocate("G", &cids[1], &mqs, &cids)
            .unwrap();
        assert_eq!(ids(&got), [1, 4]);
        let plan = AveragelyByCircle.plan("G", &mqs, &cids).unwrap();
        assert_eq!(ids(&plan.share("a").unwrap().to_vec()), [0, 3, 6]);
    }

    #[test]
    fn a_repeated_id_deals_from_its_first_position() {
        // Java's indexOf: both copies of `a` start at position 0; position 2's queues are lost.
        let cids = clients(&["a", "b", "a"]);
        let mqs = queues(7);
        let got = AveragelyByCircle
            .allocate("G", &cids[2], &mqs, &cids)
            .unwrap();
        assert_eq!(ids(&got), [0, 3, 6]);
        let plan = AveragelyByCircle.plan("G", &mqs, &cids).unwrap();
        assert_eq!(ids(&plan.share("a").unwrap().to_vec()), [0, 3, 6]);
        assert_eq!(plan.assigned_count(), 5);
    }
}
