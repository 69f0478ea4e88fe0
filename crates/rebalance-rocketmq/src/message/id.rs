//! Message ids: the broker's *offset message id* (where a message is stored) and the
//! producer's *unique id* (`UNIQ_KEY`), both upper-case hexadecimal as the Java client writes
//! them.

use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// Upper-case hexadecimal of `bytes` (Java's `UtilAll.bytes2string`).
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02X}");
    }
    text
}

/// The offset message id of a message stored by the broker at `store_ip:store_port` at
/// `commit_log_offset`: the hexadecimal of the address bytes (4 or 16), the port (4 bytes)
/// and the offset (8 bytes), big-endian (Java's `MessageDecoder.createMessageId`).
///
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use rebalance_rocketmq::message::offset_msg_id;
///
/// let id = offset_msg_id(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 10911, 0x1234);
/// assert_eq!(id, "7F00000100002A9F0000000000001234");
/// ```
pub fn offset_msg_id(store_ip: IpAddr, store_port: i32, commit_log_offset: i64) -> String {
    let mut bytes = Vec::with_capacity(28);
    match store_ip {
        IpAddr::V4(ip) => bytes.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => bytes.extend_from_slice(&ip.octets()),
    }
    bytes.extend_from_slice(&store_port.to_be_bytes());
    bytes.extend_from_slice(&commit_log_offset.to_be_bytes());
    hex(&bytes)
}

/// The fixed part of this process's unique ids: an address (loopback), the process id (2
/// bytes) and 4 random bytes (Java uses its class loader's hash code), as hexadecimal.
fn fixed_part() -> &'static str {
    static FIXED: OnceLock<String> = OnceLock::new();
    FIXED.get_or_init(|| {
        let mut bytes = Vec::with_capacity(10);
        bytes.extend_from_slice(&[127, 0, 0, 1]);
        // Java keeps the low 16 bits of the pid too.
        bytes.extend_from_slice(&(std::process::id() as u16).to_be_bytes());
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        bytes.extend_from_slice(&(hasher.finish() as u32).to_be_bytes());
        hex(&bytes)
    })
}

/// A new unique message id (`UNIQ_KEY`) shaped like the Java producer's
/// (`MessageClientIDSetter.createUniqID`): 32 hexadecimal digits, a fixed part per process
/// then the wall-clock milliseconds (4 low bytes) and a counter (2 bytes). Consumers see it as
/// the message's id.
///
/// ```
/// use rebalance_rocketmq::message::unique_id;
///
/// let (a, b) = (unique_id(), unique_id());
/// assert_eq!(a.len(), 32);
/// assert_ne!(a, b);
/// ```
pub fn unique_id() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed) as u16;
    // An id, not a clock anything is timed with.
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u32)
        .unwrap_or(0);
    let mut bytes = [0u8; 6];
    bytes[..4].copy_from_slice(&millis.to_be_bytes());
    bytes[4..].copy_from_slice(&counter.to_be_bytes());
    let mut id = String::with_capacity(32);
    id.push_str(fixed_part());
    id.push_str(&hex(&bytes));
    id
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::Ipv6Addr;

    use super::*;

    #[test]
    fn ipv6_offset_ids_have_the_16_address_bytes() {
        let id = offset_msg_id(IpAddr::V6(Ipv6Addr::LOCALHOST), 1, -1);
        assert_eq!(id.len(), 2 * (16 + 4 + 8));
        assert_eq!(
            id,
            "0000000000000000000000000000000100000001FFFFFFFFFFFFFFFF"
        );
    }

    #[test]
    fn unique_ids_do_not_repeat_and_are_upper_case_hex() {
        let ids: HashSet<String> = (0..10_000).map(|_| unique_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| {
            id.len() == 32
                && id
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c))
        }));
    }
}
