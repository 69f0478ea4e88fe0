//! Server-side assignment (RocketMQ 5): the broker computes a client's queues
//! (QUERY_ASSIGNMENT, 400), and a group's topic is read by PULL or by POP as set per broker
//! (SET_MESSAGE_REQUEST_MODE, 401).
//!
//! **QUERY_ASSIGNMENT** (no header; JSON body `topic`, `consumerGroup`, `clientId`,
//! `strategyName`, `messageModel`, all required by the Rust broker) is sent to one broker of
//! the topic (the next one when a broker cannot be reached). The broker allocates the topic's
//! queues among the group's clients as its heartbeats registered them (the `clientId` must be
//! the heartbeats'), with one of the strategies it knows, [`SERVER_STRATEGIES`]. In POP mode
//! with a `popShareQueueNum` of 0 (or at least the number of clients − 1), every client is
//! assigned one entry per broker with queue id `-1`: POP from every queue of that broker.
//!
//! **Answers**: 0 with `messageQueueAssignments` → [`AssignmentAnswer::Queues`]; 0 without it
//! (the Java broker's "cannot allocate": unknown strategy, no route, no client) →
//! [`AssignmentAnswer::Unbalanced`]. **The Rust broker 1.0 answers those cases with an empty
//! list instead**, indistinguishable from a real empty assignment: never send it a strategy
//! outside [`SERVER_STRATEGIES`]. A refusal of the credentials or permissions →
//! [`RemoteError::Denied`]; anything else (1 with `empty body`, `clientId is empty`, ...) →
//! [`RemoteError::Refused`].
//!
//! **SET_MESSAGE_REQUEST_MODE** (JSON body `topic`, `consumerGroup`, `mode`,
//! `popShareQueueNum`) is state of each broker: it is sent to every broker of the topic. A
//! retry topic is refused here before sending (the brokers answer 16, which would read as a
//! denial). The Rust broker stores a mode for a topic or group it does not know; the Java
//! broker answers 17 or 26.

use std::collections::BTreeMap;

use rebalance_core::MessageQueue;
use rebalance_runtime::RemoteError;
use rebalance_runtime::config::MessageModel;
use serde::{Deserialize, Serialize};

use super::BrokerClient;
use super::pop::{PopError, invalid};
use super::wire::WireQueue;
use crate::command::{RemotingCommand, request_code, response_code};
use crate::namespace::{self, Namespace, RETRY_PREFIX};

/// The allocation strategies the brokers can run for QUERY_ASSIGNMENT (Java's and the Rust
/// broker 1.0's): averagely and averagely by circle.
pub const SERVER_STRATEGIES: [&str; 2] = ["AVG", "AVG_BY_CIRCLE"];

/// How a group reads a topic's queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RequestMode {
    /// PULL_MESSAGE from the assigned queues, each held by one client (the default).
    #[default]
    Pull,
    /// POP_MESSAGE, queues possibly shared by several clients.
    Pop,
}

impl RequestMode {
    /// The name on the wire (`PULL`, `POP`).
    pub fn as_str(self) -> &'static str {
        match self {
            RequestMode::Pull => "PULL",
            RequestMode::Pop => "POP",
        }
    }

    /// The mode named `name` (`PULL` / `POP`; the Rust broker also reads `Pull` / `Pop`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "PULL" | "Pull" => Some(RequestMode::Pull),
            "POP" | "Pop" => Some(RequestMode::Pop),
            _ => None,
        }
    }
}

/// A client's question: which queues of `topic` are mine?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentQuery {
    /// The topic.
    pub topic: String,
    /// The consumer group.
    pub group: String,
    /// This client's id, as its heartbeats register it.
    pub client_id: String,
    /// The allocation strategy, one of [`SERVER_STRATEGIES`].
    pub strategy: String,
    /// Clustering (the group shares the queues) or broadcasting (every client gets all).
    pub message_model: MessageModel,
}

impl AssignmentQuery {
    /// Asks for `client_id`'s share of `topic` in `group` by `strategy`, clustering.
    pub fn new(
        topic: impl Into<String>,
        group: impl Into<String>,
        client_id: impl Into<String>,
        strategy: impl Into<String>,
    ) -> Self {
        Self {
            topic: topic.into(),
            group: group.into(),
            client_id: client_id.into(),
            strategy: strategy.into(),
            message_model: MessageModel::Clustering,
        }
    }

