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
    /// The service refused this client the operation: it did not accept the client's
    /// credentials (none, an unknown user, a wrong secret), or they lack the permission
    /// (RocketMQ: NO_PERMISSION, code 16). Asking again changes nothing until the credentials or
    /// the permissions are fixed.
    #[error("{server} denied {operation} on {resource} (code {code}: {remark})")]
    Denied {
        /// Which service (for a network transport, its address).
        server: String,
        /// What was asked (`heartbeat`, `offset commit`, ...).
        operation: &'static str,
        /// What it was asked about (`group G`, `topic T`, ...).
        resource: String,
        /// The service's error code.
        code: i32,
        /// Its explanation.
        remark: String,
    },
    /// Another live consumer instance already registered this client id in the group: two
    /// consumers with one id would each take the same queues.
    #[error(
        "client id `{client_id}` is already registered in group `{group}` by another consumer instance"
    )]
    ClientIdInUse {
        /// The client id.
        client_id: String,
        /// The group.
        group: String,
    },
    /// A store in this process's own storage failed (a local offset file that cannot be
    /// written), or was used in a way it cannot serve. The text names what and where.
    #[error("local storage: {0}")]
    Storage(String),
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
