//! Lenient route JSON: standard JSON, and fastjson's form with unquoted integer map keys.

use std::borrow::Cow;

use rebalance_core::TopicRoute;

/// Rewrites unquoted integer object keys, as fastjson writes them (`{0:"127.0.0.1:10911"}`), as
/// JSON strings (`{"0":"127.0.0.1:10911"}`). Everything else, string contents included, is left
/// as it is; standard JSON comes back unchanged (borrowed).
///
/// ```
/// use rebalance_rocketmq::route::quote_integer_keys;
///
/// assert_eq!(quote_integer_keys(r#"{"brokerAddrs":{0:"a:1", -1:"b:2"}}"#),
///            r#"{"brokerAddrs":{"0":"a:1", "-1":"b:2"}}"#);
/// assert_eq!(quote_integer_keys(r#"{"s":"{0:1}"}"#), r#"{"s":"{0:1}"}"#);
/// ```
pub fn quote_integer_keys(input: &str) -> Cow<'_, str> {
    let bytes = input.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    // Open containers: `true` for an object.
    let mut objects: Vec<bool> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i);
                expect_key = false;
                continue;
            }
            b'{' => {
                objects.push(true);
                expect_key = true;
            }
            b'[' => {
                objects.push(false);
                expect_key = false;
            }
            b'}' | b']' => {
                objects.pop();
                expect_key = false;
            }
            b',' => expect_key = objects.last() == Some(&true),
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'-' | b'0'..=b'9' if expect_key => {
                let end = integer_end(bytes, i);
                if end > i && next_significant(bytes, end) == Some(b':') {
                    let buf = out.get_or_insert_with(|| String::with_capacity(input.len() + 16));
                    buf.push_str(&input[copied..i]);
                    buf.push('"');
                    buf.push_str(&input[i..end]);
                    buf.push('"');
                    copied = end;
                    i = end;
                    expect_key = false;
                    continue;
                }
                expect_key = false;
            }
            _ => expect_key = false,
        }
        i += 1;
    }
    match out {
        None => Cow::Borrowed(input),
        Some(mut buf) => {
            buf.push_str(&input[copied..]);
            Cow::Owned(buf)
        }
    }
}

/// The index just past the string starting with the quote at `start` (or the end of input).
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut j = start + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b'"' => return j + 1,
            _ => j += 1,
        }
    }
    bytes.len()
}

/// The end of an optional minus sign followed by at least one digit; `start` when there is none.
fn integer_end(bytes: &[u8], start: usize) -> usize {
    let mut j = start;
    if bytes.get(j) == Some(&b'-') {
        j += 1;
    }
    let digits = j;
    while bytes.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
    }
    if j == digits { start } else { j }
}

