//! The work queue of concurrent consumption: batches waiting for one of the consumer's
//! `consume_concurrency` workers, in the order they were pulled.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Message;
use super::link::LeaseLink;

/// A batch of one lease to consume.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) link: Arc<LeaseLink>,
    pub(crate) epoch: u64,
    pub(crate) messages: Vec<Message>,
}

/// Batches waiting for a worker (many producers, many consumers).
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    queue: Mutex<VecDeque<Request>>,
    ready: Notify,
}

impl WorkQueue {
    /// Adds a batch and wakes a worker.
    pub(crate) fn push(&self, request: Request) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(request);
        self.ready.notify_one();
    }

    fn pop(&self) -> Option<Request> {
        let request = self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        if request.is_some() {
            // Another batch may be waiting: pass the wake-up on (notify_one keeps one permit).
            if !self.is_empty() {
                self.ready.notify_one();
            }
        }
        request
    }

    fn is_empty(&self) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// The next batch; `None` once `stop` is cancelled.
    pub(crate) async fn next(&self, stop: &CancellationToken) -> Option<Request> {
        loop {
            if stop.is_cancelled() {
                return None;
            }
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            if let Some(request) = self.pop() {
                return Some(request);
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = ready => {}
            }
        }
    }
}