    /// Sets the message model.
    pub fn with_message_model(mut self, message_model: MessageModel) -> Self {
        self.message_model = message_model;
        self
    }
}

/// One queue the broker assigned, and how to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueAssignment {
    /// The queue (plain names); queue id `-1` in POP mode means every queue of the broker.
    pub queue: MessageQueue,
    /// Read by PULL or by POP.
    pub mode: RequestMode,
    /// What else the broker attached (nothing, from the brokers of today).
    pub attachments: BTreeMap<String, String>,
}

/// What a QUERY_ASSIGNMENT answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignmentAnswer {
    /// These queues (sorted; possibly none).
    Queues(Vec<QueueAssignment>),
    /// The broker could not allocate (the Java broker's answer for an unknown strategy, route
    /// or group): keep the queues held.
    Unbalanced,
}

/// The PULL or POP mode of a group on a topic, with how many other clients' shares each POP
/// client also reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestModeSetting {
    /// The topic (not a retry topic).
    pub topic: String,
    /// The consumer group.
    pub group: String,
    /// The mode.
    pub mode: RequestMode,
    /// In POP mode: each client also reads the queues of the next this many clients; 0 (or
    /// at least the number of clients − 1) assigns every queue of each broker to every client.
    pub pop_share_queue_num: i32,
}

impl RequestModeSetting {
    /// `group` reads `topic` by `mode`, sharing nothing more.
    pub fn new(topic: impl Into<String>, group: impl Into<String>, mode: RequestMode) -> Self {
        Self {
            topic: topic.into(),
            group: group.into(),
            mode,
            pop_share_queue_num: 0,
        }
    }

