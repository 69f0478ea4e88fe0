//! The info strings of a POP answer's header, which say where each returned message's receipt
//! handle starts (`startOffsetInfo`), which offsets were returned per queue (`msgOffsetInfo`)
//! and, for an orderly pop, how often each was delivered (`orderCountInfo`).
//!
//! Entries are joined by `;`, their three parts by a space: `flag queueId startOffset`,
//! `flag queueId o1,o2,o3`, `flag qo{queueId}%{offset} count` or `flag queueId count`. A key
//! appearing twice, an entry without three parts or a part that is not a number is an error,
//! as in the Java client.
//!
//! **The Rust broker 1.0 joins one queue's offsets with `;`** instead of `,`
//! (`ExtraInfoUtil::build_msg_offset_info`): `0 3 100;101;102`. A segment that is only a
//! number continues the previous entry's offsets, so both forms read the same.

use std::collections::HashMap;

use super::handle::RetryFlag;

/// The offsets of a POP answer, by (retry flag, queue id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OffsetInfo {
    /// The first offset of the pop per queue (`startOffsetInfo`).
    pub start: HashMap<(RetryFlag, i32), i64>,
    /// The offsets returned per queue, in order (`msgOffsetInfo`).
    pub messages: HashMap<(RetryFlag, i32), Vec<i64>>,
    /// Orderly delivery counts per message (`qo{queue}%{offset}` entries).
    pub order_counts: HashMap<(RetryFlag, i32, i64), i32>,
    /// Orderly delivery counts per queue (the legacy entries).
    pub queue_order_counts: HashMap<(RetryFlag, i32), i32>,
}

fn flag_of(text: &str, what: &str, entry: &str) -> Result<RetryFlag, String> {
    RetryFlag::parse(text).ok_or_else(|| format!("{what} entry `{entry}`: retry flag `{text}`"))
}

fn number<T: std::str::FromStr>(text: &str, what: &str, entry: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{what} entry `{entry}`: `{text}` is not a number"))
}

/// The three parts of each entry of `info`.
fn entries<'a>(info: &'a str, what: &str) -> Result<Vec<[&'a str; 3]>, String> {
    let mut out = Vec::new();
    for entry in info.split(';').filter(|e| !e.is_empty()) {
        let parts: Vec<&str> = entry.split(' ').collect();
        let [flag, queue, value] = parts[..] else {
            return Err(format!("{what} entry `{entry}` does not have 3 parts"));
        };
        out.push([flag, queue, value]);
    }
    Ok(out)
}

impl OffsetInfo {
    /// Reads the three strings (each absent or empty when the broker sent none). The message
    /// is what is wrong, for a [`BadResponse`](rebalance_runtime::RemoteError::BadResponse).
    pub fn parse(
        start: Option<&str>,
        messages: Option<&str>,
        order_counts: Option<&str>,
    ) -> Result<Self, String> {
        let mut info = OffsetInfo::default();
        for [flag, queue, value] in entries(start.unwrap_or_default(), "startOffsetInfo")? {
            let entry = || format!("{flag} {queue} {value}");
            let key = (
                flag_of(flag, "startOffsetInfo", &entry())?,
                number(queue, "startOffsetInfo", &entry())?,
            );
            let offset = number(value, "startOffsetInfo", &entry())?;
            if info.start.insert(key, offset).is_some() {
                return Err(format!(
                    "startOffsetInfo names queue `{flag} {queue}` twice"
                ));
            }
        }
        info.messages = parse_message_offsets(messages.unwrap_or_default())?;
        for [flag, queue, value] in entries(order_counts.unwrap_or_default(), "orderCountInfo")? {
            let entry = format!("{flag} {queue} {value}");
            let flag = flag_of(flag, "orderCountInfo", &entry)?;
            let count = number(value, "orderCountInfo", &entry)?;
            let fresh = match queue.strip_prefix("qo") {
                Some(rest) => {
                    let (queue_id, offset) = rest.split_once('%').ok_or_else(|| {
                        format!("orderCountInfo entry `{entry}`: `{queue}` is not qo{{queue}}%{{offset}}")
                    })?;
                    let key = (
                        flag,
                        number(queue_id, "orderCountInfo", &entry)?,
                        number(offset, "orderCountInfo", &entry)?,
                    );
                    info.order_counts.insert(key, count).is_none()
                }
                None => {
                    let key = (flag, number(queue, "orderCountInfo", &entry)?);
                    info.queue_order_counts.insert(key, count).is_none()
                }
            };
            if !fresh {
                return Err(format!("orderCountInfo names `{flag} {queue}` twice"));
            }
        }
        Ok(info)
    }

