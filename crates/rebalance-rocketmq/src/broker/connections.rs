//! Two consumers with one client id: GET_CONSUMER_CONNECTION_LIST (203) shows a broker's view
//! of a group's connections, and a client id seen there from two addresses is two processes
//! that both take the same queues (the containerised-Java classic: every process is PID 1, so
//! the `ip@pid` ids of Java clients before 4.9 collide; this library's default ids,
//! `ip@pid@nanos`, and those of Java clients from 4.9 on, `ip@pid#nanos`, do not).
//!
//! After a successful heartbeat, at most once a minute per group, the broker client asks one
//! master for the group's connections and reports, at ERROR, every client id it sees from the
//! same addresses for at least `PERSISTS_FOR`, naming the addresses. Each conflict is reported
//! once while it lasts. A shorter one is a client's reconnection: a Java broker lists the old
//! connection beside the new one until it sees it closed, which takes up to its channel expiry
//! (120 s) when the old one died without a word, as across a network partition.
//!
//! A Java broker keeps one entry per connection (its channel table), so a collision shows. The
//! Rust broker 1.0 keeps only the latest connection of a client id (observed in
//! `tests/production_real_servers.rs`): against it a collision cannot be seen this way.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use rebalance_core::ClientId;
use rebalance_runtime::{Registration, RemoteError};
use serde::Deserialize;
use tokio::time::Instant;

use super::{BrokerClient, refused};
use crate::command::{RemotingCommand, request_code, response_code};

/// How often a group's connections are checked (after a heartbeat).
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(60);
/// How long a client id must be seen from the same addresses to be two consumers: longer than
/// a Java broker lists a connection that died without a word (its channel expiry, 120 s).
const PERSISTS_FOR: Duration = Duration::from_secs(150);

/// One connection of a consumer group, as a broker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ConsumerConnection {
    /// The client id the connection heartbeats with.
    pub client_id: String,
    /// The client's address (`ip:port`) as the broker sees it.
    pub client_addr: String,
    /// The client's language (`JAVA`, `RUST`, ...).
    #[serde(default)]
    pub language: Option<String>,
    /// The client's protocol version.
    #[serde(default)]
    pub version: Option<i32>,
}

/// A client id a broker sees from more than one address: two consumers share it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DuplicateClientId {
    /// The client id.
    pub client_id: ClientId,
    /// The addresses it connects from, sorted.
    pub addresses: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct ConnectionListAnswer {
    #[serde(rename = "connectionSet", default)]
    connection_set: Option<Vec<ConsumerConnection>>,
}

/// The ids in `connections` seen from more than one address.
fn duplicates(connections: &[ConsumerConnection]) -> Vec<DuplicateClientId> {
    let mut by_id: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for c in connections {
        by_id
            .entry(&c.client_id)
            .or_default()
            .insert(&c.client_addr);
    }
    by_id
        .into_iter()
        .filter(|(_, addrs)| addrs.len() > 1)
        .map(|(id, addrs)| DuplicateClientId {
            client_id: ClientId::from(id),
            addresses: addrs.into_iter().map(str::to_string).collect(),
        })
        .collect()
}

/// The connections in an answer to GET_CONSUMER_CONNECTION_LIST; "not online" is none.
fn connection_list(response: &RemotingCommand) -> Result<Vec<ConsumerConnection>, RemoteError> {
    match response.code {
        response_code::SUCCESS if response.body.is_empty() => Ok(Vec::new()),
        response_code::SUCCESS => {
            let answer: ConnectionListAnswer = serde_json::from_slice(&response.body)
                .map_err(|e| RemoteError::BadResponse(format!("consumer connection list: {e}")))?;
            Ok(answer.connection_set.unwrap_or_default())
        }
        response_code::CONSUMER_NOT_ONLINE => Ok(Vec::new()),
        _ => Err(refused(response)),
    }
}

/// Per group: when its connections are next checked, the conflicts seen at the last check
/// (since when), and those already reported.
#[derive(Debug, Default)]
struct GroupCheck {
    next: Option<Instant>,
    seen_since: BTreeMap<(ClientId, Vec<String>), Instant>,
    reported: BTreeSet<(ClientId, Vec<String>)>,
    /// The brokers do not answer 203: no more checks.
    unsupported: bool,
}

/// The connection checks of a broker client. Never held across an `.await`.
#[derive(Debug)]
pub(crate) struct ConnectionChecks {
    groups: Mutex<HashMap<String, GroupCheck>>,
    /// How often a group is checked, and how long a conflict must last to be reported
    /// ([`CHECK_EVERY`], [`PERSISTS_FOR`] unless set).
    timing: Mutex<(Duration, Duration)>,
}

impl Default for ConnectionChecks {
    fn default() -> Self {
        Self {
            groups: Mutex::default(),
            timing: Mutex::new((CHECK_EVERY, PERSISTS_FOR)),
        }
    }
}

