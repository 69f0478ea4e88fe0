//! [`Topic`] and [`TopicPartition`]: what a group assignor hands out.

use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::java;

/// A topic name: cheap to clone (a shared string) and ordered like Java's `String.compareTo`
/// (see [`java::compare_str`]), which is how Kafka's assignors sort topics.
///
/// ```
/// use rebalance_core::assignor::Topic;
///
/// let mut topics: Vec<Topic> = ["t2", "T1", "t10"].into_iter().map(Topic::from).collect();
/// topics.sort();
/// assert_eq!(topics, ["T1", "t10", "t2"]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Topic(Arc<str>);

impl Topic {
    /// Wraps a name.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The address of the shared string: equal addresses mean equal names (a cheap identity
    /// test used to skip hashing, never required for correctness).
    pub(crate) fn addr(&self) -> usize {
        Arc::as_ptr(&self.0).cast::<u8>() as usize
    }
}

impl Ord for Topic {
    fn cmp(&self, other: &Self) -> Ordering {
        java::compare_str(&self.0, &other.0)
    }
}

impl PartialOrd for Topic {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Deref for Topic {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Topic {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<String> for Topic {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

impl From<&String> for Topic {
    fn from(s: &String) -> Self {
        Self(s.as_str().into())
    }
}

impl From<Arc<str>> for Topic {
    fn from(s: Arc<str>) -> Self {
        Self(s)
    }
}

impl From<&Topic> for Topic {
    fn from(t: &Topic) -> Self {
        t.clone()
    }
}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// One partition of a topic, ordered by topic (Java order) and then partition number, the order
/// Kafka sorts assignments in.
///
/// ```
/// use rebalance_core::assignor::TopicPartition;
///
/// let mut v = vec![TopicPartition::new("b", 0), TopicPartition::new("a", 10), TopicPartition::new("a", 2)];
/// v.sort();
/// assert_eq!(v, [TopicPartition::new("a", 2), TopicPartition::new("a", 10), TopicPartition::new("b", 0)]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic.
    pub topic: Topic,
    /// The partition number (Kafka's `int`).
    pub partition: i32,
}

impl TopicPartition {
    /// A partition of `topic`.
    pub fn new(topic: impl Into<Topic>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl<T: Into<Topic>> From<(T, i32)> for TopicPartition {
    fn from((topic, partition): (T, i32)) -> Self {
        Self::new(topic, partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
