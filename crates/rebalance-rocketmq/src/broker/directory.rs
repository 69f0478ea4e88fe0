//! [`GroupDirectory`] over the brokers: heartbeats, consumer lists, unregistration and the
//! brokers' membership-change pushes.
//!
//! **Members are listed per group, not per topic.** A RocketMQ broker answers
//! GET_CONSUMER_LIST_BY_GROUP with every client heartbeating the group, whatever they
//! subscribe to, so [`consumer_ids`](GroupDirectory::consumer_ids) for a topic is the whole
//! group. Every member of a group must therefore subscribe to the same topics, as with the Java
//! client: a member that does not subscribe to a topic is still given a share of its queues,
//! which then nobody consumes. (The in-memory directory filters by topic unless its
//! `members_per_topic` is off; this one cannot.) The
//! first time a client asks for a group's members, it logs a reminder of this, at info.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Weak;

use async_trait::async_trait;
use futures_util::future::{join, join_all};
use rebalance_core::ClientId;
use rebalance_runtime::{GroupDirectory, Registration, RemoteError, StartedConsumer};
use tokio::sync::watch;

use super::wire::{ConsumerListAnswer, heartbeat_body};
use super::{BrokerClient, refused};
use crate::command::{RemotingCommand, request_code, response_code};
use crate::denial::Op;

