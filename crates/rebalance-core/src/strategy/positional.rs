//! The strategies whose rule is a function of a member's position: `share(n, i)` gives the
//! `mq_all` positions of the member at position `i` of `n`. [`allocate`] and [`plan`] both
//! apply that one rule, so a member's own answer and its share of the plan cannot drift apart.

use super::plan::{Plan, distinct_members};
use super::{AllocateError, validate, validate_group};
use crate::{ClientId, MessageQueue};

/// `current`'s queues: the rule at the position of its first occurrence (Java's `indexOf`),
/// nothing when it is not a member.
pub(crate) fn allocate<I>(
    current: &ClientId,
    mq_all: &[MessageQueue],
    cid_all: &[ClientId],
    share: impl Fn(usize, usize) -> I,
) -> Result<Vec<MessageQueue>, AllocateError>
where
    I: IntoIterator<Item = usize>,
{
    let Some(i) = validate(current, mq_all, cid_all)? else {
        return Ok(Vec::new());
    };
    Ok(share(cid_all.len(), i)
        .into_iter()
        .map(|p| mq_all[p].clone())
        .collect())
}

/// Every distinct, non-empty member's share by the same rule.
pub(crate) fn plan<'a, I>(
    mq_all: &'a [MessageQueue],
    cid_all: &[ClientId],
    share: impl Fn(usize, usize) -> I,
) -> Result<Plan<'a>, AllocateError>
where
    I: IntoIterator<Item = usize>,
{
    validate_group(mq_all, cid_all)?;
    let n = cid_all.len();
    let shares = distinct_members(cid_all, true)
        .into_iter()
        .map(|(i, cid)| {
            let positions = share(n, i).into_iter().map(|p| p as u32).collect();
            (cid.clone(), positions)
        })
        .collect();
    Ok(Plan::over_input(mq_all, shares))
}
