//! [`ServerQuestions`]: the requests brokers send to a client over its connections, answered
//! from the consumers this process runs.
//!
//! - `NOTIFY_CONSUMER_IDS_CHANGED` (40): to the [`MembershipNotifier`].
//! - `GET_CONSUMER_RUNNING_INFO` (307, `mqadmin consumerStatus`, `consumerProgress -s`, the
//!   dashboard): the consumer's [`running_info`](StartedConsumer::running_info) as the Java
//!   client's `ConsumerRunningInfo` JSON; code 1 "The Consumer Group … not exist in this
//!   consumer" for a group or client id this process does not run.
//! - `GET_CONSUMER_STATUS_FROM_CLIENT` (221): the committed offsets of the held queues of the
//!   topic (`{"consumerTable":{},"messageQueueTable":{<queue>:<offset>}}`).
//! - `RESET_CONSUMER_CLIENT_OFFSET` (220, one-way, `mqadmin resetOffsetByTime` on brokers
//!   without server-side reset): the table's offsets go to
//!   [`reset_offsets`](StartedConsumer::reset_offsets) of every consumer of the group.
//!
//! Anything else is answered "request code not supported". Consumers are attached by
//! [`BrokerClient`](crate::BrokerClient) when they start
//! ([`GroupDirectory::consumer_started`](rebalance_runtime::GroupDirectory::consumer_started))
//! and forgotten once stopped.

mod running_json;

use std::sync::{Arc, Weak};

use dashmap::DashMap;
use rebalance_core::MessageQueue;
use rebalance_runtime::StartedConsumer;

use crate::command::{RemotingCommand, request_code, response_code};
use crate::connection::ServerRequestHandler;
use crate::namespace::Namespace;
use crate::notify::MembershipNotifier;

use crate::queue_keys::{parse_queue_key, queue_key, stringify_object_keys};

/// A started consumer, as the questions reach it.
#[derive(Debug, Clone)]
struct Attached {
    consumer: Weak<dyn StartedConsumer>,
    namespace: Option<Namespace>,
    /// The name servers, as Java lists them in `PROP_NAMESERVER_ADDR`.
    name_servers: String,
}

/// Answers the brokers' requests to this client (see the [module](self) documentation). One
/// per [`RemotingClient`](crate::RemotingClient), shared by every connection it opens.
#[derive(Debug, Default)]
pub struct ServerQuestions {
    membership: Arc<MembershipNotifier>,
    /// By group as the brokers name it (namespaced).
    consumers: DashMap<String, Vec<Attached>>,
}

impl ServerQuestions {
    /// Where membership-change notifications go.
    pub fn membership(&self) -> &Arc<MembershipNotifier> {
        &self.membership
    }

    /// Answers the questions about `consumer`, whose group the brokers know as `wire_group`,
    /// until it stops. Forgets the stopped consumers of the group on the way, so this stays
    /// bounded by the consumers running.
    pub fn attach(
        &self,
        wire_group: &str,
        consumer: Weak<dyn StartedConsumer>,
        namespace: Option<Namespace>,
        name_servers: &[String],
    ) {
        let name_servers: String = name_servers.iter().map(|a| format!("{a};")).collect();
        let mut entry = self.consumers.entry(wire_group.to_string()).or_default();
        entry.retain(|a| a.consumer.upgrade().is_some_and(|c| !c.is_stopped()));
        entry.push(Attached {
            consumer,
            namespace,
            name_servers,
        });
    }

    /// How many consumers are attached (stopped ones included until the next look).
    pub fn attached(&self) -> usize {
        self.consumers.iter().map(|e| e.len()).sum()
    }

    /// The running consumers of `group`, with how they are attached; only the one with
    /// `client_id` when given.
    fn running(
        &self,
        group: &str,
        client_id: Option<&str>,
    ) -> Vec<(Arc<dyn StartedConsumer>, Attached)> {
        let Some(attached) = self.consumers.get(group) else {
            return Vec::new();
        };
        attached
            .iter()
            .filter_map(|a| {
                let handle = a.consumer.upgrade()?;
                let wanted = client_id.is_none_or(|id| handle.client_id().as_str() == id);
                (wanted && !handle.is_stopped()).then(|| (handle, a.clone()))
            })
            .collect()
    }

    fn running_info(&self, request: &RemotingCommand) -> RemotingCommand {
        let group = request.ext("consumerGroup").unwrap_or_default();
        let client_id = request.ext("clientId");
        let Some((handle, attached)) = self.running(group, client_id).into_iter().next() else {
            tracing::info!(
                group,
                client_id,
                "running info asked for a consumer this process does not run"
            );
            return not_here(request, group);
        };
        let info = handle.running_info();
        tracing::debug!(group, queues = info.queues.len(), "answering running info");
        let body = running_json::running_info_body(
            &info,
            attached.namespace.as_ref(),
            &attached.name_servers,
        );
        RemotingCommand::response(response_code::SUCCESS, request.opaque, None).with_body(body)
    }