impl BrokerClient {
    /// `registration` with the names the brokers know: its group and topics in the namespace,
    /// if any (the client id is not namespaced).
    fn on_wire<'r>(&self, registration: &'r Registration) -> Cow<'r, Registration> {
        if self.inner.name_server.namespace().is_none() {
            return Cow::Borrowed(registration);
        }
        let mut wired = registration.clone();
        wired.group = self.wire(&registration.group).into_owned();
        for subscription in &mut wired.subscriptions {
            subscription.topic = self.wire(&subscription.topic).into_owned();
        }
        Cow::Owned(wired)
    }

    /// What a request about `group` is, with its wire name.
    pub(super) fn group_op(&self, operation: &'static str, group: &str) -> Op {
        Op::new(operation, format!("group `{}`", self.wire(group)))
    }

    /// What a request of `group` about `topic` is (an offset, a pull, a send-back), with their
    /// wire names.
    pub(super) fn group_topic_op(&self, operation: &'static str, group: &str, topic: &str) -> Op {
        Op::new(
            operation,
            format!(
                "group `{}` on topic `{}`",
                self.wire(group),
                self.wire(topic)
            ),
        )
    }

    /// The HEART_BEAT request of `registration` (plain names) with `sub_versions`.
    fn heartbeat_request(
        &self,
        registration: &Registration,
        sub_versions: &[i64],
    ) -> RemotingCommand {
        RemotingCommand::request(request_code::HEART_BEAT)
            .with_body(heartbeat_body(&self.on_wire(registration), sub_versions))
    }

    /// UNREGISTER_CLIENT for `registration`'s client and group.
    fn unregister_request(&self, registration: &Registration) -> RemotingCommand {
        RemotingCommand::request(request_code::UNREGISTER_CLIENT)
            .with_ext("clientID", registration.client_id.as_str())
            .with_ext("consumerGroup", self.wire(&registration.group))
    }

    /// The broker addresses of `topics`: the masters, and the other addresses (slaves).
    async fn brokers_of(
        &self,
        topics: impl Iterator<Item = &str>,
    ) -> (Addresses, Option<RemoteError>) {
        let mut addrs = Addresses::default();
        let mut error = None;
        for topic in topics {
            match self.route(topic).await {
                Ok(route) => {
                    for broker in &route.broker_datas {
                        let master = broker.master_addr();
                        for addr in broker.broker_addrs.values() {
                            if Some(addr.as_str()) == master {
                                addrs.masters.insert(addr.clone());
                            } else {
                                addrs.others.insert(addr.clone());
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(topic, error = %e, "no route for a subscribed topic");
                    error.get_or_insert(e);
                }
            }
        }
        (addrs, error)
    }

    /// GET_CONSUMER_LIST_BY_GROUP at the broker `addr`: the members of `group` it lists.
    pub(super) async fn consumer_ids_at(
        &self,
        addr: &str,
        group: &str,
    ) -> Result<Vec<ClientId>, RemoteError> {
        let op = self.group_op("consumer list", group);
        let request = RemotingCommand::request(request_code::GET_CONSUMER_LIST_BY_GROUP)
            .with_ext("consumerGroup", self.wire(group));
        self.call(addr, &op, request)
            .await
            .and_then(|r| consumer_list(&r))
    }

    /// Sends the last heartbeat of every registration heartbeated at `addr` there again (the
    /// connection to it was made again).
    pub(super) async fn heartbeat_again(&self, addr: &str) {
        for key in self.inner.registrations.heartbeated_at(addr) {
            // Read just before sending (earlier ones may take a while): a registration
            // heartbeated meanwhile goes as it is now, with the versions it was sent with.
            let Some((registration, sub_versions)) =
                self.inner.registrations.last_heartbeat(&key, addr)
            else {
                continue;
            };
            let request = self.heartbeat_request(&registration, &sub_versions);
            let op = self.group_op("heartbeat", &registration.group);
            match self.call_ok(addr, &op, request).await {
                Ok(_) => {
                    tracing::info!(broker = addr, client = %registration.client_id, group = %registration.group, "reconnected: heartbeat sent again")
                }
                Err(e) => {
                    tracing::warn!(broker = addr, group = %registration.group, error = %e, "reconnected, but the heartbeat failed; the next one follows")
                }
            }
        }
    }

    /// Sends `request` to every address, all at once. Returns the addresses that failed, each
    /// with its error, after all answered.
    async fn broadcast(
        &self,
        op: &Op,
        addrs: &BTreeSet<String>,
        request: RemotingCommand,
    ) -> Vec<(String, RemoteError)> {
        let what = op.operation;
        let calls = addrs.iter().map(|addr| {
            let request = request.clone();
            async move { (addr, self.call_ok(addr, op, request).await) }
        });
        let mut failures = Vec::new();
        for (addr, result) in join_all(calls).await {
            match result {
                Ok(_) => tracing::debug!(broker = %addr, what, "broker accepted"),
                Err(e) => {
                    tracing::warn!(broker = %addr, what, error = %e, "broker request failed");
                    failures.push((addr.clone(), e));
                }
            }
        }
        failures
    }

    /// UNREGISTER_CLIENT at `brokers`, which serve none of `registration`'s topics any more.
    /// They are forgotten once they accepted; the others stay remembered, so that the next
    /// heartbeat (or unregistration) tries them again.
    async fn leave(&self, registration: &Registration, brokers: BTreeSet<String>) {
        if brokers.is_empty() {
            return;
        }
        tracing::info!(client = %registration.client_id, group = %registration.group, ?brokers, "unregistering at brokers that serve no subscribed topic any more");
        let op = self.group_op("unregister", &registration.group);
        let failures = self
            .broadcast(&op, &brokers, self.unregister_request(registration))
            .await;
        let mut accepted = brokers;
        for (addr, _) in failures {
            accepted.remove(&addr);
        }
        self.inner
            .registrations
            .unregistered(registration, &accepted);
    }
}

/// Broker addresses, masters apart from the others.
#[derive(Debug, Default)]
struct Addresses {
    masters: BTreeSet<String>,
    others: BTreeSet<String>,
}

impl Addresses {
    fn all(&self) -> BTreeSet<String> {
        self.masters.union(&self.others).cloned().collect()
    }
}

/// The first failure of a broadcast, if any.
fn first_failure(failures: Vec<(String, RemoteError)>) -> Result<(), RemoteError> {
    failures.into_iter().next().map_or(Ok(()), |(_, e)| Err(e))
}

#[async_trait]
impl GroupDirectory for BrokerClient {
    /// HEART_BEAT to every address (master and slaves) of every broker serving a subscribed
    /// topic, as the Java client does for consumers: a slave answers member lists while its
    /// master is down, and it only knows the members that heartbeated it. Each subscription
    /// carries the version of when its topic was subscribed (a topic added at run time carries
    /// a newer one), and every broker heartbeated is remembered for
    /// [`unregister`](GroupDirectory::unregister). The heartbeat fails when every master fails,
    /// or when no master serves the topics (the slaves are heartbeated all the same); a master
    /// that fails while another accepts, and a slave that fails, are only logged (the next
    /// heartbeat tries them again). An accepted heartbeat vouches for the client's membership
    /// ([`Intervals::member_expiry`](rebalance_runtime::config::Intervals::member_expiry)): a
    /// broker that accepted it keeps listing the client, and one broker down must not stop the
    /// consumption of every other broker's queues. (A member cut off from some brokers only,
    /// while the others reach them all, stays trusted through the brokers it reaches.)
    ///
    /// A broker heartbeated before that serves none of the subscribed topics any more (their
    /// only broker when topics were dropped) gets UNREGISTER_CLIENT with this heartbeat, so
    /// that it stops listing the client at once rather than at shutdown or expiry; one that
    /// fails is tried again by the next heartbeats, until the broker's own expiry of the client
    /// (130 s after the last heartbeat it was sent: its 120 s expiry, checked every 10 s). That
    /// is done only when every subscribed topic's route is known: a route that failed to come
    /// says nothing about its brokers. The brokers past that expiry are forgotten either way.
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        let (addrs, route_error) = self.brokers_of(registration.topics()).await;
        let all = addrs.all();
        // Forgets the brokers past their expiry whether or not every route came: one failing
        // for long must not keep every address the other topics' brokers moved from.
        let left = self.inner.registrations.left(registration, &all);
        let left = match route_error {
            None => left,
            Some(_) => BTreeSet::new(),
        };
        let leaving = self.leave(registration, left);
        let no_master = || {
            route_error.clone().unwrap_or_else(|| {
                RemoteError::Unreachable(format!(
                    "no master broker serves the topics {:?}",
                    registration.topics().collect::<Vec<_>>()
                ))
            })
        };
        if all.is_empty() {
            leaving.await;
            if registration.subscriptions.is_empty() {
                // Nothing subscribed: no broker needs to know this client (those heartbeated
                // before were just told it left).
                return Ok(());
            }
            return Err(no_master());
        }
        let sub_versions = self.inner.registrations.sub_versions(registration);
        let request = self.heartbeat_request(registration, &sub_versions);
        // Remembered before sending: a heartbeat that timed out may still have registered.
        self.inner
            .registrations
            .heartbeating(registration, &sub_versions, &all);
        tracing::debug!(client = %registration.client_id, group = %registration.group, masters = addrs.masters.len(), slaves = addrs.others.len(), "heartbeat");
        let op = self.group_op("heartbeat", &registration.group);
        let (failures, ()) = join(self.broadcast(&op, &all, request), leaving).await;
        if addrs.masters.is_empty() {
            // Only slaves (their masters are down): they were told, but no master was.
            return Err(no_master());
        }
        let accepted_by = addrs
            .masters
            .iter()
            .find(|addr| failures.iter().all(|(failed, _)| failed != *addr));
        if let Some(addr) = accepted_by {
            self.check_client_ids_if_due(addr, registration);
        }
        let failed_masters: Vec<(String, RemoteError)> = failures
            .into_iter()
            .filter(|(addr, _)| addrs.masters.contains(addr))
            .collect();
        if accepted_by.is_some() && !failed_masters.is_empty() {
            tracing::warn!(client = %registration.client_id, group = %registration.group, failed = failed_masters.len(), masters = addrs.masters.len(), "heartbeat accepted by some masters only; the others are tried again by the next heartbeat");
            return Ok(());
        }
        first_failure(failed_masters)
    }

    /// UNREGISTER_CLIENT at every broker address of the subscribed topics, and at every broker
    /// heartbeated since the last unregistration (also those of topics dropped since, or gone,
    /// and when no topic is subscribed any more), except those not heartbeated for the broker's
    /// expiry (130 s), which have forgotten the client. A broker that fails is tried again by the
    /// next unregistration, until that expiry.
    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        let (addrs, route_error) = self.brokers_of(registration.topics()).await;
        let mut addrs = addrs.all();
        let heartbeated = self.inner.registrations.take_heartbeated(registration);
        self.inner.connection_checks.forget(&registration.group);
        addrs.extend(heartbeated.keys().cloned());
        if addrs.is_empty() {
            return match route_error {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        tracing::info!(client = %registration.client_id, group = %registration.group, brokers = addrs.len(), "unregistering");
        let op = self.group_op("unregister", &registration.group);
        let failures = self
            .broadcast(&op, &addrs, self.unregister_request(registration))
            .await;
        // Brokers of the subscribed topics never heartbeated have nothing to forget.
        self.inner.registrations.still_registered(
            registration,
            failures
                .iter()
                .filter_map(|(addr, _)| Some((addr.clone(), *heartbeated.get(addr)?)))
                .collect(),
        );
        first_failure(failures)
    }

    /// GET_CONSUMER_LIST_BY_GROUP from a broker serving `topic`, trying the next broker when one
    /// fails. "No consumer for this group" (code 1, or no body) is an empty list.
    ///
    /// The broker lists the whole **group**, not the consumers of `topic` (see the module
    /// documentation): every member of a group must subscribe to the same topics.
    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        // Once per group, without allocating on later rounds.
        if !self.inner.member_lists_asked.contains(group)
            && self.inner.member_lists_asked.insert(group.to_string())
        {
            tracing::info!(
                group,
                "RocketMQ lists a group's members per group, not per topic: every member of the group must subscribe to the same topics, or queues go to members that do not consume them"
            );
        }
        let route = self.route(topic).await?;
        let addrs: Vec<String> = route
            .broker_datas
            .iter()
            .filter_map(|b| b.any_addr().map(str::to_string))
            .collect();
        let mut last_error = RemoteError::Unreachable(format!("no broker serves topic `{topic}`"));
        for addr in &addrs {
            match self.consumer_ids_at(addr, group).await {
                Ok(ids) => {
                    tracing::debug!(broker = %addr, group, topic, members = ids.len(), "consumer list");
                    return Ok(ids);
                }
                Err(e) => {
                    tracing::warn!(broker = %addr, group, error = %e, "consumer list failed, trying the next broker");
                    last_error = e;
                }
            }
        }
        Err(last_error)
    }

    /// The brokers' pushes for the group (named in the namespace, if any).
    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        Some(self.remoting().membership().subscribe(&self.wire(group)))
    }

    /// The brokers' questions about the consumer (running info, status, offset resets) are
    /// answered from it from now on.
    fn consumer_started(&self, consumer: Weak<dyn StartedConsumer>) {
        let Some(started) = consumer.upgrade() else {
            return;
        };
        let name_server = &self.inner.name_server;
        self.remoting().questions().attach(
            &self.wire(started.group()),
            consumer,
            name_server.namespace().cloned(),
            name_server.addresses(),
        );
    }
}

