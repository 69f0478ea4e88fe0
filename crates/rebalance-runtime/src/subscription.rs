//! Subscriptions: a topic and the tags consumed from it ([`TagExpression`]), and the group's
//! retry topic.
//!
//! A tag expression is `*` (every message of the topic; also what an empty expression means) or
//! tags separated by `||`, such as `TagA || TagB`: a message is consumed when its tag is one of
//! them. Whitespace around each tag is ignored and a repeated tag counts once. Rejected, with a
//! [`TagExpressionError`]: an empty tag (`TagA ||`, `|| TagA`, `TagA |||| TagB`), `*` among other
//! tags (`TagA || *`), and a tag containing a single `|` (`TagA | TagB`, `TagA ||| TagB`), all
//! of which the broker would otherwise read as something else than meant.
//!
//! The filtering itself is done by whoever serves the messages (the RocketMQ broker, from the
//! expression sent in every heartbeat); the runtime only carries the expression.
//!
//! ```
//! use rebalance_runtime::subscription::{TagExpression, TagExpressionError};
//!
//! let tags: TagExpression = " TagA ||TagB|| TagA".parse()?;
//! assert_eq!(tags.tags(), ["TagA", "TagB"]);
//! assert!(TagExpression::parse("").unwrap().is_all());
//! assert!(matches!(
//!     TagExpression::parse("TagA || || TagB"),
//!     Err(TagExpressionError::EmptyTag { position: 2, .. })
//! ));
//! # Ok::<(), TagExpressionError>(())
//! ```

use std::fmt;
use std::str::FromStr;

/// The prefix of a consumer group's retry topic (RocketMQ's `MixAll.RETRY_GROUP_TOPIC_PREFIX`).
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";

/// The retry topic of `group`, `%RETRY%{group}`: where RocketMQ puts the messages a consumer of
/// the group sent back for redelivery. Clustering consumers subscribe to it by default (see
/// [`ConsumerBuilder::consume_retry_topic`](crate::ConsumerBuilder::consume_retry_topic)).
///
/// ```
/// assert_eq!(rebalance_runtime::subscription::retry_topic("orders"), "%RETRY%orders");
/// ```
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}")
}

/// The POP retry topic of `group` for `topic`, `%RETRY%{group}_{topic}` (RocketMQ's v1 name):
/// where the brokers revive the messages of `topic` popped by the group and not acknowledged
/// in time (or given back). A consumer the brokers answer only PULL for `topic` subscribes to
/// it, as the Java client does, so that what POP left there is drained by pulling.
///
/// ```
/// assert_eq!(rebalance_runtime::subscription::pop_retry_topic("G", "T"), "%RETRY%G_T");
/// ```
pub fn pop_retry_topic(group: &str, topic: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}_{topic}")
}

/// Whether `topic` is a retry topic (of any group).
pub fn is_retry_topic(topic: &str) -> bool {
    topic.starts_with(RETRY_TOPIC_PREFIX)
}

/// The tags of a topic a subscription consumes: all of them (`*`), or a list (see the
/// [module documentation](self) for the syntax). The default is `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TagExpression {
    /// The expression as written, without surrounding whitespace; `*` for all tags.
    text: String,
    /// The tags, trimmed and without repetitions, in the order written; empty for all.
    tags: Vec<String>,
}

/// Why a tag expression was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TagExpressionError {
    /// Nothing (or only whitespace) between two `||`, or before the first or after the last.
    #[error(
        "tag expression `{expression}`: tag {position} is empty; write tags separated by `||`, such as `TagA || TagB`, or `*` for every tag"
    )]
    EmptyTag {
        /// The expression.
        expression: String,
        /// Which tag, counting from 1.
        position: usize,
    },
    /// `*` together with tags: `*` only means "every tag" alone.
    #[error(
        "tag expression `{expression}`: `*` cannot be combined with tags; write `*` alone to consume every tag"
    )]
    WildcardAmongTags {
        /// The expression.
        expression: String,
    },
    /// A tag contains `|`: most likely a `|` meant as `||`.
    #[error("tag expression `{expression}`: the tag `{tag}` contains `|`; separate tags with `||`")]
    StrayBar {
        /// The expression.
        expression: String,
        /// The tag, as split on `||`.
        tag: String,
    },
}

