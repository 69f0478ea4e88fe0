//! [`RemotingCommand`]: one request or response of the RocketMQ remoting protocol, and the codes
//! this crate uses.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

/// Request codes (`RequestCode` in the Java client) used by a rebalance runtime.
pub mod request_code {
    /// Send one message to a queue (broker).
    pub const SEND_MESSAGE: i32 = 10;
    /// Pull messages of a queue, held by the broker while there is none (broker).
    pub const PULL_MESSAGE: i32 = 11;
    /// Query the stored offset of a consumer group on a queue (broker).
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    /// Store the offset of a consumer group on a queue (broker).
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    /// Create or update a topic (broker admin).
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    /// The offset of the first message stored at or after a time (broker).
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    /// The largest offset of a queue (broker).
    pub const GET_MAX_OFFSET: i32 = 30;
    /// The smallest offset of a queue (broker).
    pub const GET_MIN_OFFSET: i32 = 31;
    /// Register a client and its subscriptions (broker).
    pub const HEART_BEAT: i32 = 34;
    /// Remove a client from its groups (broker).
    pub const UNREGISTER_CLIENT: i32 = 35;
    /// Send a message a consumer failed back for redelivery (broker).
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    /// The client ids of a consumer group (broker).
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    /// Pushed by a broker to the members of a group whose membership changed (one-way).
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    /// Lock queues for ordered consumption (broker master).
    pub const LOCK_BATCH_MQ: i32 = 41;
    /// Release queue locks (broker master).
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    /// The route of a topic (name server).
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    /// A consumer group's connections and subscriptions as the broker knows them (broker;
    /// extField `consumerGroup`, answer body `{"connectionSet", "subscriptionTable", ...}`).
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    /// Consumption statistics of a group per queue: committed and max offsets (broker;
    /// extFields `consumerGroup`, optional `topic`; answer `ConsumeStats`).
    pub const GET_CONSUME_STATS: i32 = 208;
    /// Broker to client, one-way: reset the group's offsets of a topic (body `offsetTable`).
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    /// Broker to client: the client's committed offsets of a topic.
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: i32 = 221;
    /// Admin to broker: reset a group's offsets of a topic to a time (extFields `topic`,
    /// `group`, `timestamp`, `isForce`).
    pub const INVOKE_BROKER_TO_RESET_OFFSET: i32 = 222;
    /// Admin to broker: ask every client of a group for its offsets (221).
    pub const INVOKE_BROKER_TO_GET_CONSUMER_STATUS: i32 = 223;
    /// A consumer's running state: broker to client, or admin to broker, which forwards it
    /// (extFields `consumerGroup`, `clientId`, `jstackEnable`).
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    /// The queues the broker assigns to a client (server-side assignment; body
    /// `QueryAssignmentRequestBody`, broker).
    pub const QUERY_ASSIGNMENT: i32 = 400;
    /// Whether a group reads a topic by PULL or POP, as QUERY_ASSIGNMENT then assigns it (body
    /// `SetMessageRequestModeRequestBody`, every broker of the topic).
    pub const SET_MESSAGE_REQUEST_MODE: i32 = 401;
    /// Take messages, which stay invisible to other POPs until acknowledged or their invisible
    /// time passes (broker master).
    pub const POP_MESSAGE: i32 = 200050;
    /// Acknowledge one popped message by its receipt handle (broker master).
    pub const ACK_MESSAGE: i32 = 200051;
    /// Read messages at a group's POP offset without taking them (broker).
    pub const PEEK_MESSAGE: i32 = 200052;
    /// Postpone the redelivery of one popped message; answers a new receipt handle (broker
    /// master).
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200053;
    /// Whether there is anything to pop, held by the broker up to a poll time (broker).
    pub const NOTIFICATION: i32 = 200054;
    /// Acknowledge many popped messages (JSON body, no header; broker master).
    pub const BATCH_ACK_MESSAGE: i32 = 200151;
}

/// Response codes (`ResponseCode` in the Java client) this crate interprets.
pub mod response_code {
    /// Success.
    pub const SUCCESS: i32 = 0;
    /// A server-side error; GET_CONSUMER_LIST_BY_GROUP answers it when the group has no member.
    pub const SYSTEM_ERROR: i32 = 1;
    /// The broker is busy (answer to PULL_MESSAGE under cold-data flow control): retry a
    /// little later.
    pub const SYSTEM_BUSY: i32 = 2;
    /// The server does not support the request code.
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    /// A sent message is stored but its disk flush timed out (answer to SEND_MESSAGE).
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    /// A sent message is stored but no slave is available (answer to SEND_MESSAGE).
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    /// A sent message is stored but its replication timed out (answer to SEND_MESSAGE).
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    /// The request names a queue the topic does not have (answer to ACK_MESSAGE and
    /// CHANGE_MESSAGE_INVISIBLETIME), or an offset outside an orderly POP's batch.
    pub const MESSAGE_ILLEGAL: i32 = 13;
    /// The broker cannot serve the request now (its store is unavailable, ...).
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    /// The server refused this client's credentials or permissions (ACL 2.0 and the Rust
    /// broker; see [`acl::is_denial`](crate::acl::is_denial)).
    pub const NO_PERMISSION: i32 = 16;
    /// The name server does not know the topic (answer to GET_ROUTEINFO_BY_TOPIC).
    pub const TOPIC_NOT_EXIST: i32 = 17;
    /// No new message at the pulled offset (answer to PULL_MESSAGE).
    pub const PULL_NOT_FOUND: i32 = 19;
    /// No message matching the subscription; pull again at once (answer to PULL_MESSAGE).
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    /// The pulled offset is out of the queue's range (answer to PULL_MESSAGE).
    pub const PULL_OFFSET_MOVED: i32 = 21;
    /// No offset is stored yet (answer to QUERY_CONSUMER_OFFSET).
    pub const QUERY_NOT_FOUND: i32 = 22;
    /// The filter expression does not parse (answer to POP_MESSAGE, NOTIFICATION).
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    /// The broker does not know the consumer's subscription; the Rust broker also answers it
    /// for "subscription not latest" (answer to PULL_MESSAGE).
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    /// The broker's subscription is older than the pull's (answer to PULL_MESSAGE).
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    /// The broker does not know the group and may not create it.
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    /// A header field is missing or out of range (the Rust broker answers it for any header
    /// that does not decode).
    pub const INVALID_PARAMETER: i32 = 29;
    /// No member of the group is connected (answer to GET_CONSUMER_CONNECTION_LIST).
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
    /// The acknowledged offset is outside the queue's stored range: the message is gone
    /// (answer to ACK_MESSAGE, BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME).
    pub const NO_MESSAGE: i32 = 208;
    /// Too many POP or NOTIFICATION requests are held by the broker: retry a little later.
    pub const POLLING_FULL: i32 = 209;
    /// Nothing to pop within the poll time (answer to POP_MESSAGE): pop again.
    pub const POLLING_TIMEOUT: i32 = 210;
    /// The broker asks the client to slow down.
    pub const FLOW_CONTROL: i32 = 215;
}