/// The ids in an answer to GET_CONSUMER_LIST_BY_GROUP.
fn consumer_list(response: &RemotingCommand) -> Result<Vec<ClientId>, RemoteError> {
    match response.code {
        response_code::SUCCESS if response.body.is_empty() => Ok(Vec::new()),
        response_code::SUCCESS => {
            let answer: ConsumerListAnswer = serde_json::from_slice(&response.body)
                .map_err(|e| RemoteError::BadResponse(format!("consumer list: {e}")))?;
            Ok(answer
                .consumer_id_list
                .unwrap_or_default()
                .into_iter()
                .map(ClientId::from)
                .collect())
        }
        response_code::SYSTEM_ERROR => Ok(Vec::new()),
        _ => Err(refused(response)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route naming broker `a` at `addr`.
    fn route_at(addr: &str) -> rebalance_core::TopicRoute {
        use rebalance_core::{BrokerData, QueueData};
        rebalance_core::TopicRoute {
            queue_datas: vec![QueueData {
                broker_name: "a".into(),
                read_queue_nums: 1,
                write_queue_nums: 1,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![BrokerData {
                cluster: "c".into(),
                broker_name: "a".into(),
                broker_addrs: [(0, addr.to_string())].into(),
            }],
            order_topic_conf: None,
        }
    }

    /// Found by review: while the route of a subscribed topic kept failing (a topic deleted but
    /// still subscribed), the brokers heartbeated were never forgotten, even long after the
    /// brokers themselves had forgotten the client: every address the other topics' brokers
    /// moved to stayed for good. Those not heartbeated for the broker's expiry are forgotten
    /// all the same.
    #[tokio::test(start_paused = true)]
    async fn brokers_long_left_are_forgotten_while_a_route_fails() {
        use rebalance_runtime::subscription::Subscription;
        let name_server = crate::NameServerClient::from_addresses("127.0.0.1:1").unwrap();
        let brokers = BrokerClient::new(name_server.clone());
        let registration = Registration {
            client_id: "c".into(),
            group: "G".into(),
            message_model: Default::default(),
            consume_order: Default::default(),
            consume_from: Default::default(),
            subscriptions: vec![Subscription::all("T"), Subscription::all("Gone")],
        };
        for n in 0..5 {
            // Broker `a` of T moves to a new address each time; Gone's route never comes.
            let addr = format!("127.0.0.1:{}", 2 + n);
            name_server.routes().update("T", &route_at(&addr));
            let _ = brokers.register(&registration).await;
            assert_eq!(brokers.inner.registrations.heartbeated_at(&addr).len(), 1);
            tokio::time::advance(super::super::registrations::BROKER_FORGETS_AFTER).await;
        }
        for n in 0..4 {
            let addr = format!("127.0.0.1:{}", 2 + n);
            assert!(
                brokers.inner.registrations.heartbeated_at(&addr).is_empty(),
                "{addr} not heartbeated for the broker's expiry"
            );
        }
    }

    #[test]
    fn consumer_list_answers() {
        let ok =
            |body: &'static str| RemotingCommand::response(0, 1, None).with_body(body.as_bytes());
        assert_eq!(
            consumer_list(&ok(r#"{"consumerIdList":["b","a"]}"#)).unwrap(),
            [ClientId::from("b"), ClientId::from("a")]
        );
        assert!(consumer_list(&ok("")).unwrap().is_empty());
        assert!(
            consumer_list(&ok(r#"{"consumerIdList":null}"#))
                .unwrap()
                .is_empty()
        );
        let none = RemotingCommand::response(1, 1, Some("no consumer for this group, G".into()));
        assert!(consumer_list(&none).unwrap().is_empty());
        assert!(matches!(
            consumer_list(&ok("{oops")),
            Err(RemoteError::BadResponse(_))
        ));
        let other = RemotingCommand::response(26, 1, Some("no group".into()));
        assert_eq!(
            consumer_list(&other),
            Err(RemoteError::Refused {
                code: 26,
                remark: "no group".into()
            })
        );
    }
}