impl TagExpression {
    /// What `*` means: every tag, and messages without one.
    pub fn all() -> Self {
        Self {
            text: "*".to_string(),
            tags: Vec::new(),
        }
    }

    /// Parses an expression: `*` or empty for every tag, else tags separated by `||`.
    pub fn parse(expression: &str) -> Result<Self, TagExpressionError> {
        let text = expression.trim();
        if text.is_empty() || text == "*" {
            return Ok(Self::all());
        }
        let mut tags: Vec<String> = Vec::new();
        for (index, tag) in text.split("||").enumerate() {
            let tag = tag.trim();
            if tag.is_empty() {
                return Err(TagExpressionError::EmptyTag {
                    expression: expression.to_string(),
                    position: index + 1,
                });
            }
            if tag == "*" {
                return Err(TagExpressionError::WildcardAmongTags {
                    expression: expression.to_string(),
                });
            }
            if tag.contains('|') {
                return Err(TagExpressionError::StrayBar {
                    expression: expression.to_string(),
                    tag: tag.to_string(),
                });
            }
            if !tags.iter().any(|t| t == tag) {
                tags.push(tag.to_string());
            }
        }
        Ok(Self {
            text: text.to_string(),
            tags,
        })
    }

    /// The expression as written (without surrounding whitespace), or `*` for every tag.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The tags, trimmed, each once, in the order written; empty when every tag is consumed.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// Whether every tag is consumed (`*`).
    pub fn is_all(&self) -> bool {
        self.tags.is_empty()
    }

    /// Whether a message with tag `tag` (`None`: without a tag) is consumed: always under `*`,
    /// else only when its tag is one of the expression's. This is the client-side re-filter of
    /// the Java client (a RocketMQ broker filters by the tag's hash code only, so two tags with
    /// the same hash both reach the consumer).
    ///
    /// ```
    /// use rebalance_runtime::subscription::TagExpression;
    ///
    /// let tags = TagExpression::parse("TagA || TagB").unwrap();
    /// assert!(tags.matches(Some("TagB")));
    /// assert!(!tags.matches(Some("TagC")));
    /// assert!(!tags.matches(None));
    /// assert!(TagExpression::all().matches(None));
    /// ```
    pub fn matches(&self, tag: Option<&str>) -> bool {
        self.is_all() || tag.is_some_and(|tag| self.tags.iter().any(|t| t == tag))
    }
}

impl Default for TagExpression {
    fn default() -> Self {
        Self::all()
    }
}

impl FromStr for TagExpression {
    type Err = TagExpressionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for TagExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A subscribed topic and which of its tags are consumed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Subscription {
    /// The topic.
    pub topic: String,
    /// Its tags.
    pub expression: TagExpression,
}

impl Subscription {
    /// A subscription to `topic` with `expression`.
    pub fn new(topic: impl Into<String>, expression: TagExpression) -> Self {
        Self {
            topic: topic.into(),
            expression,
        }
    }

