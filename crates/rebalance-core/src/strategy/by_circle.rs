//! `AllocateMessageQueueAveragelyByCircle`: round robin.

use super::plan::{Plan, distinct_members};
use super::{AllocateError, AllocateStrategy, validate, validate_group};
use crate::{ClientId, MessageQueue};

/// Round robin: the member at position `i` gets queues `i, i + N, i + 2N, …`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AveragelyByCircle;

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
        let Some(i) = validate(current, mq_all, cid_all)? else {
            return Ok(Vec::new());
        };
        Ok(mq_all
            .iter()
            .skip(i)
            .step_by(cid_all.len())
            .cloned()
            .collect())
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        validate_group(mq_all, cid_all)?;
        let (q, n) = (mq_all.len(), cid_all.len());
        let shares = distinct_members(cid_all, true)
            .into_iter()
            .map(|(i, cid)| (cid.clone(), (i..q).step_by(n).map(|p| p as u32).collect()))
            .collect();
        Ok(Plan::over_input(mq_all, shares))
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