    fn consumer_status(&self, request: &RemotingCommand) -> RemotingCommand {
        let group = request.ext("group").unwrap_or_default();
        let wire_topic = request.ext("topic").unwrap_or_default();
        let mut table = String::from("{");
        let mut first = true;
        for (handle, attached) in self.running(group, None) {
            let topic = plain(attached.namespace.as_ref(), wire_topic);
            for (mut queue, offset) in handle.running_info().committed_offsets(Some(&topic)) {
                queue.topic = wire_topic.into();
                if !first {
                    table.push(',');
                }
                first = false;
                table.push_str(&queue_key(&queue));
                table.push(':');
                table.push_str(&offset.to_string());
            }
        }
        table.push('}');
        let body = format!("{{\"consumerTable\":{{}},\"messageQueueTable\":{table}}}");
        RemotingCommand::response(response_code::SUCCESS, request.opaque, None).with_body(body)
    }

    fn reset_offset(&self, peer: &str, request: &RemotingCommand) -> RemotingCommand {
        let group = request.ext("group").unwrap_or_default();
        let ok = RemotingCommand::response(response_code::SUCCESS, request.opaque, None);
        let table = match parse_offset_table(&request.body) {
            Ok(table) => table,
            Err(why) => {
                tracing::warn!(peer, group, %why, "offset reset with a body that is not an offset table; ignored");
                return RemotingCommand::response(
                    response_code::SYSTEM_ERROR,
                    request.opaque,
                    Some(format!("unreadable offset table: {why}")),
                );
            }
        };
        let consumers = self.running(group, None);
        if consumers.is_empty() {
            tracing::info!(
                peer,
                group,
                "offset reset for a group this process does not run; ignored"
            );
            return ok;
        }
        for (handle, attached) in consumers {
            let offsets: Vec<(MessageQueue, i64)> = table
                .iter()
                .map(|(q, o)| {
                    let mut q = q.clone();
                    q.topic = plain(attached.namespace.as_ref(), &q.topic).into();
                    (q, *o)
                })
                .collect();
            tracing::info!(peer, group, topic = request.ext("topic"), timestamp = request.ext("timestamp"), queues = offsets.len(), client = %handle.client_id(), "broker pushed an offset reset");
            if let Err(e) = handle.reset_offsets(offsets) {
                tracing::warn!(group, error = %e, "could not apply the offset reset");
            }
        }
        ok
    }
}

/// `name` without the namespace.
fn plain(namespace: Option<&Namespace>, name: &str) -> String {
    match namespace {
        Some(ns) => ns.unwrap(name).into_owned(),
        None => name.to_string(),
    }
}

/// The Java client's answer for a group it does not run.
fn not_here(request: &RemotingCommand, group: &str) -> RemotingCommand {
    RemotingCommand::response(
        response_code::SYSTEM_ERROR,
        request.opaque,
        Some(format!(
            "The Consumer Group <{group}> not exist in this consumer"
        )),
    )
}

/// The `offsetTable` of a RESET_CONSUMER_CLIENT_OFFSET body: fastjson object keys (or string
/// keys) to offsets.
fn parse_offset_table(body: &[u8]) -> Result<Vec<(MessageQueue, i64)>, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    let json = stringify_object_keys(text);
    let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let table = value
        .get("offsetTable")
        .and_then(|t| t.as_object())
        .ok_or("no offsetTable object")?;
    table
        .iter()
        .map(|(key, offset)| {
            let queue = parse_queue_key(key).ok_or_else(|| format!("not a queue: {key}"))?;
            let offset = offset
                .as_i64()
                .ok_or_else(|| format!("not an offset: {offset}"))?;
            Ok((queue, offset))
        })
        .collect()
}

impl ServerRequestHandler for ServerQuestions {
    fn handle(&self, peer: &str, request: &RemotingCommand) -> Option<RemotingCommand> {
        match request.code {
            request_code::NOTIFY_CONSUMER_IDS_CHANGED => self.membership.handle(peer, request),
            request_code::GET_CONSUMER_RUNNING_INFO => Some(self.running_info(request)),
            request_code::GET_CONSUMER_STATUS_FROM_CLIENT => Some(self.consumer_status(request)),
            request_code::RESET_CONSUMER_CLIENT_OFFSET => Some(self.reset_offset(peer, request)),
            code => {
                tracing::debug!(peer, code, "unsupported request from server");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
