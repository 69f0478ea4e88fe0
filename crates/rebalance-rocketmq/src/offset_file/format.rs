//! The offset file's text, as the Java client's `LocalFileOffsetStore` writes it
//! (`OffsetSerializeWrapper.toJson(true)`, fastjson): one field, `offsetTable`, a map from
//! message queues to offsets whose keys are queue *objects* (not JSON), pretty-printed with
//! tabs (shown here as four spaces each):
//!
//! ```text
//! {
//!     "offsetTable":{{
//!             "brokerName":"broker-a",
//!             "queueId":0,
//!             "topic":"T"
//!         }:42,{
//!             "brokerName":"broker-a",
//!             "queueId":1,
//!             "topic":"T"
//!         }:17
//!     }
//! }
//! ```
//!
//! [`render`] writes exactly this layout (the spec's example; fastjson's exact whitespace is
//! unverified, and no reader depends on it), entries in the queues' order. [`parse`] reads it
//! with any whitespace, key fields in any order (the Rust broker writes `topic, brokerName,
//! queueId`), and, leniently, keys written as JSON strings holding the queue object; other
//! fields beside `offsetTable` are ignored, and a missing or `null` table is an empty one (as
//! Java reads them). A key that is not a queue, an offset that is not an integer, or text that
//! is not this shape is an error.

use std::collections::BTreeMap;
use std::fmt;

use rebalance_core::MessageQueue;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::error::excerpt;
use crate::queue_keys::{parse_queue_key, push_pretty_queue_key, stringify_object_keys};

/// Offsets by queue: what an offset file holds.
pub type OffsetTable = BTreeMap<MessageQueue, i64>;

/// The file's one field.
#[derive(Deserialize)]
struct Document {
    #[serde(rename = "offsetTable", default)]
    offset_table: Option<Entries>,
}

/// The table's entries in the file's order (a later duplicate of a queue wins, as in Java).
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of message queues to offsets")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

/// The offsets `bytes` hold, or what is wrong with them.
pub(super) fn parse(bytes: &[u8]) -> Result<OffsetTable, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))?;
    if text.trim().is_empty() {
        return Err(if text.is_empty() {
            "the file is empty".to_string()
        } else {
            "the file holds only whitespace".to_string()
        });
    }
    let json = stringify_object_keys(text);
    let document: Document = serde_json::from_str(&json)
        .map_err(|e| format!("not an offset table: {}", excerpt(&e.to_string())))?;
    let mut table = OffsetTable::new();
    for (key, value) in document.offset_table.map(|e| e.0).unwrap_or_default() {
        let queue = parse_queue_key(&key)
            .ok_or_else(|| format!("the key {} is not a message queue", excerpt(&key)))?;
        let offset = value.as_i64().ok_or_else(|| {
            format!(
                "the offset of {} is not an integer: {}",
                excerpt(&key),
                excerpt(&value.to_string())
            )
        })?;
        table.insert(queue, offset);
    }
    Ok(table)
}

/// The file's text for `table`, in the Java client's layout.
pub(super) fn render(table: &OffsetTable) -> String {
    let mut out = String::with_capacity(32 + table.len() * 96);
    out.push_str("{\n\t\"offsetTable\":{");
    for (i, (queue, offset)) in table.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_pretty_queue_key(&mut out, queue, "\t\t\t", "\t\t");
        out.push(':');
        out.push_str(&offset.to_string());
    }
    if !table.is_empty() {
        out.push_str("\n\t");
    }
    out.push_str("}\n}");
    out
}