impl ConnectionChecks {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, GroupCheck>) -> T) -> T {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut groups)
    }

    fn timing(&self) -> (Duration, Duration) {
        *self.timing.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_timing(&self, every: Duration, persists_for: Duration) {
        *self.timing.lock().unwrap_or_else(|e| e.into_inner()) = (every, persists_for);
    }

    /// Whether `group` is due for a check now; if so, the next one is due [`CHECK_EVERY`]
    /// later.
    fn due(&self, group: &str) -> bool {
        let now = Instant::now();
        let (every, _) = self.timing();
        self.with(|groups| {
            let check = groups.entry(group.to_string()).or_default();
            if check.unsupported || check.next.is_some_and(|next| now < next) {
                return false;
            }
            check.next = Some(now + every);
            true
        })
    }

    /// The conflicts among `seen` to report now: seen since at least `PERSISTS_FOR` ago and not
    /// reported yet. One not seen this time is forgotten (seen again later, it starts over).
    fn newly_seen(&self, group: &str, seen: &[DuplicateClientId]) -> Vec<DuplicateClientId> {
        let now = Instant::now();
        let (_, persists_for) = self.timing();
        self.with(|groups| {
            let check = groups.entry(group.to_string()).or_default();
            let mut since = BTreeMap::new();
            let mut new = Vec::new();
            for d in seen {
                let key = (d.client_id.clone(), d.addresses.clone());
                let first = check.seen_since.get(&key).copied().unwrap_or(now);
                if now.saturating_duration_since(first) >= persists_for
                    && check.reported.insert(key.clone())
                {
                    new.push(d.clone());
                }
                since.insert(key, first);
            }
            check.reported.retain(|key| since.contains_key(key));
            check.seen_since = since;
            new
        })
    }

    fn unsupported(&self, group: &str) {
        self.with(|groups| groups.entry(group.to_string()).or_default().unsupported = true);
    }

    /// Forgets `group` (its client left it).
    pub(crate) fn forget(&self, group: &str) {
        self.with(|groups| groups.remove(group));
    }
}

impl BrokerClient {
    /// How often, after a heartbeat, a group's connections are checked for a client id used
    /// from two addresses (60 s), and how long such a conflict must last to be reported at
    /// ERROR (150 s: longer than a Java broker lists a connection that died without a word, its
    /// `channelExpiredTimeout`, 120 s by default; set it above yours).
    pub fn set_duplicate_id_checks(&self, every: Duration, persists_for: Duration) {
        self.inner.connection_checks.set_timing(every, persists_for);
    }

    /// GET_CONSUMER_CONNECTION_LIST for `group` (a plain name) at the broker at `addr`: the
    /// group's connections as that broker sees them (none when no member is connected).
    pub async fn consumer_connections_at(
        &self,
        addr: &str,
        group: &str,
    ) -> Result<Vec<ConsumerConnection>, RemoteError> {
        let request = RemotingCommand::request(request_code::GET_CONSUMER_CONNECTION_LIST)
            .with_ext("consumerGroup", self.wire(group));
        let op = self.group_op("consumer connection list", group);
        let response = self.call(addr, &op, request).await?;
        connection_list(&response)
    }

    /// The client ids of `group` that the broker at `addr` sees connected from more than one
    /// address: two consumers sharing one id, which take the same queues.
    pub async fn duplicate_client_ids_at(
        &self,
        addr: &str,
        group: &str,
    ) -> Result<Vec<DuplicateClientId>, RemoteError> {
        Ok(duplicates(
            &self.consumer_connections_at(addr, group).await?,
        ))
    }

    /// After a heartbeat accepted by the master at `addr`: checks `registration`'s group for
    /// duplicate client ids when it is due, on a task of its own (the heartbeat does not wait).
    pub(super) fn check_client_ids_if_due(&self, addr: &str, registration: &Registration) {
        let group = &registration.group;
        if !self.inner.connection_checks.due(group) {
            return;
        }
        let client = self.clone();
        let (addr, group, own) = (
            addr.to_string(),
            group.clone(),
            registration.client_id.clone(),
        );
        tokio::spawn(async move { client.check_client_ids(&addr, &group, &own).await });
    }

