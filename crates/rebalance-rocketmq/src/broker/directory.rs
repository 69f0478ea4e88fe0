//! [`GroupDirectory`] over the brokers: heartbeats, consumer lists, unregistration and the
//! brokers' membership-change pushes.

use std::collections::BTreeSet;

use async_trait::async_trait;
use futures_util::future::join_all;
use rebalance_core::ClientId;
use rebalance_runtime::{GroupDirectory, Registration, RemoteError};
use tokio::sync::watch;

use super::wire::{ConsumerListAnswer, heartbeat_body};
use super::{BrokerClient, refused};
use crate::command::{RemotingCommand, request_code, response_code};

impl BrokerClient {
    /// The brokers of `topics`: master addresses, or every address with `all_addresses`.
    async fn brokers_of(
        &self,
        topics: &[String],
        all_addresses: bool,
    ) -> (BTreeSet<String>, Option<RemoteError>) {
        let mut addrs = BTreeSet::new();
        let mut error = None;
        for topic in topics {
            match self.route(topic).await {
                Ok(route) => {
                    for broker in &route.broker_datas {
                        if all_addresses {
                            addrs.extend(broker.broker_addrs.values().cloned());
                        } else if let Some(master) = broker.master_addr() {
                            addrs.insert(master.to_string());
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

    /// Sends `request` to every address, all at once; the first failure, if any, after all
    /// answered.
    async fn broadcast(
        &self,
        what: &'static str,
        addrs: &BTreeSet<String>,
        request: RemotingCommand,
    ) -> Result<(), RemoteError> {
        let calls = addrs.iter().map(|addr| {
            let request = request.clone();
            async move { (addr, self.call_ok(addr, request).await) }
        });
        let mut first_error = None;
        for (addr, result) in join_all(calls).await {
            match result {
                Ok(_) => tracing::debug!(broker = %addr, what, "broker accepted"),
                Err(e) => {
                    tracing::warn!(broker = %addr, what, error = %e, "broker request failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[async_trait]
impl GroupDirectory for BrokerClient {
    /// HEART_BEAT to the master of every broker serving a subscribed topic.
    async fn register(&self, registration: &Registration) -> Result<(), RemoteError> {
        let (masters, route_error) = self.brokers_of(&registration.topics, false).await;
        if masters.is_empty() {
            return Err(route_error.unwrap_or_else(|| {
                RemoteError::Unreachable(format!(
                    "no master broker serves the topics {:?}",
                    registration.topics
                ))
            }));
        }
        let request = RemotingCommand::request(request_code::HEART_BEAT)
            .with_body(heartbeat_body(registration, self.inner.sub_version));
        tracing::debug!(client = %registration.client_id, group = %registration.group, brokers = masters.len(), "heartbeat");
        self.broadcast("heartbeat", &masters, request).await
    }

    /// UNREGISTER_CLIENT at every broker address of the subscribed topics.
    async fn unregister(&self, registration: &Registration) -> Result<(), RemoteError> {
        let (addrs, route_error) = self.brokers_of(&registration.topics, true).await;
        if addrs.is_empty() {
            return match route_error {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        let request = RemotingCommand::request(request_code::UNREGISTER_CLIENT)
            .with_ext("clientID", registration.client_id.as_str())
            .with_ext("consumerGroup", &registration.group);
        tracing::info!(client = %registration.client_id, group = %registration.group, brokers = addrs.len(), "unregistering");
        self.broadcast("unregister", &addrs, request).await
    }

    /// GET_CONSUMER_LIST_BY_GROUP from a broker serving `topic`, trying the next broker when one
    /// fails. "No consumer for this group" (code 1, or no body) is an empty list.
    async fn consumer_ids(&self, group: &str, topic: &str) -> Result<Vec<ClientId>, RemoteError> {
        let route = self.route(topic).await?;
        let addrs: Vec<String> = route
            .broker_datas
            .iter()
            .filter_map(|b| b.any_addr().map(str::to_string))
            .collect();
        let mut last_error = RemoteError::Unreachable(format!("no broker serves topic `{topic}`"));
        for addr in &addrs {
            let request = RemotingCommand::request(request_code::GET_CONSUMER_LIST_BY_GROUP)
                .with_ext("consumerGroup", group);
            match self
                .call(addr, request)
                .await
                .and_then(|r| consumer_list(&r))
            {
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

    fn membership_changes(&self, group: &str) -> Option<watch::Receiver<u64>> {
        Some(self.remoting().membership().subscribe(group))
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
