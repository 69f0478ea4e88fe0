//! [`QueueLocker`] at the broker masters: LOCK_BATCH_MQ and UNLOCK_BATCH_MQ, one request per
//! broker.

use async_trait::async_trait;
use futures_util::future::join_all;
use rebalance_core::{ClientId, MessageQueue};
use rebalance_runtime::{LockOutcome, QueueLocker, RemoteError};

use std::collections::BTreeSet;

use tokio::sync::watch;

use super::BrokerClient;
use super::wire::{LockBatchAnswer, LockBatchBody, WireQueue};
use crate::command::{RemotingCommand, request_code};
use crate::denial::Op;

/// A LOCK_BATCH_MQ or UNLOCK_BATCH_MQ request, with the names as the broker knows them
/// (`group` already wrapped in the namespace, the queues' topics wrapped by `wire`).
fn lock_request<'q>(
    code: i32,
    group: &str,
    client: &ClientId,
    queues: &[&'q MessageQueue],
    wire: impl Fn(&'q str) -> std::borrow::Cow<'q, str>,
) -> RemotingCommand {
    let body = LockBatchBody {
        consumer_group: group,
        client_id: client.as_str(),
        only_this_broker: false,
        mq_set: queues
            .iter()
            .map(|q| WireQueue {
                topic: wire(&q.topic).into_owned(),
                broker_name: q.broker_name.to_string(),
                queue_id: q.queue_id,
            })
            .collect(),
    };
    // Serializing strings and numbers cannot fail.
    RemotingCommand::request(code).with_body(serde_json::to_vec(&body).unwrap_or_default())
}

/// The queues a LOCK_BATCH_MQ answer grants, as the broker named them but for the topics,
/// unwrapped from the namespace by `plain` ([`LockOutcome::answered`] keeps those asked for).
fn granted(
    response: &RemotingCommand,
    plain: impl Fn(&str) -> String,
) -> Result<Vec<MessageQueue>, RemoteError> {
    if response.body.is_empty() {
        return Ok(Vec::new());
    }
    let answer: LockBatchAnswer = serde_json::from_slice(&response.body)
        .map_err(|e| RemoteError::BadResponse(format!("lock answer: {e}")))?;
    Ok(answer
        .lock_ok_mq_set
        .unwrap_or_default()
        .into_iter()
        .map(|q| MessageQueue::new(plain(&q.topic).as_str(), q.broker_name.as_str(), q.queue_id))
        .collect())
}

/// How many times each broker's connection was lost (closed, or made again after it was):
/// each loss may have been a restart, which loses the locks it granted
/// ([`QueueLocker::lock_losses`]).
#[derive(Debug)]
pub(super) struct LockLosses {
    counts: watch::Sender<rebalance_runtime::LockLosses>,
}

impl Default for LockLosses {
    fn default() -> Self {
        Self {
            counts: watch::Sender::new(rebalance_runtime::LockLosses::default()),
        }
    }
}

impl LockLosses {
    /// The connection to `addr` was lost: the brokers whose master it is, as `routes` know
    /// them, may have lost their locks.
    pub(super) fn connection_lost(&self, addr: &str, routes: &crate::route::RouteCache) {
        let names = routes.masters_at(addr);
        if names.is_empty() {
            tracing::debug!(
                broker = addr,
                "connection lost to an address that is no known master"
            );
            return;
        }
        tracing::info!(broker = addr, names = ?names, "connection to a broker master lost: it may have lost the locks it granted");
        self.counts
            .send_modify(|counts| names.into_iter().for_each(|name| counts.record(name)));
    }

    /// The master of each of `names` moved (see `RouteCache::on_master_moved_while`).
    pub(super) fn masters_moved(&self, names: &[String]) {
        self.counts
            .send_modify(|counts| names.iter().for_each(|name| counts.record(name.as_str())));
    }

    fn subscribe(&self) -> watch::Receiver<rebalance_runtime::LockLosses> {
        self.counts.subscribe()
    }
}

impl BrokerClient {
    /// What a lock request of `group` at the broker of `queues` is about, with the wire names.
    fn lock_op(&self, operation: &'static str, group: &str, queues: &[&MessageQueue]) -> Op {
        let topics: BTreeSet<&str> = queues.iter().map(|q| &*q.topic).collect();
        let topics: Vec<String> = topics
            .into_iter()
            .map(|t| format!("`{}`", self.wire(t)))
            .collect();
        Op::new(
            operation,
            format!(
                "group `{}` on topic {}",
                self.wire(group),
                topics.join(", ")
            ),
        )
    }
}

#[async_trait]
impl QueueLocker for BrokerClient {
    /// Locks at each broker master the queues it serves. A broker's answer grants some of its
    /// queues and refuses the others; the queues of a broker that fails or has no known master
    /// are unanswered. The call fails only when no broker answered.
    async fn lock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<LockOutcome, RemoteError> {
        if queues.is_empty() {
            return Ok(LockOutcome::default());
        }
        let (by_master, unknown) = self.by_master(queues).await;
        let mut outcome = LockOutcome::default();
        let mut first_error = None;
        for (queue, e) in unknown {
            tracing::warn!(?queue, error = %e, "cannot lock: no master for the queue's broker");
            outcome.unanswered.push(queue.clone());
            first_error.get_or_insert(e);
        }
        let wire_group = self.wire(group);
        let plain = |topic: &str| self.inner.name_server.plain_name(topic).into_owned();
        let calls = by_master.iter().map(|(addr, asked)| {
            let request = lock_request(
                request_code::LOCK_BATCH_MQ,
                &wire_group,
                client,
                asked,
                |t| self.wire(t),
            );
            let op = self.lock_op("lock", group, asked);
            async move {
                let result = self
                    .call_ok(addr, &op, request)
                    .await
                    .and_then(|r| granted(&r, plain));
                (addr, asked, result)
            }
        });
        let mut answered = false;
        for (addr, asked, result) in join_all(calls).await {
            let asked: Vec<MessageQueue> = asked.iter().map(|q| (*q).clone()).collect();
            match result {
                Ok(got) => {
                    tracing::debug!(broker = %addr, group, %client, asked = asked.len(), granted = got.len(), "locked");
                    answered = true;
                    outcome.merge(LockOutcome::answered(&asked, got));
                }
                Err(e) => {
                    tracing::warn!(broker = %addr, group, %client, unanswered = asked.len(), error = %e, "lock failed");
                    outcome.merge(LockOutcome::unanswered(&asked));
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if !answered => Err(e),
            _ => {
                outcome.sort();
                Ok(outcome)
            }
        }
    }

    /// Unlocks at each broker master; fails with the first error after trying every broker.
    async fn unlock(
        &self,
        group: &str,
        client: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<(), RemoteError> {
        if queues.is_empty() {
            return Ok(());
        }
        let (by_master, unknown) = self.by_master(queues).await;
        let mut first_error = unknown.into_iter().map(|(_, e)| e).next();
        let wire_group = self.wire(group);
        let calls = by_master.iter().map(|(addr, asked)| {
            let request = lock_request(
                request_code::UNLOCK_BATCH_MQ,
                &wire_group,
                client,
                asked,
                |t| self.wire(t),
            );
            let op = self.lock_op("unlock", group, asked);
            async move { (addr, asked.len(), self.call_ok(addr, &op, request).await) }
        });
        for (addr, asked, result) in join_all(calls).await {
            match result {
                Ok(_) => tracing::debug!(broker = %addr, group, %client, asked, "unlocked"),
                Err(e) => {
                    tracing::warn!(broker = %addr, group, %client, error = %e, "unlock failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// At each broker master of `queues`: asks for the group's members, and when `departed` is
    /// not among them, UNLOCK_BATCH_MQ of its queues in `departed`'s name (the broker drops a
    /// lock only when that client holds it). A broker that still lists `departed` keeps its
    /// locks (it heartbeats there, so it may renew them). Returns the queues asked to unlock;
    /// fails only when no broker could be asked.
    async fn unlock_departed(
        &self,
        group: &str,
        departed: &ClientId,
        queues: &[MessageQueue],
    ) -> Result<Vec<MessageQueue>, RemoteError> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let (by_master, unknown) = self.by_master(queues).await;
        let mut first_error = unknown.into_iter().map(|(_, e)| e).next();
        let wire_group = self.wire(group);
        let mut unlocked = Vec::new();
        let mut answered = false;
        for (addr, asked) in &by_master {
            match self.consumer_ids_at(addr, group).await {
                Ok(ids) if ids.contains(departed) => {
                    answered = true;
                    tracing::debug!(broker = %addr, group, %departed, "the broker still lists the member: its locks stay");
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(broker = %addr, group, %departed, error = %e, "cannot ask the broker whether a departed member is listed; its locks there stay");
                    first_error.get_or_insert(e);
                    continue;
                }
            }
            let request = lock_request(
                request_code::UNLOCK_BATCH_MQ,
                &wire_group,
                departed,
                asked,
                |t| self.wire(t),
            );
            let op = self.lock_op("unlock", group, asked);
            match self.call_ok(addr, &op, request).await {
                Ok(_) => {
                    answered = true;
                    tracing::debug!(broker = %addr, group, %departed, asked = asked.len(), "unlocked a departed member's queues");
                    unlocked.extend(asked.iter().map(|q| (*q).clone()));
                }
                Err(e) => {
                    tracing::warn!(broker = %addr, group, %departed, error = %e, "unlock failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if !answered => Err(e),
            _ => Ok(unlocked),
        }
    }

    /// Changes when a connection to a broker master is lost, or made again after it was (see
    /// [`RemotingClient::on_disconnect`](crate::RemotingClient::on_disconnect)): the broker may
    /// have restarted and lost its lock table. A master that fails without its connection
    /// closing (a host lost, a partition) is seen only when a request to it fails.
    fn lock_losses(&self) -> Option<watch::Receiver<rebalance_runtime::LockLosses>> {
        Some(self.inner.lock_losses.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::namespace::Namespace;

    /// With a namespace, the body names the wrapped group and topics, and the granted queues
    /// come back under their plain topics.
    #[test]
    fn lock_names_are_namespaced_on_the_wire_only() {
        let ns = Namespace::new("NS").unwrap();
        let queues = [
            MessageQueue::new("T", "b", 1),
            MessageQueue::new("%RETRY%G", "b", 0),
        ];
        let asked: Vec<&MessageQueue> = queues.iter().collect();
        let request = lock_request(
            request_code::LOCK_BATCH_MQ,
            &ns.wrap("G"),
            &ClientId::from("c1"),
            &asked,
            |t| ns.wrap(t),
        );
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"consumerGroup": "NS%G", "clientId": "c1", "onlyThisBroker": false,
                "mqSet": [{"topic": "NS%T", "brokerName": "b", "queueId": 1},
                          {"topic": "%RETRY%NS%G", "brokerName": "b", "queueId": 0}]})
        );
        let answer = RemotingCommand::response(0, 1, None).with_body(
            r#"{"lockOKMQSet":[{"topic":"NS%T","brokerName":"b","queueId":1},{"topic":"%RETRY%NS%G","brokerName":"b","queueId":0}]}"#
                .as_bytes(),
        );
        let got = granted(&answer, |t| ns.unwrap(t).into_owned()).unwrap();
        assert_eq!(got, queues);
    }

    #[test]
    fn reads_the_granted_queues() {
        let b = MessageQueue::new("T", "b", 1);
        let response = RemotingCommand::response(0, 1, None).with_body(
            r#"{"lockOKMQSet":[{"topic":"T","brokerName":"b","queueId":1},{"topic":"T","brokerName":"b","queueId":7}]}"#
                .as_bytes(),
        );
        let got = granted(&response, str::to_string).unwrap();
        assert_eq!(got, vec![b.clone(), MessageQueue::new("T", "b", 7)]);
        // Queue 7, not asked for, is not granted.
        let a = MessageQueue::new("T", "b", 0);
        let outcome = LockOutcome::answered(&[a.clone(), b.clone()], got);
        assert_eq!((outcome.granted, outcome.refused), (vec![b], vec![a]));
        let empty = RemotingCommand::response(0, 1, None);
        assert!(granted(&empty, str::to_string).unwrap().is_empty());
        let bad = RemotingCommand::response(0, 1, None).with_body(&b"[1"[..]);
        assert!(matches!(
            granted(&bad, str::to_string),
            Err(RemoteError::BadResponse(_))
        ));
    }

    #[test]
    fn lock_request_carries_the_queues() {
        let q = MessageQueue::new("T", "b", 2);
        let request = lock_request(41, "G", &ClientId::from("c1"), &[&q], Cow::Borrowed);
        assert_eq!(request.code, 41);
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["mqSet"][0]["queueId"], 2);
        assert_eq!(body["clientId"], "c1");
        assert_eq!(body["consumerGroup"], "G");
    }

    #[test]
    fn lock_and_unlock_bodies_are_the_java_clients() {
        // `onlyThisBroker` false, as the Java client sends it: a broker in strict lock mode
        // then locks on a quorum of its replicas, not on itself alone.
        let queues = [
            MessageQueue::new("T", "b", 2),
            MessageQueue::new("T", "b", 5),
        ];
        let asked: Vec<&MessageQueue> = queues.iter().collect();
        for code in [request_code::LOCK_BATCH_MQ, request_code::UNLOCK_BATCH_MQ] {
            let request = lock_request(code, "G", &ClientId::from("c1"), &asked, Cow::Borrowed);
            let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
            assert_eq!(
                body,
                serde_json::json!({"consumerGroup": "G", "clientId": "c1", "onlyThisBroker": false,
                    "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 2},
                              {"topic": "T", "brokerName": "b", "queueId": 5}]})
            );
        }
    }
}