    /// A subscription to every tag of `topic` (`*`).
    pub fn all(topic: impl Into<String>) -> Self {
        Self::new(topic, TagExpression::all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(expression: &str) -> Vec<String> {
        TagExpression::parse(expression).unwrap().tags().to_vec()
    }

    #[test]
    fn star_empty_and_blank_mean_every_tag() {
        for expression in ["*", "", "   ", " * "] {
            let parsed = TagExpression::parse(expression).unwrap();
            assert!(parsed.is_all(), "{expression:?}");
            assert_eq!(parsed.as_str(), "*", "{expression:?}");
            assert_eq!(parsed, TagExpression::all());
        }
        assert_eq!(TagExpression::default(), TagExpression::all());
    }

    #[test]
    fn tags_are_split_on_double_bars_trimmed_and_deduplicated() {
        assert_eq!(tags("TagA"), ["TagA"]);
        assert_eq!(tags("TagA || TagB"), ["TagA", "TagB"]);
        assert_eq!(tags("  TagB||TagA ||  TagB "), ["TagB", "TagA"]);
        // Inner whitespace belongs to the tag, as in the Java client.
        assert_eq!(tags("Tag A || B"), ["Tag A", "B"]);
        let parsed = TagExpression::parse("  TagA ||TagB ").unwrap();
        assert_eq!(
            parsed.as_str(),
            "TagA ||TagB",
            "the text as written, trimmed"
        );
        assert_eq!(parsed.to_string(), "TagA ||TagB");
        assert!(!parsed.is_all());
        assert_eq!(
            "TagA||TagB".parse::<TagExpression>().unwrap().tags(),
            ["TagA", "TagB"]
        );
    }

    #[test]
    fn empty_tags_are_rejected_with_their_position() {
        for (expression, position) in [
            ("TagA ||", 2),
            ("|| TagA", 1),
            ("TagA || || TagB", 2),
            ("TagA |||| TagB", 2),
            ("||", 1),
        ] {
            assert_eq!(
                TagExpression::parse(expression),
                Err(TagExpressionError::EmptyTag {
                    expression: expression.to_string(),
                    position
                }),
                "{expression:?}"
            );
        }
    }

    #[test]
    fn a_wildcard_among_tags_or_a_single_bar_is_rejected() {
        assert_eq!(
            TagExpression::parse("TagA || *"),
            Err(TagExpressionError::WildcardAmongTags {
                expression: "TagA || *".into()
            })
        );
        assert_eq!(
            TagExpression::parse("TagA | TagB"),
            Err(TagExpressionError::StrayBar {
                expression: "TagA | TagB".into(),
                tag: "TagA | TagB".into()
            })
        );
        assert_eq!(
            TagExpression::parse("TagA ||| TagB"),
            Err(TagExpressionError::StrayBar {
                expression: "TagA ||| TagB".into(),
                tag: "| TagB".into()
            })
        );
        let message = TagExpression::parse("TagA ||").unwrap_err().to_string();
        assert!(message.contains("tag 2 is empty"), "{message}");
    }

    proptest::proptest! {
        #[test]
        fn joined_tags_parse_back(
            tags in proptest::collection::vec("[A-Za-z0-9_-]{1,6}", 1..6),
            pad in 0usize..3,
        ) {
            let separator = format!("{}||{}", " ".repeat(pad), " ".repeat(2 - pad.min(2)));
            let parsed = TagExpression::parse(&tags.join(&separator)).unwrap();
            let mut expected: Vec<String> = Vec::new();
            for tag in tags {
                if !expected.contains(&tag) {
                    expected.push(tag);
                }
            }
            proptest::prop_assert_eq!(parsed.tags(), &expected[..]);
        }

        #[test]
        fn any_text_parses_to_clean_tags_or_an_error(text in ".{0,40}") {
            if let Ok(parsed) = TagExpression::parse(&text) {
                for tag in parsed.tags() {
                    proptest::prop_assert!(!tag.is_empty() && tag.trim() == tag);
                    proptest::prop_assert!(!tag.contains('|') && tag != "*");
                }
                proptest::prop_assert_eq!(parsed.is_all(), parsed.as_str() == "*");
            }
        }
    }

    #[test]
    fn retry_topics_are_named_the_rocketmq_way() {
        assert_eq!(retry_topic("G"), "%RETRY%G");
        assert!(is_retry_topic(&retry_topic("G")));
        assert!(!is_retry_topic("G"));
        assert_eq!(Subscription::all("T").expression, TagExpression::all());
    }
}
