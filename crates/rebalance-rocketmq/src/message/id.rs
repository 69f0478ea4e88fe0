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
/// then a time (4 bytes: milliseconds since 12:00 UTC on the first of the month, or of the
/// month before in a month's first 12 hours, where Java counts from the start of the month in
/// the producer's zone) and a counter (2 bytes). Consumers see it as the message's id; a lookup by key (Java's
/// `queryMsgByUniqueKey`) reads the time back to know where to search from.
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
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let millis = id_time(now_ms);
    let mut bytes = [0u8; 6];
    bytes[..4].copy_from_slice(&millis.to_be_bytes());
    bytes[4..].copy_from_slice(&counter.to_be_bytes());
    let mut id = String::with_capacity(32);
    id.push_str(fixed_part());
    id.push_str(&hex(&bytes));
    id
}

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

/// The time field of a unique id made at `now_ms` (ms since the Unix epoch, UTC).
///
/// Java writes the milliseconds since the start of the current month in the producer's time
/// zone, and a lookup by key rebuilds the time as the start of the month in the reader's time
/// zone plus that field (the month before when that is in the future), then searches from it
/// on. Without the zone, the field counts from 12 hours after the start of the month in UTC
/// (from the month before in its first 12 hours): the time rebuilt in any zone (UTC−12 to
/// UTC+14) is then at most the id's time, never after it (a search from after the message's
/// store time would miss it), and at most 26 hours before. Always below 2^32.
pub(crate) fn id_time(now_ms: i64) -> u32 {
    let base = month_start_ms(now_ms) + 12 * HOUR_MS;
    let base = if now_ms >= base {
        base
    } else {
        month_start_ms(month_start_ms(now_ms) - 1) + 12 * HOUR_MS
    };
    u32::try_from(now_ms - base).unwrap_or(u32::MAX)
}

/// The start of the month (UTC) of `ms`, in ms since the Unix epoch.
fn month_start_ms(ms: i64) -> i64 {
    let days = ms.div_euclid(DAY_MS);
    let (_, _, d) = civil_from_days(days);
    (days - i64::from(d) + 1) * DAY_MS
}

/// The (year, month 1-12, day 1-31) of day `z` since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The day since 1970-01-01 of (year, month 1-12, day): `civil_from_days`'s inverse.
#[cfg(test)]
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::Ipv6Addr;

    use super::*;

    /// Java's `MessageClientIDSetter.getNearlyTimeFromID`, as a reader in the time zone `tz_ms`
    /// (east of UTC positive) runs it at `lookup_ms`.
    fn java_nearly_time(field: u32, lookup_ms: i64, tz_ms: i64) -> i64 {
        let local = lookup_ms + tz_ms;
        let start = month_start_ms(local) - tz_ms;
        let time = start + i64::from(field);
        if time > lookup_ms {
            month_start_ms(month_start_ms(local) - 1) - tz_ms + i64::from(field)
        } else {
            time
        }
    }

    #[test]
    fn month_starts_are_the_calendars() {
        // 2026-12-07T16:00:00Z and 2024-03-01T00:00:00Z (after a leap day).
        assert_eq!(month_start_ms(1_796_659_200_000), 1_796_083_200_000);
        assert_eq!(month_start_ms(1_709_251_200_000), 1_709_251_200_000);
        assert_eq!(month_start_ms(1_709_251_199_999), 1_706_745_600_000);
        assert_eq!(month_start_ms(0), 0);
        for days in [-1_000_000i64, -1, 0, 59, 10_000, 20_000, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    /// A key's time read back as a Java reader does, in any time zone, up to ten days later:
    /// never after the id was made (a search from there would miss the message), at most a
    /// day and two hours before it.
    #[test]
    fn a_keys_time_is_read_back_at_or_before_it_in_any_time_zone() {
        let start = 1_767_225_600_000i64; // 2026-01-01T00:00:00Z
        let mut made = start - 40 * DAY_MS;
        while made < start + 400 * DAY_MS {
            let field = id_time(made);
            for tz_hours in -12..=14 {
                for later in [0, HOUR_MS, 13 * HOUR_MS, 3 * DAY_MS, 10 * DAY_MS] {
                    let read = java_nearly_time(field, made + later, tz_hours * HOUR_MS);
                    assert!(
                        read <= made,
                        "made {made}, tz {tz_hours}, later {later}: {read}"
                    );
                    assert!(
                        made - read <= 26 * HOUR_MS,
                        "made {made}, tz {tz_hours}, later {later}: {} h early",
                        (made - read) / HOUR_MS
                    );
                }
            }
            made += 7 * HOUR_MS + 12_345;
        }
    }

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
