//! [`ClientId`]: the identity of one member of a consumer group.

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
#[derive(Clone, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientId(Arc<str>);

/// String equality, deciding early for ids: the ids of one group mostly share their length and
/// a long prefix (`room@10.0.3.`) and differ at the end (`...17@20750`), so the last eight bytes
/// are compared before the rest. A strategy looks its caller up in a list of thousands of ids
/// every round; this makes that scan several times faster than a plain comparison.
fn same_id(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    if let (Some(ta), Some(tb)) = (a.last_chunk::<8>(), b.last_chunk::<8>())
        && ta != tb
    {
        return false;
    }
    a == b
}

impl PartialEq for ClientId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || same_id(&self.0, &other.0)
    }
}

impl std::hash::Hash for ClientId {
    /// The string's hash, as `Borrow<str>` requires.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

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
        same_id(&self.0, other)
    }
}

impl PartialEq<&str> for ClientId {
    fn eq(&self, other: &&str) -> bool {
        same_id(&self.0, other)
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

    #[test]
    fn equality_is_string_equality() {
        let id = |s: &str| ClientId::from(s);
        assert_eq!(id("room0@10.0.3.17@20750"), id("room0@10.0.3.17@20750"));
        // Same length and tail, different head; same head, different tail; short ids.
        assert_ne!(id("room0@10.0.3.17@20750"), id("room1@10.0.3.17@20750"));
        assert_ne!(id("room0@10.0.3.17@20750"), id("room0@10.0.3.17@20751"));
        assert_ne!(id("a@1"), id("a@2"));
        assert_eq!(id("a@1"), id("a@1"));
        assert_eq!(id(""), id(""));
        assert_eq!(id("room0@10.0.3.17@20750"), "room0@10.0.3.17@20750");
        assert_ne!(id("room0@10.0.3.17@20750"), "room0@10.0.3.17@2075");
        // Against a `str` (not a `&str`), as generic code comparing through `Borrow` does.
        assert!(id("a@1") == *"a@1");
        assert!(id("a@1") != *"a@2");
        assert_eq!(AsRef::<str>::as_ref(&id("a@1")), "a@1");
        assert_eq!(format!("{:?}", id("a@1")), "\"a@1\"");
    }

    proptest::proptest! {
        #[test]
        fn equality_and_hash_agree_with_str(a in "[ab@.]{0,12}", flip in 0usize..16) {
            // `b` is `a` with at most one byte changed, so equal lengths and tails are common.
            let mut b = a.clone().into_bytes();
            if let Some(byte) = b.get_mut(flip) {
                *byte = if *byte == b'a' { b'b' } else { b'a' };
            }
            let b = String::from_utf8(b).unwrap();
            let (x, y) = (ClientId::from(a.as_str()), ClientId::from(b.as_str()));
            proptest::prop_assert_eq!(x == y, a == b);
            proptest::prop_assert_eq!(x == b.as_str(), a == b);
            use std::hash::BuildHasher;
            let state = std::collections::hash_map::RandomState::new();
            proptest::prop_assert_eq!(state.hash_one(&x), state.hash_one(a.as_str()));
        }
    }
}
