//! `AllocateMessageQueueByConfig`: a fixed list.

use std::borrow::Cow;
use std::sync::Arc;

use super::plan::{Plan, distinct_members};
use super::{AllocateError, AllocateStrategy};
use crate::{ClientId, MessageQueue};

/// Always the configured list, whatever the inputs: no validation, no filtering (the list may
/// name queues that do not exist, in any order, with duplicates), exactly as the Java client.
#[derive(Debug, Clone)]
pub struct ByConfig {
    queues: Arc<[MessageQueue]>,
}

impl ByConfig {
    /// A strategy that always answers `queues`.
    pub fn new(queues: impl Into<Arc<[MessageQueue]>>) -> Self {
        Self {
            queues: queues.into(),
        }
    }

    /// The configured list.
    pub fn queues(&self) -> &[MessageQueue] {
        &self.queues
    }
}

impl AllocateStrategy for ByConfig {
    fn name(&self) -> &str {
        "by_config"
    }

    fn allocate(
        &self,
        _group: &str,
        _current: &ClientId,
        _mq_all: &[MessageQueue],
        _cid_all: &[ClientId],
    ) -> Result<Vec<MessageQueue>, AllocateError> {
        Ok(self.queues.to_vec())
    }

    /// The configured list itself: one reference count, however long the list.
    fn allocate_shared(
        &self,
        _group: &str,
        _current: &ClientId,
        _mq_all: &[MessageQueue],
        _cid_all: &[ClientId],
    ) -> Result<Arc<[MessageQueue]>, AllocateError> {
        Ok(self.queues.clone())
    }

    fn plan<'a>(
        &'a self,
        _group: &str,
        _mq_all: &'a [MessageQueue],
        cid_all: &[ClientId],
    ) -> Result<Plan<'a>, AllocateError> {
        let all: Vec<u32> = (0..self.queues.len() as u32).collect();
        let shares = distinct_members(cid_all, false)
            .into_iter()
            .map(|(_, cid)| (cid.clone(), all.clone()))
            .collect();
        Ok(Plan::over_pool(Cow::Borrowed(&self.queues), shares))
    }

    /// An empty list: every member takes nothing.
    fn allocates_nothing(&self) -> Option<String> {
        self.queues
            .is_empty()
            .then(|| "`message_queue_list` is empty, so this client takes no queue".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::test_support::*;

    #[test]
    fn ignores_every_input() {
        let configured = vec![
            MessageQueue::new("X", "y", 9),
            MessageQueue::new("X", "y", 9),
        ];
        let s = ByConfig::new(configured.clone());
        assert_eq!(s.queues(), configured);
        assert_eq!(s.allocate("G", &"".into(), &[], &[]).unwrap(), configured);
        let cids = clients(&["", "a"]);
        let plan = s.plan("G", &[], &cids).unwrap();
        assert_eq!(plan.len(), 2);
        assert_eq!(plan.share("").unwrap().to_vec(), configured);
    }

    #[test]
    fn an_empty_list_says_it_allocates_nothing() {
        assert_eq!(
            ByConfig::new(Vec::new()).allocates_nothing().as_deref(),
            Some("`message_queue_list` is empty, so this client takes no queue")
        );
        assert_eq!(ByConfig::new(queues(1)).allocates_nothing(), None);
    }
}
