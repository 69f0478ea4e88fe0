//! Maps keyed by message queues, as fastjson writes them: the key is a JSON object, not a
//! string (`{"offsetTable":{{"topic":"T","brokerName":"b","queueId":0}:42}}`), which is not
//! JSON. Java's tools need that form from us, and brokers send it to us (the `questions/` and
//! `broker/group_view.rs`); the Java client's broadcasting offset file is written in it too
//! (`offset_file/`).

use std::borrow::Cow;

use rebalance_core::MessageQueue;

use crate::broker::wire::WireQueue;

/// Rewrites every object used as an object key into a string holding that object's text, so
/// that the result is JSON. Text that already is JSON comes back borrowed. Linear, no
/// recursion: the nesting is tracked on a heap stack bounded by the input's length.
pub(crate) fn stringify_object_keys(input: &str) -> Cow<'_, str> {
    #[derive(Clone, Copy, PartialEq)]
    enum Frame {
        Object { expect_key: bool },
        Array,
    }
    let bytes = input.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut out: Option<String> = None;
    // Everything before `copied` is already in `out` (when rewriting).
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => i = skip_string(bytes, i),
            b'{' if matches!(stack.last(), Some(Frame::Object { expect_key: true })) => {
                let end = skip_object(bytes, i);
                let key = &input[i..end];
                let text = out.get_or_insert_with(|| String::with_capacity(input.len() + 64));
                text.push_str(&input[copied..i]);
                // A string serializes infallibly.
                text.push_str(&serde_json::to_string(key).unwrap_or_default());
                copied = end;
                i = end;
                continue;
            }
            b'{' => stack.push(Frame::Object { expect_key: true }),
            b'[' => stack.push(Frame::Array),
            b'}' | b']' => {
                stack.pop();
            }
            b':' => {
                if let Some(Frame::Object { expect_key }) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            b',' => {
                if let Some(Frame::Object { expect_key }) = stack.last_mut() {
                    *expect_key = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    match out {
        Some(mut text) => {
            text.push_str(&input[copied..]);
            Cow::Owned(text)
        }
        None => Cow::Borrowed(input),
    }
}

/// The index of the closing quote of the string opening at `start` (or the end).
fn skip_string(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// One past the `}` closing the object opening at `start` (or the end).
fn skip_object(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => i = skip_string(bytes, i),
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// A queue key as it comes from [`stringify_object_keys`] (or as a plain JSON string of the
/// queue object); `None` when it is not one.
pub(crate) fn parse_queue_key(key: &str) -> Option<MessageQueue> {
    serde_json::from_str::<WireQueue>(key)
        .ok()
        .map(MessageQueue::from)
}

/// A queue's fields as fastjson writes them: names in Java's alphabetical order, values as
/// JSON text.
fn key_fields(queue: &MessageQueue) -> [(&'static str, String); 3] {
    // A string serializes infallibly.
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    [
        ("brokerName", text(&queue.broker_name)),
        ("queueId", queue.queue_id.to_string()),
        ("topic", text(&queue.topic)),
    ]
}

/// A queue as a fastjson object key (fields in Java's alphabetical order).
pub(crate) fn queue_key(queue: &MessageQueue) -> String {
    let fields: Vec<String> = key_fields(queue)
        .iter()
        .map(|(name, value)| format!("\"{name}\":{value}"))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// Appends `queue` as a fastjson object key pretty-printed (`toJSONString(…, PrettyFormat)`):
/// the opening brace where `out` ends, each field on a line of its own after `field_indent`,
/// and the closing brace on a line of its own after `close_indent`.
pub(crate) fn push_pretty_queue_key(
    out: &mut String,
    queue: &MessageQueue,
    field_indent: &str,
    close_indent: &str,
) {
    out.push('{');
    for (i, (name, value)) in key_fields(queue).iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('\n');
        out.push_str(field_indent);
        out.push('"');
        out.push_str(name);
        out.push_str("\":");
        out.push_str(value);
    }
    out.push('\n');
    out.push_str(close_indent);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn object_keys_become_strings_and_parse_back() {
        let body = r#"{"offsetTable":{{"topic":"T1","brokerName":"broker-b","queueId":1}:0,{"topic":"T1","brokerName":"broker-b","queueId":0}:7}}"#;
        let json = stringify_object_keys(body);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let table = value["offsetTable"].as_object().unwrap();
        let mut parsed: Vec<(MessageQueue, i64)> = table
            .iter()
            .map(|(k, v)| (parse_queue_key(k).unwrap(), v.as_i64().unwrap()))
            .collect();
        parsed.sort();
        assert_eq!(
            parsed,
            vec![
                (MessageQueue::new("T1", "broker-b", 0), 7),
                (MessageQueue::new("T1", "broker-b", 1), 0)
            ]
        );
    }

    #[test]
    fn standard_json_is_left_alone_and_nested_values_are_not_keys() {
        let body = r#"{"a":{"b":[{"c":1},{"d":"}{"}]},"e":"x{\"y"}"#;
        assert!(matches!(stringify_object_keys(body), Cow::Borrowed(_)));
        let mixed = r#"{"t":{{"topic":"T","brokerName":"b\"}","queueId":2}:{"brokerOffset":5,"consumerOffset":3}},"consumeTps":1.5}"#;
        let json = stringify_object_keys(mixed);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let (key, offsets) = value["t"].as_object().unwrap().iter().next().unwrap();
        assert_eq!(
            parse_queue_key(key),
            Some(MessageQueue::new("T", "b\"}", 2))
        );
        assert_eq!(offsets["brokerOffset"], 5);
        assert_eq!(value["consumeTps"], 1.5);
    }

    #[test]
    fn our_keys_are_what_we_parse() {
        let q = MessageQueue::new("%RETRY%G", "broker-a", 3);
        let body = format!("{{\"m\":{{{}:1}}}}", queue_key(&q));
        let json = stringify_object_keys(&body);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let key = value["m"]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap()
            .clone();
        assert_eq!(parse_queue_key(&key), Some(q));
    }

    proptest! {
        /// Whatever the servers send, rewriting never panics and never grows without bound.
        #[test]
        fn any_text_is_rewritten_without_panicking(text in ".{0,200}") {
            let out = stringify_object_keys(&text);
            prop_assert!(out.len() <= text.len() * 7 + 64);
        }
    }
}
