//! The properties string of a message: `name\u{1}value\u{2}` per property (Java's
//! `MessageDecoder.messageProperties2String` / `string2messageProperties`).

use std::collections::HashMap;

/// Separates a property's name from its value.
pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
/// Ends each property.
pub const PROPERTY_SEPARATOR: char = '\u{2}';

/// Parses a properties string as the Java client does: segments between
/// [`PROPERTY_SEPARATOR`]s, each `name` [`NAME_VALUE_SEPARATOR`] `value` with a non-empty name
/// and a non-empty value; a segment that is not (too short, no separator, an empty name or
/// value) is skipped. A later property of the same name replaces an earlier one.
///
/// ```
/// use rebalance_rocketmq::message::properties::parse;
///
/// let properties = parse("TAGS\u{1}TagA\u{2}KEYS\u{1}k1 k2\u{2}junk\u{2}");
/// assert_eq!(properties.get("TAGS").map(String::as_str), Some("TagA"));
/// assert_eq!(properties.get("KEYS").map(String::as_str), Some("k1 k2"));
/// assert_eq!(properties.len(), 2);
/// ```
pub fn parse(text: &str) -> HashMap<String, String> {
    let mut properties = HashMap::new();
    for segment in text.split(PROPERTY_SEPARATOR) {
        // Java counts UTF-16 units (>= 3); a name and a value of one unit each and the
        // separator are at least 3 bytes too.
        if segment.len() < 3 {
            continue;
        }
        if let Some((name, value)) = segment.split_once(NAME_VALUE_SEPARATOR)
            && !name.is_empty()
            && !value.is_empty()
        {
            properties.insert(name.to_string(), value.to_string());
        }
    }
    properties
}

/// Formats properties as a properties string, in name order (so the same properties always
/// give the same string).
///
/// ```
/// use rebalance_rocketmq::message::properties::format;
///
/// let text = format([("TAGS", "TagA"), ("KEYS", "k")]);
/// assert_eq!(text, "KEYS\u{1}k\u{2}TAGS\u{1}TagA\u{2}");
/// ```
pub fn format<'a>(properties: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut sorted: Vec<(&str, &str)> = properties.into_iter().collect();
    sorted.sort_unstable();
    let mut text = String::new();
    for (name, value) in sorted {
        text.push_str(name);
        text.push(NAME_VALUE_SEPARATOR);
        text.push_str(value);
        text.push(PROPERTY_SEPARATOR);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_java_would_skip_are_skipped() {
        let parsed = parse("\u{2}a\u{1}\u{2}\u{1}b\u{2}ab\u{2}x\u{1}y\u{2}x\u{1}z\u{1}w");
        // "a\u1" has an empty value, "\u1b" an empty name, "ab" no separator; the last "x"
        // wins and keeps everything after its first separator.
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed["x"], "z\u{1}w");
        assert!(parse("").is_empty());
    }

    #[test]
    fn format_then_parse_gives_the_properties_back() {
        let text = format([("UNIQ_KEY", "AB"), ("TAGS", "t"), ("DELAY", "3")]);
        let parsed = parse(&text);
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed["DELAY"], "3");
        assert!(text.starts_with("DELAY\u{1}3\u{2}"));
    }
}