/// The `flag` bit marking a response.
pub const FLAG_RESPONSE: i32 = 1;
/// The `flag` bit marking a one-way request (no response expected).
pub const FLAG_ONEWAY: i32 = 1 << 1;

/// The `version` this client announces. Servers write fastjson-style route JSON to clients
/// older than 401, so anything at or above it gets standard JSON.
pub const CLIENT_VERSION: i32 = 475;

/// The `language` this client announces.
pub const CLIENT_LANGUAGE: &str = "RUST";

/// A request or a response: the JSON header's fields and the raw body.
///
/// ```
/// use rebalance_rocketmq::{RemotingCommand, request_code};
///
/// let request = RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC)
///     .with_ext("topic", "T");
/// assert!(!request.is_response());
/// assert_eq!(request.ext("topic"), Some("T"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    /// The request code, or the response code in a response.
    pub code: i32,
    /// The sender's language (`"RUST"`, `"JAVA"`, ...).
    pub language: String,
    /// The sender's protocol version.
    pub version: i32,
    /// The request id, echoed by the response.
    pub opaque: i32,
    /// Bit 0: response; bit 1: one-way.
    pub flag: i32,
    /// A human-readable explanation (usually of an error).
    pub remark: Option<String>,
    /// The request or response header fields, all strings on the wire.
    pub ext_fields: BTreeMap<String, String>,
    /// The body (JSON for the commands this crate uses), possibly empty.
    pub body: Bytes,
}

impl RemotingCommand {
    /// A request with `code`, this client's language and version, and nothing else.
    pub fn request(code: i32) -> Self {
        Self {
            code,
            language: CLIENT_LANGUAGE.to_string(),
            version: CLIENT_VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: BTreeMap::new(),
            body: Bytes::new(),
        }
    }

    /// A response with `code` to a request whose id is `opaque`.
    pub fn response(code: i32, opaque: i32, remark: Option<String>) -> Self {
        Self {
            opaque,
            flag: FLAG_RESPONSE,
            remark,
            ..Self::request(code)
        }
    }

    /// Adds a header field (`extFields`).
    pub fn with_ext(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.ext_fields.insert(key.into(), value.to_string());
        self
    }

    /// Sets the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// A header field.
    pub fn ext(&self, key: &str) -> Option<&str> {
        self.ext_fields.get(key).map(String::as_str)
    }

    /// Whether this is a response (flag bit 0).
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    /// Whether this is a one-way request (flag bit 1).
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// The remark, or an empty string.
    pub fn remark_or_empty(&self) -> &str {
        self.remark.as_deref().unwrap_or_default()
    }
}

impl fmt::Debug for RemotingCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemotingCommand")
            .field("code", &self.code)
            .field("language", &self.language)
            .field("version", &self.version)
            .field("opaque", &self.opaque)
            .field("flag", &self.flag)
            .field("remark", &self.remark)
            .field("ext_fields", &self.ext_fields)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_tell_requests_responses_and_oneways_apart() {
        let req = RemotingCommand::request(request_code::HEART_BEAT);
        assert!(!req.is_response() && !req.is_oneway());
        let resp = RemotingCommand::response(response_code::SUCCESS, 7, None);
        assert!(resp.is_response() && !resp.is_oneway());
        assert_eq!(resp.opaque, 7);
        let oneway = RemotingCommand {
            flag: FLAG_ONEWAY,
            ..req
        };
        assert!(oneway.is_oneway() && !oneway.is_response());
    }

    #[test]
    fn flag_bits_are_numbered_as_the_servers_write_them() {
        // Bit 0 (1) marks a response, bit 1 (2) a one-way request, whatever else is set.
        let with_flag = |flag| RemotingCommand {
            flag,
            ..RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
        };
        let bits = |c: RemotingCommand| (c.is_response(), c.is_oneway());
        assert_eq!(bits(with_flag(1)), (true, false));
        assert_eq!(bits(with_flag(2)), (false, true));
        assert_eq!(bits(with_flag(3)), (true, true));
        assert_eq!(bits(with_flag(4)), (false, false));
    }
}