fn next_significant(bytes: &[u8], from: usize) -> Option<u8> {
    bytes[from..]
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// Why a route answer could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouteParseError {
    /// The body is not UTF-8 (so not JSON in either form).
    #[error("route is not UTF-8: {0}")]
    NotUtf8(#[source] std::str::Utf8Error),
    /// The body is not JSON, and has no unquoted integer key to blame.
    #[error("route is not valid JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// The body is not JSON even with its unquoted integer keys quoted.
    #[error("route is not valid JSON, even with integer keys quoted: {0}")]
    NotJsonWithKeysQuoted(#[source] serde_json::Error),
    /// The body is JSON, but not an object.
    #[error("route is not a JSON object")]
    NotAnObject,
    /// The object lacks a required field, or a field has the wrong type.
    #[error("route does not have the expected fields: {0}")]
    Fields(#[source] serde_json::Error),
}

/// Parses a route answer (the body of GET_ROUTEINFO_BY_TOPIC), in standard or fastjson form.
pub fn parse_route(body: &[u8]) -> Result<TopicRoute, RouteParseError> {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(strict) => {
            let text = std::str::from_utf8(body).map_err(RouteParseError::NotUtf8)?;
            match quote_integer_keys(text) {
                Cow::Borrowed(_) => return Err(RouteParseError::NotJson(strict)),
                Cow::Owned(fixed) => {
                    serde_json::from_str(&fixed).map_err(RouteParseError::NotJsonWithKeysQuoted)?
                }
            }
        }
    };
    if !value.is_object() {
        return Err(RouteParseError::NotAnObject);
    }
    serde_json::from_value(value).map_err(RouteParseError::Fields)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    #[test]
    fn quotes_integer_keys_only_where_keys_are() {
        let cases = [
            (r#"{0:"a"}"#, r#"{"0":"a"}"#),
            (r#"{ 0 : "a" , 12:"b"}"#, r#"{ "0" : "a" , "12":"b"}"#),
            (r#"{-3:"a"}"#, r#"{"-3":"a"}"#),
            (r#"[{0:1},{1:[2,3]}]"#, r#"[{"0":1},{"1":[2,3]}]"#),
            (r#"{"a":{0:{1:"x"}}}"#, r#"{"a":{"0":{"1":"x"}}}"#),
            // Values and array items are numbers, not keys.
            (r#"{"a":1,"b":[1,2]}"#, r#"{"a":1,"b":[1,2]}"#),
            (r#"[0,1,{2:3}]"#, r#"[0,1,{"2":3}]"#),
            // Inside strings nothing changes, escaped quotes included.
            (r#"{"s":"{0:1, 2:3}"}"#, r#"{"s":"{0:1, 2:3}"}"#),
            (r#"{"s":"x\"{0:1"}"#, r#"{"s":"x\"{0:1"}"#),
            (r#"{"é":"ü",0:"ß"}"#, r#"{"é":"ü","0":"ß"}"#),
            // Not an integer key: left for the JSON parser to refuse.
            (r#"{0.5:"a"}"#, r#"{0.5:"a"}"#),
            (r#"{-:"a"}"#, r#"{-:"a"}"#),
            (r#"{0"#, r#"{0"#),
            (r#"{"unterminated"#, r#"{"unterminated"#),
            ("", ""),
        ];
        for (input, expected) in cases {
            assert_eq!(quote_integer_keys(input), expected, "input {input}");
        }
    }

    const STANDARD: &str = r#"{"orderTopicConf":null,
        "queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],
        "brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"},
                        "zoneName":null,"enableActingMaster":false}],
        "filterServerTable":{},"topicQueueMappingInfo":null}"#;

    #[test]
    fn parses_both_route_forms_to_the_same_route() {
        let standard = parse_route(STANDARD.as_bytes()).unwrap();
        let fastjson = STANDARD.replace(r#""0":"#, "0:").replace(r#""1":"#, "1:");
        assert!(fastjson.contains("{0:\"127.0.0.1:10911\",1:"));
        assert!(serde_json::from_str::<Value>(&fastjson).is_err());
        assert_eq!(parse_route(fastjson.as_bytes()).unwrap(), standard);
        assert_eq!(
            standard.broker("broker-a").unwrap().broker_addrs,
            BTreeMap::from([
                (0, "127.0.0.1:10911".to_string()),
                (1, "127.0.0.1:10921".to_string())
            ])
        );
    }

    #[test]
    fn bad_routes_are_typed_errors_not_panics() {
        let kind = |e: &RouteParseError| match e {
            RouteParseError::NotUtf8(_) => "NotUtf8",
            RouteParseError::NotJson(_) => "NotJson",
            RouteParseError::NotJsonWithKeysQuoted(_) => "NotJsonWithKeysQuoted",
            RouteParseError::NotAnObject => "NotAnObject",
            RouteParseError::Fields(_) => "Fields",
        };
        let cases: [(&[u8], &str, &str); 6] = [
            (b"not json", "NotJson", "not valid JSON"),
            (
                b"{0:",
                "NotJsonWithKeysQuoted",
                "even with integer keys quoted",
            ),
            (b"\xff\xfe", "NotUtf8", "not UTF-8"),
            (b"[]", "NotAnObject", "not a JSON object"),
            (b"{\"queueDatas\":7}", "Fields", "expected fields"),
            (
                b"{\"brokerDatas\":[{\"brokerAddrs\":{0:\"a:1\"}}]}",
                "Fields",
                "missing field `brokerName`",
            ),
        ];
        for (body, expected, says) in cases {
            let error = parse_route(body).unwrap_err();
            assert_eq!(kind(&error), expected, "{body:?}: {error:?}");
            assert!(error.to_string().contains(says), "{body:?}: {error}");
        }
    }

    /// JSON values up to four levels deep whose object keys come from `keys`.
    fn arb_json_keyed(keys: BoxedStrategy<String>) -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(keys.clone(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        arb_json_keyed("[-0-9a-z:{}\" ]{0,6}".boxed())
    }

    /// JSON whose object keys are often integers, nested in arrays and objects.
    fn arb_json_with_integer_keys() -> impl Strategy<Value = Value> {
        arb_json_keyed(
            prop_oneof![
                any::<i32>().prop_map(|k| k.to_string()),
                "[-0-9a-z:{}\\[\\]\" ]{0,6}"
            ]
            .boxed(),
        )
    }

    /// `value` as compact JSON, with integer keys unquoted as fastjson writes map keys.
    fn fastjson(value: &Value) -> String {
        match value {
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(fastjson).collect();
                format!("[{}]", items.join(","))
            }
            Value::Object(map) => {
                let entries: Vec<String> = map
                    .iter()
                    .map(|(k, v)| {
                        let digits = k.strip_prefix('-').unwrap_or(k);
                        let integer =
                            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
                        let key = if integer {
                            k.clone()
                        } else {
                            Value::String(k.clone()).to_string()
                        };
                        format!("{key}:{}", fastjson(v))
                    })
                    .collect();
                format!("{{{}}}", entries.join(","))
            }
            leaf => leaf.to_string(),
        }
    }

    proptest! {
        /// Integer keys anywhere (in objects after arrays, in arrays of objects) are quoted back
        /// to exactly the standard text.
        #[test]
        fn integer_keys_are_quoted_at_any_depth(value in arb_json_with_integer_keys()) {
            let text = fastjson(&value);
            prop_assert_eq!(quote_integer_keys(&text), value.to_string());
        }

        /// A minus sign without digits is no key to quote: the text stays as it is, and its error
        /// is the plain "not JSON" one.
        #[test]
        fn a_lone_minus_is_not_an_integer_key(space in "[ ]{0,2}") {
            let text = format!("{{-{space}:1}}");
            prop_assert!(matches!(quote_integer_keys(&text), Cow::Borrowed(_)));
            prop_assert!(matches!(parse_route(text.as_bytes()), Err(RouteParseError::NotJson(_))));
        }

        #[test]
        fn standard_json_is_left_alone(value in arb_json()) {
            for text in [value.to_string(), serde_json::to_string_pretty(&value).unwrap()] {
                prop_assert!(matches!(quote_integer_keys(&text), Cow::Borrowed(_)));
            }
        }

        #[test]
        fn unquoted_integer_keys_parse_like_quoted_ones(
            addrs in prop::collection::btree_map(any::<i64>(), "[0-9.:a-z\"{}]{0,12}", 0..6),
            spaced in any::<bool>(),
        ) {
            let sep = if spaced { " : " } else { ":" };
            let entries: Vec<String> = addrs
                .iter()
                .map(|(k, v)| format!("{k}{sep}{}", Value::String(v.clone())))
                .collect();
            let text = format!(r#"{{"brokerName":"b","brokerAddrs":{{{}}}}}"#, entries.join(","));
            let fixed = quote_integer_keys(&text);
            let parsed: rebalance_core::BrokerData = serde_json::from_str(&fixed).unwrap();
            prop_assert_eq!(parsed.broker_addrs, addrs);
        }

        #[test]
        fn arbitrary_text_never_panics(text in ".{0,64}") {
            let _ = quote_integer_keys(&text);
            let _ = parse_route(text.as_bytes());
        }
    }
}
