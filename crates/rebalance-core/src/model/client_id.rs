//! [`ClientId`]: the identity of one member of a consumer group.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::java;

/// A consumer's client id, as the broker lists it (RocketMQ writes `ip@instance`, often
/// `ip@pid@nanos`).
///
/// Cheap to clone (a shared string) and ordered like Java's `String.compareTo`
/// (see [`java::compare_str`]), which is how every client of a group sorts the member list.
///
/// ```
/// use rebalance_core::ClientId;
///
/// let mut ids: Vec<ClientId> = ["10.0.0.2@1", "10.0.0.10@1"].into_iter().map(ClientId::from).collect();
/// ids.sort();
/// assert_eq!(ids[0], "10.0.0.10@1");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientId(Arc<str>);

impl ClientId {
    /// Wraps an id.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before the first `'@'` (the whole id when it has none): the client's address in
    /// RocketMQ's `ip@instance` format, or the room in `room@ip@port` ids.
    pub fn prefix(&self) -> &str {
        self.0.split('@').next().unwrap_or_default()
    }
}

impl Ord for ClientId {
    fn cmp(&self, other: &Self) -> Ordering {
        java::compare_str(&self.0, &other.0)
    }
}

impl PartialOrd for ClientId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Deref for ClientId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for ClientId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ClientId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ClientId {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<String> for ClientId {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

impl From<Arc<str>> for ClientId {
    fn from(s: Arc<str>) -> Self {
        Self(s)
    }
}

impl PartialEq<str> for ClientId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for ClientId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_text_before_first_at() {
        assert_eq!(ClientId::from("room0@10.0.0.1@1").prefix(), "room0");
        assert_eq!(ClientId::from("plain").prefix(), "plain");
        assert_eq!(ClientId::from("@x").prefix(), "");
    }

    #[test]
    fn sorts_like_java() {
        let mut ids: Vec<ClientId> = ["ｚ", "😀", "Z", "a"]
            .into_iter()
            .map(ClientId::from)
            .collect();
        ids.sort();
        let got: Vec<&str> = ids.iter().map(ClientId::as_str).collect();
        assert_eq!(got, ["Z", "a", "😀", "ｚ"]);
    }
}
