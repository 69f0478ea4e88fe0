//! Why a group assignor refused to assign.

use crate::ClientId;

/// An assignment that could not be computed.
///
/// [`java_message`](Self::java_message) gives `"<Exception>: <message>"` where Kafka's own
/// assignor throws for the same input, the form the reference vectors record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssignError {
    /// The group has no members. Kafka's round robin assignor throws
    /// `IllegalArgumentException` here and its sticky assignors `ArithmeticException`; range
    /// and broadcast return an empty assignment instead.
    #[error("the group has no members")]
    NoMembers {
        /// The exception Kafka throws, with its message (`"ArithmeticException: / by zero"`).
        kafka: &'static str,
    },
    /// Two members have the same id.
    #[error("member `{0}` appears more than once in the group")]
    DuplicateMember(ClientId),
    /// An assignor outside this crate failed.
    #[error("{assignor}: {message}")]
    Other {
        /// The assignor's name.
        assignor: String,
        /// What went wrong.
        message: String,
    },
}

impl AssignError {
    /// `"<ExceptionSimpleName>: <message>"`, Kafka's wording where Kafka throws.
    pub fn java_message(&self) -> String {
        match self {
            AssignError::NoMembers { kafka } => (*kafka).to_string(),
            AssignError::DuplicateMember(_) => format!("IllegalArgumentException: {self}"),
            AssignError::Other { .. } => format!("RuntimeException: {self}"),
        }
    }
}
