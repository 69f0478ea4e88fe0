//! Errors of the services outside the process.

/// A failed call to a service outside the process (a broker, a directory, a store).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The service could not be reached (connection refused or lost).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The service did not answer in time.
    #[error("{service} did not answer within {after:?}")]
    Timeout {
        /// Which service (for a network transport, its address).
        service: String,
        /// How long it was given.
        after: std::time::Duration,
    },
    /// The service answered with an error.
    #[error("refused with code {code}: {remark}")]
    Refused {
        /// The service's error code.
        code: i32,
        /// Its explanation.
        remark: String,
    },
    /// The answer could not be understood.
    #[error("bad response: {0}")]
    BadResponse(String),
}

/// Why a topic's route could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The name server answered that it does not know the topic. This is an answer, not a
    /// failure of the name server.
    #[error("topic `{0}` not found")]
    TopicNotFound(String),
    /// The name server failed.
    #[error("name server {0}")]
    NameServer(#[from] RemoteError),
}