    async fn check_client_ids(&self, addr: &str, group: &str, own: &ClientId) {
        let found = match self.duplicate_client_ids_at(addr, group).await {
            Ok(found) => found,
            Err(RemoteError::Refused { code, .. })
                if code == response_code::REQUEST_CODE_NOT_SUPPORTED =>
            {
                tracing::info!(
                    broker = addr,
                    group,
                    "the broker does not list a group's connections (GET_CONSUMER_CONNECTION_LIST): duplicate client ids cannot be detected"
                );
                self.inner.connection_checks.unsupported(group);
                return;
            }
            Err(e) => {
                tracing::debug!(broker = addr, group, error = %e, "consumer connection list failed; checked again later");
                return;
            }
        };
        for conflict in self.inner.connection_checks.newly_seen(group, &found) {
            let whose = if conflict.client_id == *own {
                "this consumer's client id"
            } else {
                "a client id"
            };
            tracing::error!(
                broker = addr,
                group,
                client_id = %conflict.client_id,
                addresses = ?conflict.addresses,
                "{whose} `{}` is connected from {}: two consumers share one client id, so both take the same queues and consume their messages twice; give each consumer its own id (`ConsumerBuilder::client_id` here, the instance name in a Java client). This library's ids default to ip@pid@nanos and Java clients' from 4.9 on to ip@pid#nanos, which do not collide; Java clients before 4.9 default to ip@pid, which collides where every process is PID 1, as in containers",
                conflict.client_id,
                conflict.addresses.join(" and "),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(id: &str, addr: &str) -> ConsumerConnection {
        ConsumerConnection {
            client_id: id.into(),
            client_addr: addr.into(),
            language: Some("RUST".into()),
            version: Some(475),
        }
    }

    #[test]
    fn reads_the_rust_brokers_answer() {
        // A Rust broker 1.0.0's answer to GET_CONSUMER_CONNECTION_LIST, as captured.
        let body = r#"{"connectionSet":[{"clientId":"127.0.0.1@opx-test","clientAddr":"127.0.0.1:32984","language":"RUST","version":475}],
 "subscriptionTable":{"T1":{"classFilterMode":false,"topic":"T1","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1796308978496,"expressionType":"TAG"}},
 "consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET"}"#;
        let response = RemotingCommand::response(0, 1, None).with_body(body.as_bytes());
        assert_eq!(
            connection_list(&response).unwrap(),
            [conn("127.0.0.1@opx-test", "127.0.0.1:32984")]
        );
        let offline = RemotingCommand::response(206, 1, Some("not online".into()));
        assert!(connection_list(&offline).unwrap().is_empty());
        let garbage = RemotingCommand::response(0, 1, None).with_body(&b"{"[..]);
        assert!(matches!(
            connection_list(&garbage),
            Err(RemoteError::BadResponse(_))
        ));
        let unsupported = RemotingCommand::response(3, 1, None);
        assert!(matches!(
            connection_list(&unsupported),
            Err(RemoteError::Refused { code: 3, .. })
        ));
    }

    #[test]
    fn an_id_from_two_addresses_is_a_duplicate() {
        let found = duplicates(&[
            conn("a@1", "10.0.0.1:1000"),
            conn("b@1", "10.0.0.2:1000"),
            conn("a@1", "10.0.0.3:2000"),
            // The same connection listed twice is one address.
            conn("b@1", "10.0.0.2:1000"),
        ]);
        assert_eq!(
            found,
            [DuplicateClientId {
                client_id: ClientId::from("a@1"),
                addresses: vec!["10.0.0.1:1000".into(), "10.0.0.3:2000".into()],
            }]
        );
        assert!(duplicates(&[]).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn checks_are_spaced_and_conflicts_reported_once() {
        let checks = ConnectionChecks::default();
        assert!(checks.due("G"));
        assert!(!checks.due("G"), "not again within a minute");
        assert!(checks.due("H"), "each group has its own schedule");
        tokio::time::advance(CHECK_EVERY).await;
        assert!(checks.due("G"));

        let conflict = DuplicateClientId {
            client_id: ClientId::from("a@1"),
            addresses: vec!["x:1".into(), "y:1".into()],
        };
        let seen = std::slice::from_ref(&conflict);
        // A reconnection: the old connection listed until the broker sees it closed.
        assert!(checks.newly_seen("G", seen).is_empty());
        tokio::time::advance(CHECK_EVERY * 2).await;
        assert!(
            checks.newly_seen("G", seen).is_empty(),
            "not yet: a dead connection is listed for up to 120 s"
        );
        assert!(checks.newly_seen("G", &[]).is_empty(), "gone: forgotten");
        assert!(checks.newly_seen("G", seen).is_empty(), "back: starts over");
        tokio::time::advance(PERSISTS_FOR).await;
        assert_eq!(
            checks.newly_seen("G", seen),
            seen,
            "it lasts: two consumers"
        );
        tokio::time::advance(CHECK_EVERY).await;
        assert!(checks.newly_seen("G", seen).is_empty(), "reported once");
        // The same id from other addresses is another conflict, timed on its own.
        let moved = DuplicateClientId {
            client_id: ClientId::from("a@1"),
            addresses: vec!["x:1".into(), "z:1".into()],
        };
        assert!(
            checks
                .newly_seen("G", std::slice::from_ref(&moved))
                .is_empty()
        );
        // Gone, then back for long enough: reported again.
        assert!(checks.newly_seen("G", &[]).is_empty());
        assert!(checks.newly_seen("G", seen).is_empty());
        tokio::time::advance(PERSISTS_FOR).await;
        assert_eq!(checks.newly_seen("G", seen), seen);

        checks.unsupported("G");
        tokio::time::advance(CHECK_EVERY).await;
        assert!(!checks.due("G"), "a broker without 203 is not asked again");
        checks.forget("G");
        assert!(checks.due("G"));
    }
}
