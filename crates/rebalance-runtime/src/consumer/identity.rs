//! Which client id a consumer registers: the configured one, the directory's, or a default.

use rebalance_core::ClientId;

use super::ConsumerError;

/// The id a consumer registers: the one given to the builder (`configured`), else the one the
/// directory is bound to (`bound`), else [`default_client_id`]. Both given must be equal, and
/// the id must not be empty.
pub(super) fn resolve_client_id(
    configured: Option<ClientId>,
    bound: Option<ClientId>,
) -> Result<ClientId, ConsumerError> {
    let client_id = match (configured, bound) {
        (Some(configured), Some(bound)) if configured != bound => {
            return Err(ConsumerError::ClientIdMismatch { configured, bound });
        }
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => default_client_id(),
    };
    if client_id.is_empty() {
        return Err(ConsumerError::EmptyClientId);
    }
    Ok(client_id)
}

/// The default client id: `ip@pid@nanos`, as unique as the Java client's `ip@pid#nanos`.
pub fn default_client_id() -> ClientId {
    let ip = local_ip().unwrap_or_else(|| "127.0.0.1".to_string());
    // An identifier, not a clock reading used for timing: wall time only makes it unique.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    ClientId::from(format!("{ip}@{}@{nanos}", std::process::id()))
}

/// The address this host would use to reach the outside (no packet is sent).
fn local_ip() -> Option<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then(|| ip.to_string())
}
