//! Errors of the transport, and how they map onto the runtime's errors.

use std::time::Duration;

use rebalance_runtime::RemoteError;

/// The longest part of a value from outside (a file's key, a broker's answer) an error quotes.
const EXCERPT_CHARS: usize = 120;

/// `text`, or its beginning and how long it is when it is longer than [`EXCERPT_CHARS`]: a
/// file or an answer of many megabytes gives an error of a line.
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((end, _)) => format!("{}… ({} bytes)", &text[..end], text.len()),
        None => text.to_string(),
    }
}

/// A request that did not get an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The server could not be reached.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The server's address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// A connection attempt to the server failed recently; the next one waits for the backoff.
    #[error("not reconnecting to {addr} for another {retry_in:?} (last attempt: {last_error})")]
    BackingOff {
        /// The server's address.
        addr: String,
        /// How long until the next attempt is allowed.
        retry_in: Duration,
        /// What the last attempt failed with.
        last_error: String,
    },
    /// The connection closed before the answer came.
    #[error("connection to {addr} closed: {reason}")]
    Closed {
        /// The server's address.
        addr: String,
        /// Why it closed.
        reason: String,
    },
    /// No answer within the request's timeout.
    #[error("no answer from {addr} within {after:?}")]
    Timeout {
        /// The server's address.
        addr: String,
        /// The timeout.
        after: Duration,
    },
    /// The server answered in a header serialization this client does not read (only JSON is;
    /// a server configured for RocketMQ's binary serialization, type 1, answers in that). Only
    /// this request fails; the connection stays open.
    #[error(
        "{addr} answered in header serialization type {serialize_type}; only JSON (0) is supported"
    )]
    UnsupportedSerialization {
        /// The server's address.
        addr: String,
        /// The answer's serialization type.
        serialize_type: u8,
    },
    /// The server's TLS certificate is not trusted: issued by an unknown authority, for another
    /// name, expired (feature `tls`). The connection attempt failed; the client retries after
    /// its backoff, but only a new configuration or certificate can help.
    #[error("certificate not trusted: {addr}: {reason}")]
    CertificateNotTrusted {
        /// The server's address.
        addr: String,
        /// Why, and what to do about it.
        reason: String,
    },
    /// The TLS handshake failed for another reason than the server's certificate: the server
    /// does not serve TLS on that port, refused this client's certificate, or closed (feature
    /// `tls`). The connection attempt failed; the client retries after its backoff.
    #[error("TLS handshake with {addr} failed: {reason}")]
    Tls {
        /// The server's address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The request could not be encoded (for example it is larger than the frame limit).
    #[error("cannot send to {addr}: {reason}")]
    Encode {
        /// The server's address.
        addr: String,
        /// Why.
        reason: String,
    },
}

impl From<TransportError> for RemoteError {
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Timeout { addr, after } => RemoteError::Timeout {
                service: addr,
                after,
            },
            TransportError::Encode { .. } | TransportError::UnsupportedSerialization { .. } => {
                RemoteError::BadResponse(e.to_string())
            }
            TransportError::Connect { .. }
            | TransportError::CertificateNotTrusted { .. }
            | TransportError::Tls { .. }
            | TransportError::BackingOff { .. }
            | TransportError::Closed { .. } => RemoteError::Unreachable(e.to_string()),
        }
    }
}

/// A name server address list, or an address override, that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// The list names no address.
    #[error("the name server address list is empty")]
    Empty,
    /// An entry is not `host:port`.
    #[error("`{0}` is not a host:port address")]
    Malformed(String),
    /// An address override is not `ADVERTISED=ACTUAL` (see [`AddressMap`](crate::AddressMap)).
    #[error("`{0}` is not an address override ADVERTISED=ACTUAL (host:port=host:port)")]
    MalformedOverride(String),
    /// One advertised address mapped to two addresses to dial.
    #[error("`{advertised}` is mapped to both `{first}` and `{second}`; keep one")]
    ConflictingOverride {
        /// The advertised address.
        advertised: String,
        /// The address it was mapped to first.
        first: String,
        /// The other address.
        second: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_onto_the_runtime_errors() {
        let addr = "127.0.0.1:1".to_string();
        assert_eq!(
            RemoteError::from(TransportError::Timeout {
                addr: addr.clone(),
                after: Duration::from_secs(3)
            }),
            RemoteError::Timeout {
                service: addr.clone(),
                after: Duration::from_secs(3)
            }
        );
        for e in [
            TransportError::Connect {
                addr: addr.clone(),
                reason: "refused".into(),
            },
            TransportError::Closed {
                addr: addr.clone(),
                reason: "eof".into(),
            },
            TransportError::BackingOff {
                addr: addr.clone(),
                retry_in: Duration::from_millis(5),
                last_error: "refused".into(),
            },
            TransportError::CertificateNotTrusted {
                addr: addr.clone(),
                reason: "expired".into(),
            },
            TransportError::Tls {
                addr: addr.clone(),
                reason: "closed".into(),
            },
        ] {
            let text = e.to_string();
            assert_eq!(RemoteError::from(e), RemoteError::Unreachable(text));
        }
        let binary = TransportError::UnsupportedSerialization {
            addr: addr.clone(),
            serialize_type: 1,
        };
        let text = binary.to_string();
        assert!(text.contains("type 1"), "{text}");
        assert_eq!(RemoteError::from(binary), RemoteError::BadResponse(text));
    }
}