    /// Sets `popShareQueueNum`.
    pub fn with_pop_share_queue_num(mut self, n: i32) -> Self {
        self.pop_share_queue_num = n;
        self
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueryBody<'a> {
    topic: &'a str,
    consumer_group: &'a str,
    client_id: &'a str,
    strategy_name: &'a str,
    message_model: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ModeBody<'a> {
    topic: &'a str,
    consumer_group: &'a str,
    mode: RequestMode,
    pop_share_queue_num: i32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerBody {
    #[serde(default)]
    message_queue_assignments: Option<Vec<WireAssignment>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireAssignment {
    #[serde(default)]
    message_queue: Option<WireQueue>,
    mode: String,
    #[serde(default)]
    attachments: Option<BTreeMap<String, String>>,
}

/// The QUERY_ASSIGNMENT request of `query` in `namespace`. Fails, sending nothing, when a
/// field is empty (the Rust broker requires all of them).
pub fn query_assignment_request(
    query: &AssignmentQuery,
    namespace: Option<&Namespace>,
) -> Result<RemotingCommand, PopError> {
    if [
        &query.topic,
        &query.group,
        &query.client_id,
        &query.strategy,
    ]
    .iter()
    .any(|field| field.is_empty())
    {
        return Err(invalid(
            "QUERY_ASSIGNMENT",
            "the topic, the group, the client id or the strategy is empty",
        ));
    }
    let body = QueryBody {
        topic: &namespace::wrap(namespace, &query.topic),
        consumer_group: &namespace::wrap(namespace, &query.group),
        client_id: &query.client_id,
        strategy_name: &query.strategy,
        message_model: query.message_model.as_str(),
    };
    // Strings only: serializing cannot fail.
    let body = serde_json::to_vec(&body).unwrap_or_default();
    Ok(RemotingCommand::request(request_code::QUERY_ASSIGNMENT).with_body(body))
}

/// The SET_MESSAGE_REQUEST_MODE request of `setting` in `namespace`. Fails, sending nothing,
/// for an empty name or a retry topic.
pub fn set_message_request_mode_request(
    setting: &RequestModeSetting,
    namespace: Option<&Namespace>,
) -> Result<RemotingCommand, PopError> {
    if setting.topic.is_empty() || setting.group.is_empty() {
        return Err(invalid(
            "SET_MESSAGE_REQUEST_MODE",
            "the topic or the group is empty",
        ));
    }
    if setting.topic.starts_with(RETRY_PREFIX) {
        return Err(invalid(
            "SET_MESSAGE_REQUEST_MODE",
            format!(
                "`{}` is a retry topic, whose mode is always PULL",
                setting.topic
            ),
        ));
    }
    let body = ModeBody {
        topic: &namespace::wrap(namespace, &setting.topic),
        consumer_group: &namespace::wrap(namespace, &setting.group),
        mode: setting.mode,
        pop_share_queue_num: setting.pop_share_queue_num,
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    Ok(RemotingCommand::request(request_code::SET_MESSAGE_REQUEST_MODE).with_body(body))
}

/// Reads the answer to a QUERY_ASSIGNMENT (queue topics out of `namespace`).
pub(crate) fn read_assignment_answer(
    response: &RemotingCommand,
    namespace: Option<&Namespace>,
) -> Result<AssignmentAnswer, RemoteError> {
    if response.code != response_code::SUCCESS {
        return Err(super::refused(response));
    }
    let not_assignment = |e: &dyn std::fmt::Display| {
        RemoteError::BadResponse(format!("QUERY_ASSIGNMENT answer is not an assignment: {e}"))
    };
    let value: serde_json::Value =
        serde_json::from_slice(&response.body).map_err(|e| not_assignment(&e))?;
    if !value.is_object() {
        return Err(not_assignment(&"not a JSON object"));
    }
    let body: AnswerBody = serde_json::from_value(value).map_err(|e| not_assignment(&e))?;
    let Some(assignments) = body.message_queue_assignments else {
        return Ok(AssignmentAnswer::Unbalanced);
    };
    let mut queues = assignments
        .into_iter()
        .map(|wire| {
            let queue = wire.message_queue.ok_or_else(|| {
                RemoteError::BadResponse(
                    "QUERY_ASSIGNMENT answer: an assignment without its queue".into(),
                )
            })?;
            let mode = RequestMode::parse(&wire.mode).ok_or_else(|| {
                RemoteError::BadResponse(format!(
                    "QUERY_ASSIGNMENT answer: unknown mode `{}`",
                    wire.mode
                ))
            })?;
            let topic = namespace::unwrap(namespace, &queue.topic).into_owned();
            Ok(QueueAssignment {
                queue: MessageQueue::new(
                    topic.as_str(),
                    queue.broker_name.as_str(),
                    queue.queue_id,
                ),
                mode,
                attachments: wire.attachments.unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, RemoteError>>()?;
    queues.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(AssignmentAnswer::Queues(queues))
}

/// Reads the answer to a SET_MESSAGE_REQUEST_MODE.
pub(crate) fn read_mode_answer(response: &RemotingCommand) -> Result<(), RemoteError> {
    match response.code {
        response_code::SUCCESS => Ok(()),
        _ => Err(super::refused(response)),
    }
}

impl BrokerClient {
    /// The brokers serving `topic`, from its route, in name order.
    async fn topic_brokers(&self, topic: &str) -> Result<Vec<String>, RemoteError> {
        let route = self.route(topic).await?;
        let mut brokers: Vec<String> = route
            .queue_datas
            .iter()
            .map(|q| q.broker_name.clone())
            .collect();
        brokers.sort();
        brokers.dedup();
        Ok(brokers)
    }

    /// The master address of `broker_name`, found through `topic`'s route.
    async fn master_of(&self, topic: &str, broker_name: &str) -> Result<String, RemoteError> {
        self.broker_addr(&MessageQueue::new(topic, broker_name, 0), true)
            .await
    }

    /// QUERY_ASSIGNMENT at a broker of the topic: the first one in name order, the next when
    /// it cannot be reached. See [`assignment`](self) for the answers.
    pub async fn query_assignment(
        &self,
        query: &AssignmentQuery,
    ) -> Result<AssignmentAnswer, PopError> {
        query_assignment_request(query, None)?;
        let brokers = self.topic_brokers(&query.topic).await?;
        let mut last =
            RemoteError::Unreachable(format!("no broker serves topic `{}`", query.topic));
        for broker in &brokers {
            match self.query_assignment_at(broker, query).await {
                Err(PopError::Remote(
                    e @ (RemoteError::Unreachable(_) | RemoteError::Timeout { .. }),
                )) => {
                    tracing::debug!(broker, error = %e, "QUERY_ASSIGNMENT failed; asking the next broker");
                    last = e;
                }
                other => return other,
            }
        }
        Err(last.into())
    }

    /// QUERY_ASSIGNMENT at the master of `broker_name`.
    pub async fn query_assignment_at(
        &self,
        broker_name: &str,
        query: &AssignmentQuery,
    ) -> Result<AssignmentAnswer, PopError> {
        let ns = self.name_server().namespace();
        let command = query_assignment_request(query, ns)?;
        let addr = self.master_of(&query.topic, broker_name).await?;
        let op = self.group_topic_op("query assignment", &query.group, &query.topic);
        let response = self.call(&addr, &op, command).await?;
        let answer = read_assignment_answer(&response, ns)?;
        tracing::debug!(broker = %addr, topic = %query.topic, group = %query.group, client_id = %query.client_id, strategy = %query.strategy, ?answer, "server-side assignment");
        Ok(answer)
    }

    /// SET_MESSAGE_REQUEST_MODE at every broker of the topic (it is state of each broker);
    /// fails with the first broker that fails, after trying them all.
    pub async fn set_message_request_mode(
        &self,
        setting: &RequestModeSetting,
    ) -> Result<(), PopError> {
        set_message_request_mode_request(setting, None)?;
        let mut first_failure = None;
        for broker in self.topic_brokers(&setting.topic).await? {
            if let Err(e) = self.set_message_request_mode_at(&broker, setting).await {
                tracing::warn!(broker, topic = %setting.topic, group = %setting.group, error = %e, "SET_MESSAGE_REQUEST_MODE failed");
                first_failure.get_or_insert(e);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// SET_MESSAGE_REQUEST_MODE at the master of `broker_name`.
    pub async fn set_message_request_mode_at(
        &self,
        broker_name: &str,
        setting: &RequestModeSetting,
    ) -> Result<(), PopError> {
        let command = set_message_request_mode_request(setting, self.name_server().namespace())?;
        let addr = self.master_of(&setting.topic, broker_name).await?;
        let op = self.group_topic_op("set request mode", &setting.group, &setting.topic);
        let response = self.call(&addr, &op, command).await?;
        read_mode_answer(&response)?;
        tracing::info!(broker = %addr, topic = %setting.topic, group = %setting.group, mode = setting.mode.as_str(), pop_share_queue_num = setting.pop_share_queue_num, "message request mode set");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn query() -> AssignmentQuery {
        AssignmentQuery::new("T", "G", "127.0.0.1@1", "AVG")
    }

    fn answer(body: &str) -> RemotingCommand {
        RemotingCommand::response(0, 1, None).with_body(body.as_bytes().to_vec())
    }

    #[test]
    fn the_query_has_every_field_the_rust_broker_requires() {
        let command = query_assignment_request(&query(), None).unwrap();
        assert_eq!(command.code, 400);
        assert!(command.ext_fields.is_empty(), "no header");
        let body: serde_json::Value = serde_json::from_slice(&command.body).unwrap();
        assert_eq!(
            body,
            json!({"topic": "T", "consumerGroup": "G", "clientId": "127.0.0.1@1",
                   "strategyName": "AVG", "messageModel": "CLUSTERING"})
        );
        let ns = Namespace::new("NS").unwrap();
        let broadcast = query().with_message_model(MessageModel::Broadcasting);
        let command = query_assignment_request(&broadcast, Some(&ns)).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&command.body).unwrap();
        assert_eq!(body["topic"], "NS%T");
        assert_eq!(body["consumerGroup"], "NS%G");
        assert_eq!(
            body["clientId"], "127.0.0.1@1",
            "client ids are never namespaced"
        );
        assert_eq!(body["messageModel"], "BROADCASTING");
        for empty in [
            AssignmentQuery::new("", "G", "c", "AVG"),
            AssignmentQuery::new("T", "", "c", "AVG"),
            AssignmentQuery::new("T", "G", "", "AVG"),
            AssignmentQuery::new("T", "G", "c", ""),
        ] {
            assert!(matches!(
                query_assignment_request(&empty, None),
                Err(PopError::InvalidRequest { .. })
            ));
        }
    }

    #[test]
    fn the_mode_setting_goes_out_as_java_names_it_and_never_for_a_retry_topic() {
        let setting =
            RequestModeSetting::new("T", "G", RequestMode::Pop).with_pop_share_queue_num(1);
        let command = set_message_request_mode_request(&setting, None).unwrap();
        assert_eq!(command.code, 401);
        let body: serde_json::Value = serde_json::from_slice(&command.body).unwrap();
        assert_eq!(
            body,
            json!({"topic": "T", "consumerGroup": "G", "mode": "POP", "popShareQueueNum": 1})
        );
        let retry = RequestModeSetting::new("%RETRY%G", "G", RequestMode::Pop);
        assert!(matches!(
            set_message_request_mode_request(&retry, None),
            Err(PopError::InvalidRequest { reason, .. }) if reason.contains("retry topic")
        ));
        let pull = RequestModeSetting::new("T", "G", RequestMode::Pull);
        let body: serde_json::Value =
            serde_json::from_slice(&set_message_request_mode_request(&pull, None).unwrap().body)
                .unwrap();
        assert_eq!(body["mode"], "PULL");
        for bad in [
            RequestModeSetting::new("", "G", RequestMode::Pop),
            RequestModeSetting::new("T", "", RequestMode::Pop),
        ] {
            assert!(set_message_request_mode_request(&bad, None).is_err());
        }
    }

    #[test]
    fn assignments_are_read_sorted_with_plain_topics() {
        // The Rust broker's form: field order topic, brokerName, queueId, attachments null.
        let body = r#"{"messageQueueAssignments":[
            {"messageQueue":{"topic":"NS%T","brokerName":"b","queueId":1},"mode":"POP","attachments":null},
            {"messageQueue":{"brokerName":"a","queueId":-1,"topic":"NS%T"},"mode":"PULL","attachments":{"k":"v"}}]}"#;
        let ns = Namespace::new("NS").unwrap();
        let AssignmentAnswer::Queues(queues) =
            read_assignment_answer(&answer(body), Some(&ns)).unwrap()
        else {
            panic!("not queues");
        };
        assert_eq!(
            queues,
            [
                QueueAssignment {
                    queue: MessageQueue::new("T", "a", -1),
                    mode: RequestMode::Pull,
                    attachments: BTreeMap::from([("k".into(), "v".into())]),
                },
                QueueAssignment {
                    queue: MessageQueue::new("T", "b", 1),
                    mode: RequestMode::Pop,
                    attachments: BTreeMap::new(),
                },
            ]
        );
    }

    #[test]
    fn an_absent_list_is_unbalanced_and_an_empty_one_is_no_queue() {
        assert_eq!(
            read_assignment_answer(&answer("{}"), None),
            Ok(AssignmentAnswer::Unbalanced)
        );
        assert_eq!(
            read_assignment_answer(&answer(r#"{"messageQueueAssignments":null}"#), None),
            Ok(AssignmentAnswer::Unbalanced)
        );
        assert_eq!(
            read_assignment_answer(&answer(r#"{"messageQueueAssignments":[]}"#), None),
            Ok(AssignmentAnswer::Queues(vec![]))
        );
    }

    #[test]
    fn malformed_answers_are_typed_errors() {
        for body in [
            "",
            "garbage",
            "[]",
            r#"{"messageQueueAssignments":{}}"#,
            r#"{"messageQueueAssignments":[{"mode":"POP"}]}"#,
            r#"{"messageQueueAssignments":[{"messageQueue":null,"mode":"POP"}]}"#,
            r#"{"messageQueueAssignments":[{"messageQueue":{"topic":"T","brokerName":"b","queueId":0},"mode":"PUSH"}]}"#,
            r#"{"messageQueueAssignments":[{"messageQueue":{"topic":"T","brokerName":"b","queueId":"x"},"mode":"POP"}]}"#,
            r#"{"messageQueueAssignments":[{"messageQueue":{"topic":"T","brokerName":"b","queueId":0}}]}"#,
        ] {
            assert!(
                matches!(
                    read_assignment_answer(&answer(body), None),
                    Err(RemoteError::BadResponse(_))
                ),
                "{body:?}"
            );
        }
        let refused = RemotingCommand::response(1, 1, Some("clientId is empty".into()));
        assert!(matches!(
            read_assignment_answer(&refused, None),
            Err(RemoteError::Refused { code: 1, remark }) if remark == "clientId is empty"
        ));
        assert_eq!(
            read_mode_answer(&RemotingCommand::response(0, 1, None)),
            Ok(())
        );
        assert!(matches!(
            read_mode_answer(&RemotingCommand::response(26, 1, None)),
            Err(RemoteError::Refused { code: 26, .. })
        ));
    }

    #[test]
    fn modes_read_as_either_broker_writes_them() {
        for (name, mode) in [
            ("PULL", RequestMode::Pull),
            ("Pull", RequestMode::Pull),
            ("POP", RequestMode::Pop),
            ("Pop", RequestMode::Pop),
        ] {
            assert_eq!(RequestMode::parse(name), Some(mode));
        }
        assert_eq!(RequestMode::parse("pop"), None);
        assert_eq!(RequestMode::Pop.as_str(), "POP");
    }
}