    /// The orderly delivery count of the message at `offset` of queue `key`: its own entry,
    /// else its queue's.
    pub fn order_count(&self, key: (RetryFlag, i32), offset: i64) -> Option<i32> {
        self.order_counts
            .get(&(key.0, key.1, offset))
            .or_else(|| self.queue_order_counts.get(&key))
            .copied()
    }
}

/// `msgOffsetInfo`, in either form (see the [module documentation](self)).
fn parse_message_offsets(info: &str) -> Result<HashMap<(RetryFlag, i32), Vec<i64>>, String> {
    let what = "msgOffsetInfo";
    let mut out: HashMap<(RetryFlag, i32), Vec<i64>> = HashMap::new();
    let mut current: Option<(RetryFlag, i32)> = None;
    for segment in info.split(';').filter(|s| !s.is_empty()) {
        if !segment.contains(' ') {
            // The Rust broker's continuation of the previous entry's offsets.
            let key = current.ok_or_else(|| {
                format!("{what} starts with `{segment}`, not `flag queue offsets`")
            })?;
            let offsets = out.entry(key).or_default();
            for offset in segment.split(',') {
                offsets.push(number(offset, what, segment)?);
            }
            continue;
        }
        let parts: Vec<&str> = segment.split(' ').collect();
        let [flag, queue, offsets] = parts[..] else {
            return Err(format!("{what} entry `{segment}` does not have 3 parts"));
        };
        let key = (flag_of(flag, what, segment)?, number(queue, what, segment)?);
        if out.contains_key(&key) {
            return Err(format!("{what} names queue `{flag} {queue}` twice"));
        }
        let offsets = offsets
            .split(',')
            .map(|o| number(o, what, segment))
            .collect::<Result<Vec<i64>, String>>()?;
        out.insert(key, offsets);
        current = Some(key);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use RetryFlag::{Normal, V1};

    #[test]
    fn the_java_form_is_read() {
        let info =
            OffsetInfo::parse(Some("1 0 5;0 3 100"), Some("1 0 5;0 3 100,101,102"), None).unwrap();
        assert_eq!(info.start[&(V1, 0)], 5);
        assert_eq!(info.start[&(Normal, 3)], 100);
        assert_eq!(info.messages[&(V1, 0)], [5]);
        assert_eq!(info.messages[&(Normal, 3)], [100, 101, 102]);
    }

    #[test]
    fn the_rust_brokers_semicolons_between_offsets_are_read() {
        let info = OffsetInfo::parse(None, Some("0 0 0;1;2;0 1 7;8"), None).unwrap();
        assert_eq!(info.messages[&(Normal, 0)], [0, 1, 2]);
        assert_eq!(info.messages[&(Normal, 1)], [7, 8]);
    }

    #[test]
    fn orderly_counts_by_message_then_by_queue() {
        let info = OffsetInfo::parse(None, None, Some("0 qo3%120 2;0 3 1;0 qo3%121 0")).unwrap();
        assert_eq!(info.order_count((Normal, 3), 120), Some(2));
        assert_eq!(info.order_count((Normal, 3), 121), Some(0));
        assert_eq!(info.order_count((Normal, 3), 122), Some(1), "the queue's");
        assert_eq!(info.order_count((Normal, 4), 122), None);
    }

    #[test]
    fn absent_or_empty_strings_are_empty_maps() {
        assert_eq!(
            OffsetInfo::parse(None, None, None).unwrap(),
            OffsetInfo::default()
        );
        assert_eq!(
            OffsetInfo::parse(Some(""), Some(""), Some("")).unwrap(),
            OffsetInfo::default()
        );
    }

    #[test]
    fn malformed_strings_are_errors() {
        for (start, messages, counts) in [
            (Some("0 3"), None, None),
            (Some("0 3 1 2"), None, None),
            (Some("x 3 1"), None, None),
            (Some("0 x 1"), None, None),
            (Some("0 3 x"), None, None),
            (Some("0 3 1;0 3 2"), None, None),
            (None, Some("5"), None),
            (None, Some("0 3 1,x"), None),
            (None, Some("0 3 1;y"), None),
            (None, Some("0 3 1;0 3 2"), None),
            (None, Some("3 3 1"), None),
            (None, None, Some("0 qo3 1")),
            (None, None, Some("0 qo3%x 1")),
            (None, None, Some("0 3 1;0 3 1")),
            (None, None, Some("0 qo3%1 1;0 qo3%1 1")),
        ] {
            assert!(
                OffsetInfo::parse(start, messages, counts).is_err(),
                "{start:?} {messages:?} {counts:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn parsing_never_panics(a in "[0-9qo%; ,x-]{0,40}", b in "[0-9qo%; ,x-]{0,40}", c in "[0-9qo%; ,x-]{0,40}") {
            let _ = OffsetInfo::parse(Some(&a), Some(&b), Some(&c));
        }
    }
}
