//! Namespaces, the v1 form of the Java client (`NamespaceUtil`): the namespace is part of the
//! names the servers see, `{ns}%{topic}`, `{ns}%{group}`, `%RETRY%{ns}%{group}`,
//! `%DLQ%{ns}%{group}`.
//!
//! A [`NameServerClient`](crate::NameServerClient) built with a namespace applies it at the
//! transport's edges: names are wrapped on the way to the servers (route requests, heartbeats,
//! member lists, offsets, locks, sends) and unwrapped on the way back (granted locks, pushed
//! group names), so the application, the strategies, the callbacks and the output only ever see
//! plain names. Two namespaces on one cluster are as separate as two clusters: the same group
//! and topic names in each never meet. Client ids are not namespaced, as in Java.
//!
//! ```
//! use rebalance_rocketmq::namespace::Namespace;
//!
//! let ns = Namespace::new("MQ_INST_1").unwrap();
//! assert_eq!(ns.wrap("TopicA"), "MQ_INST_1%TopicA");
//! assert_eq!(ns.wrap("%RETRY%GID_a"), "%RETRY%MQ_INST_1%GID_a");
//! assert_eq!(ns.wrap("MQ_INST_1%TopicA"), "MQ_INST_1%TopicA"); // already wrapped
//! assert_eq!(ns.wrap("RMQ_SYS_TRACE_TOPIC"), "RMQ_SYS_TRACE_TOPIC"); // a system topic
//! assert_eq!(ns.unwrap("%DLQ%MQ_INST_1%GID_a"), "%DLQ%GID_a");
//! assert_eq!(ns.unwrap("OTHER%TopicA"), "OTHER%TopicA"); // not this namespace's
//! ```

use std::borrow::Cow;
use std::fmt;

/// The prefix of a group's retry topic.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// The prefix of a group's dead-letter topic.
pub const DLQ_PREFIX: &str = "%DLQ%";
/// Separates the namespace from the name.
pub const SEPARATOR: char = '%';

/// The topics Java's `TopicValidator` counts as system topics (besides those starting with
/// `rmq_sys_`): never namespaced.
const SYSTEM_TOPICS: [&str; 10] = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
];
/// The prefix of system topics.
const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";
/// The prefix of system groups.
const SYSTEM_GROUP_PREFIX: &str = "CID_RMQ_SYS_";

/// The longest namespace accepted: the broker limits a topic name to 127 characters, and the
/// namespace and its separator are part of it.
pub const MAX_LEN: usize = 64;

/// A namespace that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NamespaceError {
    /// The namespace is empty (leave it unset instead).
    #[error("the namespace is empty; leave it unset for no namespace")]
    Empty,
    /// The namespace has a character that topic and group names cannot carry, or the separator
    /// `%`, which would make its names ambiguous.
    #[error(
        "the namespace `{0}` may only hold letters, digits, `_` and `-` (RocketMQ's name characters without `%` and `|`)"
    )]
    InvalidCharacter(String),
    /// The namespace is too long for the names it prefixes.
    #[error("the namespace `{0}` is longer than {MAX_LEN} characters")]
    TooLong(String),
}

/// A v1 namespace (see the [module documentation](self)).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Namespace {
    name: String,
    /// `name` followed by the separator.
    prefix: String,
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Namespace").field(&self.name).finish()
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Namespace {
    /// A namespace named `name`: letters, digits, `_` and `-`, at most [`MAX_LEN`] characters.
    pub fn new(name: impl Into<String>) -> Result<Self, NamespaceError> {
        let name = name.into();
        if name.is_empty() {
            return Err(NamespaceError::Empty);
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(NamespaceError::InvalidCharacter(name));
        }
        if name.len() > MAX_LEN {
            return Err(NamespaceError::TooLong(name));
        }
        let prefix = format!("{name}{SEPARATOR}");
        Ok(Self { name, prefix })
    }

    /// The namespace's name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// `name` (a topic, a group, a retry or dead-letter topic) as the servers know it in this
    /// namespace: Java's `NamespaceUtil.wrapNamespace`. Unchanged when empty, a system topic
    /// or group, or already in this namespace; otherwise a leading `%RETRY%` or `%DLQ%` stays
    /// in front and the namespace follows it.
    pub fn wrap<'a>(&self, name: &'a str) -> Cow<'a, str> {
        if name.is_empty() || is_system(name) {
            return Cow::Borrowed(name);
        }
        let (kind, bare) = split_kind(name);
        if bare.starts_with(&self.prefix) {
            return Cow::Borrowed(name);
        }
        Cow::Owned(format!("{kind}{}{bare}", self.prefix))
    }

    /// `name` as the application knows it: Java's `NamespaceUtil.withoutNamespace(name, ns)`.
    /// The namespace is removed only when it is this one; any other name is returned as it is.
    pub fn unwrap<'a>(&self, name: &'a str) -> Cow<'a, str> {
        let (kind, bare) = split_kind(name);
        match bare.strip_prefix(&self.prefix) {
            Some(plain) if kind.is_empty() => Cow::Borrowed(plain),
            Some(plain) => Cow::Owned(format!("{kind}{plain}")),
            None => Cow::Borrowed(name),
        }
    }
}

/// `name` split into its retry or dead-letter prefix (or `""`) and the rest.
fn split_kind(name: &str) -> (&'static str, &str) {
    if let Some(rest) = name.strip_prefix(RETRY_PREFIX) {
        (RETRY_PREFIX, rest)
    } else if let Some(rest) = name.strip_prefix(DLQ_PREFIX) {
        (DLQ_PREFIX, rest)
    } else {
        ("", name)
    }
}

/// Whether `name` is a system topic or group, which no namespace applies to.
fn is_system(name: &str) -> bool {
    SYSTEM_TOPICS.contains(&name)
        || name.starts_with(SYSTEM_TOPIC_PREFIX)
        || name.starts_with(SYSTEM_GROUP_PREFIX)
}

/// Wraps `name` in `namespace`, if any.
pub(crate) fn wrap<'a>(namespace: Option<&Namespace>, name: &'a str) -> Cow<'a, str> {
    match namespace {
        Some(ns) => ns.wrap(name),
        None => Cow::Borrowed(name),
    }
}

/// Unwraps `name` from `namespace`, if any.
pub(crate) fn unwrap<'a>(namespace: Option<&Namespace>, name: &'a str) -> Cow<'a, str> {
    match namespace {
        Some(ns) => ns.unwrap(name),
        None => Cow::Borrowed(name),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ns(name: &str) -> Namespace {
        Namespace::new(name).unwrap()
    }

    #[test]
    fn the_specs_table() {
        let ns = ns("MQ_INST_1");
        for (input, wrapped) in [
            ("TopicA", "MQ_INST_1%TopicA"),
            ("GID_a", "MQ_INST_1%GID_a"),
            ("%RETRY%GID_a", "%RETRY%MQ_INST_1%GID_a"),
            ("%DLQ%GID_a", "%DLQ%MQ_INST_1%GID_a"),
            ("MQ_INST_1%TopicA", "MQ_INST_1%TopicA"),
            ("%RETRY%MQ_INST_1%GID_a", "%RETRY%MQ_INST_1%GID_a"),
            ("RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),
            ("TBW102", "TBW102"),
            ("rmq_sys_x", "rmq_sys_x"),
            ("CID_RMQ_SYS_x", "CID_RMQ_SYS_x"),
            ("", ""),
        ] {
            assert_eq!(ns.wrap(input), wrapped, "{input}");
        }
    }

    #[test]
    fn unwrapping_removes_only_this_namespace() {
        let ns = ns("MQ_INST_1");
        for (input, plain) in [
            ("MQ_INST_1%TopicA", "TopicA"),
            ("%RETRY%MQ_INST_1%GID_a", "%RETRY%GID_a"),
            ("%DLQ%MQ_INST_1%GID_a", "%DLQ%GID_a"),
            ("TopicA", "TopicA"),
            ("%RETRY%GID_a", "%RETRY%GID_a"),
            ("OTHER%TopicA", "OTHER%TopicA"),
            ("%RETRY%OTHER%GID_a", "%RETRY%OTHER%GID_a"),
            // A namespace that only starts like this one is another namespace.
            ("MQ_INST_10%TopicA", "MQ_INST_10%TopicA"),
            ("RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),
        ] {
            assert_eq!(ns.unwrap(input), plain, "{input}");
        }
    }

    #[test]
    fn a_name_carrying_another_namespace_is_wrapped_in_this_one() {
        // Java does the same: only this namespace counts as "already wrapped".
        assert_eq!(ns("A").wrap("B%T"), "A%B%T");
        assert_eq!(ns("A").unwrap("A%B%T"), "B%T");
    }

    #[test]
    fn unusable_namespaces_are_refused() {
        assert_eq!(Namespace::new(""), Err(NamespaceError::Empty));
        for bad in ["a%b", "a|b", "a b", "é", "a.b"] {
            assert!(
                matches!(
                    Namespace::new(bad),
                    Err(NamespaceError::InvalidCharacter(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Namespace::new("x".repeat(MAX_LEN + 1)),
            Err(NamespaceError::TooLong(_))
        ));
        assert!(Namespace::new("x".repeat(MAX_LEN)).is_ok());
        assert_eq!(ns("MQ_INST-1").as_str(), "MQ_INST-1");
    }

    proptest! {
        /// Whatever the name, unwrapping what was wrapped gives it back (system names are left
        /// alone both ways), and wrapping twice is wrapping once.
        #[test]
        fn wrapping_round_trips(
            name in "(%RETRY%|%DLQ%)?[A-Za-z0-9_%-]{0,12}",
            namespace in "[A-Za-z0-9_-]{1,8}",
        ) {
            let ns = ns(&namespace);
            let wrapped = ns.wrap(&name).into_owned();
            prop_assert_eq!(ns.wrap(&wrapped), wrapped.as_str());
            let (_, bare) = split_kind(&name);
            if !bare.starts_with(&ns.prefix) {
                prop_assert_eq!(ns.unwrap(&wrapped), name.as_str());
            }
            if !name.is_empty() && !is_system(&name) {
                let (_, bare) = split_kind(&wrapped);
                prop_assert!(bare.starts_with(&ns.prefix));
            }
        }
    }
}
